package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The publication rule of the metrics snapshot against a manual clock: a busy loop publishes at
 * most once a second, every transition (requests idle or busy, storage pending or idle) at once,
 * and an idle loop leaves no round unpublished for more than a second.
 */
class MetricsPublicationTest {
  private static final long SECOND = MetricsPublication.INTERVAL_NS;
  private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);

  /** A loop driven by hand: the rule, the clock and what was published. */
  private static final class Loop {
    final MetricsPublication rule = new MetricsPublication();
    final List<long[]> published = new ArrayList<>(); // {nowNs, idle, pending}
    long nowNs = 1_000 * SECOND; // any origin: only differences count
    boolean idle = true;
    boolean pending;

    boolean round(long dtNs, boolean idle, boolean pending) {
      nowNs += dtNs;
      this.idle = idle;
      this.pending = pending;
      boolean due = rule.dueAfterRound(nowNs, idle, pending);
      if (due) {
        publish();
      }
      return due;
    }

    boolean idleWait(long dtNs) {
      nowNs += dtNs;
      boolean due = rule.dueWhileIdle(nowNs);
      if (due) {
        publish();
      }
      return due;
    }

    private void publish() {
      rule.published(nowNs, idle, pending);
      published.add(new long[] {nowNs, idle ? 1 : 0, pending ? 1 : 0});
    }
  }

  @Test
  void shouldPublishTheFirstRoundThenOncePerSecondWhileBusy() {
    Loop loop = new Loop();
    assertTrue(loop.round(MS, false, false), "the first round publishes");
    int published = 1;
    for (int i = 1; i <= 3_000; i++) { // 3 s of 1 ms rounds
      if (loop.round(MS, false, false)) {
        published++;
        assertEquals(0, i % 1_000, "a busy round publishes only a second after the last: " + i);
      }
    }
    assertEquals(4, published);
  }

  @Test
  void shouldPublishEveryTransitionAtOnce() {
    Loop loop = new Loop();
    loop.round(MS, true, false);
    assertTrue(loop.round(MS, false, false), "requests arrived: busy");
    assertFalse(loop.round(MS, false, false));
    assertTrue(loop.round(MS, false, true), "storage turned pending");
    assertFalse(loop.round(MS, false, true));
    assertTrue(loop.round(MS, true, true), "the last request ended: idle");
    assertFalse(loop.round(MS, true, true));
    assertTrue(loop.round(MS, true, false), "storage turned idle");
    assertFalse(loop.idleWait(20 * MS), "nothing ran since the last snapshot");
    assertFalse(loop.idleWait(2 * SECOND), "still nothing ran");
  }

  @Test
  void shouldRefreshAnIdleLoopASecondAfterRoundsThatDidNotPublish() {
    Loop loop = new Loop();
    loop.round(MS, true, false);
    assertFalse(loop.round(5 * MS, true, false), "a housekeeping round within the second");
    assertFalse(loop.idleWait(20 * MS), "too soon");
    assertFalse(loop.idleWait(900 * MS), "too soon");
    assertTrue(loop.idleWait(100 * MS), "a second after the last snapshot, with a round since");
    assertFalse(loop.idleWait(2 * SECOND), "refreshed: nothing ran since");
  }

  /**
   * Random rounds and idle waits (random states, steps from 0 to 1.5 s): consecutive snapshots are
   * a second apart unless a flag changed between them; a round whose state differs from the last
   * published one publishes, and so does one a second after the last snapshot; an idle wait a
   * second after the last snapshot publishes exactly when rounds ran since it.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
  void shouldHoldThePublicationRuleOverRandomRoundsAndWaits(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    Loop loop = new Loop();
    boolean roundSincePublished = false;
    for (int step = 0; step < 5_000; step++) {
      long dt = rnd.nextInt(10) == 0 ? rnd.nextLong(3 * SECOND / 2) : rnd.nextLong(30 * MS);
      long[] last = loop.published.isEmpty() ? null : loop.published.getLast();
      String at = "seed=" + seed + " step=" + step;
      if (rnd.nextInt(4) == 0) {
        boolean due = loop.idleWait(dt);
        boolean stale = last != null && loop.nowNs - last[0] >= SECOND;
        assertEquals(stale && roundSincePublished, due, at + ": idle wait");
        roundSincePublished &= !due;
      } else {
        boolean idle = rnd.nextInt(8) == 0 ? !loop.idle : loop.idle;
        boolean pending = rnd.nextInt(8) == 0 ? !loop.pending : loop.pending;
        boolean due = loop.round(dt, idle, pending);
        boolean changed = last == null || (last[1] == 1) != idle || (last[2] == 1) != pending;
        boolean stale = last != null && loop.nowNs - last[0] >= SECOND;
        assertEquals(changed || stale, due, at + ": round");
        roundSincePublished = !due;
      }
    }
    List<long[]> p = loop.published;
    assertTrue(p.size() > 10, "the walk published: " + p.size());
    for (int i = 1; i < p.size(); i++) {
      long[] a = p.get(i - 1);
      long[] b = p.get(i);
      assertTrue(
          b[0] - a[0] >= SECOND || a[1] != b[1] || a[2] != b[2],
          "seed=" + seed + ": snapshots " + (i - 1) + " and " + i + " without a reason");
    }
  }
}
