package io.tokenspeed.cuda;

import java.util.SplittableRandom;

/** Test values exact in bf16, as the GPU tests' inputs: their bits and their values. */
public final class Bf16Bits {
  private Bf16Bits() {}

  /** A uniform value in [-scale, scale). */
  public static float uniform(SplittableRandom rnd, float scale) {
    return (float) ((rnd.nextDouble() * 2 - 1) * scale);
  }

  /** The bf16 bits of {@code v}, its low mantissa bits dropped (so the value is exact in bf16). */
  public static short bf16(float v) {
    return (short) (Float.floatToRawIntBits(v) >>> 16);
  }

  /** The value of bf16 bits. */
  public static double value(short bits) {
    return Float.intBitsToFloat(bits << 16);
  }
}
