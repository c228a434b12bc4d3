package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The restore estimate over synthetic calls of a store with a known latency and bandwidth: queries
 * give the latency, GETs of any size the bandwidth beyond it; misses move nothing.
 */
class RestoreEstimatorTest {

  static LongStream seeds() {
    return LongStream.range(0, 60);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldRecoverTheLatencyAndBandwidthOfAStore(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    double latencyNs = 1e4 + rnd.nextDouble() * 1e7;
    double bytesPerSecond = 1e6 * Math.pow(1e4, rnd.nextDouble());
    RestoreEstimator e = new RestoreEstimator();
    e.onQuery(Math.round(latencyNs)); // a restore's QUERY comes before its GET
    for (int i = 0; i < 50; i++) {
      if (rnd.nextBoolean()) {
        e.onQuery(Math.round(latencyNs));
      } else {
        long bytes = (1L << 16) + rnd.nextLong(1L << (10 + rnd.nextInt(20)));
        e.onGet(bytes, Math.round(latencyNs + bytes / bytesPerSecond * 1e9));
      }
    }
    e.onQuery(Math.round(latencyNs));
    e.onGet(1 << 20, Math.round(latencyNs + (1 << 20) / bytesPerSecond * 1e9));
    RestoreEstimate r = e.snapshot();
    assertTrue(r.known());
    assertEquals(latencyNs, r.latencyNs(), 1);
    assertEquals(bytesPerSecond, r.bytesPerSecond(), 0.01 * bytesPerSecond);
  }

  @Test
  void shouldLearnNothingFromMissesAndKnowNothingBeforeAGet() {
    RestoreEstimator e = new RestoreEstimator();
    e.onQuery(5000);
    e.onGet(0, 1_000_000);
    RestoreEstimate r = e.snapshot();
    assertFalse(r.known());
    assertEquals(5000, r.latencyNs());
    assertEquals(1, r.calls());
    assertEquals(0, r.gets());
  }

  @Test
  void shouldCountAGetFasterThanItsLatencyAsTheFastestStore() {
    RestoreEstimator e = new RestoreEstimator();
    e.onQuery(5000);
    e.onGet(4096, 3000);
    assertEquals(RestoreEstimator.MAX_BYTES_PER_SECOND, e.snapshot().bytesPerSecond());
  }
}
