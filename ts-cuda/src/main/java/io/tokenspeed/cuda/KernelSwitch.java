package io.tokenspeed.cuda;

import java.util.Arrays;
import java.util.Locale;

/**
 * A system property that picks between two kernels of the CUDA backend ({@code
 * tokenspeed.cuda.gemv}, {@code .fixedgemm}, {@code .fixedsplit}, {@code .flash}, {@code .splitkv},
 * {@code .graphs}; docs/gpu.md), so that both (for {@code .fixedgemm} and {@code .flash}, all
 * three) can be measured on the same card in one session before one becomes the default. A value is
 * read once, when its class loads.
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
    return pick(property, value, first, second) == 1;
  }

  /**
   * Which of {@code values} {@code value}, the value of {@code property}, names: its index, in any
   * case and with spaces around ignored; no value gives 0, the first. For a switch of more than two
   * values ({@code tokenspeed.cuda.fixedgemm}: v1, v2 or wgmma; {@code .flash}: auto, mma or
   * wgmma).
   *
   * @throws IllegalArgumentException for any other value, naming the property and every value
   *     ("must be a, b or c, not ...")
   */
  public static int pick(String property, String value, String... values) {
    if (values.length < 2) {
      throw new IllegalArgumentException(property + ": a switch has two values or more");
    }
    if (value == null) {
      return 0;
    }
    String v = value.strip().toLowerCase(Locale.ROOT);
    for (int i = 0; i < values.length; i++) {
      if (v.equals(values[i])) {
        return i;
      }
    }
    String all =
        String.join(", ", Arrays.asList(values).subList(0, values.length - 1))
            + " or "
            + values[values.length - 1];
    throw new IllegalArgumentException(property + " must be " + all + ", not \"" + value + "\"");
  }
}
