package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;

/**
 * Drives a manager through a seeded random sequence of arrivals, completions in any order,
 * failures, timeouts, cancellations, evictions, backups, pressure changes and clears, checking the
 * ledger and the cache after every step. Returns the transcript of everything it emitted, so two
 * runs can be compared byte for byte.
 *
 * <p>A clear here is a full one: the manager rejects everything and the cached Host blocks go, as
 * {@link Scheduler#clearAll} does. After every step it checks that nothing of an earlier generation
 * is matchable (every match the manager allows for a known prompt avoids the blocks that survived a
 * clear), backed up again, or remembered as negative, and that a closed lease leaves its request
 * holding nothing.
 */
final class StmSimulation {

  private static final long MS = 1_000_000L;

  private final Random rnd;
  private final StmFixture f;
  private final List<PromptKeys> prompts = new ArrayList<>();
  private final Map<Long, StorageOp> pending = new LinkedHashMap<>();
  private final Set<Long> cancelled = new HashSet<>();
  private final List<StorageLease> leases = new ArrayList<>();
  private final List<String> transcript = new ArrayList<>();
  private long now;
  private boolean late;
  private boolean permitted = true;
  private long nextRequest = 1;
  int readsCompleted;
  int published;
  int clearsWithPutsInFlight;
  int oldFacts;
  int oldHostBlocks;
  private final Map<Long, Long> opGeneration = new HashMap<>();
  private final Map<Integer, CacheKey> oldHost = new HashMap<>();
  private final Set<CacheKey> oldEvidence = new HashSet<>();
  private final Set<CacheKey> currentEvidence = new HashSet<>();

  StmSimulation(long seed) {
    rnd = new Random(seed);
    StorageConfig config = StmFixture.config().withCredits(2 + rnd.nextInt(8), 8 + rnd.nextInt(80));
    int hostParents = 24 + rnd.nextInt(40);
    f = new StmFixture(StmFixture.fitted(config, hostParents), 16, hostParents);
    int[] base = StmFixture.tokens(400, (int) seed);
    for (int i = 0; i < 6; i++) {
      int[] t = java.util.Arrays.copyOf(base, 70 + rnd.nextInt(330));
      if (i > 0 && t.length > 130) {
        t[128 + rnd.nextInt(t.length - 128)] ^= 0x5A;
      }
      prompts.add(PromptKeys.of(f.cache.layout(), t, List.of()));
    }
  }

  List<String> run(int steps) {
    for (int step = 0; step < steps; step++) {
      late = step > steps * 4 / 5; // quarantine ends L3 for good: only late in the run
      permitted = rnd.nextInt(10) != 0; // some rounds are frozen: no new storage work
      f.stm.beginRound(permitted);
      int op = rnd.nextInt(100);
      if (op < 20) {
        prepare();
      } else if (op < 50) {
        complete();
      } else if (op < 62) {
        now += rnd.nextInt(120) * MS;
        f.stm.onTick(now);
      } else if (op < 70) {
        closeLease();
      } else if (op < 78) {
        offer();
      } else if (op < 85) {
        evict();
      } else if (op < 95) {
        pressure();
      } else if (op < 97) {
        clear();
      } else {
        now += 2_000 * MS;
        f.stm.onTick(now);
      }
      collect();
      f.checkInvariants(List.of());
      checkEarlyDestinations();
      checkGenerations();
    }
    quiesce();
    return transcript;
  }

  /**
   * The only Device blocks storage takes are its GETs' early destinations: held by tickets in
   * flight, private until the GET's fact.
   */
  private void checkEarlyDestinations() {
    long held = 0;
    for (HeldBlock h : f.stm.heldBlocks()) {
      if (h.tier() == Tier.DEVICE) {
        held++;
        assertNull(
            f.cache.device().keyOf(h.blockId()),
            "an early Device destination is published before its GET's fact: " + h);
      }
    }
    var device = f.cache.device();
    long unpublished = 0;
    for (int b = 1; b < device.pool().blockIdLimit(); b++) {
      if (device.pool().isAllocated(b) && device.keyOf(b) == null && !device.isWithdrawn(b)) {
        unpublished++;
      }
    }
    assertEquals(
        held, unpublished, "storage holds Device blocks beyond its GETs' early destinations");
  }

  private void clear() {
    if (pending.values().stream().anyMatch(StorageOp.Put.class::isInstance)) {
      clearsWithPutsInFlight++;
    }
    var host = f.cache.host();
    Map<Integer, CacheKey> before = new HashMap<>();
    for (int b = 1; b < host.pool().blockIdLimit(); b++) {
      if (host.pool().isAllocated(b) && host.keyOf(b) != null) {
        before.put(b, host.keyOf(b));
      }
    }
    f.stm.rejectAll();
    for (HeldBlock h : f.stm.heldBlocks()) {
      var tier = h.tier() == Tier.HOST ? host : f.cache.device();
      assertNull(tier.keyOf(h.blockId()), "a ticket's block is published after rejectAll: " + h);
    }
    f.cache.clear(); // the rest of the scheduler's full clear
    for (int g = 0; g < f.cache.layout().numGroups(); g++) {
      assertEquals(0, host.publishedCount(g), "the Host index after a clear, group " + g);
    }
    transcript.add("clear");
    currentEvidence.clear();
    oldHost.clear();
    for (var e : before.entrySet()) {
      if (host.isWithdrawn(e.getKey())) {
        oldHost.put(e.getKey(), e.getValue()); // still held by an old PUT: never findable again
      }
    }
    oldHostBlocks += oldHost.size();
  }

  /** Nothing of an earlier generation is in the index or remembered as negative. */
  private void checkGenerations() {
    var host = f.cache.host();
    oldHost.keySet().removeIf(b -> !host.isWithdrawn(b)); // freed: its id may be reused
    for (var e : oldHost.entrySet()) {
      assertNotEquals(
          e.getKey(), host.lookup(e.getValue()), "the index finds old block " + e.getKey());
      assertNull(host.keyOf(e.getKey()), "old block " + e.getKey() + " is published");
    }
    if (!oldHost.isEmpty()) {
      for (PromptKeys p : prompts) {
        int hit = f.cache.probe(p, p.reusableBound()).hostHit();
        for (CacheKey k : f.cache.neededKeys(p, hit)) {
          int b = host.lookup(k);
          assertFalse(oldHost.containsKey(b), "a match to " + hit + " uses old block " + b);
        }
      }
    }
    for (CacheKey k : oldEvidence) {
      assertTrue(
          !f.stm.knownMissing(k) || currentEvidence.contains(k),
          "a fact of an earlier generation is negative metadata: " + k);
    }
  }

  private void prepare() {
    PromptKeys p = prompts.get(rnd.nextInt(prompts.size()));
    StorageTransferManager.Preparation prep = f.stm.prepare(nextRequest++, p, rnd.nextInt(10) != 0);
    transcript.add(
        "prepare " + (prep.waiting() ? "wait " + prep.lease().operationId() : prep.bypass()));
    if (prep.waiting()) {
      leases.add(prep.lease());
    }
  }

  private void complete() {
    if (pending.isEmpty()) {
      return;
    }
    List<Long> ids = new ArrayList<>(pending.keySet());
    long id = ids.get(rnd.nextInt(ids.size())); // any order: a later operation may finish first
    StorageOp op = pending.remove(id);
    List<CacheKey> keys =
        switch (op) {
          case StorageOp.Query q -> q.keys();
          case StorageOp.Get g -> g.keys();
          case StorageOp.Put p -> p.keys();
          case StorageOp.Cancel c -> throw new AssertionError("cancels are not pending");
        };
    boolean detached = cancelled.contains(id) && rnd.nextBoolean();
    boolean retired = !late || rnd.nextInt(50) != 0;
    BitSet ok = new BitSet();
    BitSet failed = new BitSet();
    for (int i = 0; i < keys.size(); i++) {
      if (!detached && rnd.nextInt(10) < 8) {
        ok.set(i);
      } else if (op instanceof StorageOp.Get && !detached && rnd.nextInt(3) == 0) {
        failed.set(i);
      }
    }
    Set<CacheKey> before = new HashSet<>();
    for (CacheKey k : keys) {
      if (f.cache.host().contains(k)) {
        before.add(k);
      }
    }
    f.stm.onCompletion(Facts.of(op, ok, failed, retired, detached));
    boolean old = opGeneration.remove(id) != f.stm.generation();
    oldFacts += old ? 1 : 0;
    for (int i = failed.nextSetBit(0); i >= 0; i = failed.nextSetBit(i + 1)) {
      (old ? oldEvidence : currentEvidence).add(keys.get(i));
    }
    if (op instanceof StorageOp.Get) {
      readsCompleted++;
      for (int i = 0; i < keys.size(); i++) {
        CacheKey k = keys.get(i);
        boolean nowThere = f.cache.host().contains(k);
        if (nowThere && !before.contains(k)) {
          published++;
          assertTrue(ok.get(i) && retired && !detached, "published without full success: " + k);
        }
      }
    }
    transcript.add("complete " + id + " ok=" + ok + " failed=" + failed + " retired=" + retired);
  }

  private void closeLease() {
    if (leases.isEmpty()) {
      return;
    }
    StorageLease l = leases.remove(rnd.nextInt(leases.size()));
    transcript.add("close " + l);
    l.close();
    assertFalse(f.stm.holdsLease(l.requestId()), "a closed lease leaves its request nothing");
  }

  private void offer() {
    int[] cands = f.cache.host().evictionCandidates(64);
    if (cands.length > 0) {
      CacheKey k = f.cache.host().keyOf(cands[rnd.nextInt(cands.length)]);
      f.stm.offerBackup(k);
      transcript.add("offer " + k);
    } else {
      PromptKeys p = prompts.get(rnd.nextInt(prompts.size()));
      List<CacheKey> keys = f.cache.neededKeys(p, 64);
      if (f.cache.host().pool().freeParents() > keys.size()) {
        f.put(Tier.HOST, keys);
      }
    }
  }

  private void evict() {
    int[] cands = f.cache.host().evictionCandidates(1);
    if (cands.length > 0) {
      f.cache.host().evict(cands[0]);
      transcript.add("evict");
    }
  }

  private void pressure() {
    boolean high = rnd.nextInt(4) == 0;
    PressureSnapshot p =
        high
            ? new PressureSnapshot(StorageConfig.DEFAULT_HIGH_QUEUED_JOBS + rnd.nextInt(5), 0, 0)
            : new PressureSnapshot(rnd.nextInt(StorageConfig.DEFAULT_LOW_QUEUED_JOBS + 1), 0, 0);
    f.stm.onPressure(p);
    transcript.add("pressure " + p + " closed=" + f.stm.gateClosed());
  }

  private void collect() {
    for (StorageOp op : f.stm.drainOps(permitted)) {
      transcript.add("op " + op);
      if (op instanceof StorageOp.Cancel c) {
        cancelled.add(c.operationId());
      } else {
        pending.put(op.operationId(), op);
        opGeneration.put(op.operationId(), f.stm.generation());
        if (op instanceof StorageOp.Put put) {
          for (int b : put.hostBlocks()) {
            assertFalse(oldHost.containsKey(b), "an earlier generation's block is backed up: " + b);
          }
        }
      }
    }
    for (Wakeup w : f.stm.drainWakeups()) {
      transcript.add("wake " + w.requestId() + " " + w.reason());
      leases.removeIf(l -> !l.live());
      if (w.ready() != null) {
        leases.add(w.ready());
      }
    }
  }

  /** Everything retires, every lease closes: nothing may stay held but quarantine. */
  private void quiesce() {
    permitted = true;
    f.stm.beginRound(true);
    int guard = 0;
    while (!pending.isEmpty() || !leases.isEmpty()) {
      if (++guard > 10_000) {
        throw new AssertionError(
            "the manager does not drain: pending="
                + pending.keySet()
                + " leases="
                + leases
                + " ops in use="
                + f.stm.operationsInUse());
      }
      for (StorageLease l : new ArrayList<>(leases)) {
        l.close();
      }
      leases.clear();
      for (Long id : new ArrayList<>(pending.keySet())) {
        StorageOp op = pending.remove(id);
        int n =
            switch (op) {
              case StorageOp.Query q -> q.keys().size();
              case StorageOp.Get g -> g.keys().size();
              case StorageOp.Put p -> p.keys().size();
              case StorageOp.Cancel c -> 0;
            };
        // Reads end detached; a refused PUT row would be offered again, so backups succeed.
        f.stm.onCompletion(
            op instanceof StorageOp.Put
                ? Facts.allOk(op)
                : Facts.of(op, new BitSet(), new BitSet(), true, true));
      }
      collect();
    }
    f.stm.onPressure(PressureSnapshot.IDLE);
    f.checkInvariants(List.of());
    assertEquals(
        f.stm.quarantinedRefs(),
        f.stm.hostCreditsInUse(),
        "at quiescence only quarantine holds Host references");
    assertFalse(f.stm.readyHolds() > 0, "no Ready hold outlives its lease");
  }
}
