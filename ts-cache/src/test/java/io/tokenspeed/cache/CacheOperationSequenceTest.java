package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.LongStream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Seeded random sequences of admissions, copy completions, publications, demotions, evictions,
 * releases and full clears over small pools, with every invariant checked after every step and
 * nothing held at the end. After a clear every index is empty, and from then on no index entry ever
 * names a block that was allocated at the clear (those are withdrawn until their holders let go).
 */
class CacheOperationSequenceTest {

  private static final int STEPS = 400;

  private static final java.util.concurrent.atomic.AtomicInteger WITHDRAWN_AT_CLEARS =
      new java.util.concurrent.atomic.AtomicInteger();

  @org.junit.jupiter.api.AfterAll
  static void clearsMetHeldBlocks() {
    assertTrue(WITHDRAWN_AT_CLEARS.get() > 0, "some clear found referenced blocks to withdraw");
  }

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 12).map(i -> 0xCAFE_0000L + i * 104_729);
  }

  private static CacheLayout layout(Random rnd) {
    return switch (rnd.nextInt(3)) {
      case 0 -> Layouts.mixed();
      case 1 ->
          new CacheLayout(32, "bf16", List.of(Layouts.full(0, 8, 32), Layouts.full(1, 32, 64)));
      default ->
          new CacheLayout(16, "bf16", List.of(Layouts.swa(0, 20, 4, 16), Layouts.state(1, 16, 48)));
    };
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldKeepEveryInvariantUnderRandomOperations(long seed) {
    Random rnd = new Random(seed);
    CacheLayout layout = layout(rnd);
    CacheFixture f = new CacheFixture(layout, 12 + rnd.nextInt(24), 8 + rnd.nextInt(24));
    int p = layout.prefixGranularity();
    int[] base = Layouts.tokens(8 * p, (int) seed);
    List<PromptKeys> prompts = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      int[] t = java.util.Arrays.copyOf(base, p + rnd.nextInt(7 * p));
      if (i > 0 && t.length > 2 * p) {
        t[2 * p + rnd.nextInt(t.length - 2 * p)] ^= 0x55; // diverge after two shared pages
      }
      prompts.add(PromptKeys.of(layout, t, List.of()));
    }
    Map<Admission, PromptKeys> live = new LinkedHashMap<>(); // insertion order: deterministic
    List<Admission> pending = new ArrayList<>();
    int admitted = 0;
    int reused = 0;
    int clears = 0;
    int withdrawnAtClears = 0;
    Map<Tier, java.util.Set<Integer>> old = new java.util.EnumMap<>(Tier.class);
    for (Tier t : Tier.values()) {
      old.put(t, new java.util.HashSet<>());
    }
    Random clearRnd = new Random(~seed); // its own stream: the other operations stay as they were
    for (int step = 0; step < STEPS; step++) {
      // clears in the first quarter: the rest of the sequence shows reuse growing back
      if (step == STEPS / 8 || (step < STEPS / 4 && clearRnd.nextInt(40) == 0)) {
        f.cache.clear();
        clears++;
        for (Tier t : Tier.values()) {
          TierCache tier = f.cache.tier(t);
          for (int g = 0; g < layout.numGroups(); g++) {
            assertEquals(0, tier.publishedCount(g), t + " index after a clear, step " + step);
          }
          withdrawnAtClears += tier.withdrawnCount();
          for (int b = 1; b < tier.pool().blockIdLimit(); b++) {
            if (tier.pool().isAllocated(b)) {
              old.get(t).add(b);
            }
          }
        }
        f.checkInvariants();
        continue;
      }
      int op = rnd.nextInt(10);
      if (op < 3) {
        PromptKeys keys = prompts.get(rnd.nextInt(prompts.size()));
        int max = rnd.nextBoolean() ? keys.reusableBound() : rnd.nextInt(keys.reusableBound() + 1);
        int expectedHit = f.cache.probe(keys, max).hostHit();
        int newTokens = 1 + rnd.nextInt(Math.max(1, keys.numTokens() - max));
        Admission a = f.admit(keys, max, newTokens);
        if (a != null) {
          assertEquals(expectedHit, a.hit(), "seed=" + seed + " step " + step);
          live.put(a, keys);
          pending.add(a);
          admitted++;
          reused += a.hit() > 0 ? 1 : 0;
        }
      } else if (op < 5 && !pending.isEmpty()) {
        Admission a = pending.remove(rnd.nextInt(pending.size()));
        f.finishCopies(a, rnd.nextInt(4) != 0);
      } else if (op < 7 && !live.isEmpty()) {
        Admission a = pick(rnd, live);
        if (!pending.contains(a)) {
          computeAndPublish(f, a, live.get(a), rnd);
        }
      } else if (op < 8 && !live.isEmpty()) {
        Admission a = pick(rnd, live);
        pending.remove(a);
        live.remove(a);
        f.release(a);
      } else if (op < 9) {
        demoteOldest(f);
      } else if (f.cache.host().cachedCount() > 0) {
        f.cache.host().evict(f.cache.host().evictionCandidates(1)[0]);
      }
      f.checkInvariants();
      for (Tier t : Tier.values()) {
        TierCache tier = f.cache.tier(t);
        // a block freed since the clear may be allocated anew: only withdrawn ones stay old
        old.get(t).removeIf(b -> !tier.pool().isAllocated(b) || !tier.isWithdrawn(b));
        for (int b : old.get(t)) {
          assertNull(tier.keyOf(b), t + " block " + b + " from before a clear is published");
        }
      }
    }
    for (Admission a : new ArrayList<>(live.keySet())) {
      f.release(a);
    }
    f.checkInvariants();
    for (Tier t : Tier.values()) {
      TierCache tier = f.cache.tier(t);
      assertEquals(tier.cachedCount(), tier.pool().heldBlocks(), t + ": only cached blocks remain");
    }
    assertTrue(admitted > STEPS / 20, "admitted " + admitted);
    assertTrue(clears > 0, "the sequence clears");
    WITHDRAWN_AT_CLEARS.addAndGet(withdrawnAtClears);
    assertTrue(
        reused > 0,
        "some admissions reused a prefix: admitted="
            + admitted
            + " layout="
            + layout
            + " dev="
            + f.cache.device()
            + " host="
            + f.cache.host());
  }

  private static Admission pick(Random rnd, Map<Admission, PromptKeys> live) {
    List<Admission> all = new ArrayList<>(live.keySet());
    return all.get(rnd.nextInt(all.size()));
  }

  /** The forward wrote the fresh rows: publish those that lie in full pages of the prompt. */
  private static void computeAndPublish(CacheFixture f, Admission a, PromptKeys keys, Random rnd) {
    if (!f.cache.isCurrent(a)) {
      return; // admitted before a full clear: what it computes is its own
    }
    TierCache device = f.cache.device();
    int p = keys.layout().prefixGranularity();
    int computedEnd = keys.numTokens();
    int alignedEnd = (computedEnd / p) * p;
    for (CacheGroupSpec g : keys.layout().groups()) {
      int[] table = a.tables()[g.groupId()];
      if (g.kind() instanceof GroupKind.StateCheckpoints) {
        int working = table[1];
        int firstPage = a.hit() / p + 1;
        int lastPage = alignedEnd / p;
        int boundary = p * (firstPage + rnd.nextInt(Math.max(1, lastPage - firstPage + 1)));
        if (boundary <= alignedEnd && device.keyOf(working) == null) {
          device.noteWrite(working);
          device.publish(keys.checkpointKey(g.groupId(), boundary), working);
        }
        continue;
      }
      int bg = g.blockGranularity();
      for (int row = a.hit() / bg; row < table.length && (row + 1) * bg <= alignedEnd; row++) {
        int b = table[row];
        if (b != 0 && device.keyOf(b) == null && device.pool().refCount(b) == 1) {
          device.noteWrite(b);
          CacheKey key = keys.keyOf(g.groupId(), row, alignedEnd);
          device.publish(key, b);
        }
      }
    }
  }

  /** The engine copies the oldest cached Device block to the Host, then lets the Device drop it. */
  private static void demoteOldest(CacheFixture f) {
    int[] candidates = f.cache.device().evictionCandidates(1);
    if (candidates.length == 0) {
      return;
    }
    int d = candidates[0];
    CacheKey key = f.cache.device().keyOf(d);
    if (!f.cache.host().contains(key)) {
      int[] needs = new int[f.cache.layout().numGroups()];
      needs[key.groupId()] = 1;
      int[][] h = f.cache.host().allocate(needs);
      if (h != null) {
        int hb = h[key.groupId()][0];
        f.cache.host().noteWrite(hb);
        f.cache.host().publish(key, hb);
        f.cache.host().unref(hb);
      }
    }
    f.cache.device().evict(d);
  }
}
