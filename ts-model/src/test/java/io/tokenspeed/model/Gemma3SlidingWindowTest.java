package io.tokenspeed.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.model.config.Gemma3Config;
import io.tokenspeed.model.kernel.ComputePool;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The sliding-window (SWA) group of Gemma 3: its layout, that attention in it reads only the window
 * (so the rows left of it may be holes), and that a token left of the window still reaches the last
 * token through the global layer.
 *
 * <pre>
 *   W = 16, bg = 16, next token at position p:  reads [p - 15, p]
 *   SWA rows:  | 0 | 0 | ... | 0 | row(p-15) ... row(p) |     rows i with (i+1)·bg ≤ p-15 → hole
 *   Full rows: | every row present                     |
 * </pre>
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class Gemma3SlidingWindowTest {
  static final int WINDOW = 16;

  private CausalLm model;
  private ComputePool pool;
  private int swa;
  private int full;

  @BeforeAll
  void load() {
    model = CausalLm.load(Fixtures.folder("gemma3"));
    pool = ComputePool.ofCores();
    CacheLayout layout = model.cacheLayout(64, 16);
    for (int g = 0; g < layout.numGroups(); g++) {
      if (layout.group(g).kind() instanceof GroupKind.SlidingWindow) {
        swa = g;
      } else {
        full = g;
      }
    }
  }

  @AfterAll
  void close() {
    pool.close();
    model.close();
  }

  @Test
  void shouldDeriveAnSwaGroupForSlidingLayersAndAFullGroupForTheGlobalLayer() {
    Gemma3Config config = (Gemma3Config) model.config();
    assertEquals(WINDOW, config.slidingWindow());
    CacheLayout layout = model.cacheLayout(64, 16);
    assertEquals(2, layout.numGroups());
    CacheGroupSpec s = layout.group(0);
    CacheGroupSpec f = layout.group(1);
    assertEquals(new GroupKind.SlidingWindow(WINDOW), s.kind());
    assertEquals(new GroupKind.FullHistory(), f.kind());
    long fieldBytes = 1L * 16 * 16 * Float.BYTES;
    List<CacheField> swaFields = new ArrayList<>();
    for (int l = 0; l < 5; l++) {
      swaFields.add(new CacheField("layers." + l + ".k", fieldBytes));
      swaFields.add(new CacheField("layers." + l + ".v", fieldBytes));
    }
    assertEquals(swaFields, s.fields());
    assertEquals(
        List.of(new CacheField("layers.5.k", fieldBytes), new CacheField("layers.5.v", fieldBytes)),
        f.fields());
  }

  /**
   * Run A keeps every block. Run B prefills in chunks and decodes, and before each step replaces
   * the SWA rows entirely left of the step's window by 0 and fills the dropped blocks with NaN
   * bytes: any read of them would poison the logits. Both must agree bit for bit.
   */
  @ParameterizedTest(name = "prompt {0} tokens, chunk {1}, seed {2}")
  @CsvSource({"133, 7, 3", "40, 40, 4", "47, 16, 5", "70, 1, 6"})
  void shouldGiveBitIdenticalLogitsWhenSwaRowsLeftOfTheWindowAreHoles(
      int length, int chunk, long seed) {
    int[] ids = prompt(seed, length);
    int steps = 4;
    int vocab = model.vocabSize();
    float[] wantPrompt;
    float[][] wantSteps = new float[steps][];
    int[] next = new int[steps];
    try (PagedRunner a = new PagedRunner(model, 16, 24, -1)) {
      int[][] table = a.table(a.rowsFor(length + steps));
      wantPrompt = a.prefill(ids, table, length, pool);
      float[] last = Arrays.copyOfRange(wantPrompt, (length - 1) * vocab, length * vocab);
      for (int s = 0; s < steps; s++) {
        next[s] = PagedRunner.argmax(last);
        wantSteps[s] = a.decode(next[s], length + s, table, pool);
        last = wantSteps[s];
      }
    }
    try (PagedRunner b = new PagedRunner(model, 16, 24, seed)) {
      int[][] table = b.table(b.rowsFor(length + steps));
      float[] gotPrompt = new float[length * vocab];
      for (int start = 0; start < length; start += chunk) {
        int end = Math.min(length, start + chunk);
        dropLeftOfWindow(b, table, start);
        ForwardResult r =
            model.forward(
                ForwardBatch.of(
                    new ForwardRequest(Arrays.copyOfRange(ids, start, end), start, table, true)),
                b.kv(),
                pool);
        System.arraycopy(r.logits(0), 0, gotPrompt, start * vocab, (end - start) * vocab);
      }
      assertArrayEquals(bits(wantPrompt), bits(gotPrompt), "prompt logits with holes");
      for (int s = 0; s < steps; s++) {
        int dropped = dropLeftOfWindow(b, table, length + s);
        assertTrue(length < 2 * WINDOW || dropped > 0, "no row was dropped at step " + s);
        float[] got = b.decode(next[s], length + s, table, pool);
        assertArrayEquals(bits(wantSteps[s]), bits(got), "decode step " + s + " with holes");
      }
    }
  }

  @Test
  void shouldRejectHolesInsideTheWindowAndInTheFullGroup() {
    int[] ids = prompt(9, 60);
    try (PagedRunner r = new PagedRunner(model, 16, 24, -1)) {
      int[][] table = r.table(r.rowsFor(61));
      r.prefill(ids, table, 60, pool);
      int[][] insideWindow = copy(table);
      insideWindow[swa][2] = 0; // tokens 32..47: position 60 reads 45..60
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> r.decode(1, 60, insideWindow, pool));
      assertTrue(e.getMessage().contains("row 2 block id=0"), e.getMessage());
      int[][] fullHole = copy(table);
      fullHole[full][0] = 0;
      e = assertThrows(IllegalArgumentException.class, () -> r.decode(1, 60, fullHole, pool));
      assertTrue(e.getMessage().contains("group " + full + " row 0 block id=0"), e.getMessage());
      int[][] leftOfWindow = copy(table);
      leftOfWindow[swa][0] = 0;
      leftOfWindow[swa][1] = 0;
      r.decode(1, 60, leftOfWindow, pool);
    }
  }

  /**
   * Position 3 is 129 tokens left of the last position, 132: five sliding layers carry it at most 5
   * × 15 positions to the right, so any change of the final logits came through the global layer.
   * With that layer made sliding too, the final logits do not move at all.
   */
  @Test
  void shouldChangeFinalLogitsThroughTheGlobalLayerWhenATokenLeftOfTheWindowChanges(
      @TempDir Path tmp) throws IOException {
    int[] ids = prompt(12, 133);
    int changed = 3;
    int[] other = ids.clone();
    other[changed] = (ids[changed] + 7) % model.vocabSize();
    float[][] withGlobal = lastLogits(model, ids, other);
    assertTrue(
        HfFixtureTestBase.maxAbsDelta(withGlobal[0], withGlobal[1]) > 1e-6,
        "final logits did not move although the global layer sees position " + changed);

    Path dir = Fixtures.copyCheckpoint("gemma3", tmp);
    Path config = dir.resolve("config.json");
    String text = Files.readString(config);
    String global = "\"sliding_attention\",\n    \"full_attention\"\n  ]";
    assertTrue(text.contains(global), "fixture config layout changed");
    Files.writeString(
        config, text.replace(global, "\"sliding_attention\",\n    \"sliding_attention\"\n  ]"));
    try (CausalLm allSliding = CausalLm.load(dir)) {
      assertEquals(1, allSliding.cacheLayout(64, 16).numGroups());
      float[][] slidingOnly = lastLogits(allSliding, ids, other);
      assertArrayEquals(
          bits(slidingOnly[0]),
          bits(slidingOnly[1]),
          "with sliding layers only, a token left of every window must not matter");
    }
  }

  private float[][] lastLogits(CausalLm m, int[] ids, int[] other) {
    int vocab = m.vocabSize();
    try (PagedRunner r = new PagedRunner(m, 16, 24, 1)) {
      float[] base = r.prefill(ids, r.table(r.rowsFor(ids.length)), 64, pool);
      float[] alt = r.prefill(other, r.table(r.rowsFor(ids.length)), 64, pool);
      return new float[][] {
        Arrays.copyOfRange(base, base.length - vocab, base.length),
        Arrays.copyOfRange(alt, alt.length - vocab, alt.length)
      };
    }
  }

  /**
   * Replaces the SWA rows entirely left of the window of a chunk starting at {@code start} by 0,
   * filling each dropped block with NaN bytes; returns how many rows are holes now.
   */
  private int dropLeftOfWindow(PagedRunner runner, int[][] table, int start) {
    int firstNeeded = Math.max(0, start - WINDOW + 1);
    int holes = 0;
    for (int row = 0; (row + 1) * 16 <= firstNeeded; row++) {
      if (table[swa][row] != 0) {
        MemorySegment block = runner.kv().pool(swa).block(table[swa][row]);
        block.fill((byte) 0xFF);
        table[swa][row] = 0;
      }
      holes++;
    }
    return holes;
  }

  private int[] prompt(long seed, int length) {
    Random rnd = new Random(seed);
    int[] ids = new int[length];
    for (int i = 0; i < length; i++) {
      ids[i] = rnd.nextInt(model.vocabSize());
    }
    return ids;
  }

  private static int[][] copy(int[][] table) {
    int[][] out = new int[table.length][];
    for (int g = 0; g < table.length; g++) {
      out[g] = table[g].clone();
    }
    return out;
  }

  private static int[] bits(float[] a) {
    return ForwardExactnessTest.bits(a);
  }
}
