package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The store-wide pace of backups on its own (the manager's tests cover it in the round). */
class BackupPacerTest {

  private static final long MS = 1_000_000L;

  @Test
  void shouldDoubleTheHoldUpToItsCapAndStayThere() {
    BackupPacer pacer = new BackupPacer(10_000, 4096);
    long tick = 0;
    for (int level = 1; level <= 200; level++) {
      pacer.onPutAnswered(pacer.epoch(), true, 0);
      pacer.onTick(tick += MS);
      assertTrue(pacer.held());
      long want = Math.min(10_000, 100L << Math.min(level - 1, 20)) * MS;
      assertEquals(want, pacer.backoffNs(), "level " + level);
      assertEquals(tick + want, pacer.holdEndNs(tick), "level " + level);
      pacer.onTick(tick += want);
      assertFalse(pacer.held(), "the probe may go at the hold's end, level " + level);
      assertEquals(BackupPacer.PROBE_KEYS, pacer.window());
      pacer.checkInvariants();
    }
    assertTrue(pacer.persistent());
  }

  @Test
  void shouldOpenByWhatTheStoreTakesAndIgnoreStaleAnswers() {
    BackupPacer pacer = new BackupPacer(10_000, 16);
    long before = pacer.epoch();
    pacer.onPutAnswered(before, true, 0);
    pacer.onPutAnswered(before, false, 8); // sent before the refusal: stale
    assertTrue(pacer.held());
    pacer.onTick(0);
    pacer.onTick(100 * MS);
    assertEquals(BackupPacer.State.PROBING, pacer.state());
    pacer.onPutAnswered(pacer.epoch(), false, 1);
    assertEquals(BackupPacer.State.RAMPING, pacer.state());
    assertEquals(2, pacer.window());
    assertEquals(0, pacer.backoffNs());
    pacer.onPutAnswered(pacer.epoch(), false, 2);
    pacer.onPutAnswered(pacer.epoch(), false, 4);
    assertEquals(8, pacer.window());
    pacer.onPutAnswered(pacer.epoch(), false, 8);
    assertEquals(BackupPacer.State.OPEN, pacer.state(), "the window reached the credits");
    assertEquals(Integer.MAX_VALUE, pacer.window());
    pacer.checkInvariants();
  }
}
