package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.BlockPool;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Host credits as the specification counts them: each held Host block is one potentially pinned LCM
 * parent, the credits never exceed the Host tier's parents less the retraction reserve, and however
 * many of them hung reads and backups hold, a retraction image of the reserve's size still finds
 * room on the Host.
 */
class HostCreditsTest {

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 24).map(i -> 0x38L * 1_000 + i);
  }

  /**
   * Reads and backups whose store calls never return pile up until L3 can take no more; after every
   * step the ledger and the cache agree (the invariant checkers), the credits in use stay within
   * the Host tier's parents less the reserve, the parents the tickets pin (counted block by block,
   * the brute-force reference) never outnumber the credits, and at the end the Host still holds an
   * image of the reserve's whole parents.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldKeepTheRetractionReserveFreeWhateverHungOperationsHold(long seed) {
    Random rnd = new Random(seed);
    int hostParents = 8 + rnd.nextInt(120);
    int percent =
        List.of(0, 10, StorageConfig.DEFAULT_RETRACTION_RESERVE_PERCENT, 50, 99)
            .get(rnd.nextInt(5));
    StorageConfig base = StmFixture.config().withRetractionReservePercent(percent);
    int reserve = base.retractionReserveParents(hostParents);
    int fit = hostParents - reserve;
    int credits = rnd.nextBoolean() ? 0 : 1 + rnd.nextInt(fit);
    StmFixture f = new StmFixture(base.withCredits(1 << 10, credits), 64, hostParents);
    int limit = f.stm.config().maxHostBlocks();
    assertEquals(reserve, f.stm.retractionReserveParents());
    f.stm.onTick(0);
    int bypassed = 0;
    for (int i = 0; i < 400 && bypassed < 8; i++) {
      if (rnd.nextInt(4) == 0) {
        offerPublishedPages(f, i);
      }
      PromptKeys p = f.prompt(64 + rnd.nextInt(400), (int) seed * 1_000 + i);
      StorageTransferManager.Preparation prep = f.stm.prepare(i, p, true);
      for (StorageOp op : f.drain()) {
        if (op instanceof StorageOp.Query q) {
          f.stm.onCompletion(StmFixture.allOk(q)); // the store holds everything asked for
        }
      }
      f.drain(); // the GET, and any PUT: neither ever returns
      if (!prep.waiting() || f.stm.drainWakeups().stream().anyMatch(w -> w.ready() == null)) {
        bypassed++; // no credits or no room: nothing reserved
      }
      checkCredits(f, limit, reserve, hostParents);
    }
    List<CacheKey> page = f.cache.neededKeys(f.prompt(64, -1), 64);
    assertTrue(
        f.stm.hostCreditsInUse() + page.size() > limit || !hostHasRoomFor(f, page),
        "hung operations hold "
            + f.stm.hostCreditsInUse()
            + " of "
            + limit
            + " credits and the Host has room for a page: the run never pressed on them");
    if (reserve > 0) {
      BlockPool pool = f.cache.host().pool();
      int[] image = new int[f.cache.layout().numGroups()];
      image[0] = reserve * pool.childrenPerParent(0);
      int[][] blocks = f.cache.host().allocate(image);
      assertNotNull(
          blocks,
          "an image of the reserve's "
              + reserve
              + " parents found no room while L3 held "
              + f.stm.hostCreditsInUse()
              + " credits");
      List<HeldBlock> image0 = new ArrayList<>();
      for (int b : blocks[0]) {
        image0.add(new HeldBlock(Tier.HOST, b));
      }
      f.checkInvariants(image0);
    }
  }

  /**
   * Publishes a prompt's first page on the Host, as far as it has room, and offers it for backup.
   */
  private static void offerPublishedPages(StmFixture f, int i) {
    TierCache host = f.cache.host();
    for (CacheKey k : f.cache.neededKeys(f.prompt(64, 7_000_000 + i), 64)) {
      int[] needs = new int[f.cache.layout().numGroups()];
      needs[k.groupId()] = 1;
      int[][] b = host.allocate(needs);
      if (b == null) {
        return; // every Host parent is pinned: nothing more to offer
      }
      host.noteWrite(b[k.groupId()][0]);
      host.publish(k, b[k.groupId()][0]);
      host.unref(b[k.groupId()][0]);
      f.stm.offerBackup(k);
    }
  }

  /** Whether the Host could hold private blocks for {@code keys} now, evicting cached blocks. */
  private static boolean hostHasRoomFor(StmFixture f, List<CacheKey> keys) {
    int[] needs = new int[f.cache.layout().numGroups()];
    keys.forEach(k -> needs[k.groupId()]++);
    int[][] blocks = f.cache.host().allocate(needs);
    if (blocks == null) {
      return false;
    }
    for (int[] group : blocks) {
      for (int b : group) {
        f.cache.host().unref(b);
      }
    }
    return true;
  }

  private static void checkCredits(StmFixture f, int limit, int reserve, int hostParents) {
    f.checkInvariants(List.of());
    int used = f.stm.hostCreditsInUse();
    assertTrue(used <= limit, "credits " + used + " over " + limit);
    assertTrue(
        limit <= hostParents - reserve,
        "credits " + limit + " reach the reserve of " + reserve + " of " + hostParents);
    Set<Integer> pinned = new HashSet<>();
    for (HeldBlock h : f.stm.heldBlocks()) {
      if (h.tier() != Tier.HOST) {
        continue; // early Device destinations spend no Host credit
      }
      pinned.add(f.cache.host().pool().parentOf(h.blockId()));
    }
    assertTrue(pinned.size() <= used, pinned.size() + " parents pinned on " + used + " credits");
  }

  @Test
  void shouldRejectHostCreditsBeyondWhatTheHostTierHoldsAfterTheReserve() {
    StorageConfig config = StmFixture.config().withCredits(8, 193);
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> new StmFixture(config, 64, 256));
    assertTrue(
        e.getMessage().startsWith("max_host_blocks=193 exceeds the Host tier"), e.getMessage());
    assertTrue(e.getMessage().contains("256 parents less the 64"), e.getMessage());
    assertTrue(e.getMessage().contains("set it in [1, 192]"), e.getMessage());
    assertEquals(
        192,
        new StmFixture(StmFixture.config(), 64, 256).stm.config().maxHostBlocks(),
        "max_host_blocks=0 (the default): every parent the reserve leaves");
    assertEquals(
        192, new StmFixture(config.withCredits(8, 192), 64, 256).stm.config().maxHostBlocks());
  }
}
