package io.tokenspeed.server.trace;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Arrays;
import java.util.List;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class CacheBoundTest {

  static LongStream seeds() {
    return LongStream.range(0, 30).map(i -> 0xB0D0_0000L + i * 7_919);
  }

  /**
   * The bound over ids equals the longest common prefix with any earlier prompt, token by token.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldCountTheLongestPrefixAnEarlierPromptBeganWith(long seed) {
    List<TraceRequest> trace = TraceTestData.conversations(seed, 60);
    int[][] p = trace.stream().map(new TracePrompts(seed, 32_000)::prompt).toArray(int[][]::new);
    long[] want = new long[trace.size()];
    for (int a = 0; a < p.length; a++) {
      for (int b = 0; b < a; b++) {
        int m = Arrays.mismatch(p[a], p[b]);
        int common = m < 0 ? p[a].length : Math.min(m, p[a].length);
        want[a] = Math.max(want[a], common);
      }
    }
    assertArrayEquals(want, CacheBound.hitTokens(trace));
  }

  @Test
  void shouldCountACutBlockOnlyAsFarAsItWent() {
    List<TraceRequest> trace =
        List.of(
            new TraceRequest(0, 700, 1, new int[] {0, 1}), // block 1: 188 tokens
            new TraceRequest(1, 1500, 1, new int[] {0, 1, 2}), // reuses 512 + 188
            new TraceRequest(2, 1200, 1, new int[] {0, 1, 2}), // reuses all its 1,200
            new TraceRequest(3, 600, 1, new int[] {0, 5})); // the system block only
    assertArrayEquals(new long[] {0, 700, 1200, 512}, CacheBound.hitTokens(trace));
    assertEquals(
        (700 + 1200 + 512) / (double) (700 + 1500 + 1200 + 600), CacheBound.hitRate(trace));
    assertEquals(0.0, CacheBound.hitRate(List.of()));
  }
}
