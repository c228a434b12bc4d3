package io.tokenspeed.scheduler;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.CacheInvariants;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.cache.TierCache;
import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.Collection;
import java.util.List;
import java.util.Set;

/** A cache, a manager and helpers that play the data plane and the agreement. */
final class StmFixture {

  /** P = 64: full history bg 16, a 80-token window bg 32, state checkpoints bg 64. */
  static CacheLayout layout() {
    return new CacheLayout(
        64,
        "bf16",
        List.of(
            new CacheGroupSpec(
                0, new GroupKind.FullHistory(), 16, List.of(new CacheField("kv", 64)), null),
            new CacheGroupSpec(
                1, new GroupKind.SlidingWindow(80), 32, List.of(new CacheField("kv", 128)), null),
            new CacheGroupSpec(
                2,
                new GroupKind.StateCheckpoints(),
                64,
                List.of(new CacheField("ssm", 256)),
                null)));
  }

  static int[] tokens(int n, int seed) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = Math.floorMod(i * 7919 + seed * 104729, 32000);
    }
    return t;
  }

  final CacheCoordinator cache;
  final StorageTransferManager stm;
  final List<StorageOp> issued = new ArrayList<>();

  StmFixture(StorageConfig config, int deviceParents, int hostParents) {
    this(layout(), config, deviceParents, hostParents);
  }

  StmFixture(CacheLayout layout, StorageConfig config, int deviceParents, int hostParents) {
    cache = new CacheCoordinator(layout, deviceParents, hostParents, 64);
    stm = new StorageTransferManager(config, cache);
  }

  static StorageConfig config() {
    return StorageConfig.defaults().withMinExtensionTokens(1);
  }

  /**
   * {@code config} with its Host credits lowered to what a Host tier of {@code hostParents} leaves
   * after the retraction reserve, when they exceed it (randomized tests draw them independently).
   */
  static StorageConfig fitted(StorageConfig config, int hostParents) {
    int fit = hostParents - config.retractionReserveParents(hostParents);
    return config.withCredits(config.maxOperations(), Math.min(config.maxHostBlocks(), fit));
  }

  PromptKeys prompt(int n, int seed) {
    return PromptKeys.of(cache.layout(), tokens(n, seed), List.of());
  }

  /** Publishes {@code keys} in {@code tier} as cached blocks. */
  void put(Tier tier, Collection<CacheKey> keys) {
    TierCache t = cache.tier(tier);
    for (CacheKey k : keys) {
      if (t.contains(k)) {
        continue;
      }
      int[] needs = new int[cache.layout().numGroups()];
      needs[k.groupId()] = 1;
      int b = t.allocate(needs)[k.groupId()][0];
      t.noteWrite(b);
      t.publish(k, b);
      t.unref(b);
    }
  }

  /** The ops the manager emitted this round. */
  List<StorageOp> drain() {
    List<StorageOp> out = stm.drainOps(true);
    issued.addAll(out);
    return out;
  }

  static StorageOp only(List<StorageOp> ops, Class<? extends StorageOp> kind) {
    List<StorageOp> match = ops.stream().filter(kind::isInstance).toList();
    if (match.size() != 1) {
      throw new AssertionError("expected one " + kind.getSimpleName() + " in " + ops);
    }
    return match.get(0);
  }

  /** An agreed fact where the keys in {@code okKeys} succeeded. */
  static AgreedCompletion fact(StorageOp op, Set<CacheKey> okKeys, boolean retired) {
    List<CacheKey> keys =
        switch (op) {
          case StorageOp.Query q -> q.keys();
          case StorageOp.Get g -> g.keys();
          case StorageOp.Put p -> p.keys();
          case StorageOp.Cancel c -> throw new IllegalArgumentException("no keys");
        };
    BitSet ok = new BitSet();
    for (int i = 0; i < keys.size(); i++) {
      if (okKeys.contains(keys.get(i))) {
        ok.set(i);
      }
    }
    return Facts.of(op, ok, new BitSet(), retired, false);
  }

  static AgreedCompletion allOk(StorageOp op) {
    return Facts.allOk(op);
  }

  void checkInvariants(Collection<HeldBlock> otherHolders) {
    stm.checkInvariants();
    List<HeldBlock> holders = new ArrayList<>(stm.heldBlocks());
    holders.addAll(otherHolders);
    CacheInvariants.check(cache, holders);
  }
}
