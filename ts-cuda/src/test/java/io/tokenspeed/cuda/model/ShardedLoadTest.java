package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.SafetensorsFile;
import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.Random;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * What a rank of a tensor-parallel GPU replica loads, checked on the host: its cache layout is the
 * CPU model's for the same rank (so per-rank L3 objects of either serve the other), and the blocks
 * of the weights it copies to its GPU hold exactly the checkpoint's rows and columns of its share.
 */
class ShardedLoadTest {

  /** A rank's place for loading the CPU model; loading reads nothing else of it. */
  record Place(int rank, int size) implements Collective {
    @Override
    public void allReduceSum(float[] data, int offset, int length) {
      throw new UnsupportedOperationException("loading only");
    }

    @Override
    public void allGather(float[] local, int[] counts, float[] out) {
      throw new UnsupportedOperationException("loading only");
    }

    @Override
    public void abort(String reason) {}

    @Override
    public void close() {}
  }

  @ParameterizedTest(name = "{0} at TP {1}")
  @CsvSource({
    "llama, 2",
    "qwen2, 2",
    "qwen2, 4",
    "gemma3, 2",
    "gemma3, 4",
    "jamba, 2",
    "mamba, 2",
    "synthetic:llama-100m, 4"
  })
  void shouldLayOutEachRanksKvAsTheCpuModelsRank(String name, int size, @TempDir Path dir) {
    Path folder =
        name.startsWith("synthetic:")
            ? SyntheticCheckpoints.materialize(name, 1, DType.BF16, dir)
            : Fixtures.extract(name, dir);
    for (int rank = 0; rank < size; rank++) {
      try (CausalLm cpu =
          CausalLm.load(
              folder, name, ModelIdentity.DEFAULT_WEIGHT_VERSION, new Place(rank, size))) {
        Shard shard = new Shard(rank, size);
        for (int bg : new int[] {1, 4, 16}) {
          CacheLayout want = cpu.cacheLayout(4 * bg, bg);
          CacheLayout got =
              CudaCausalLm.cacheLayoutOf(
                  cpu.config(), CudaCausalLm.rankDims(cpu.config(), shard), 4 * bg, bg, false);
          assertEquals(want, got, name + " rank " + rank + " of " + size + ", bg " + bg);
        }
      }
    }
  }

  @ParameterizedTest
  @ValueSource(ints = {3, 8})
  void shouldRefuseDimensionsThatDoNotSplit(int size, @TempDir Path dir) {
    Path folder = Fixtures.extract("llama", dir);
    try (CausalLm cpu = CausalLm.load(folder)) {
      assertThrows(
          IllegalArgumentException.class,
          () -> CudaCausalLm.rankDims(cpu.config(), new Shard(0, size)));
    }
  }

  /** Every block gathers the checkpoint's values at its rows and columns, in both element types. */
  @ParameterizedTest
  @ValueSource(longs = {1, 2, 3})
  void shouldGatherABlocksRowsAndColumnsExactly(long seed, @TempDir Path dir) throws Exception {
    Path f32 = Fixtures.extract("llama", dir.resolve("f32"));
    Path bf16 = SyntheticCheckpoints.materialize("synthetic:llama-100m", 1, DType.BF16, dir);
    Random rnd = new Random(seed);
    try (Arena arena = Arena.ofConfined()) {
      for (Path folder : new Path[] {f32, bf16}) {
        SafetensorsFile file = SafetensorsFile.open(folder.resolve("model.safetensors"), arena);
        Tensor t = file.tensor("model.layers.0.mlp.down_proj.weight");
        for (int k = 0; k < 40; k++) {
          int row = rnd.nextInt(t.dim(0));
          int rows = 1 + rnd.nextInt(t.dim(0) - row);
          int col = rnd.nextInt(t.dim(1));
          int cols = 1 + rnd.nextInt(t.dim(1) - col);
          CudaCausalLm.Part p = new CudaCausalLm.Part(t, row, rows, col, cols);
          for (boolean toBf16 : new boolean[] {false, true}) {
            int r0 = rnd.nextInt(rows);
            int n = 1 + rnd.nextInt(rows - r0);
            MemorySegment host = arena.allocate((long) n * cols * 4, 64);
            p.gather(toBf16, r0, n, host);
            for (int r = 0; r < n; r++) {
              for (int c = 0; c < cols; c++) {
                float want = t.getFloat((long) (row + r0 + r) * t.dim(1) + col + c);
                long i = (long) r * cols + c;
                if (toBf16) {
                  assertEquals(
                      CudaCausalLm.toBf16(want),
                      host.getAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i),
                      t + " bf16 at " + (row + r0 + r) + "," + (col + c));
                } else {
                  assertEquals(
                      Float.floatToRawIntBits(want),
                      Float.floatToRawIntBits(host.getAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i)),
                      t + " f32 at " + (row + r0 + r) + "," + (col + c));
                }
              }
            }
          }
        }
      }
    }
  }
}
