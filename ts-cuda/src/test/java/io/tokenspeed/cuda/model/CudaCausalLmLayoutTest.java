package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.Random;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The GPU model reads and writes KV where the CPU model does: the same cache layout, so a block
 * computed by one, or restored from a store, serves the other.
 */
class CudaCausalLmLayoutTest {

  @ParameterizedTest
  @ValueSource(strings = {"llama", "qwen2", "synthetic:llama-100m"})
  void shouldUseTheCpuModelsCacheLayout(String name, @TempDir Path dir) {
    Path folder =
        name.startsWith("synthetic:")
            ? SyntheticCheckpoints.materialize(name, 1, DType.BF16, dir)
            : Fixtures.extract(name, dir);
    try (CausalLm cpu = CausalLm.load(folder)) {
      for (int bg : new int[] {1, 4, 16}) {
        for (int pages : new int[] {1, 4}) {
          assertEquals(
              cpu.cacheLayout(bg * pages, bg),
              CudaCausalLm.cacheLayoutOf(cpu.config().dims(), bg * pages, bg, false),
              name + " bg=" + bg + " pages=" + pages);
        }
      }
    }
  }

  @ParameterizedTest
  @ValueSource(longs = {1, 2, 3})
  void shouldRoundToBf16AsTheCheckpointsDo(long seed) {
    Random rnd = new Random(seed);
    for (int i = 0; i < 100_000; i++) {
      float f = Float.intBitsToFloat(rnd.nextInt());
      if (Float.isNaN(f)) {
        assertEquals(0x7f80, CudaCausalLm.toBf16(f) & 0x7f80, "NaN stays NaN");
        continue;
      }
      // round to nearest, ties to even: the two bf16 values around f, as exact doubles (the one
      // above the largest finite bf16 is 2^128, which rounds to infinity)
      int bits = Float.floatToRawIntBits(f);
      int down = bits & 0xffff0000;
      double lo = Float.intBitsToFloat(down);
      double hi = lo + Math.copySign(Math.ulp((float) lo) * 65536.0, f);
      double dLo = Math.abs(f - lo);
      double dHi = Math.abs(hi - f);
      boolean even = ((down >>> 16) & 1) == 0;
      int want =
          Float.isInfinite(f) || dLo < dHi || (dLo == dHi && even)
              ? down >>> 16
              : (down + 0x10000) >>> 16;
      assertEquals(
          (short) want,
          CudaCausalLm.toBf16(f),
          () -> "f=" + f + " bits=" + Integer.toHexString(bits));
    }
  }
}
