package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.l3.L3Metrics;
import java.util.HashMap;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A follower's executor figures through a rank status: every counter and gauge comes back as it
 * was, texts and rejections cut so that no encoding exceeds the status limit, and bytes that are
 * not an encoding are refused.
 */
class ExecutorFiguresTest {

  private static L3Metrics.Kind kind(SplittableRandom rnd) {
    return new L3Metrics.Kind(
        rnd.nextLong(),
        rnd.nextLong(),
        rnd.nextLong(),
        rnd.nextLong(),
        rnd.nextLong(),
        rnd.nextLong(),
        rnd.nextInt(),
        rnd.nextLong(),
        rnd.nextInt(),
        rnd.nextLong(),
        rnd.nextInt(),
        rnd.nextLong());
  }

  /** A random text of up to {@code max} characters, any code point (NUL and pairs included). */
  private static String text(SplittableRandom rnd, int max) {
    StringBuilder b = new StringBuilder();
    for (int i = rnd.nextInt(max + 1); i > 0; i--) {
      int cp =
          switch (rnd.nextInt(4)) {
            case 0 -> 0;
            case 1 -> 'a' + rnd.nextInt(26);
            case 2 -> 0x80 + rnd.nextInt(0xff00);
            default -> 0x10000 + rnd.nextInt(0x10000);
          };
      if (cp >= 0xd800 && cp <= 0xdfff) {
        cp = 'x';
      }
      b.appendCodePoint(cp);
    }
    return b.toString();
  }

  private static L3Metrics figures(SplittableRandom rnd, int rejections, int textChars) {
    Map<String, Long> rej = new HashMap<>();
    for (int i = 0; i < rejections; i++) {
      rej.put("REJECTED_" + i + text(rnd, 4), rnd.nextLong());
    }
    return new L3Metrics(
        kind(rnd),
        kind(rnd),
        kind(rnd),
        rnd.nextBoolean() ? "HEALTHY" : "COOLDOWN",
        rnd.nextLong(),
        rnd.nextLong(),
        rnd.nextLong(),
        rnd.nextBoolean(),
        rnd.nextLong(),
        rnd.nextLong(),
        rnd.nextLong(),
        rej,
        rnd.nextLong(),
        rnd.nextLong(),
        text(rnd, textChars),
        rnd.nextLong(),
        rnd.nextBoolean(),
        rnd.nextLong(),
        text(rnd, textChars));
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8})
  void shouldGiveBackEveryFigureWhenTextsAreShort(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int i = 0; i < 50; i++) {
      Map<String, Long> rej = new HashMap<>();
      rej.put("REJECTED_QUEUE_FULL", rnd.nextLong());
      L3Metrics m =
          new L3Metrics(
              kind(rnd),
              kind(rnd),
              kind(rnd),
              "PROBING",
              rnd.nextLong(),
              rnd.nextLong(),
              rnd.nextLong(),
              rnd.nextBoolean(),
              rnd.nextLong(),
              rnd.nextLong(),
              rnd.nextLong(),
              rej,
              rnd.nextLong(),
              rnd.nextLong(),
              "store refused: " + rnd.nextInt(),
              rnd.nextLong(),
              rnd.nextBoolean(),
              rnd.nextLong(),
              "OOM command not allowed when used memory > 'maxmemory'. " + rnd.nextInt());
      assertEquals(m, ExecutorFigures.decode(ExecutorFigures.encode(m)), "seed " + seed);
    }
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {11, 12, 13, 14})
  void shouldStayWithinTheStatusLimitWhateverTheTexts(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int i = 0; i < 50; i++) {
      L3Metrics m = figures(rnd, rnd.nextInt(20), 2_000);
      RankStatus s = ExecutorFigures.encode(m);
      assertTrue(s.length() <= RankStatus.MAX_BYTES, s.length() + " bytes");
      L3Metrics back = ExecutorFigures.decode(s);
      assertEquals(m.put(), back.put(), "the counters survive");
      assertEquals(m.backendCalls(), back.backendCalls());
      assertTrue(back.rejections().size() <= ExecutorFigures.MAX_REJECTIONS);
      assertTrue(m.lastConfigurationFailure().startsWith(back.lastConfigurationFailure()));
      assertTrue(m.writesRefusedReason().startsWith(back.writesRefusedReason()));
      assertEquals(m.writesRefused(), back.writesRefused());
      assertEquals(m.refusedPutKeys(), back.refusedPutKeys());
    }
  }

  @Test
  void shouldRefuseBytesThatAreNotFigures() {
    assertThrows(
        IllegalArgumentException.class,
        () -> ExecutorFigures.decode(new RankStatus(new byte[] {9, 1, 2})));
    RankStatus good = ExecutorFigures.encode(figures(new SplittableRandom(5), 1, 3));
    byte[] cut = java.util.Arrays.copyOf(good.bytes(), good.length() - 3);
    assertThrows(IllegalArgumentException.class, () -> ExecutorFigures.decode(new RankStatus(cut)));
  }
}
