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
  @ValueSource(strings = {"llama", "qwen2", "gemma3", "mamba", "jamba", "synthetic:llama-100m"})
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
              CudaCausalLm.cacheLayoutOf(cpu.config(), bg * pages, bg, false),
              name + " bg=" + bg + " pages=" + pages);
        }
      }
    }
  }

  /**
   * The bf16 KV layout of the tensor-core attention: the float32 one's geometry, half the bytes.
   */
  @ParameterizedTest
  @ValueSource(strings = {"llama", "synthetic:llama-100m"})
  void shouldHalveTheBytesOfABlockWithBf16Kv(String name, @TempDir Path dir) {
    Path folder =
        name.startsWith("synthetic:")
            ? SyntheticCheckpoints.materialize(name, 1, DType.BF16, dir)
            : Fixtures.extract(name, dir);
    try (CausalLm cpu = CausalLm.load(folder)) {
      var f32 = CudaCausalLm.cacheLayoutOf(cpu.config(), 64, 16, false);
      var bf16 = CudaCausalLm.cacheLayoutOf(cpu.config(), 64, 16, true);
      assertEquals(CudaCausalLm.KV_BF16, bf16.dtype());
      assertEquals(f32.numGroups(), bf16.numGroups());
      assertEquals(f32.group(0).blockGranularity(), bf16.group(0).blockGranularity());
      assertEquals(f32.group(0).fields().size(), bf16.group(0).fields().size());
      assertEquals(f32.group(0).bytesPerBlock(), 2 * bf16.group(0).bytesPerBlock());
    }
  }

  /** Scratch sizes grow to their floor, to what is needed, and to at least twice the old size. */
  @ParameterizedTest
  @org.junit.jupiter.params.provider.CsvSource({
    "16384, 32, 0, 16384",
    "16384, 16385, 16384, 32768",
    "16384, 70000, 16384, 70000",
    "16, 17, 16, 32",
    "16, 5, 16, 16",
    "16, 3, 0, 16",
    "16, 2000000000, 1500000000, 2147483647"
  })
  void shouldGrowTheScratchGeometrically(int floor, int need, int old, int want) {
    assertEquals(want, CudaCausalLm.grown(floor, need, old));
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
