package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.scheduler.StorageCounters;
import io.tokenspeed.scheduler.StorageCounters.DropReason;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * What write-through backs up (issue 21, defects 7 and 8): a hybrid model's finished prompt leaves
 * in L3 the windows and State checkpoints of its intermediate aligned boundaries, so that a later
 * prompt sharing only a shorter prefix restores it; and when the Host has no room for a finished
 * prefix, every key that did not get there is counted as a dropped backup key, by reason.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3WriteThroughTest {
  private static final int P = 4;

  private final Map<String, CausalLm> models = new HashMap<>();

  @BeforeAll
  void load(@TempDir Path dir) {
    models.put("jamba", CausalLm.load(Fixtures.extract("jamba", dir)));
    models.put("gemma3", ContextModels.gemma3(dir));
    models.put("llama", ContextModels.llama(dir));
  }

  @AfterAll
  void close() {
    models.values().forEach(CausalLm::close);
  }

  private static Run serveFresh(CausalLm model, EngineConfig config, L3Settings l3, int[] prompt)
      throws Exception {
    Checked rec = new Checked();
    Run run;
    try (Engine e =
        Engine.start(EngineSettings.of(model, config).observer(rec).l3(l3).paused().conclude())) {
      e.resume();
      run = rec.await(e.submit(prompt, SamplingParams.greedy(8)));
    } // close drains the write-through's PUTs
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    return run;
  }

  // ---------------------------------------------------------------- hybrid boundaries (defect 7)

  /** Each hybrid model, with A of 12 full pages, and of 2 (the control: B shares all of them). */
  static Stream<Arguments> hybridPrompts() {
    return Stream.of(
        Arguments.of("jamba", 12),
        Arguments.of("gemma3", 12),
        Arguments.of("jamba", 2),
        Arguments.of("gemma3", 2));
  }

  /**
   * A writer serves prompt A of {@code aPages} full pages and closes; a fresh reader serves prompt
   * B, which shares only A's first 2 pages: B must restore those 2 pages from L3 — Jamba needs the
   * State checkpoint at 2·P, Gemma 3 (16-token windows) the window before it, which A's
   * write-through must have written as one of its intermediate aligned boundaries — and its output
   * must equal recomputation. On 66f0a4f write-through backs up only A's last full boundary: with
   * 12 pages 0 tokens are restored (the control, A of 2 pages, restores 8).
   */
  @ParameterizedTest(name = "{0}, A of {1} pages")
  @MethodSource("hybridPrompts")
  void shouldRestoreAShorterSharedPrefixOfAHybridModelFromWhatALongerPromptWroteThrough(
      String name, int aPages) throws Exception {
    CausalLm model = models.get(name);
    SplittableRandom rnd = new SplittableRandom(name.hashCode());
    int[] a = rnd.ints(aPages * P + 1, 0, model.vocabSize()).toArray();
    int[] b = Arrays.copyOf(a, 2 * P + 13);
    for (int i = 2 * P; i < b.length; i++) {
      do {
        b[i] = rnd.nextInt(model.vocabSize());
      } while (i < a.length && b[i] == a[i]);
    }
    SharedStore store = new SharedStore();
    serveFresh(model, EngineTest.small(256), patient(store), a);
    assertTrue(store.puts.get() > 0, "the writer put its prompt");
    Run want = serveFresh(model, EngineTest.small(256), null, b);
    Run got = serveFresh(model, EngineTest.small(256), patient(store), b);
    EngineTest.assertSame(want, got, name + ": B restored from L3 vs recomputed");
    assertTrue(
        got.result().metrics().reusedStorageTokens() >= 2 * P,
        name
            + ", A of "
            + aPages
            + " pages: B shares A's first "
            + 2 * P
            + " tokens, which it must restore from L3: "
            + got.result().metrics());
  }

  // ---------------------------------------------------------------- silent drops (defect 8)

  /**
   * A finished prompt of 10 full pages (20 blocks of KV) on an engine whose Host holds 2 blocks:
   * every key of its prefix either reaches the Host (and then the store) or is counted among the
   * scheduler's dropped backup keys. On 66f0a4f write-through stops at the first key the Host has
   * no room for and drops the rest without a counter.
   */
  @Test
  void shouldCountEveryBackupKeyThatDidNotReachTheHostWhenTheHostIsFull() throws Exception {
    CausalLm model = models.get("llama");
    int[] prompt = new SplittableRandom(73).ints(10 * P + 1, 0, model.vocabSize()).toArray();
    Set<String> putKeys = ConcurrentHashMap.newKeySet();
    ForwardingStore store =
        new ForwardingStore(new SharedStore()) {
          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            putKeys.addAll(keys);
            return super.put(keys, sources);
          }
        };
    EngineConfig tinyHost = new EngineConfig(P, 2, 256, 2.5 / 256, 64, 8, 2, 2, 64);
    Map<DropReason, Long> dropped = new ConcurrentHashMap<>();
    Checked rec =
        new Checked() {
          @Override
          public void afterRound(EngineView e) {
            super.afterRound(e);
            StorageCounters c = e.storageTransferManager().counters();
            for (DropReason r : DropReason.values()) {
              dropped.put(r, c.droppedBackupKeys(r));
            }
          }
        };
    int needed;
    int hostBlocks;
    try (SteppedEngine stepped =
        new SteppedEngine(EngineSettings.of(model, tinyHost).observer(rec).l3(l3(store)))) {
      rec.await(stepped.serve(prompt, SamplingParams.greedy(8)));
      stepped.settle(); // the write-through done; the observer saw the last round's counters
      Engine e = stepped.engine;
      needed = e.cache().neededKeys(PromptKeys.of(e.layout(), prompt, List.of()), 10 * P).size();
      hostBlocks = e.cache().host().pool().numParents();
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    long droppedKeys = dropped.values().stream().mapToLong(Long::longValue).sum();
    Map<DropReason, Long> byReason = new EnumMap<>(dropped);
    assertTrue(
        putKeys.size() + droppedKeys >= needed,
        needed
            + " keys of the finished prefix (Host of "
            + hostBlocks
            + " parents): "
            + putKeys.size()
            + " reached the Host and the store, "
            + droppedKeys
            + " were counted as dropped "
            + byReason
            + "; "
            + (needed - putKeys.size() - droppedKeys)
            + " vanished without a count");
  }

  private static L3Settings l3(Store store) {
    return EngineL3Test.l3(store);
  }

  /** One-page extensions and a soft deadline no cold JVM reaches: the restore never times out. */
  private static L3Settings patient(Store store) {
    return EngineL3Test.l3(
        store, StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(60_000));
  }
}
