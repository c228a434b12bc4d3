package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The served and raw throughput of one level, from its counts alone. */
class ServedThroughputTest {

  @Test
  void shouldSetServedAgainstTheForwardPassAtTheMeanBatch() {
    // 1,000 tokens in 2 s of wall time over 100 rounds of 10 ms, 5 ms of each in the forward;
    // 3 s of CPU time
    ServedThroughput t =
        new ServedThroughput(
            1_000, 2_000_000_000L, 100, 500_000_000L, 1_000_000_000L, 20_000_000L, 3_000_000_000L);
    assertEquals(500, t.servedTokensPerS(), 1e-9);
    assertEquals(0.2, t.copyWaitMsPerRound(), 1e-9);
    assertEquals(10, t.meanBatch(), 1e-9);
    assertEquals(5, t.forwardMsPerRound(), 1e-9);
    assertEquals(10, t.roundMs(), 1e-9);
    assertEquals(2_000, t.rawTokensPerS(), 1e-9, "10 tokens per 5 ms forward");
    assertEquals(0.25, t.servedOverRaw(), 1e-12, "the forward's share of the wall: 0.5 s of 2 s");
    assertEquals(150, t.hostCpuPercent(), 1e-9, "one and a half cores");
  }

  @Test
  void shouldReadNaNWhereALevelHadNoRoundsOrNoCpuClock() {
    ServedThroughput t = new ServedThroughput(0, 1_000_000, 0, 0, 0, 0, -1);
    assertEquals(0, t.servedTokensPerS());
    assertTrue(Double.isNaN(t.meanBatch()));
    assertTrue(Double.isNaN(t.forwardMsPerRound()));
    assertTrue(Double.isNaN(t.roundMs()));
    assertTrue(Double.isNaN(t.rawTokensPerS()));
    assertTrue(Double.isNaN(t.servedOverRaw()));
    assertTrue(Double.isNaN(t.hostCpuPercent()));
  }

  @Test
  void shouldRejectNegativeCountsAndAnEmptyWall() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> new ServedThroughput(1, 0, 1, 1, 1, 0, 0));
    assertTrue(e.getMessage().contains("wallNs=0"), e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> new ServedThroughput(-1, 1, 1, 1, 1, 0, 0));
    assertThrows(IllegalArgumentException.class, () -> new ServedThroughput(1, 1, 1, 1, 1, 0, -2));
    assertThrows(IllegalArgumentException.class, () -> new ServedThroughput(1, 1, 1, 1, 1, -1, 0));
  }
}
