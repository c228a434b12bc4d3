package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PrefixHasher;
import io.tokenspeed.core.PromptKeys;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.LongStream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Seeded randomized comparison of the hybrid matcher and the two-tier probe with a brute-force
 * reference written from the definitions in concepts.md: for every candidate boundary, every group
 * checks the full set of rows it needs, with keys hashed directly by {@link PrefixHasher}.
 */
class HybridMatcherPropertyTest {

  private static final int LAYOUTS_PER_SEED = 120;
  private static final int TRIALS_PER_LAYOUT = 3;

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 10).map(i -> 0x5EED_0000L + i * 7_919);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldAgreeWithBruteForceOverRandomLayouts(long seed) {
    Random rnd = new Random(seed);
    int deviceHits = 0;
    int hostExtensions = 0;
    int tailHits = 0;
    for (int i = 0; i < LAYOUTS_PER_SEED; i++) {
      CacheLayout layout = randomLayout(rnd);
      int[] tokens = new int[1 + rnd.nextInt(6 * layout.prefixGranularity() + 5)];
      for (int t = 0; t < tokens.length; t++) {
        tokens[t] = rnd.nextInt(rnd.nextBoolean() ? 4 : 50_000); // small vocab: repeated pages
      }
      PromptKeys keys = PromptKeys.of(layout, tokens, List.of());
      Reference ref = new Reference(layout, tokens);
      for (int trial = 0; trial < TRIALS_PER_LAYOUT; trial++) {
        String where = "seed=" + seed + " layout#" + i + " trial " + trial + " " + layout;
        CacheFixture f = new CacheFixture(layout, 4096, 4096);
        Set<Integer> recordedTails = new TreeSet<>();
        if (keys.reusableBound() > 0 && rnd.nextBoolean()) {
          int tail = 1 + rnd.nextInt(keys.reusableBound());
          if (tail % layout.prefixGranularity() != 0) {
            f.cache.recordTail(keys, tail);
            recordedTails.add(tail);
          }
        }
        List<Integer> favourites = new ArrayList<>(recordedTails);
        favourites.add(keys.reusableBound());
        Set<CacheKey> device = randomPresence(rnd, ref, keys.reusableBound(), favourites);
        Set<CacheKey> host = randomPresence(rnd, ref, keys.reusableBound(), favourites);
        f.put(Tier.DEVICE, device);
        f.put(Tier.HOST, host);
        int max = rnd.nextBoolean() ? keys.reusableBound() : rnd.nextInt(keys.reusableBound() + 1);
        Set<CacheKey> union = new HashSet<>(device);
        union.addAll(host);
        int expectedDevice = ref.match(device, max, recordedTails);
        int expectedHost = ref.match(union, max, recordedTails);
        Probe probe = f.cache.probe(keys, max);
        assertEquals(expectedDevice, probe.deviceHit(), "device hit, " + where);
        assertEquals(expectedHost, probe.hostHit(), "host hit, " + where);
        deviceHits += expectedDevice > 0 ? 1 : 0;
        hostExtensions += expectedHost > expectedDevice ? 1 : 0;
        tailHits += expectedHost % layout.prefixGranularity() != 0 ? 1 : 0;

        Set<CacheKey> assumed = randomPresence(rnd, ref, keys.reusableBound(), favourites);
        Set<CacheKey> all = new HashSet<>(union);
        all.addAll(assumed);
        assertEquals(
            ref.match(all, max, recordedTails),
            f.cache.matchAssuming(keys, f.cache.candidates(keys, 0, max), assumed::contains),
            "match assuming L3, " + where);

        int b = max;
        List<CacheKey> missing = new ArrayList<>();
        for (CacheKey k : ref.needed(b)) {
          if (!union.contains(k)) {
            missing.add(k);
          }
        }
        assertEquals(Set.copyOf(missing), Set.copyOf(f.cache.missingKeys(keys, b)), where);
        f.checkAndForget();
      }
    }
    // The generator must exercise the interesting cases, or the comparison proves little.
    int trials = LAYOUTS_PER_SEED * TRIALS_PER_LAYOUT;
    assertTrue(deviceHits > trials / 10, "device hits " + deviceHits + " of " + trials);
    assertTrue(hostExtensions > trials / 20, "host extensions " + hostExtensions + " of " + trials);
    assertTrue(tailHits > 0, "tail hits " + tailHits + " of " + trials);
  }

  /**
   * The tail object of a prompt whose reusable bound B is not a multiple of P: {@link
   * CacheCoordinator#tailKeys} names exactly the needed keys at B that the brute-force hasher puts
   * under the partial page's hash. For a layout without State groups, the keys a finished prompt
   * writes through — those of every aligned boundary of its full pages — complete a restore at B
   * with the tail object and fall short of B without it; admission then copies the partial history
   * row into a private block (never published) and publishes the whole tail rows it loads.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldNameATailObjectThatCompletesARestoreAtTheReusableBound(long seed) {
    Random rnd = new Random(seed);
    int restores = 0;
    int partialRows = 0;
    for (int i = 0; i < LAYOUTS_PER_SEED; i++) {
      CacheLayout layout = randomLayout(rnd);
      int p = layout.prefixGranularity();
      int length = 2 + rnd.nextInt(5 * p + 4);
      if ((length - 1) % p == 0) {
        length++;
      }
      int[] tokens = new int[length];
      for (int t = 0; t < tokens.length; t++) {
        tokens[t] = rnd.nextInt(rnd.nextBoolean() ? 4 : 50_000);
      }
      PromptKeys keys = PromptKeys.of(layout, tokens, List.of());
      Reference ref = new Reference(layout, tokens);
      int bound = keys.reusableBound();
      String where = "seed=" + seed + " layout#" + i + " bound=" + bound + " " + layout;
      ContentHash tailHash =
          ref.hasher.hashPage(
              bound < p ? null : ref.pages[bound / p - 1], tokens, bound / p * p, bound % p);
      List<CacheKey> expected =
          ref.needed(bound).stream().filter(k -> k.pageHash().equals(tailHash)).toList();
      CacheFixture f = new CacheFixture(layout, 4096, 4096);
      assertEquals(expected, f.cache.tailKeys(keys, bound), "tail keys, " + where);
      if (layout.groups().stream().anyMatch(g -> g.kind() instanceof GroupKind.StateCheckpoints)) {
        f.checkAndForget();
        continue; // the checkpoint at B is one of them: no forward materializes it
      }
      Set<CacheKey> written = new HashSet<>();
      for (int b = p; b <= keys.numFullPages() * p; b += p) {
        written.addAll(ref.needed(b));
      }
      f.put(Tier.HOST, written);
      int withoutTail = f.cache.probe(keys, bound).hostHit();
      assertTrue(withoutTail < bound || expected.isEmpty(), "no restore at B without it, " + where);
      f.put(Tier.HOST, expected);
      assertEquals(bound, f.cache.probe(keys, bound).hostHit(), "restore at B, " + where);
      Admission a = f.admit(keys, bound, 1);
      assertEquals(bound, a.hit(), where);
      for (BlockCopy c : a.copies()) {
        boolean partial = (c.row() + 1) * layout.group(c.groupId()).blockGranularity() > bound;
        assertEquals(!partial, c.publishOnComplete(), "copy-on-write of the partial row, " + where);
        partialRows += partial ? 1 : 0;
      }
      f.finishCopies(a, true);
      f.release(a);
      f.checkAndForget();
      restores++;
    }
    assertTrue(restores > LAYOUTS_PER_SEED / 10, "restores at a tail " + restores);
    assertTrue(partialRows > 0, "partial rows " + partialRows);
  }

  private static CacheLayout randomLayout(Random rnd) {
    int p = 1 << (1 + rnd.nextInt(6)); // 2 .. 64
    int numGroups = 1 + rnd.nextInt(4);
    List<CacheGroupSpec> groups = new ArrayList<>();
    for (int g = 0; g < numGroups; g++) {
      int bg = p >> rnd.nextInt(Integer.numberOfTrailingZeros(p) + 1);
      GroupKind kind =
          switch (rnd.nextInt(3)) {
            case 0 -> new GroupKind.FullHistory();
            case 1 -> new GroupKind.SlidingWindow(1 + rnd.nextInt(3 * p));
            default -> new GroupKind.StateCheckpoints();
          };
      groups.add(
          new CacheGroupSpec(
              g, kind, bg, List.of(new CacheField("f", 1L << rnd.nextInt(4))), null));
    }
    return new CacheLayout(p, "bf16", groups);
  }

  /**
   * Mostly the needed keys of a few boundaries — random, aligned, or the favourite tails — with
   * some holes punched in.
   */
  private static Set<CacheKey> randomPresence(
      Random rnd, Reference ref, int bound, List<Integer> favourites) {
    Set<CacheKey> out = new HashSet<>();
    int targets = rnd.nextInt(4);
    for (int i = 0; i < targets; i++) {
      int b = rnd.nextInt(bound + 1);
      switch (rnd.nextInt(3)) {
        case 0 -> b -= b % ref.layout.prefixGranularity();
        case 1 -> b = favourites.get(rnd.nextInt(favourites.size()));
        default -> {}
      }
      for (CacheKey k : ref.needed(b)) {
        if (rnd.nextInt(10) != 0) {
          out.add(k);
        }
      }
    }
    return out;
  }

  /** The brute-force model. */
  private static final class Reference {
    final CacheLayout layout;
    final int[] tokens;
    final ContentHash[] pages;
    final PrefixHasher hasher;

    Reference(CacheLayout layout, int[] tokens) {
      this.layout = layout;
      this.tokens = tokens;
      this.hasher = new PrefixHasher(layout.prefixGranularity(), List.of());
      this.pages = hasher.pageHashes(tokens);
    }

    CacheKey key(int group, int row, int boundary) {
      int p = layout.prefixGranularity();
      int bg = layout.group(group).blockGranularity();
      int page = row * bg / p;
      ContentHash h;
      if ((page + 1) * p <= boundary) {
        h = pages[page];
      } else {
        h =
            hasher.hashPage(
                page == 0 ? null : pages[page - 1], tokens, page * p, boundary - page * p);
      }
      return new CacheKey(group, h, (row * bg % p) / bg);
    }

    List<CacheKey> needed(int b) {
      List<CacheKey> out = new ArrayList<>();
      for (CacheGroupSpec g : layout.groups()) {
        int bg = g.blockGranularity();
        switch (g.kind()) {
          case GroupKind.FullHistory f -> {
            for (int r = 0; r * bg < b; r++) {
              out.add(key(g.groupId(), r, b));
            }
          }
          case GroupKind.SlidingWindow(int w) -> {
            int lo = Math.max(0, b - w + 1);
            int hi = b - 1; // tokens [lo, hi] are attended to
            for (int r = 0; r * bg < b; r++) {
              int first = r * bg;
              int last = first + bg - 1;
              if (lo <= hi && first <= hi && last >= lo) {
                out.add(key(g.groupId(), r, b));
              }
            }
          }
          case GroupKind.StateCheckpoints s -> {
            if (b > 0) {
              out.add(key(g.groupId(), (b + bg - 1) / bg - 1, b));
            }
          }
        }
      }
      return out;
    }

    int match(Set<CacheKey> present, int max, Set<Integer> tails) {
      TreeSet<Integer> candidates = new TreeSet<>();
      candidates.add(0);
      int p = layout.prefixGranularity();
      for (int b = p; b <= max; b += p) {
        candidates.add(b);
      }
      int bound = tokens.length - 1;
      if (bound <= max && bound % p != 0) {
        candidates.add(bound);
      }
      for (int t : tails) {
        if (t <= max) {
          candidates.add(t);
        }
      }
      for (int b : candidates.descendingSet()) {
        if (present.containsAll(needed(b))) {
          return b;
        }
      }
      throw new AssertionError("boundary 0 is always covered");
    }
  }
}
