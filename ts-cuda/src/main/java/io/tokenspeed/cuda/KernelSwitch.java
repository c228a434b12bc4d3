package io.tokenspeed.cuda;

import java.util.Locale;

/**
 * A system property that picks between two kernels of the CUDA backend ({@code
 * tokenspeed.cuda.gemv}, {@code .fixedgemm}, {@code .splitkv}, {@code .graphs}; docs/gpu.md), so
 * that both can be measured on the same card in one session before one becomes the default. A value
 * is read once, when its class loads.
 */
public final class KernelSwitch {

  private KernelSwitch() {}

  /**
   * Whether {@code value}, the value of {@code property}, picks the second kernel: {@code first}
   * (or no value) gives false, {@code second} true, in any case and with spaces around ignored.
   *
   * @throws IllegalArgumentException for any other value, naming the property and both values, so
   *     that a misspelt switch does not silently measure the other kernel
   */
  public static boolean read(String property, String value, String first, String second) {
    if (value == null) {
      return false;
    }
    String v = value.strip().toLowerCase(Locale.ROOT);
    if (v.equals(first)) {
      return false;
    }
    if (v.equals(second)) {
      return true;
    }
    throw new IllegalArgumentException(
        property + " must be " + first + " or " + second + ", not \"" + value + "\"");
  }
}
