package io.tokenspeed.server.trace;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.List;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class TracePromptsTest {

  static LongStream seeds() {
    return LongStream.range(0, 20).map(i -> 0x7ACE_0000L + i * 104_729);
  }

  /**
   * Two requests sharing exactly their first k ids share exactly their first tokens up to the end
   * of block k - 1 (the shorter one's, when it is one's cut last block) and differ in block k.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldShareExactlyTheTokensOfTheSharedLeadingIds(long seed) {
    List<TraceRequest> trace = TraceTestData.conversations(seed, 40);
    TracePrompts prompts = new TracePrompts(seed, 32_000);
    int[][] p = trace.stream().map(prompts::prompt).toArray(int[][]::new);
    for (int a = 0; a < trace.size(); a++) {
      TraceRequest ra = trace.get(a);
      assertEquals(ra.inputLength(), p[a].length);
      for (int b = 0; b < a; b++) {
        TraceRequest rb = trace.get(b);
        int k = 0;
        while (k < ra.numBlocks() && k < rb.numBlocks() && ra.hashId(k) == rb.hashId(k)) {
          k++;
        }
        int shared = 0; // tokens of the shared blocks both hold
        boolean cut = false;
        for (int j = 0; j < k && !cut; j++) {
          int n = Math.min(ra.blockTokens(j), rb.blockTokens(j));
          shared += n;
          cut = n < Trace.BLOCK_TOKENS;
        }
        int common = Arrays.mismatch(p[a], p[b]);
        if (common < 0) {
          common = p[a].length; // equal prompts
        }
        if (cut || k == Math.min(ra.numBlocks(), rb.numBlocks())) {
          assertEquals(shared, common, "requests " + b + " and " + a + ": " + k + " ids shared");
        } else {
          // two different blocks of 512 ids from 32,000: they may begin alike by chance, but
          // not for a whole block
          assertTrue(
              common >= shared && common < shared + Trace.BLOCK_TOKENS,
              "requests " + b + " and " + a + " differ in block " + k + ", at " + common);
        }
      }
    }
  }

  @Test
  void shouldGiveTheSamePromptForTheSameSeedAndAnotherForAnother() {
    TraceRequest r = new TraceRequest(0, 700, 1, new int[] {3, 9});
    int[] a = new TracePrompts(1, 1000).prompt(r);
    assertArrayEquals(a, new TracePrompts(1, 1000).prompt(r));
    assertTrue(!Arrays.equals(a, new TracePrompts(2, 1000).prompt(r)));
    for (int t : a) {
      assertTrue(t >= 0 && t < 1000, "in the vocabulary: " + t);
    }
    assertThrows(IllegalArgumentException.class, () -> new TracePrompts(1, 1));
  }
}
