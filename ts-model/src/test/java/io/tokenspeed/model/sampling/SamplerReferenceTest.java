package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The sampler against a deliberately naive reference written from the arithmetic its javadoc
 * states: every candidate sorted with a comparator (no keys, no heap), integer weights computed
 * exactly with {@link BigDecimal} and summed as {@link BigInteger}s, every comparison in exact
 * decimal arithmetic. A device kernel ports that arithmetic; the two implementations agreeing on
 * every id of many thousand random rows (masks, ties, signed zeros, weights that quantize to zero,
 * temperatures down to 1e-30, every filter alone and combined) is what makes it a specification.
 *
 * <p>A quarter of the rows take a {@code top_p} whose threshold lies on a running sum of their own
 * weights or one ulp beside it, so the cut depends on the last unit of the weights: rounding the
 * weights instead of flooring them, or comparing with {@code >} instead of {@code >=}, fails every
 * seed here, while random draws alone would almost never land close enough to tell.
 */
class SamplerReferenceTest {

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 24);
  }

  /** Rows per seed: 24 × 250 rows, each drawn at two steps. */
  private static final int ROWS_PER_SEED = 250;

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldMatchNaiveReferenceWhenRowsAreRandom(long seed) {
    SplittableRandom random = new SplittableRandom(seed);
    for (int c = 0; c < ROWS_PER_SEED; c++) {
      int vocab = vocabSize(random);
      float[] row = row(random, vocab);
      SamplingParams drawn = params(random, vocab);
      SamplingParams params =
          random.nextInt(4) == 0 ? onTheEdge(row, drawn, random).orElse(drawn) : drawn;
      Sampler sampler = new Sampler(vocab);
      for (int draw = 0; draw < 2; draw++) {
        long drawSeed = random.nextLong();
        int step = random.nextInt(5_000);
        int expected = naive(row, params, drawSeed, step);
        int c0 = c;
        assertEquals(
            expected,
            sampler.sample(row, params, drawSeed, step),
            () ->
                "case "
                    + c0
                    + " vocab="
                    + vocab
                    + " params="
                    + params
                    + " seed="
                    + drawSeed
                    + " step="
                    + step
                    + " row="
                    + Arrays.toString(row));
      }
    }
  }

  /** Bad rows fail in both, with the sampler naming the position. */
  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldRefuseTheRowsTheReferenceRefuses(long seed) {
    SplittableRandom random = new SplittableRandom(seed);
    int vocab = 1 + random.nextInt(40);
    float[] row = row(random, vocab);
    row[random.nextInt(vocab)] = random.nextBoolean() ? Float.NaN : Float.POSITIVE_INFINITY;
    SamplingParams params = params(random, vocab);
    assertThrows(IllegalArgumentException.class, () -> naive(row, params, seed, 0));
    assertThrows(
        IllegalArgumentException.class, () -> new Sampler(vocab).sample(row, params, 1, 0));
    Arrays.fill(row, Float.NEGATIVE_INFINITY);
    assertThrows(IllegalArgumentException.class, () -> naive(row, params, seed, 0));
    assertThrows(
        IllegalArgumentException.class, () -> new Sampler(vocab).sample(row, params, 1, 0));
  }

  // ---- random cases ---------------------------------------------------------------------------

  private static int vocabSize(SplittableRandom random) {
    return switch (random.nextInt(10)) {
      case 0 -> 1 + random.nextInt(3);
      case 1 -> 1 << random.nextInt(11); // powers of two: a row's total can reach 2^53
      case 2 -> 1_000 + random.nextInt(4_000);
      default -> 1 + random.nextInt(200);
    };
  }

  private static float[] row(SplittableRandom random, int vocab) {
    float[] row = new float[vocab];
    int kind = random.nextInt(6);
    for (int i = 0; i < vocab; i++) {
      row[i] =
          switch (kind) {
            case 0 -> (float) (random.nextGaussian() * 3); // distinct
            case 1 -> (random.nextInt(9) - 4) * 0.5f; // ties
            case 2 -> random.nextBoolean() ? 0f : -0f; // signed zeros, all tied
            case 3 -> (float) (random.nextGaussian() * 200); // most weights underflow to 0
            case 4 -> (float) (random.nextDouble() * 1e-3); // nearly uniform
            default -> random.nextInt(3) == 0 ? 0f : (float) (-random.nextDouble() * 60);
          };
    }
    if (random.nextInt(3) == 0) {
      double maskRate = random.nextDouble();
      for (int i = 0; i < vocab; i++) {
        if (random.nextDouble() < maskRate) {
          row[i] = Float.NEGATIVE_INFINITY;
        }
      }
    }
    if (random.nextInt(4) == 0) {
      row[random.nextInt(vocab)] = 7f; // a clear winner, sometimes tied
    }
    row[random.nextInt(vocab)] = random.nextInt(3); // at least one finite logit
    return row;
  }

  private static SamplingParams params(SplittableRandom random, int vocab) {
    double temperature =
        switch (random.nextInt(8)) {
          case 0 -> 0;
          case 1 -> Math.pow(10, -1 - random.nextInt(30)); // tiny: most weights quantize to 0
          case 2 -> 1;
          default -> 0.05 + 4 * random.nextDouble();
        };
    int topK = random.nextInt(3) == 0 ? random.nextInt(-1, vocab + 3) : 0;
    double topP =
        switch (random.nextInt(5)) {
          case 0 -> 1e-9;
          case 1 -> 1 - Math.pow(2, -1 - random.nextInt(52));
          case 2, 3 -> Math.max(1e-6, random.nextDouble());
          default -> 1;
        };
    double minP =
        switch (random.nextInt(6)) {
          case 0 -> random.nextDouble();
          case 1 -> random.nextInt(2); // 0 or 1
          case 2 -> Math.pow(10, -random.nextInt(25));
          default -> 0;
        };
    return new SamplingParams(
        temperature, topK, topP, minP, OptionalLong.empty(), 1, Set.of(), false);
  }

  /**
   * The params with a {@code top_p} that puts the threshold {@code top_p × T} on a running sum of
   * the kept weights, or one ulp beside it, where one unit of one weight decides the cut: random
   * draws alone almost never land within a unit of a boundary. Empty for a greedy row or one whose
   * first kept candidate takes all the weight.
   */
  private static Optional<SamplingParams> onTheEdge(
      float[] row, SamplingParams drawn, SplittableRandom random) {
    if (drawn.isGreedy()) {
      return Optional.empty();
    }
    SamplingParams sorted = drawn.withTopP(0.5); // top-p on: the candidates are walked sorted
    Weighted kept = weighted(row, sorted);
    BigInteger total = kept.sum(kept.ids().size());
    BigInteger running = kept.sum(1 + random.nextInt(kept.ids().size()));
    double topP = running.doubleValue() / total.doubleValue();
    topP =
        switch (random.nextInt(3)) {
          case 0 -> Math.nextDown(topP);
          case 1 -> Math.nextUp(topP);
          default -> topP;
        };
    return topP > 0 && topP < 1 ? Optional.of(drawn.withTopP(topP)) : Optional.empty();
  }

  // ---- the naive reference --------------------------------------------------------------------

  /**
   * The candidates left after min-p and top-k, in the order the draw walks them, with every token's
   * integer weight ({@code null} for a token that is no candidate).
   */
  record Weighted(List<Integer> ids, BigInteger[] wq) {

    /** The sum of the first {@code n} candidates' weights. */
    BigInteger sum(int n) {
      BigInteger s = BigInteger.ZERO;
      for (int id : ids.subList(0, n)) {
        s = s.add(wq[id]);
      }
      return s;
    }
  }

  /** A token id by the arithmetic of {@link Sampler}'s javadoc, spelled out with exact numbers. */
  static int naive(float[] logits, SamplingParams p, long seed, int step) {
    List<Integer> sorted = finiteMostLikelyFirst(logits);
    if (p.isGreedy()) {
      return sorted.get(0);
    }
    Weighted weighted = weighted(logits, p);
    List<Integer> kept = weighted.ids();
    BigInteger[] wq = weighted.wq();
    if (p.topP() < 1) {
      BigInteger total = weighted.sum(kept.size());
      BigDecimal threshold = new BigDecimal(p.topP() * total.doubleValue());
      BigInteger cumulative = BigInteger.ZERO;
      int n = 0;
      do {
        cumulative = cumulative.add(wq[kept.get(n++)]);
      } while (new BigDecimal(cumulative).compareTo(threshold) < 0);
      kept = kept.subList(0, n);
    }

    BigInteger total = BigInteger.ZERO;
    for (int id : kept) {
      total = total.add(wq[id]);
    }
    BigDecimal target = new BigDecimal(Sampler.uniform(seed, step) * total.doubleValue());
    BigInteger cumulative = BigInteger.ZERO;
    for (int id : kept) {
      cumulative = cumulative.add(wq[id]);
      if (target.compareTo(new BigDecimal(cumulative)) < 0) {
        return id;
      }
    }
    for (int n = kept.size() - 1; n >= 0; n--) {
      if (wq[kept.get(n)].signum() > 0) {
        return kept.get(n);
      }
    }
    throw new AssertionError("no kept candidate has a positive weight");
  }

  /**
   * The finite tokens, logit descending ({@code -0.0} equal to {@code +0.0}), then id ascending.
   */
  private static List<Integer> finiteMostLikelyFirst(float[] logits) {
    List<Integer> finite = new ArrayList<>();
    for (int i = 0; i < logits.length; i++) {
      float x = logits[i];
      if (Float.isNaN(x) || x == Float.POSITIVE_INFINITY) {
        throw new IllegalArgumentException("logit " + i + " is " + x);
      }
      if (x != Float.NEGATIVE_INFINITY) {
        finite.add(i);
      }
    }
    if (finite.isEmpty()) {
      throw new IllegalArgumentException("every logit is -Infinity");
    }
    finite.sort(mostLikelyFirst(logits));
    return finite;
  }

  private static Comparator<Integer> mostLikelyFirst(float[] logits) {
    return (a, b) -> {
      double la = logits[a];
      double lb = logits[b];
      return la != lb ? (la > lb ? -1 : 1) : Integer.compare(a, b);
    };
  }

  /** Weights, min-p, the walk's order and top-k. */
  private static Weighted weighted(float[] logits, SamplingParams p) {
    int vocab = logits.length;
    float max = logits[finiteMostLikelyFirst(logits).get(0)];
    int bits = 1;
    while (BigInteger.ONE.shiftLeft(bits).compareTo(BigInteger.valueOf(vocab)) < 0) {
      bits++;
    }
    BigDecimal scale = new BigDecimal(BigInteger.ONE.shiftLeft(53 - bits));

    List<Integer> candidates = new ArrayList<>(); // in id order
    BigInteger[] wq = new BigInteger[vocab];
    for (int i = 0; i < vocab; i++) {
      if (logits[i] == Float.NEGATIVE_INFINITY) {
        continue;
      }
      double w = Math.exp(((double) logits[i] - max) / p.temperature());
      if (w < p.minP()) {
        continue;
      }
      wq[i] = new BigDecimal(w).multiply(scale).toBigInteger(); // floor: w >= 0
      candidates.add(i);
    }
    boolean topKCuts = p.topK() > 0 && p.topK() < candidates.size();
    if (topKCuts || p.topP() < 1) {
      candidates.sort(mostLikelyFirst(logits));
    }
    if (topKCuts) {
      candidates = candidates.subList(0, p.topK());
    }
    return new Weighted(candidates, wq);
  }
}
