package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class TokenLogprobsTest {

  @Test
  void shouldCopyItsArraysInAndOut() {
    int[] ids = {4, 2};
    float[] values = {-0.5f, -1.5f};
    TokenLogprobs lp = new TokenLogprobs(2, -1.5f, ids, values);
    ids[0] = 9;
    values[0] = -9f;
    lp.topTokens()[1] = 7;
    lp.topLogprobs()[1] = -7f;
    assertArrayEquals(new int[] {4, 2}, lp.topTokens());
    assertArrayEquals(new float[] {-0.5f, -1.5f}, lp.topLogprobs());
  }

  @Test
  void shouldBeEqualOnlyWhenBitIdentical() {
    TokenLogprobs a = new TokenLogprobs(3, -0.25f, new int[] {3, 1}, new float[] {-0.25f, -2f});
    TokenLogprobs b = new TokenLogprobs(3, -0.25f, new int[] {3, 1}, new float[] {-0.25f, -2f});
    assertEquals(a, b);
    assertEquals(a.hashCode(), b.hashCode());
    assertNotEquals(
        a,
        new TokenLogprobs(3, -0.25f, new int[] {3, 1}, new float[] {-0.25f, Math.nextDown(-2f)}));
    assertNotEquals(a, new TokenLogprobs(3, -0.25f, new int[] {3, 0}, new float[] {-0.25f, -2f}));
    assertNotEquals(a, new TokenLogprobs(3, -0.25f, new int[0], new float[0]));
    assertEquals(
        "TokenLogprobs[token=3, logprob=-0.25, topTokens=[3, 1], topLogprobs=[-0.25, -2.0]]",
        a.toString());
  }

  @Test
  void shouldRefuseValuesThatAreNoLogprobs() {
    assertMessage("token=-1", () -> new TokenLogprobs(-1, -1f, new int[0], new float[0]));
    assertMessage("logprob=0.5", () -> new TokenLogprobs(1, 0.5f, new int[0], new float[0]));
    assertMessage("logprob=NaN", () -> new TokenLogprobs(1, Float.NaN, new int[0], new float[0]));
    assertMessage(
        "topTokens.length=1 and topLogprobs.length=2",
        () -> new TokenLogprobs(1, -1f, new int[] {1}, new float[] {-1f, -2f}));
    assertMessage(
        "must be equal and <= 20", () -> new TokenLogprobs(1, -1f, new int[21], new float[21]));
    assertMessage(
        "top 1 (token=2 logprob=-1.0) must follow top 0 (token=1 logprob=-2.0)",
        () -> new TokenLogprobs(1, -2f, new int[] {1, 2}, new float[] {-2f, -1f}));
    assertMessage(
        "top 0: token=1 logprob=1.0",
        () -> new TokenLogprobs(1, -2f, new int[] {1}, new float[] {1f}));
    // equal values keep any order (two logits may round to one value); -Infinity is allowed
    new TokenLogprobs(
        5,
        Float.NEGATIVE_INFINITY,
        new int[] {7, 2, 5},
        new float[] {-1f, -1f, Float.NEGATIVE_INFINITY});
  }

  private static void assertMessage(String part, Runnable r) {
    var e = assertThrows(IllegalArgumentException.class, r::run);
    assertTrue(e.getMessage().contains(part), e.getMessage());
  }
}
