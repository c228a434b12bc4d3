package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.Sharding;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.sampling.SamplingParams;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A replica whose full-history KV is split by pages (ranks as threads, the real mesh): the group is
 * page-cyclic over the two ranks, a block living on its owner only ((v−1) mod 2, Device and Host
 * alike). Each rank attends over its own pages; transfers between blocks of two owners move through
 * the collective; each rank PUTs and GETs only the pages it owns, under keys that name the payload
 * replica ({@code r0} on both ranks), so a page one allocation wrote is restored by whichever rank
 * owns it in a new Host allocation. Outputs equal a single rank's, on a model whose output depends
 * on its context.
 */
class EngineTensorParallelPagesTest {
  @TempDir Path dir;

  /** Pages of 4 tokens, one block each: a one-page shift deals every page to the other owner. */
  private static EngineConfig config(int deviceParents, int demoteBelow) {
    return new EngineConfig(4, 4, deviceParents, 4.0, 64, 8, demoteBelow, 1, 64);
  }

  /** A rank's client of the shared store: the keys it PUT and the keys it read. */
  static final class Recorder extends ForwardingStore {
    final Set<String> put = ConcurrentHashMap.newKeySet();
    final Set<String> read = ConcurrentHashMap.newKeySet();

    Recorder(Store shared) {
      super(shared);
    }

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      StoreResult r = super.get(keys, destinations);
      for (int i = 0; i < keys.size(); i++) {
        if (r.rows().get(i) instanceof RowResult.Ok) {
          read.add(keys.get(i));
        }
      }
      return r;
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      put.addAll(keys);
      return super.put(keys, sources);
    }

    @Override
    public void close() {} // shared: the test owns the store
  }

  private Path folder() {
    return ContextModels.folder(dir, "untied-llama", ContextModels.LLAMA, 11);
  }

  private static int[] single(Path folder, EngineConfig config, int[] prompt, int n)
      throws Exception {
    try (CausalLm model = CausalLm.load(folder);
        Engine e = Engine.start(EngineSettings.of(model, config).conclude())) {
      return e.submit(prompt, SamplingParams.greedy(n)).result().get(60, TimeUnit.SECONDS).tokens();
    }
  }

  @Test
  void shouldRestoreOnAnotherOwnerThePagesOneAllocationWrote() throws Exception {
    Path folder = folder();
    EngineConfig config = config(128, 2);
    int[] prompt = new SplittableRandom(61).ints(81, 0, 256).toArray();
    int[] want = single(folder, config, prompt, 8);

    MemoryStore shared = new MemoryStore();
    Recorder[] writers = {new Recorder(shared), new Recorder(shared)};
    try (TpReplica a =
        TpReplica.start(
            folder,
            2,
            r -> config,
            r -> EngineL3FaultsTest.settings(writers[r]),
            Shard.KvSplit.PAGES)) {
      assertEquals(
          new Sharding.PageCyclic(2),
          a.models.getFirst().cacheLayout(4, 4).group(0).sharding(),
          "the full-history group is page-cyclic");
      GenerationResult r =
          a.leader().submit(prompt, SamplingParams.greedy(8)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, r.tokens(), "writer replica vs TP=1");
      a.awaitStorageIdle();
    }
    for (int rank = 0; rank < 2; rank++) {
      assertFalse(writers[rank].put.isEmpty(), "rank " + rank + " wrote the pages it owns");
      assertTrue(
          writers[rank].put.stream().allMatch(k -> k.endsWith("|r0")),
          "both owners name payload replica 0: " + writers[rank].put);
    }
    Set<String> both = new HashSet<>(writers[0].put);
    both.retainAll(writers[1].put);
    assertTrue(both.isEmpty(), "each page written by its one owner, not twice: " + both);

    Recorder[] readers = {new Recorder(shared), new Recorder(shared)};
    try (TpReplica b =
        TpReplica.start(
            folder,
            2,
            r -> config,
            r -> EngineL3FaultsTest.settings(readers[r]),
            Shard.KvSplit.PAGES)) {
      // one page of another prompt first: the new allocation deals the pages one block later
      int[] shift = {201, 202, 203, 204, 205};
      b.leader().submit(shift, SamplingParams.greedy(1)).result().get(60, TimeUnit.SECONDS);
      b.awaitStorageIdle();
      GenerationResult r =
          b.leader().submit(prompt, SamplingParams.greedy(8)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, r.tokens(), "restoring replica vs TP=1");
      assertTrue(
          r.metrics().reusedStorageTokens() >= 64, "restored from the store: " + r.metrics());
      Set<String> twice = new HashSet<>(readers[0].read);
      twice.retainAll(readers[1].read);
      assertTrue(twice.isEmpty(), "each page read by its one new owner: " + twice);
      int moved = 0;
      for (int rank = 0; rank < 2; rank++) {
        for (String k : readers[rank].read) {
          if (writers[1 - rank].put.contains(k)) {
            moved++;
          }
        }
      }
      int readTotal = readers[0].read.size() + readers[1].read.size();
      assertTrue(readTotal >= 16, "the prefix's pages were read: " + readTotal);
      assertTrue(
          moved > 0,
          "some pages were restored on the other owner than the one that wrote them: "
              + moved
              + " of "
              + readTotal);
      System.out.printf(
          "pages restored: %d, on another owner than their writer: %d%n", readTotal, moved);
    }
  }

  /**
   * A page's object lives under a key both owners share, and only its owner reads it; the other
   * owner reports the row as a success that is not evidence. When one owner's GETs fail, its pages
   * are missing: what is published stops before the first of them (the pages before it, read by the
   * other owner, are whole), the rest recomputes, and the output is correct.
   */
  @Test
  void shouldPublishOnlyThePagesBeforeOneOwnersFailedGets() throws Exception {
    Path folder = folder();
    EngineConfig config = config(128, 2);
    int[] prompt = new SplittableRandom(67).ints(65, 0, 256).toArray();
    int[] want = single(folder, config, prompt, 6);
    MemoryStore shared = new MemoryStore();
    try (TpReplica a =
        TpReplica.start(
            folder,
            2,
            r -> config,
            r -> EngineL3FaultsTest.settings(new Recorder(shared)),
            Shard.KvSplit.PAGES)) {
      a.leader().submit(prompt, SamplingParams.greedy(6)).result().get(60, TimeUnit.SECONDS);
      a.awaitStorageIdle();
    }
    EngineTensorParallelFaultsTest.RankClient[] readers = {
      new EngineTensorParallelFaultsTest.RankClient(shared),
      new EngineTensorParallelFaultsTest.RankClient(shared)
    };
    readers[1].failGets = true;
    try (TpReplica b =
        TpReplica.start(
            folder,
            2,
            r -> config,
            r -> EngineL3FaultsTest.settings(readers[r]),
            Shard.KvSplit.PAGES)) {
      GenerationResult r =
          b.leader().submit(prompt, SamplingParams.greedy(6)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, r.tokens(), "recomputed after one owner's GETs failed");
      int restored = r.metrics().reusedStorageTokens();
      assertTrue(
          restored < 64 && restored % 4 == 0,
          "at most the pages before the first failed one: " + r.metrics());
      assertTrue(readers[0].okGets.get() > 0, "rank 0 read the pages it owns");
      GenerationResult again =
          b.leader().submit(prompt, SamplingParams.greedy(6)).result().get(60, TimeUnit.SECONDS);
      assertArrayEquals(want, again.tokens(), "the recomputed prefix serves the next request");
    }
  }

  /**
   * Without L3: cached pages demoted to the Host and loaded back after Device clears, under seeded
   * prompts that share prefixes. Device and Host blocks are paired without regard to owners, so
   * transfers between two owners happen and move through the collective; every output equals a
   * single rank's.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {3, 4})
  void shouldMatchASingleRankWhenPagesMoveBetweenTiersAndOwners(long seed) throws Exception {
    Path folder = folder();
    EngineConfig config = config(48, 48);
    SplittableRandom random = new SplittableRandom(seed);
    int[] prefix = random.ints(40, 0, 256).toArray();
    List<int[]> prompts = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      int[] tail = random.ints(1 + random.nextInt(9), 0, 256).toArray();
      int keep = 8 + random.nextInt(33);
      int[] p = new int[keep + tail.length];
      System.arraycopy(prefix, 0, p, 0, keep);
      System.arraycopy(tail, 0, p, keep, tail.length);
      prompts.add(p);
    }
    List<int[]> want = new ArrayList<>();
    for (int[] p : prompts) {
      want.add(single(folder, config, p, 6));
    }
    try (TpReplica replica = TpReplica.start(folder, 2, r -> config, null, Shard.KvSplit.PAGES)) {
      int hostReuse = 0;
      for (int i = 0; i < prompts.size(); i++) {
        GenerationResult r =
            replica
                .leader()
                .submit(prompts.get(i), SamplingParams.greedy(6))
                .result()
                .get(60, TimeUnit.SECONDS);
        assertArrayEquals(want.get(i), r.tokens(), "prompt " + i + " vs TP=1");
        hostReuse += r.metrics().reusedHostTokens();
        replica.leader().clearDeviceCache().get(30, TimeUnit.SECONDS);
      }
      assertTrue(hostReuse > 0, "prefixes came back from the Host");
      long moved = replica.engines.get(0).movedPageBlocks();
      assertEquals(moved, replica.engines.get(1).movedPageBlocks(), "both ranks moved the same");
      assertTrue(moved > 0, "some transfers paired blocks of two owners");
      System.out.printf("seed %d: host reuse %d tokens, moved %d blocks%n", seed, hostReuse, moved);
    }
  }
}
