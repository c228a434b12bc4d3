package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.function.Function;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Table-driven matcher cases, each worked out by hand. The prompt has 300 tokens (reusable bound
 * 299, a tail), P = 64, so the candidates are 0, 64, 128, 192, 256 and the tail 299.
 */
class MatcherTableTest {

  private static final int[] PROMPT = Layouts.tokens(300, 1);

  /** A way to name present blocks relative to a prompt's keys. */
  private interface Spec extends Function<PromptKeys, List<CacheKey>> {}

  private static Spec rows(int group, int from, int to, int boundary) {
    return k -> {
      List<CacheKey> out = new ArrayList<>();
      for (int r = from; r < to; r++) {
        out.add(k.keyOf(group, r, boundary));
      }
      return out;
    };
  }

  private static Spec ckpt(int group, int boundary) {
    return k -> List.of(k.checkpointKey(group, boundary));
  }

  private static Spec except(Spec base, Spec removed) {
    return k -> {
      List<CacheKey> out = new ArrayList<>(base.apply(k));
      out.removeAll(removed.apply(k));
      return out;
    };
  }

  private static CacheLayout only(io.tokenspeed.core.CacheGroupSpec g) {
    return new CacheLayout(64, "bf16", List.of(g));
  }

  static Stream<Arguments> cases() {
    CacheLayout full16 = only(Layouts.full(0, 16, 64));
    CacheLayout swa80 = only(Layouts.swa(0, 80, 32, 64));
    CacheLayout state64 = only(Layouts.state(0, 64, 64));
    CacheLayout state32 = only(Layouts.state(0, 32, 64));
    CacheLayout mixed = Layouts.mixed();
    return Stream.of(
        // ---- Full history, bg = 16 (4 rows per page) ----
        Arguments.of("full: nothing present", full16, List.<Spec>of(), 299, 0),
        Arguments.of("full: three pages", full16, List.of(rows(0, 0, 12, 192)), 299, 192),
        Arguments.of(
            "full: a hole in page 1 stops at 64",
            full16,
            List.of(except(rows(0, 0, 16, 256), rows(0, 5, 6, 256))),
            299,
            64),
        Arguments.of("full: max caps the hit", full16, List.of(rows(0, 0, 16, 256)), 200, 192),
        Arguments.of(
            "full: exact tail 299 with its partial rows",
            full16,
            List.of(rows(0, 0, 16, 256), rows(0, 16, 19, 299)),
            299,
            299),
        Arguments.of(
            "full: tail rows without the pages below do not count",
            full16,
            List.of(rows(0, 0, 8, 128), rows(0, 16, 19, 299)),
            299,
            128),
        Arguments.of(
            "full: tail needs its partial history block",
            full16,
            List.of(rows(0, 0, 16, 256), rows(0, 16, 18, 299)),
            299,
            256),
        // ---- Sliding window 80, bg = 32: at B the rows holding tokens [B-79, B-1] ----
        Arguments.of(
            "swa: window rows at 256 only, holes to the left",
            swa80,
            List.of(rows(0, 5, 8, 256)),
            299,
            256),
        Arguments.of(
            "swa: a missing window row lowers to a boundary whose window is present",
            swa80,
            List.of(rows(0, 0, 2, 64), rows(0, 5, 6, 256), rows(0, 7, 8, 256)),
            299,
            64),
        Arguments.of(
            "swa: tail 299 needs rows 6..9, two of them tail-keyed",
            swa80,
            List.of(rows(0, 6, 8, 256), rows(0, 8, 10, 299)),
            299,
            299),
        Arguments.of("swa: nothing present", swa80, List.<Spec>of(), 299, 0),
        // ---- State checkpoints ----
        Arguments.of("state: checkpoint at 128 only", state64, List.of(ckpt(0, 128)), 299, 128),
        Arguments.of(
            "state: sparse checkpoints pick the longest",
            state64,
            List.of(ckpt(0, 64), ckpt(0, 192)),
            299,
            192),
        Arguments.of("state: absent everywhere", state64, List.<Spec>of(), 299, 0),
        Arguments.of("state: checkpoint at the tail", state64, List.of(ckpt(0, 299)), 299, 299),
        Arguments.of(
            "state: bg 32 checkpoint between pages is not a candidate",
            state32,
            List.of(ckpt(0, 96)),
            299,
            0),
        // ---- Mixed granularities 16 / 32 / 64 in one layout (full, swa 80, state) ----
        Arguments.of(
            "mixed: every group at 192 and beyond fails at 256 for state",
            mixed,
            List.of(rows(0, 0, 16, 256), rows(1, 3, 8, 256), ckpt(2, 192)),
            299,
            192),
        Arguments.of(
            "mixed: fixed point walks down through swa and state",
            mixed,
            List.of(rows(0, 0, 16, 256), rows(1, 3, 6, 192), ckpt(2, 128), ckpt(2, 256)),
            299,
            0),
        Arguments.of(
            "mixed: state at 128 with its window",
            mixed,
            List.of(rows(0, 0, 16, 256), rows(1, 1, 6, 192), ckpt(2, 128), ckpt(2, 256)),
            299,
            128),
        Arguments.of(
            "mixed: exact tail with all three groups",
            mixed,
            List.of(
                rows(0, 0, 16, 256),
                rows(0, 16, 19, 299),
                rows(1, 6, 8, 256),
                rows(1, 8, 10, 299),
                ckpt(2, 299)),
            299,
            299));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void shouldFindLongestBoundaryEveryGroupCovers(
      String name, CacheLayout layout, List<Spec> present, int max, int expected) {
    PromptKeys keys = PromptKeys.of(layout, PROMPT, List.of());
    Set<CacheKey> keySet = new HashSet<>();
    for (Spec s : present) {
      keySet.addAll(s.apply(keys));
    }
    CacheFixture f = new CacheFixture(layout, 8, 256);
    assertEquals(
        expected,
        f.cache.matchAssuming(keys, f.cache.candidates(keys, 0, max), keySet::contains),
        "assumed");
    // The same blocks published on the Host, then on the Device, give the same hit.
    f.put(Tier.HOST, keySet);
    assertEquals(expected, f.cache.probe(keys, max).hostHit(), "host probe");
    assertEquals(0, f.cache.probe(keys, max).deviceHit(), "nothing on the device");
    CacheFixture d = new CacheFixture(layout, 256, 8);
    d.put(Tier.DEVICE, keySet);
    assertEquals(expected, d.cache.probe(keys, max).deviceHit(), "device probe");
  }
}
