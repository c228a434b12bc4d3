package io.tokenspeed.model.sampling;

/**
 * A counter-based uniform generator: the draw for a sequence at a decode step is a pure function of
 * (seed, step). There is no generator state to carry, copy or lose, so a sequence's sample at step
 * {@code i} cannot depend on the batch it runs in, on other sequences, or on whether it was
 * retracted and recomputed.
 *
 * <p>The draw at step {@code i} is the {@code i}-th {@link java.util.SplittableRandom#nextDouble()}
 * of {@code new SplittableRandom(mix64(seed))}: SplitMix64 evaluated at one position, in O(1). The
 * seed is mixed first so that user seeds that differ by the SplitMix increment do not give shifted
 * copies of one stream.
 */
final class StepRandom {

  /** SplitMix64's increment (the golden ratio in 64-bit fixed point), as SplittableRandom uses. */
  static final long GOLDEN_GAMMA = 0x9e3779b97f4a7c15L;

  private StepRandom() {}

  /** A uniform double in [0, 1) with 53 random bits, for {@code seed} at {@code step >= 0}. */
  static double uniform(long seed, int step) {
    if (step < 0) {
      throw new IllegalArgumentException("step=" + step + " must be >= 0");
    }
    long state = mix64(seed) + GOLDEN_GAMMA * (step + 1L);
    return (mix64(state) >>> 11) * 0x1.0p-53;
  }

  /** Stafford's variant 13 of the MurmurHash3 finalizer, as in SplittableRandom. */
  static long mix64(long z) {
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }
}
