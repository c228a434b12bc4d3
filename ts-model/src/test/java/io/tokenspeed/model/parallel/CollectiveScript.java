package io.tokenspeed.model.parallel;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;

/**
 * A seeded sequence of collective calls that every rank plays the same way, with each rank's inputs
 * derived from the seed, the step and the rank, and the results every rank must get, computed here
 * independently: sums element by element in rank order, gathers as concatenations, and the values
 * around the written range unchanged.
 */
final class CollectiveScript {

  enum Kind {
    REDUCE,
    GATHER,
    BARRIER
  }

  /**
   * One call: a reduction of {@code length} floats at offset {@code pad} of an array with {@code
   * slack} more values after them, a gather of {@code counts} (local arrays and the output with
   * {@code slack} values to spare), or a barrier.
   */
  record Step(Kind kind, int pad, int length, int[] counts, int slack) {

    @Override
    public String toString() {
      return switch (kind) {
        case REDUCE -> "allReduceSum(pad " + pad + ", length " + length + ")";
        case GATHER -> "allGather(counts " + Arrays.toString(counts) + ")";
        case BARRIER -> "barrier";
      };
    }
  }

  private CollectiveScript() {}

  /** {@code count} steps for {@code size} ranks, lengths up to about three chunks. */
  static List<Step> steps(long seed, int size, int maxFloats, int count) {
    SplittableRandom rnd = new SplittableRandom(seed);
    List<Step> steps = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      int pick = rnd.nextInt(10);
      int pad = rnd.nextInt(4);
      int slack = rnd.nextInt(4);
      if (pick < 5) {
        steps.add(new Step(Kind.REDUCE, pad, length(rnd, maxFloats), null, slack));
      } else if (pick < 9) {
        int[] counts = new int[size];
        for (int r = 0; r < size; r++) {
          counts[r] = rnd.nextInt(5) == 0 ? 0 : length(rnd, maxFloats);
        }
        steps.add(new Step(Kind.GATHER, 0, 0, counts, slack));
      } else {
        steps.add(new Step(Kind.BARRIER, 0, 0, null, 0));
      }
    }
    return steps;
  }

  /** Zero, a chunk boundary give or take one, or anything up to three chunks. */
  private static int length(SplittableRandom rnd, int maxFloats) {
    return switch (rnd.nextInt(8)) {
      case 0 -> 0;
      case 1 -> Math.max(0, maxFloats * (1 + rnd.nextInt(3)) + rnd.nextInt(-1, 2));
      default -> rnd.nextInt(1, 3 * maxFloats + 3);
    };
  }

  /**
   * Rank {@code rank}'s {@code n} input values at step {@code step}: magnitudes spread over many
   * binades, signed zeros and exact cancellations, so the order of a sum changes its bits.
   */
  static float[] values(long seed, int step, int rank, int n) {
    SplittableRandom rnd =
        new SplittableRandom(seed ^ (0x9E37_79B9_7F4A_7C15L * (step + 1)) ^ (1_000_003L * rank));
    float[] v = new float[n];
    for (int i = 0; i < n; i++) {
      v[i] =
          switch (rnd.nextInt(12)) {
            case 0 -> 0f;
            case 1 -> -0f;
            case 2 -> (float) Math.scalb(rnd.nextDouble(-1, 1), 24);
            default -> (float) Math.scalb(rnd.nextDouble(-1, 1), rnd.nextInt(-12, 13));
          };
    }
    return v;
  }

  /** The values around the range a call writes, which must stay as they are. */
  private static float sentinel(int i) {
    return -7777.25f - i;
  }

  /** Plays step {@code i} as {@code collective}'s rank; returns the array the call wrote into. */
  static float[] play(SharedMemoryCollective collective, long seed, Step step, int i) {
    int rank = collective.rank();
    return switch (step.kind()) {
      case REDUCE -> {
        float[] data = new float[step.pad() + step.length() + step.slack()];
        for (int j = 0; j < data.length; j++) {
          data[j] = sentinel(j);
        }
        float[] mine = values(seed, i, rank, step.length());
        System.arraycopy(mine, 0, data, step.pad(), mine.length);
        collective.allReduceSum(data, step.pad(), step.length());
        yield data;
      }
      case GATHER -> {
        int[] counts = step.counts();
        float[] local = Arrays.copyOf(values(seed, i, rank, counts[rank]), counts[rank] + 2);
        local[counts[rank]] = Float.NaN; // past the count: must not travel
        local[counts[rank] + 1] = 12345f;
        float[] out = new float[Arrays.stream(counts).sum() + step.slack()];
        for (int j = 0; j < out.length; j++) {
          out[j] = sentinel(j);
        }
        collective.allGather(local, counts.clone(), out);
        yield out;
      }
      case BARRIER -> {
        collective.barrier();
        yield new float[0];
      }
    };
  }

  /** The array every rank must hold after step {@code i} of {@code size} ranks. */
  static float[] expected(long seed, int size, Step step, int i) {
    return switch (step.kind()) {
      case REDUCE -> {
        float[] data = new float[step.pad() + step.length() + step.slack()];
        for (int j = 0; j < data.length; j++) {
          data[j] = sentinel(j);
        }
        float[][] inputs = new float[size][];
        for (int r = 0; r < size; r++) {
          inputs[r] = values(seed, i, r, step.length());
        }
        for (int j = 0; j < step.length(); j++) {
          float sum = inputs[0][j];
          for (int r = 1; r < size; r++) {
            sum += inputs[r][j];
          }
          data[step.pad() + j] = sum;
        }
        yield data;
      }
      case GATHER -> {
        int[] counts = step.counts();
        float[] out = new float[Arrays.stream(counts).sum() + step.slack()];
        for (int j = 0; j < out.length; j++) {
          out[j] = sentinel(j);
        }
        int at = 0;
        for (int r = 0; r < size; r++) {
          System.arraycopy(values(seed, i, r, counts[r]), 0, out, at, counts[r]);
          at += counts[r];
        }
        yield out;
      }
      case BARRIER -> new float[0];
    };
  }

  /** Folds {@code result}'s length and raw bits into the digest {@code h}. */
  static long digest(long h, float[] result) {
    h = (h ^ result.length) * 0x0000_0100_0000_01B3L;
    for (float f : result) {
      h = (h ^ Float.floatToRawIntBits(f)) * 0x0000_0100_0000_01B3L;
    }
    return h;
  }

  /** The digest every rank must report after playing {@code steps}. */
  static long expectedDigest(long seed, int size, List<Step> steps) {
    long h = 0xCBF2_9CE4_8422_2325L;
    for (int i = 0; i < steps.size(); i++) {
      h = digest(h, expected(seed, size, steps.get(i), i));
    }
    return h;
  }
}
