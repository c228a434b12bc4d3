package io.tokenspeed.cuda.model;

import static io.tokenspeed.cuda.model.EngineCudaL3GpuTest.assertBitIdentical;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.model.EngineCudaL3GpuTest.Run;
import io.tokenspeed.cuda.model.EngineCudaL3GpuTest.Shared;
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
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.file.FileStore;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.ContextConfigs;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Engines over the CUDA backend serving the hybrid models in deterministic mode: Gemma 3 (its
 * sliding-window layers' group beside its global layers'), Mamba (State checkpoints only) and Jamba
 * (State checkpoints beside full-history KV), each with an untied output projection so that its
 * outputs depend on what it attends over or resumes from. A prompt that shares only a shorter
 * prefix with one a writer served restores that prefix — the window or the checkpoint at its end,
 * which the writer's write-through stored at an intermediate boundary — from the memory, file and
 * Redis stores; a prompt that extends the written one restores all of it; and requests retracted
 * from a tight Device come back to their exact images. Every output equals recomputation bit for
 * bit.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class HybridEngineGpuTest {
  private static final int P = 4;
  private static final int TOP = 5;

  /** The hybrid models the tests serve, by name; the jamba fixture's projection is untied. */
  static Path folder(String name, Path dir) {
    return switch (name) {
      case "gemma3" ->
          SyntheticCheckpoints.materialize(
              "untied-gemma3", ContextConfigs.GEMMA3, 13, DType.F32, dir);
      case "mamba" ->
          SyntheticCheckpoints.materialize(
              "untied-mamba", ContextConfigs.MAMBA, 13, DType.F32, dir);
      case "jamba" -> Fixtures.extract("jamba", dir);
      default -> throw new IllegalArgumentException(name);
    };
  }

  private CudaDevice device;
  private final Map<String, CudaDeviceModel> models = new HashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    device = CudaDevice.open(0);
    for (String name : List.of("gemma3", "mamba", "jamba")) {
      models.put(
          name,
          new CudaDeviceModel(
              CudaCausalLm.load(device, folder(name, dir.resolve(name)), name, "test", true)));
    }
  }

  @AfterAll
  void close() {
    for (CudaDeviceModel m : models.values()) {
      m.close();
      m.model().close();
    }
    if (device != null) {
      device.close();
    }
  }

  static Stream<Arguments> modelsAndStores() {
    return Stream.of("gemma3", "mamba", "jamba")
        .flatMap(m -> Stream.of("memory", "file", "redis").map(s -> Arguments.of(m, s)));
  }

  static EngineConfig roomy() {
    return new EngineConfig(P, 2, 256, 4.0, 64, 8, 2, 1, 64);
  }

  static L3Settings l3(Store store, DeviceModel m) {
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(5_000);
    return new L3Settings(
        store,
        new StorageRuntimeConfig(scheduling, L3ExecutorConfig.defaults()),
        m.attentionBackend());
  }

  static Run await(RequestHandle h) throws Exception {
    GenerationResult r = h.result().get(120, TimeUnit.SECONDS);
    assertNull(r.error(), "the request failed: " + r.error());
    return new Run(r, h.logprobs());
  }

  static Run serveFresh(DeviceModel m, EngineConfig config, Store store, int[] prompt, int tokens)
      throws Exception {
    try (Engine e =
        Engine.start(
            EngineSettings.of(m, config).l3(store == null ? null : l3(store, m)).conclude())) {
      return await(e.submit(prompt, SamplingParams.greedy(tokens), TOP));
    }
  }

  /** A prompt sharing exactly {@code shared} leading tokens with {@code a}, {@code n} long. */
  static int[] sharing(int[] a, int shared, int n, SplittableRandom rnd, int vocab) {
    int[] b = Arrays.copyOf(a, n);
    for (int i = shared; i < n; i++) {
      do {
        b[i] = rnd.nextInt(vocab);
      } while (i < a.length && b[i] == a[i]);
    }
    return b;
  }

  @ParameterizedTest(name = "{0}, {1} store")
  @MethodSource("modelsAndStores")
  void shouldRestoreShorterAndLongerSharedPrefixesWithRecomputationsBits(
      String name, String kind, @TempDir Path dir) throws Exception {
    Restores r = Restores.run(models.get(name), kind, dir);
    System.out.printf(
        Locale.ROOT,
        "%s on the GPU, %s store: %d tokens restored of a prompt sharing %d, %d of one extending"
            + " the %d written%n",
        name,
        kind,
        r.shorter(),
        2 * P,
        r.longer(),
        12 * P + 1);
  }

  /**
   * The restore scenario on any device model (the CPU backend runs it in the build): a writer
   * serves A, 12 pages and a token, and closes; a fresh engine serves a prompt sharing only A's
   * first 2 pages, another one extending A. Returns the tokens each restored from L3; asserts they
   * restored at least the 2 pages and exactly A's 12, with recomputation's bits.
   */
  record Restores(int shorter, int longer) {
    static Restores run(DeviceModel model, String kind, Path dir) throws Exception {
      int vocab = model.vocabSize();
      SplittableRandom rnd = new SplittableRandom(kind.hashCode());
      int[] a = rnd.ints(12 * P + 1, 0, vocab).toArray();
      int[] shorter = sharing(a, 2 * P, 2 * P + 13, rnd, vocab);
      int[] longer = sharing(a, a.length, a.length + 20, rnd, vocab);
      Run wantShorter = serveFresh(model, roomy(), null, shorter, 8);
      Run wantLonger = serveFresh(model, roomy(), null, longer, 8);
      RedisServer redis =
          kind.equals("redis") ? RedisServers.startStandalone(dir.resolve("r")) : null;
      try {
        Shared store =
            new Shared(
                switch (kind) {
                  case "memory" -> new MemoryStore();
                  case "file" -> new FileStore(FileStoreSettings.of(dir.resolve("objects")));
                  default -> RedisStore.open(RedisStoreSettings.standalone(redis.uri()));
                });
        serveFresh(model, roomy(), store, a, 8);
        assertTrue(store.puts.get() > 0, "the writer put its prompt");
        Run gotShorter = serveFresh(model, roomy(), store, shorter, 8);
        Run gotLonger = serveFresh(model, roomy(), store, longer, 8);
        Restores r =
            new Restores(
                gotShorter.result().metrics().reusedStorageTokens(),
                gotLonger.result().metrics().reusedStorageTokens());
        assertTrue(r.shorter() >= 2 * P, "the shorter shared prefix came from L3: " + r);
        assertEquals(12 * P, r.longer(), "the whole written prefix came from L3");
        assertBitIdentical(wantShorter, gotShorter, kind + ": shorter shared prefix");
        assertBitIdentical(wantLonger, gotLonger, kind + ": the written prefix extended");
        return r;
      } finally {
        if (redis != null) {
          redis.close();
        }
      }
    }
  }

  /**
   * Requests whose prompts fit the Device at admission but whose outputs do not: as they decode
   * they retract each other, their images saved to the Host and loaded back into GPU memory at
   * readmission. Each output equals the request's alone run bit for bit.
   */
  @ParameterizedTest
  @ValueSource(strings = {"gemma3", "jamba"})
  void shouldGiveEveryRetractedRequestItsAloneOutput(String name) throws Exception {
    Retractions r = Retractions.run(models.get(name), 17, Retractions.tightParents(name));
    System.out.printf(
        Locale.ROOT,
        "%s on the GPU, Device of %d parents: %d retractions, %d of %d outputs equal alone%n",
        name,
        Retractions.tightParents(name),
        r.retractions(),
        r.requests() - r.differ().size(),
        r.requests());
    assertTrue(r.retractions() >= 1, "the Device retracted " + r.retractions() + " times");
    assertTrue(r.differ().isEmpty(), () -> String.join("\n", r.differ()));
  }

  /**
   * The retraction scenario on any device model (the CPU backend runs it in the build). Mamba is
   * left out: a State group's blocks never grow (its two-slot contract), so a request the Device
   * admits is never retracted by its own decoding.
   */
  record Retractions(long retractions, int requests, List<String> differ) {
    static final int REQUESTS = 24;

    /** A Device that admits every prompt but retracts as they decode (measured on the CPU). */
    static int tightParents(String model) {
      return switch (model) {
        case "gemma3" -> 64;
        case "jamba" -> 8;
        default -> throw new IllegalArgumentException(model + " has no retraction scenario");
      };
    }

    static Retractions run(DeviceModel m, long seed, int parents) throws Exception {
      SplittableRandom rnd = new SplittableRandom(seed);
      List<int[]> prompts = new ArrayList<>();
      List<Integer> outputs = new ArrayList<>();
      for (int i = 0; i < REQUESTS; i++) {
        prompts.add(rnd.ints(6 + rnd.nextInt(20), 0, m.vocabSize()).toArray());
        outputs.add(20 + rnd.nextInt(17));
      }
      List<Run> alone = new ArrayList<>();
      for (int i = 0; i < REQUESTS; i++) {
        alone.add(serveFresh(m, roomy(), null, prompts.get(i), outputs.get(i)));
      }
      EngineConfig tight = new EngineConfig(P, 2, parents, 4.0, 4096, REQUESTS, 0, 1, 64);
      List<String> differ = new ArrayList<>();
      long retractions;
      try (Engine e = Engine.start(EngineSettings.of(m, tight).conclude())) {
        List<RequestHandle> handles = new ArrayList<>();
        for (int i = 0; i < REQUESTS; i++) {
          handles.add(e.submit(prompts.get(i), SamplingParams.greedy(outputs.get(i)), TOP));
        }
        for (int i = 0; i < REQUESTS; i++) {
          try {
            assertBitIdentical(alone.get(i), await(handles.get(i)), "request " + i);
          } catch (AssertionError a) {
            differ.add(a.getMessage());
          }
        }
        retractions = e.stats().retractions();
      }
      return new Retractions(retractions, REQUESTS, differ);
    }
  }
}
