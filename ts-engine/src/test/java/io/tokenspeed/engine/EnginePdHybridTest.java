package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.tokenspeed.core.GroupKind;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Disaggregated serving of the hybrid cache groups (docs/pd.md): the rows of a sliding window that
 * the next token still reads (Gemma 3's local layers, a 16-token window), and a State group's
 * running state (Mamba; Jamba's Mamba layers beside its attention). Prompts longer than the window
 * and than several pages; every decode output, token ids and logits rows, equals a fused engine's
 * bit for bit, and neither engine holds anything afterwards. The owners' invariants are checked
 * after every round.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EnginePdHybridTest {
  private static final PdSecret SECRET = PdSecret.generate();

  private final Map<String, CausalLm> models = new HashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    models.put("gemma3-untied", ContextModels.gemma3(dir.resolve("gemma3")));
    for (String f : new String[] {"mamba", "jamba"}) {
      models.put(f, CausalLm.load(Fixtures.extract(f, dir)));
    }
  }

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  private static Engine start(CausalLm model, PdOptions pd, Checked checks) {
    return Engine.start(
        EngineSettings.of(model, EngineTest.small(256)).observer(checks).pd(pd).conclude());
  }

  /**
   * The test above sees a landing that puts a window's rows in the wrong place: with that bug
   * planted in the decode engine, Gemma 3's output differs from the fused one's.
   */
  @org.junit.jupiter.api.Test
  void shouldSeeAPlantedWindowRowBug() throws Exception {
    CausalLm model = models.get("gemma3-untied");
    int[] prompt = new SplittableRandom(3).ints(40, 0, model.vocabSize()).toArray();
    SamplingParams params = SamplingParams.greedy(10);
    int[] want;
    try (Engine e = start(model, PdOptions.FUSED, new Checked())) {
      want = e.submit(prompt, params).result().get(60, TimeUnit.SECONDS).tokens();
    }
    PdSettings settings = PdSettings.defaults();
    try (Engine p = start(model, PdOptions.prefill(SECRET, settings), new Checked());
        Engine d =
            start(
                model,
                PdOptions.decode(
                    SECRET, settings, new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)),
                new Checked())) {
      d.plantPdLandsWindowFromRowZero();
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      RequestHandle dec = d.submit(prompt, params, -1, new PdTicket.Decode(77));
      p.submit(prompt, params, -1, new PdTicket.Prefill(77, kv));
      int[] got = dec.result().get(60, TimeUnit.SECONDS).tokens();
      assertTrue(
          !java.util.Arrays.equals(want, got),
          "a landing with the window's rows misplaced gave the fused output");
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"gemma3-untied", "mamba", "jamba"})
  void shouldLandEveryCacheGroupAndGiveTheFusedOutput(String name) throws Exception {
    CausalLm model = models.get(name);
    var layout = model.cacheLayout(4, 2);
    assertTrue(
        layout.groups().stream().anyMatch(g -> !(g.kind() instanceof GroupKind.FullHistory)),
        () -> name + " has no hybrid group: " + layout);
    SplittableRandom rnd = new SplittableRandom(name.hashCode());
    List<int[]> prompts = new ArrayList<>();
    int[] shared = rnd.ints(22, 0, model.vocabSize()).toArray();
    for (int i = 0; i < 6; i++) {
      int[] own = rnd.ints(3 + rnd.nextInt(40), 0, model.vocabSize()).toArray();
      int[] prompt = own;
      if (i % 2 == 0) { // half of them share a prefix longer than Gemma's window
        prompt = java.util.Arrays.copyOf(shared, shared.length + own.length);
        System.arraycopy(own, 0, prompt, shared.length, own.length);
      }
      prompts.add(prompt);
    }
    SamplingParams params = SamplingParams.greedy(10);
    Checked fc = new Checked();
    List<EngineTest.Run> fused = new ArrayList<>();
    try (Engine e = start(model, PdOptions.FUSED, fc)) {
      for (int[] p : prompts) {
        fused.add(fc.await(e.submit(p, params)));
      }
    }
    Checked pc = new Checked();
    Checked dc = new Checked();
    PdSettings settings = PdSettings.defaults();
    try (Engine p = start(model, PdOptions.prefill(SECRET, settings), pc);
        Engine d =
            start(
                model,
                PdOptions.decode(
                    SECRET, settings, new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)),
                dc)) {
      InetSocketAddress kv = d.pdEndpoint().orElseThrow();
      for (int pass = 0; pass < 2; pass++) { // the second pass reuses on the prefill side
        for (int i = 0; i < prompts.size(); i++) {
          long room = rnd.nextLong() | 1;
          RequestHandle dec = d.submit(prompts.get(i), params, -1, new PdTicket.Decode(room));
          RequestHandle pre = p.submit(prompts.get(i), params, -1, new PdTicket.Prefill(room, kv));
          pc.await(pre);
          EngineTest.Run got = dc.await(dec);
          EngineTest.Run want = fused.get(i);
          String what = name + " pass " + pass + " request " + i;
          assertArrayEquals(want.tokens(), got.tokens(), what + ": tokens");
          List<float[]> rows = want.logits().subList(1, want.logits().size());
          assertEquals(rows.size(), got.logits().size(), what + ": logits rows");
          for (int r = 0; r < rows.size(); r++) {
            assertArrayEquals(rows.get(r), got.logits().get(r), what + ": logits row " + r);
          }
        }
      }
      for (Engine e : new Engine[] {p, d}) {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (e.stats().activeRequests() != 0
            || e.metrics().device().usedParents() != 0
            || e.metrics().host().usedParents() != 0
            || e.pdMetrics().orElseThrow().roomsOpen() != 0) {
          if (System.nanoTime() > until) {
            fail(e.role() + " not quiet: " + e.stats() + " " + e.metrics());
          }
          Thread.sleep(20);
        }
      }
      assertTrue(pc.broken.isEmpty(), () -> "prefill: " + pc.broken);
      assertTrue(dc.broken.isEmpty(), () -> "decode: " + dc.broken);
    }
  }
}
