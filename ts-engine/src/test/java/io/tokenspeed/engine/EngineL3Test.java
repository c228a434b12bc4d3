package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineTest.Recorder;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * L3 under the engine, in one process over the in-memory store: a writer engine serves a prompt and
 * closes (its finished prefix goes Device → Host → store on the way); a fresh engine with empty
 * local caches then serves a prompt that extends it, restores the prefix from the store into its
 * own Host and Device blocks, and must produce exactly what a recomputation produces. Invariants of
 * the scheduler, the storage transfer manager and the cache are checked after every round.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3Test {
  private static final int P = 4;

  private final java.util.Map<String, CausalLm> models = new java.util.HashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) throws Exception {
    for (String f : new String[] {"llama", "jamba"}) {
      models.put(f, CausalLm.load(Fixtures.extract(f, dir)));
    }
    java.nio.file.Path config = dir.resolve("wide-llama.json");
    java.nio.file.Files.writeString(config, WIDE_LLAMA);
    models.put(
        "wide",
        CausalLm.load(
            io.tokenspeed.model.synthetic.SyntheticCheckpoints.materialize(
                io.tokenspeed.model.synthetic.SyntheticCheckpoints.PREFIX + config,
                7,
                io.tokenspeed.model.checkpoint.DType.F32,
                dir.resolve("synthetic"))));
  }

  /**
   * A synthetic Llama with 8 KiB of KV per token (4 layers × 8 KV heads × 32 × K and V, F32), so
   * that restoring 1024 tokens is one 8 MiB GET, which the executor runs as shares.
   */
  private static final String WIDE_LLAMA =
      """
      {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": false,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 256,
        "intermediate_size": 512,
        "max_position_embeddings": 2048,
        "mlp_bias": false,
        "model_type": "llama",
        "num_attention_heads": 8,
        "num_hidden_layers": 4,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true,
        "vocab_size": 256
      }
      """;

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  /** One in-memory store shared by several engines: an engine's close does not end it. */
  static final class SharedStore extends ForwardingStore {
    final MemoryStore inner;
    final AtomicInteger puts = new AtomicInteger();
    final AtomicInteger gets = new AtomicInteger();

    SharedStore() {
      this(new MemoryStore());
    }

    private SharedStore(MemoryStore memory) {
      super(memory);
      this.inner = memory;
    }

    @Override
    public String name() {
      return "shared-memory";
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      gets.incrementAndGet();
      return super.get(keys, destinations);
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      puts.incrementAndGet();
      return super.put(keys, sources);
    }

    @Override
    public void close() {}
  }

  static L3Settings l3(Store store) {
    return l3(store, StorageConfig.defaults().withMinExtensionTokens(P));
  }

  static L3Settings l3(Store store, StorageConfig scheduling) {
    return new L3Settings(
        store,
        new StorageRuntimeConfig(scheduling, L3ExecutorConfig.defaults()),
        L3Settings.CPU_ATTENTION_BACKEND);
  }

  private static Run serve(Engine e, Recorder rec, int[] prompt) throws Exception {
    return EngineTest.await(e.submit(prompt, SamplingParams.greedy(8)), rec);
  }

  /** What the prompt gives on a fresh engine without L3. */
  private Run recompute(CausalLm model, int[] prompt) throws Exception {
    return recompute(model, prompt, 256);
  }

  private Run recompute(CausalLm model, int[] prompt, int deviceParents) throws Exception {
    return serveFresh(model, deviceParents, null, prompt);
  }

  /**
   * Serves {@code prompt} on a fresh engine of {@code deviceParents} Device parents, with L3 when
   * {@code l3} is not null, checks that every forward recorded was well formed, and closes the
   * engine (a close drains its L3 writes).
   */
  private static Run serveFresh(CausalLm model, int deviceParents, L3Settings l3, int[] prompt)
      throws Exception {
    Recorder rec = new Recorder();
    Run run;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(deviceParents))
                .observer(rec)
                .l3(l3)
                .paused()
                .conclude())) {
      e.resume();
      run = serve(e, rec, prompt);
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    return run;
  }

  /** {@code prefix} extended to {@code length} tokens with seeded random ones. */
  static int[] extend(int[] prefix, int length, int vocabSize, SplittableRandom rnd) {
    int[] out = Arrays.copyOf(prefix, length);
    for (int i = prefix.length; i < length; i++) {
      out[i] = rnd.nextInt(vocabSize);
    }
    return out;
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"llama", "jamba"})
  void shouldRestoreAPrefixAnotherEngineWroteAndMatchRecomputation(String fixture)
      throws Exception {
    CausalLm model = models.get(fixture);
    SplittableRandom rnd = new SplittableRandom(fixture.hashCode());
    int[] written = rnd.ints(101, 0, model.vocabSize()).toArray();
    int[] extended = extend(written, 121, model.vocabSize(), rnd);
    SharedStore store = new SharedStore();

    serveFresh(model, 256, l3(store), written); // its close writes the prefix through and puts it
    assertTrue(store.puts.get() > 0, "the writer put its prefix");

    Run want = recompute(model, extended);
    Run got = serveFresh(model, 256, l3(store), extended);
    EngineTest.assertSame(want, got, fixture + ": restored from L3 vs recomputed");
    assertTrue(store.gets.get() > 0, "the reader read the store");
    assertEquals(0, got.result().metrics().reusedDeviceTokens());
    assertEquals(
        written.length / P * P,
        got.result().metrics().reusedHostTokens(),
        "the writer's full pages, restored through the Host");
    assertEquals(
        written.length / P * P,
        got.result().metrics().reusedStorageTokens(),
        "every reused token came from L3");
    assertEquals(
        extended.length - written.length / P * P + 7,
        got.result().metrics().computedTokens(),
        "only the rest of the prompt and the decode steps are computed");

    // a token changed inside the restored prefix: only the pages before it can be reused
    int[] changed = extended.clone();
    changed[10] = (changed[10] + 1) % model.vocabSize();
    Run wantChanged = recompute(model, changed);
    Run gotChanged = serveFresh(model, 256, l3(store), changed);
    EngineTest.assertSame(wantChanged, gotChanged, fixture + ": changed prefix vs recomputed");
    assertTrue(
        gotChanged.result().metrics().reusedHostTokens() <= 8,
        "nothing after the changed token is reused: " + gotChanged.result().metrics());
    assertFalse(
        Arrays.equals(want.logits().get(0), gotChanged.logits().get(0)),
        "the changed token changes the output");
  }

  private static List<String> storageThreads() {
    return Thread.getAllStackTraces().keySet().stream()
        .map(Thread::getName)
        .filter(n -> n.startsWith("ts-l3-") || n.startsWith("ts-control-"))
        .toList();
  }

  @Test
  void shouldRunNoStorageMachineryWithoutABackendAndGiveTheSameOutputs() throws Exception {
    CausalLm model = models.get("llama");
    int[] prompt = new SplittableRandom(3).ints(61, 0, model.vocabSize()).toArray();
    List<String> before = storageThreads();
    Recorder off = new Recorder();
    Run without;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256)).observer(off).paused().conclude())) {
      e.resume();
      without = serve(e, off, prompt);
      serve(e, off, prompt); // a Device hit too
      // threads of engines closed before may still be ending; none may start
      List<String> during = storageThreads();
      assertTrue(
          before.containsAll(during),
          () -> "no executor workers and no mesh without a backend: " + during + " vs " + before);
      e.close();
      assertTrue(e.storageCloseReport().isEmpty(), "no executor to close");
    }
    assertTrue(off.broken.isEmpty(), () -> off.broken.toString());

    // with a backend whose store holds nothing: every query misses and the output is the same
    SharedStore empty = new SharedStore();
    Recorder on = new Recorder();
    Run with;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(on)
                .l3(l3(empty))
                .paused()
                .conclude())) {
      e.resume();
      assertFalse(storageThreads().isEmpty(), "the executor's workers run with a backend");
      with = serve(e, on, prompt);
      e.close();
      assertTrue(e.storageCloseReport().orElseThrow().storeClosed(), "closed cleanly");
    }
    assertTrue(on.broken.isEmpty(), () -> on.broken.toString());
    EngineTest.assertSame(without, with, "all-miss with L3 vs no L3");
    assertEquals(0, with.result().metrics().reusedStorageTokens());
    assertTrue(empty.puts.get() > 0, "and its prefix was written through to the store");
  }

  /**
   * While a request waits only for L3, the loop sleeps until the executor reports a completion (or
   * the tick passes) instead of running a round every millisecond: a store that takes 300 ms per
   * call costs about one round per tick, and the restore still matches recomputation.
   */
  @Test
  void shouldSleepBetweenRoundsWhileOnlyL3IsPendingAndWakeOnItsCompletions() throws Exception {
    CausalLm model = models.get("llama");
    SplittableRandom rnd = new SplittableRandom(41);
    int[] written = rnd.ints(64, 0, model.vocabSize()).toArray();
    int[] extended = extend(written, 72, model.vocabSize(), rnd);
    SharedStore store = new SharedStore();
    serveFresh(model, 256, l3(store), written);
    long delayMs = 300;
    Run want = recompute(model, extended);
    Recorder r = new Recorder();
    Run got;
    long roundsBefore;
    long roundsAfter;
    try (SteppedEngine reader =
        new SteppedEngine(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(r)
                .l3(
                    l3(
                        store,
                        StorageConfig.defaults()
                            .withMinExtensionTokens(P)
                            .withSoftDeadlineMs(60_000))))) {
      reader.holdStore(); // every call takes delayMs of the clock inside the store
      roundsBefore = reader.rounds();
      RequestHandle h = reader.engine.submit(extended, SamplingParams.greedy(8));
      for (String call : List.of("query", "GET")) {
        reader.stepUntil(() -> reader.heldStoreCalls() > 0, "the " + call + " is in the store");
        long waiting = reader.runForMs(delayMs);
        assertTrue(
            waiting <= delayMs / LoopRunner.STORAGE_TICK_MS + 1,
            "rounds while the " + call + " took " + delayMs + " ms: " + waiting);
        reader.releaseStore();
        long answeredNs = reader.clock.get();
        reader.holdStore();
        reader.step();
        assertEquals(
            answeredNs + SteppedEngine.ROUND_NS,
            reader.clock.get(),
            "the " + call + "'s completion woke the loop for a round at once");
      }
      reader.releaseStore();
      reader.finish(h);
      got = EngineTest.await(h, r);
      roundsAfter = reader.rounds();
      reader.settle();
    }
    assertTrue(r.broken.isEmpty(), () -> r.broken.toString());
    EngineTest.assertSame(want, got, "restored through a slow store vs recomputed");
    assertEquals(written.length / P * P, got.result().metrics().reusedStorageTokens());
    long waitMs = got.result().metrics().queueNs() / 1_000_000;
    assertTrue(
        waitMs >= 2 * delayMs, "the query and the GET each took " + delayMs + " ms: " + waitMs);
    // one round per 5 ms tick at most while waiting, plus the rounds that compute (a few chunks
    // and 8 decode steps) and those that carry completions and agreements
    long allowed = waitMs / 5 + 40;
    assertTrue(
        roundsAfter - roundsBefore <= allowed,
        "rounds while waiting "
            + waitMs
            + " ms for L3: "
            + (roundsAfter - roundsBefore)
            + " > "
            + allowed);
  }

  /**
   * A restore big enough for executor shares (an 8 MiB GET on four workers), and a request
   * cancelled while those shares are inside the store: it ends at once as cancelled, the late GET
   * publishes nothing, the engine goes on serving, and every output equals recomputation.
   */
  @ParameterizedTest(name = "early_h2d={0}")
  @ValueSource(booleans = {false, true})
  void shouldRestoreThroughSplitGetsAndSurviveACancelWhileTheyAreInsideTheStore(boolean early)
      throws Exception {
    CausalLm model = models.get("wide");
    SplittableRandom rnd = new SplittableRandom(57);
    int[] written = rnd.ints(1025, 0, model.vocabSize()).toArray();
    int[] extended = extend(written, 1040, model.vocabSize(), rnd);
    SharedStore store = new SharedStore();
    serveFresh(model, 1024, l3(store), written);
    Run want = recompute(model, extended, 1024);

    Semaphore inside = new Semaphore(0);
    CountDownLatch release = new CountDownLatch(1);
    AtomicBoolean gate = new AtomicBoolean(true);
    List<Integer> getSizes = Collections.synchronizedList(new ArrayList<>());
    ForwardingStore gated =
        new ForwardingStore(store) {
          @Override
          public StoreResult get(List<String> keys, List<MemorySegment> destinations)
              throws Exception {
            getSizes.add(keys.size());
            if (gate.get()) {
              inside.release();
              release.await();
            }
            return super.get(keys, destinations);
          }
        };
    Recorder r = new Recorder();
    try (Engine reader =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(1024))
                .observer(r)
                .l3(
                    l3(
                        gated,
                        StorageConfig.defaults()
                            .withMinExtensionTokens(P)
                            .withSoftDeadlineMs(60_000)
                            .withEarlyH2d(early)))
                .paused()
                .conclude())) {
      reader.resume();
      RequestHandle first = reader.submit(extended, SamplingParams.greedy(8));
      assertTrue(
          inside.tryAcquire(4, 30, TimeUnit.SECONDS),
          "the GET's four shares are inside the store together: " + getSizes);
      first.cancel();
      GenerationResult cancelled = first.result().get(30, TimeUnit.SECONDS);
      assertEquals("cancelled", cancelled.finishReason(), "ended while its GET was running");
      gate.set(false);
      release.countDown(); // the shares return late, detached: nothing of them is published
      Run again = serve(reader, r, extended);
      EngineTest.assertSame(want, again, "served after the cancelled restore");
      Run third = serve(reader, r, extended);
      EngineTest.assertSame(want, third, "and again");
    }
    assertTrue(r.broken.isEmpty(), () -> r.broken.toString());
    // with early Device copies a GET is cut finer (up to four shares per worker, 1 MiB at least:
    // 8 shares) and starts with a first wave of one small share per worker, a 64th of its rows
    // together (8 rows, 2 a share), the first four inside the store; without, in four of 128
    int share = early ? 512 / 64 / 4 : 128;
    assertEquals(
        List.of(share, share, share, share),
        getSizes.subList(0, 4).stream().sorted().toList(),
        "512 block objects (8 MiB), four shares of " + share + " inside the store at once");

    // and without the gate: a fresh reader restores the whole prefix through shares
    Run got =
        serveFresh(
            model,
            1024,
            l3(store, StorageConfig.defaults().withMinExtensionTokens(P).withEarlyH2d(early)),
            extended);
    EngineTest.assertSame(want, got, "restored through split GETs vs recomputed");
    assertEquals(
        extended.length - 1,
        got.result().metrics().reusedStorageTokens(),
        "the gated reader's own requests wrote the extension's full pages and its tail through");
  }
}
