package io.tokenspeed.engine;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.scheduler.Scheduler;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.SequencedSet;

/**
 * Where each request's prefix came from, for its figures: at admission, the tokens already on the
 * Device, those loaded from the Host, and of them those whose Host blocks L3 restored. It remembers
 * the keys agreed GETs published on the Host recently (a bounded set, oldest first); it never feeds
 * a decision. A GET with early Device copies ({@code async.early_h2d}) publishes its rows on the
 * Device too, so they are Device hits at admission: the first admission that finds such a block
 * counts it as loaded from the Host and restored from L3, as it would have been without the early
 * copy; later admissions count it as on the Device.
 */
final class ReuseAccounting {
  private static final int MAX_RESTORED_KEYS = 1 << 16;

  private final CacheLayout layout;
  private final CacheCoordinator cache;
  private final Scheduler scheduler;
  private final Map<Long, ActiveRequest> active;

  /** Keys restored from L3 recently, oldest first. */
  private final SequencedSet<CacheKey> restored = new LinkedHashSet<>();

  /** Of those, keys a GET's early copies published on the Device that no admission claimed yet. */
  private final SequencedSet<CacheKey> earlyOnDevice = new LinkedHashSet<>();

  ReuseAccounting(
      CacheLayout layout,
      CacheCoordinator cache,
      Scheduler scheduler,
      Map<Long, ActiveRequest> active) {
    this.layout = layout;
    this.cache = cache;
    this.scheduler = scheduler;
    this.active = active;
  }

  /**
   * Remembers the Host publications of a scheduler round since {@code hostMark}: inside a round,
   * only agreed GETs publish on the Host, so these are restored from L3; and {@code
   * earlyPublished}, the keys the round's GETs published on the Device through their early copies.
   */
  void noteRestored(long hostMark, List<CacheKey> earlyPublished) {
    for (CacheKey k : earlyPublished) {
      earlyOnDevice.add(k);
      if (earlyOnDevice.size() > MAX_RESTORED_KEYS) {
        earlyOnDevice.removeFirst();
      }
    }
    List<CacheKey> keys = cache.host().publishedSince(hostMark);
    if (keys == null) {
      return; // more than the ring holds in one round: these go uncounted
    }
    for (CacheKey k : keys) {
      restored.add(k);
      if (restored.size() > MAX_RESTORED_KEYS) {
        restored.removeFirst();
      }
    }
  }

  /**
   * Records the admission time and reused prefix of every request admitted this round. The round's
   * time was read before its head took the intake in, so a request submitted in between counts as
   * admitted when it was submitted, never before.
   */
  void noteAdmissions(long nowNs) {
    for (ActiveRequest a : active.values()) {
      if (a.admittedNs == 0) {
        Admission adm = scheduler.admission(a.id);
        if (adm != null) {
          a.admittedNs = Math.max(nowNs, a.submittedNs);
          if (a.reusedDevice < 0) {
            int early = claimEarly(a.keys, adm.deviceHit());
            a.reusedDevice = adm.deviceHit() - early;
            a.reusedHost = adm.hit() - adm.deviceHit() + early;
            a.reusedStorage = restoredTokens(a.keys, adm.deviceHit(), adm.hit()) + early;
          }
        }
      }
    }
  }

  /**
   * Of the Device part {@code [0, deviceHit)} of an admission, the tokens whose blocks a GET's
   * early copies put there and no admission claimed before (counted as {@link #restoredTokens}
   * counts, by the first history group's blocks or the State checkpoint); they are claimed now.
   */
  private int claimEarly(PromptKeys keys, int deviceHit) {
    if (earlyOnDevice.isEmpty() || deviceHit == 0) {
      return 0;
    }
    int p = layout.prefixGranularity();
    for (var g : layout.groups()) {
      if (g.kind() instanceof GroupKind.FullHistory) {
        int tokens = 0;
        for (int start = 0; start < deviceHit; start += p) {
          if (earlyOnDevice.remove(
              keys.keyOf(g.groupId(), start / g.blockGranularity(), deviceHit))) {
            tokens += Math.min(p, deviceHit - start);
          }
        }
        return tokens;
      }
    }
    for (var g : layout.groups()) {
      if (g.kind() instanceof GroupKind.StateCheckpoints
          && earlyOnDevice.remove(keys.checkpointKey(g.groupId(), deviceHit))) {
        return deviceHit;
      }
    }
    return 0;
  }

  /**
   * Of the Host part {@code [deviceHit, hit)} of an admission, the tokens whose Host blocks were
   * restored from L3: the pages whose first block of the (first) history group was restored, or,
   * for a model without one, the whole part when its State checkpoint was.
   */
  private int restoredTokens(PromptKeys keys, int deviceHit, int hit) {
    if (restored.isEmpty() || hit <= deviceHit) {
      return 0;
    }
    int p = layout.prefixGranularity();
    for (var g : layout.groups()) {
      if (g.kind() instanceof GroupKind.FullHistory) {
        int tokens = 0;
        for (int start = deviceHit; start < hit; start += p) {
          if (restored.contains(keys.keyOf(g.groupId(), start / g.blockGranularity(), hit))) {
            tokens += Math.min(p, hit - start);
          }
        }
        return tokens;
      }
    }
    for (var g : layout.groups()) {
      if (g.kind() instanceof GroupKind.StateCheckpoints
          && restored.contains(keys.checkpointKey(g.groupId(), hit))) {
        return hit - deviceHit;
      }
    }
    return 0;
  }
}
