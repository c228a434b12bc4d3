package io.tokenspeed.cache;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;

/**
 * A coordinator plus the ledger of who holds which reference, so that {@link CacheInvariants} can
 * compare reference counts with holders. Every fixture is checked after its test by {@link
 * CacheInvariantsExtension}.
 */
final class CacheFixture {

  static final ThreadLocal<List<CacheFixture>> LIVE = ThreadLocal.withInitial(ArrayList::new);
  static final ThreadLocal<List<BlockPool>> POOLS = ThreadLocal.withInitial(ArrayList::new);

  /** Registers a bare pool so its accounting is checked after the test. */
  static BlockPool track(BlockPool pool) {
    POOLS.get().add(pool);
    return pool;
  }

  final CacheCoordinator cache;
  private final List<Admission> admitted = new ArrayList<>();
  private final List<Admission> copiesPending = new ArrayList<>();

  CacheFixture(CacheLayout layout, int deviceParents, int hostParents) {
    this.cache = new CacheCoordinator(layout, deviceParents, hostParents, 64);
    LIVE.get().add(this);
  }

  /** Publishes each key in {@code tier} as a cached (unreferenced) block, never evicting. */
  void put(Tier tier, Collection<CacheKey> keys) {
    TierCache t = cache.tier(tier);
    int groups = cache.layout().numGroups();
    for (CacheKey k : keys) {
      if (t.contains(k)) {
        continue;
      }
      int[] needs = new int[groups];
      needs[k.groupId()] = 1;
      if (!t.pool().canAcquire(needs)) {
        throw new IllegalStateException(tier + " is full while seeding " + k + ": size the test");
      }
      int[][] b = t.allocate(needs);
      t.noteWrite(b[k.groupId()][0]);
      t.publish(k, b[k.groupId()][0]);
      t.unref(b[k.groupId()][0]);
    }
  }

  Admission admit(io.tokenspeed.core.PromptKeys keys, int maxReuse, int newTokens) {
    return adopt(cache.admit(keys, maxReuse, newTokens));
  }

  /** Tracks an admission made directly on the coordinator (null passes through). */
  Admission adopt(Admission a) {
    if (a != null) {
      admitted.add(a);
      copiesPending.add(a);
    }
    return a;
  }

  void finishCopies(Admission a, boolean completed) {
    if (!copiesPending.remove(a)) {
      throw new IllegalStateException("copies already finished");
    }
    cache.finishCopies(a, completed);
  }

  void release(Admission a) {
    if (copiesPending.contains(a)) {
      finishCopies(a, false);
    }
    if (!admitted.remove(a)) {
      throw new IllegalStateException("admission already released");
    }
    cache.release(a);
  }

  List<Admission> admitted() {
    return admitted;
  }

  List<HeldBlock> holders() {
    List<HeldBlock> out = new ArrayList<>();
    for (Admission a : admitted) {
      for (int[] table : a.tables()) {
        for (int b : table) {
          if (b != 0) {
            out.add(new HeldBlock(Tier.DEVICE, b));
          }
        }
      }
    }
    for (Admission a : copiesPending) {
      for (BlockCopy c : a.copies()) {
        out.add(new HeldBlock(c.srcTier(), c.srcBlock()));
      }
    }
    return out;
  }

  /** Checks the invariants now and stops tracking this fixture (for tests that make thousands). */
  void checkAndForget() {
    checkInvariants();
    LIVE.get().remove(this);
  }

  void checkInvariants() {
    CacheInvariants.check(cache, holders());
  }
}
