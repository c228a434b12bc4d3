package io.tokenspeed.bench;

import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.PagedAttention;
import io.tokenspeed.model.kernel.PagedAttention.LayerKv;
import io.tokenspeed.model.kernel.VectorMath;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * {@link PagedAttention#attend} on all cores against {@link OneDotAttention}, the kernel it
 * replaced (one dot, one {@code StrictMath.exp} and one axpy per query head and position), in the
 * same run. KV in shuffled 16-token blocks, random values.
 *
 * <pre>
 *   prefill: one request, 512 query tokens at positions 1536 .. 2047 (context 2048)
 *   decode:  16 requests, one query token each at position 2047
 *   FLOPs = 4 · headDim · Σ over (token, query head) of positions read
 *         prefill 14 heads: 3.29 GFLOP   12 heads: 2.82 GFLOP
 *         decode  14 heads: 117 MFLOP    12 heads: 101 MFLOP
 * </pre>
 *
 * <p>GFLOP/s = FLOPs / score. Run:
 *
 * <pre>
 *   ./mvnw -q -pl ts-bench -am package -DskipTests
 *   java --add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED \
 *       -jar ts-bench/target/benchmarks.jar PagedAttentionBenchmark -f 1 -wi 2 -i 3 -w 2s -r 2s
 * </pre>
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 2, time = 2)
@Measurement(iterations = 3, time = 2)
@Fork(
    value = 1,
    jvmArgsAppend = {"--add-modules", "jdk.incubator.vector", "--enable-native-access=ALL-UNNAMED"})
public class PagedAttentionBenchmark {
  private static final int HEAD_DIM = 64;
  private static final int BLOCK_TOKENS = 16;
  private static final int CONTEXT = 2048;
  private static final int PREFILL_TOKENS = 512;
  private static final int DECODE_REQUESTS = 16;

  /** Query heads / KV heads: Qwen2-0.5B's GQA and plain multi-head attention. */
  @Param({"14/2", "12/12"})
  String heads;

  private Arena arena;
  private ComputePool pool;
  private LayerKv kv;
  private int numHeads;
  private float scale;
  private int[][] tables;
  private Batch prefill;
  private Batch decode;

  /** Query rows, positions and owners of one call. */
  private record Batch(float[] q, int tokens, int[] positions, int[] tokenRequest, float[] out) {}

  @Setup(Level.Trial)
  public void setUp() {
    String[] parts = heads.split("/");
    numHeads = Integer.parseInt(parts[0]);
    int numKvHeads = Integer.parseInt(parts[1]);
    scale = (float) (1 / Math.sqrt(HEAD_DIM));
    int rows = CONTEXT / BLOCK_TOKENS;
    int blocks = DECODE_REQUESTS * rows + 1;
    long field = (long) numKvHeads * BLOCK_TOKENS * HEAD_DIM * Float.BYTES;
    arena = Arena.ofShared();
    MemorySegment memory = arena.allocate(2 * field * blocks, 64);
    SplittableRandom rnd = new SplittableRandom(7);
    for (long i = field * 2; i < memory.byteSize(); i += Float.BYTES) {
      memory.set(ValueLayout.JAVA_FLOAT_UNALIGNED, i, (float) rnd.nextDouble(-1, 1));
    }
    kv = new LayerKv(memory, 2 * field, 0, field, BLOCK_TOKENS, numKvHeads, HEAD_DIM);
    List<Integer> ids = new ArrayList<>();
    for (int b = 1; b < blocks; b++) {
      ids.add(b);
    }
    Collections.shuffle(ids, new java.util.Random(11));
    tables = new int[DECODE_REQUESTS][rows];
    for (int r = 0; r < DECODE_REQUESTS; r++) {
      for (int i = 0; i < rows; i++) {
        tables[r][i] = ids.get(r * rows + i);
      }
    }
    prefill = batch(rnd, PREFILL_TOKENS, t -> CONTEXT - PREFILL_TOKENS + t, t -> 0);
    decode = batch(rnd, DECODE_REQUESTS, t -> CONTEXT - 1, t -> t);
    pool = ComputePool.ofCores();
  }

  private Batch batch(
      SplittableRandom rnd,
      int tokens,
      java.util.function.IntUnaryOperator position,
      java.util.function.IntUnaryOperator request) {
    float[] q = new float[tokens * numHeads * HEAD_DIM];
    for (int i = 0; i < q.length; i++) {
      q[i] = (float) rnd.nextDouble(-1, 1);
    }
    int[] positions = new int[tokens];
    int[] owners = new int[tokens];
    for (int t = 0; t < tokens; t++) {
      positions[t] = position.applyAsInt(t);
      owners[t] = request.applyAsInt(t);
    }
    return new Batch(q, tokens, positions, owners, new float[q.length]);
  }

  @TearDown(Level.Trial)
  public void tearDown() {
    pool.close();
    arena.close();
  }

  @Benchmark
  public float[] prefillNew() {
    return run(prefill, false);
  }

  @Benchmark
  public float[] prefillOld() {
    return run(prefill, true);
  }

  @Benchmark
  public float[] decodeNew() {
    return run(decode, false);
  }

  @Benchmark
  public float[] decodeOld() {
    return run(decode, true);
  }

  private float[] run(Batch b, boolean old) {
    if (old) {
      OneDotAttention.attend(
          pool, kv, b.q, b.tokens, numHeads, scale, b.positions, b.tokenRequest, tables, b.out);
    } else {
      PagedAttention.attend(
          pool, kv, b.q, b.tokens, numHeads, scale, b.positions, b.tokenRequest, tables, b.out);
    }
    return b.out;
  }

  /**
   * The attention kernel before the tiled one, kept as the baseline: per (token, head) one {@link
   * VectorMath#dot} per position, a softmax with {@link StrictMath#exp} summed left to right, and
   * one {@link VectorMath#axpy} per position.
   */
  static final class OneDotAttention {
    private OneDotAttention() {}

    static void attend(
        ComputePool pool,
        LayerKv kv,
        float[] q,
        int tokens,
        int numHeads,
        float scale,
        int[] positions,
        int[] tokenRequest,
        int[][] blockTables,
        float[] out) {
      int hd = kv.headDim();
      int group = numHeads / kv.numKvHeads();
      int width = numHeads * hd;
      int maxCtx = 0;
      for (int t = 0; t < tokens; t++) {
        maxCtx = Math.max(maxCtx, positions[t] + 1);
      }
      int scratchLength = maxCtx;
      pool.parallelFor(
          tokens * numHeads,
          (from, to) -> {
            float[] scores = new float[scratchLength];
            for (int item = from; item < to; item++) {
              int t = item / numHeads;
              int h = item % numHeads;
              int kvHead = h / group;
              int[] table = blockTables[tokenRequest[t]];
              int n = positions[t] + 1;
              int qOff = t * width + h * hd;
              for (int j = 0; j < n; j++) {
                scores[j] =
                    VectorMath.dot(
                        q, qOff, kv.memory(), at(kv, table, j, kvHead, kv.kFieldOffset()), hd);
                scores[j] *= scale;
              }
              softmax(scores, n);
              java.util.Arrays.fill(out, qOff, qOff + hd, 0f);
              for (int j = 0; j < n; j++) {
                long v = at(kv, table, j, kvHead, kv.vFieldOffset());
                VectorMath.axpy(scores[j], kv.memory(), v, out, qOff, hd);
              }
            }
          });
    }

    private static long at(LayerKv kv, int[] table, int j, int kvHead, long field) {
      int bg = kv.blockTokens();
      return table[j / bg] * kv.bytesPerBlock()
          + field
          + ((long) kvHead * bg + j % bg) * kv.headDim() * 4L;
    }

    private static void softmax(float[] x, int n) {
      float max = Float.NEGATIVE_INFINITY;
      for (int i = 0; i < n; i++) {
        max = Math.max(max, x[i]);
      }
      float sum = 0f;
      for (int i = 0; i < n; i++) {
        float e = (float) StrictMath.exp(x[i] - max);
        x[i] = e;
        sum += e;
      }
      for (int i = 0; i < n; i++) {
        x[i] = x[i] / sum;
      }
    }
  }
}
