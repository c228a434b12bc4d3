package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Where a job's rows are cut into shares ({@link L3Executor#shareCuts}): {@code n + 1} offsets from
 * 0 to the row count, no share empty while there are rows for all; a GET of more shares than
 * workers starts with a first wave of one small share per worker, about a 64th of its rows
 * together, every later share at least as large as any share of the wave; every other job is cut
 * evenly.
 */
class ShareCutsTest {

  static LongStream seeds() {
    return LongStream.range(0, 200);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldCutEveryRowOnceIntoAFirstWaveAndEvenLaterShares(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int c = 0; c < 200; c++) {
      int lead = rnd.nextInt(4) == 0 ? 0 : 1 + rnd.nextInt(rnd.nextBoolean() ? 4 : 64);
      int rows = rnd.nextInt(4) == 0 ? rnd.nextInt(40) : rnd.nextInt(1 << (4 + rnd.nextInt(14)));
      int most = Math.max(1, lead) * L3Executor.LANDING_SHARES_PER_WORKER;
      int n = 1 + rnd.nextInt(rnd.nextInt(8) == 0 ? 4 * most : most);
      check(rows, n, lead);
    }
  }

  private static void check(int rows, int n, int lead) {
    String at = "rows=" + rows + " n=" + n + " lead=" + lead;
    int[] cuts = L3Executor.shareCuts(rows, n, lead);
    assertEquals(n + 1, cuts.length, at);
    assertEquals(0, cuts[0], at);
    assertEquals(rows, cuts[n], at);
    for (int i = 0; i < n; i++) {
      assertTrue(cuts[i] <= cuts[i + 1], at + ": share " + i + " goes backwards");
      if (rows >= n) {
        assertTrue(cuts[i] < cuts[i + 1], at + ": share " + i + " is empty");
      }
    }
    int waveRows = Math.max(lead, rows / L3Executor.LEAD_DIVISOR);
    boolean wave = lead >= 1 && n > lead && rows - waveRows >= n - lead;
    assertEquals(wave ? lead : 0, L3Executor.waveShares(rows, n, lead), at);
    if (!wave) {
      for (int i = 0; i < n; i++) {
        int size = cuts[i + 1] - cuts[i];
        assertTrue(size == rows / n || size == rows / n + 1, at + ": uneven share " + i);
      }
      return;
    }
    assertEquals(waveRows, cuts[lead], at + ": the first wave's rows");
    int largestWaveShare = 0;
    for (int i = 0; i < lead; i++) {
      int size = cuts[i + 1] - cuts[i];
      assertTrue(size >= 1, at + ": wave share " + i + " is empty");
      largestWaveShare = Math.max(largestWaveShare, size);
    }
    int later = n - lead;
    int rest = rows - waveRows;
    for (int i = lead; i < n; i++) {
      int size = cuts[i + 1] - cuts[i];
      assertTrue(size == rest / later || size == rest / later + 1, at + ": uneven share " + i);
      if (n <= lead * L3Executor.LANDING_SHARES_PER_WORKER) { // as many as the executor cuts
        assertTrue(
            size >= largestWaveShare,
            at
                + ": later share "
                + i
                + " of "
                + size
                + " rows, a wave share of "
                + largestWaveShare);
      }
    }
  }

  @Test
  void shouldCutAGetOfFourSharesPerWorkerAsTheExecutorDoes() {
    // 4 workers, 16 shares, 1024 rows: a wave of 16 rows, then 12 shares of 84
    int[] cuts = L3Executor.shareCuts(1024, 16, 4);
    assertArrayEquals(new int[] {0, 4, 8, 12, 16}, java.util.Arrays.copyOf(cuts, 5));
    assertEquals(16 + 84, cuts[5]);
    assertEquals(1024, cuts[16]);
    assertArrayEquals(new int[] {0, 256, 512, 768, 1024}, L3Executor.shareCuts(1024, 4, 4));
    assertArrayEquals(new int[] {0, 3, 6, 10}, L3Executor.shareCuts(10, 3, 0), "a PUT: even");
  }
}
