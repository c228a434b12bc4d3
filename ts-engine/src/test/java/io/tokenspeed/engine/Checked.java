package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertNull;

import io.tokenspeed.cache.CacheInvariants;
import io.tokenspeed.engine.EngineTest.Run;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * An observer like {@link EngineTest.Recorder} that can stop checking: it records every logits row
 * and, while {@link #checking}, checks the scheduler's, the storage transfer manager's and the
 * cache's invariants after every round. Tests that count an idle engine's rounds switch the checks
 * off for the counting window, since a check per round slows a spinning loop down to a rate that
 * would hide the spin.
 */
class Checked implements EngineObserver {
  final Map<Long, List<float[]>> logits = new ConcurrentHashMap<>();
  final List<Throwable> broken = new CopyOnWriteArrayList<>();

  /** Rounds seen (the loop thread's count, as {@link EngineStats#rounds()}). */
  final AtomicLong rounds = new AtomicLong();

  volatile boolean checking = true;

  @Override
  public void afterRound(EngineView e) {
    rounds.incrementAndGet();
    if (!checking) {
      return;
    }
    try {
      check(e);
    } catch (Throwable t) {
      broken.add(t);
    }
  }

  /**
   * The owners' invariants between rounds: no copy batch left over, the scheduler's own checks, and
   * the cache's references against every holder's (the manager's checks run with them).
   */
  static void check(EngineView e) {
    if (e.copyBacklog() != 0) {
      throw new AssertionError("a round ended with " + e.copyBacklog() + " copy batches due");
    }
    e.scheduler().checkInvariants();
    CacheInvariants.check(e.cache(), e.heldBlocks());
  }

  @Override
  public boolean wantsLogits() {
    return true;
  }

  @Override
  public void onLogits(long requestId, int step, float[] row) {
    logits.computeIfAbsent(requestId, k -> new CopyOnWriteArrayList<>()).add(row.clone());
  }

  /** The finished request's tokens, logits rows and figures; fails on an error. */
  Run await(RequestHandle h) throws Exception {
    GenerationResult r = h.result().get(60, TimeUnit.SECONDS);
    assertNull(r.error(), () -> "request " + h.id() + " failed: " + r.error());
    return new Run(r.tokens(), logits.getOrDefault(h.id(), List.of()), r);
  }
}
