package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.redis.RedisStore;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.io.RandomAccessFile;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Whole engines over the CUDA backend, the Device tier in GPU memory and the Host tier pinned: a
 * writer engine serves a prompt and closes (its prefix goes Device → Host → store); a fresh reader
 * engine serves a prompt that extends it and restores the prefix from the store into its Host
 * blocks and up into GPU memory. Its output must equal a recomputation on the GPU: in deterministic
 * mode bit for bit (every logprob), in normal mode token for token. A short read and a corrupted
 * object fall back to recomputation. The llama fixture's embeddings are untied, so its outputs
 * depend on the KV it attends over.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineCudaL3GpuTest {
  private static final int P = 4;
  private static final int TOP = 5;

  private CudaDevice device;
  private CudaDeviceModel normal;
  private CudaDeviceModel fixedOrder;
  private int[] written;
  private int[] extended;

  @BeforeAll
  void load(@TempDir Path dir) {
    device = CudaDevice.open(0);
    Path folder = Fixtures.extract("llama", dir);
    normal = new CudaDeviceModel(CudaCausalLm.load(device, folder, "llama", "test", false));
    fixedOrder = new CudaDeviceModel(CudaCausalLm.load(device, folder, "llama", "test", true));
    SplittableRandom rnd = new SplittableRandom(29);
    written = rnd.ints(101, 0, normal.vocabSize()).toArray();
    extended = java.util.Arrays.copyOf(written, 121);
    for (int i = written.length; i < extended.length; i++) {
      extended[i] = rnd.nextInt(normal.vocabSize());
    }
  }

  @AfterAll
  void close() {
    for (CudaDeviceModel m : new CudaDeviceModel[] {normal, fixedOrder}) {
      if (m != null) {
        m.close();
        m.model().close();
      }
    }
    if (device != null) {
      device.close();
    }
  }

  record Run(GenerationResult result, List<TokenLogprobs> logprobs) {}

  static EngineConfig config() {
    return new EngineConfig(P, 2, 256, 4.0, 64, 8, 2, 1, 64);
  }

  static L3Settings settings(Store store, CudaDeviceModel m) {
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(2_000);
    return new L3Settings(
        store,
        new StorageRuntimeConfig(scheduling, L3ExecutorConfig.defaults()),
        m.attentionBackend());
  }

  static Run serve(Engine e, int[] prompt) throws Exception {
    RequestHandle h = e.submit(prompt, SamplingParams.greedy(8), TOP);
    GenerationResult r = h.result().get(120, TimeUnit.SECONDS);
    assertNull(r.error(), "the request failed: " + r.error());
    return new Run(r, h.logprobs());
  }

  static Run serveFresh(CudaDeviceModel m, Store store, int[] prompt) throws Exception {
    try (Engine e =
        Engine.start(
            EngineSettings.of(m, config())
                .l3(store == null ? null : settings(store, m))
                .conclude())) {
      return serve(e, prompt);
    }
  }

  /** One store shared by several engines: an engine's close does not end it. */
  static class Shared extends ForwardingStore {
    final AtomicInteger gets = new AtomicInteger();
    final AtomicInteger puts = new AtomicInteger();

    Shared(Store inner) {
      super(inner);
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

  static void assertBitIdentical(Run want, Run got, String what) {
    assertArrayEquals(want.result().tokens(), got.result().tokens(), what + ": tokens");
    assertEquals(want.logprobs().size(), got.logprobs().size(), what + ": steps");
    for (int s = 0; s < want.logprobs().size(); s++) {
      TokenLogprobs a = want.logprobs().get(s);
      TokenLogprobs b = got.logprobs().get(s);
      assertEquals(
          Float.floatToRawIntBits(a.logprob()),
          Float.floatToRawIntBits(b.logprob()),
          what + ": step " + s + " logprob " + a.logprob() + " vs " + b.logprob());
      assertArrayEquals(a.topTokens(), b.topTokens(), what + ": step " + s + " top tokens");
      for (int k = 0; k < a.topLogprobs().length; k++) {
        assertEquals(
            Float.floatToRawIntBits(a.topLogprobs()[k]),
            Float.floatToRawIntBits(b.topLogprobs()[k]),
            what + ": step " + s + " top logprob " + k);
      }
    }
  }

  static double maxLogprobDiff(Run a, Run b) {
    double d = 0;
    for (int s = 0; s < a.logprobs().size(); s++) {
      d = Math.max(d, Math.abs(a.logprobs().get(s).logprob() - b.logprobs().get(s).logprob()));
    }
    return d;
  }

  /**
   * Writes the prefix through {@code store}, reads the extension back; returns the reader's run.
   */
  Run writeThenRead(CudaDeviceModel m, Store writer, Store reader) throws Exception {
    serveFresh(m, writer, written);
    return serveFresh(m, reader, extended);
  }

  @ParameterizedTest
  @ValueSource(strings = {"memory", "file"})
  void shouldRestoreIntoGpuMemoryBitIdenticallyInDeterministicMode(String kind, @TempDir Path dir)
      throws Exception {
    Run want = serveFresh(fixedOrder, null, extended);
    Shared store =
        new Shared(
            kind.equals("memory") ? new MemoryStore() : new FileStore(FileStoreSettings.of(dir)));
    Run got = writeThenRead(fixedOrder, store, store);
    assertTrue(store.puts.get() > 0 && store.gets.get() > 0, "the store was written and read");
    int restored = got.result().metrics().reusedStorageTokens();
    System.out.printf(
        Locale.ROOT,
        "deterministic, %s store: %d of %d prompt tokens restored from L3 into GPU memory%n",
        kind,
        restored,
        extended.length);
    assertEquals(written.length / P * P, restored, "the whole written prefix came from the store");
    assertBitIdentical(want, got, kind + " store, deterministic mode");
  }

  /**
   * A restore read into the Host only (early copies off) is loaded to the GPU at admission: in
   * stages of layers on the copy stream while the forward's kernels of earlier layers run, or whole
   * before the forward. Both give recomputation's bits in deterministic mode.
   */
  @ParameterizedTest
  @ValueSource(ints = {1, 2})
  void shouldLoadRestoresAtAdmissionStageByStageWithRecomputationsBits(int stages)
      throws Exception {
    Run want = serveFresh(fixedOrder, null, extended);
    Shared store = new Shared(new MemoryStore());
    L3Settings base = settings(store, fixedOrder);
    L3Settings hostOnly =
        new L3Settings(
            store,
            new StorageRuntimeConfig(
                base.runtime().scheduling().withEarlyH2d(false), base.runtime().executor()),
            base.attentionBackend());
    Run got;
    for (int[] prompt : new int[][] {written, extended}) {
      try (Engine e =
          Engine.start(
              EngineSettings.of(fixedOrder, config()).l3(hostOnly).loadStages(stages).conclude())) {
        got = serve(e, prompt);
        if (prompt == extended) {
          assertEquals(written.length / P * P, got.result().metrics().reusedStorageTokens());
          System.out.printf(
              Locale.ROOT,
              "deterministic, loads at admission in %d stage(s): %d tokens restored%n",
              stages,
              got.result().metrics().reusedStorageTokens());
          assertBitIdentical(want, got, stages + " load stage(s)");
        }
      }
    }
    assertTrue(store.gets.get() > 0, "the reader read");
  }

  @Test
  void shouldRestoreFromRedisAndMatchRecomputation(@TempDir Path dir) throws Exception {
    Run want = serveFresh(normal, null, extended);
    try (RedisServer server = RedisServers.startStandalone(dir.resolve("redis"))) {
      RedisStoreSettings redis = RedisStoreSettings.standalone(server.uri());
      serveFresh(normal, RedisStore.open(redis), written);
      Run got = serveFresh(normal, RedisStore.open(redis), extended);
      assertEquals(written.length / P * P, got.result().metrics().reusedStorageTokens());
      assertArrayEquals(want.result().tokens(), got.result().tokens(), "Redis: tokens");
      double d = maxLogprobDiff(want, got);
      System.out.printf(Locale.ROOT, "normal mode, Redis store: max |Δ logprob| %.2e%n", d);
      assertTrue(d <= 1e-3, "Redis: logprobs differ by " + d);
    }
  }

  @Test
  void shouldFallBackToRecomputationOnShortReads(@TempDir Path dir) throws Exception {
    Run want = serveFresh(fixedOrder, null, extended);
    serveFresh(fixedOrder, new FileStore(FileStoreSettings.of(dir)), written);
    Shared shortReads =
        new Shared(new FileStore(FileStoreSettings.of(dir))) {
          @Override
          public StoreResult get(List<String> keys, List<MemorySegment> destinations)
              throws Exception {
            StoreResult full = super.get(keys, destinations);
            List<RowResult> rows = new ArrayList<>();
            for (RowResult row : full.rows()) {
              rows.add(
                  row instanceof RowResult.Ok ok ? new RowResult.Ok(ok.bytes() / 2, false) : row);
            }
            return new StoreResult(rows, full.retired());
          }
        };
    Run got = serveFresh(fixedOrder, shortReads, extended);
    assertTrue(shortReads.gets.get() > 0, "the reader read");
    assertEquals(0, got.result().metrics().reusedStorageTokens(), "no short read was used");
    assertBitIdentical(want, got, "short reads");
  }

  @Test
  void shouldUseNoObjectCorruptedOnDisk(@TempDir Path dir) throws Exception {
    Run want = serveFresh(fixedOrder, null, extended);
    serveFresh(fixedOrder, new FileStore(FileStoreSettings.of(dir)), written);
    List<Path> objects;
    try (var walk = Files.walk(dir)) {
      objects = walk.filter(Files::isRegularFile).sorted().toList();
    }
    assertTrue(!objects.isEmpty(), "the writer's objects are files");
    for (Path object : objects) {
      try (RandomAccessFile f = new RandomAccessFile(object.toFile(), "rw")) {
        long at = f.length() - 1;
        f.seek(at);
        int b = f.read();
        f.seek(at);
        f.write(b ^ 0x5A);
      }
    }
    Shared counted = new Shared(new FileStore(FileStoreSettings.of(dir)));
    Run got = serveFresh(fixedOrder, counted, extended);
    assertTrue(counted.gets.get() > 0, "the reader read the corrupted objects");
    assertEquals(0, got.result().metrics().reusedStorageTokens(), "no corrupted object is used");
    assertBitIdentical(want, got, "corrupted objects");
  }

  @Test
  void shouldComputeTheSameTokensInNormalAndDeterministicMode() throws Exception {
    Run a = serveFresh(normal, null, extended);
    Run b = serveFresh(fixedOrder, null, extended);
    assertArrayEquals(a.result().tokens(), b.result().tokens(), "normal vs deterministic tokens");
    double d = maxLogprobDiff(a, b);
    System.out.printf(Locale.ROOT, "normal vs deterministic: max |Δ logprob| %.2e%n", d);
    assertTrue(d <= 1e-3, "modes differ by " + d);
  }
}
