package io.tokenspeed.model.kernel;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.model.checkpoint.Tensor;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link PagedAttention#attend} against {@link #reference}, a plain scalar loop that follows the
 * order stated in the class comment literally, bit for bit: seeded random head widths (8 .. 256,
 * with and without a vector tail), GQA ratios 1, 2 and 7, blocks of 1, 4, 16 and 64 tokens in
 * shuffled physical blocks, batches that mix prefill chunks and decode steps of several requests,
 * sliding windows (some narrower than a block, with the rows left of them as holes), soft-capping,
 * and 1, 2 or 3 threads. Every byte of the pool that holds no written K/V, the null block included,
 * is NaN, so reading anything outside a token's positions would show.
 *
 * <p>The second test holds one request fixed and changes everything else — chunking (whole, 1, 7,
 * 64), batch neighbours, thread count, physical blocks — and requires bit-identical outputs.
 */
class PagedAttentionExactnessTest {
  private static final int[] HEAD_DIMS = {8, 16, 64, 72, 80, 128, 256};
  private static final int[] RATIOS = {1, 2, 7};
  private static final int[] BLOCK_TOKENS = {1, 4, 16, 64};

  private static final ComputePool[] POOLS = new ComputePool[4];

  @BeforeAll
  static void pools() {
    for (int t = 1; t <= 3; t++) {
      POOLS[t] = ComputePool.ofThreads(t);
    }
  }

  @AfterAll
  static void close() {
    for (int t = 1; t <= 3; t++) {
      POOLS[t].close();
    }
  }

  static Stream<Arguments> seeds() {
    return LongStream.range(1, 61).mapToObj(Arguments::of);
  }

  static Stream<Arguments> invarianceSeeds() {
    return LongStream.range(1, 13).mapToObj(Arguments::of);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldMatchTheScalarReferenceBitForBitWhenBatchesAreRandom(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    Shape shape = Shape.random(rnd);
    int requests = 1 + rnd.nextInt(4);
    int[] done = new int[requests];
    int[] fresh = new int[requests];
    for (int r = 0; r < requests; r++) {
      boolean decode = rnd.nextInt(3) == 0;
      done[r] = rnd.nextInt(shape.maxContext() / 2 + 1);
      fresh[r] = decode ? 1 : 1 + rnd.nextInt(shape.maxContext() - done[r]);
    }
    try (Arena arena = Arena.ofShared()) {
      Cache cache = new Cache(shape, arena, requests, done, fresh, rnd);
      List<int[]> order = new ArrayList<>();
      for (int r = 0; r < requests; r++) {
        order.add(new int[] {r, done[r], fresh[r]});
      }
      Collections.shuffle(order, new Random(seed));
      Batch batch = Batch.of(shape, order, rnd.nextInt(6) == 0 ? new Random(seed) : null);
      int threads = 1 + rnd.nextInt(3);
      float[] actual = cache.attend(batch, POOLS[threads]);
      float[] expected = reference(cache, batch);
      assertBitIdentical(expected, actual, shape, batch, "seed=" + seed + " threads=" + threads);
    }
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("invarianceSeeds")
  void shouldGiveBitIdenticalOutputsWhateverTheChunkingBatchThreadsAndBlocks(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed * 7919);
    Shape shape = Shape.random(rnd);
    int length = 40 + rnd.nextInt(shape.maxContext() - 40);
    float[] baseline = run(shape, seed, length, length, false, 1, 1);
    for (int chunk : new int[] {1, 7, 64}) {
      assertBitIdentical(baseline, run(shape, seed, length, chunk, false, 1, 1), "chunk=" + chunk);
    }
    assertBitIdentical(baseline, run(shape, seed, length, length, true, 1, 1), "batched");
    assertBitIdentical(baseline, run(shape, seed, length, 13, true, 3, 1), "batched, 3 threads");
    assertBitIdentical(baseline, run(shape, seed, length, length, false, 3, 1), "3 threads");
    assertBitIdentical(baseline, run(shape, seed, length, length, false, 1, 2), "other blocks");
  }

  /**
   * Outputs of request 0 ({@code length} tokens, prefilled in chunks of {@code chunk}) as one
   * array; with {@code neighbours}, two other requests share every batch; {@code placement} seeds
   * the physical blocks.
   */
  private static float[] run(
      Shape shape,
      long seed,
      int length,
      int chunk,
      boolean neighbours,
      int threads,
      long placement) {
    SplittableRandom neighbourLengths = new SplittableRandom(seed + 17);
    int requests = neighbours ? 3 : 1;
    int[] lengths = new int[requests];
    lengths[0] = length;
    for (int r = 1; r < requests; r++) {
      lengths[r] = 1 + neighbourLengths.nextInt(shape.maxContext());
    }
    int width = shape.numHeads() * shape.headDim();
    float[] out = new float[length * width];
    try (Arena arena = Arena.ofShared()) {
      Cache cache =
          new Cache(
              shape,
              arena,
              requests,
              new int[requests],
              lengths,
              new SplittableRandom(seed * 31 + placement),
              new SplittableRandom(seed));
      int[] done = new int[requests];
      SplittableRandom neighbourChunks = new SplittableRandom(seed + placement * 1009);
      while (done[0] < length) {
        List<int[]> order = new ArrayList<>();
        order.add(new int[] {0, done[0], Math.min(chunk, length - done[0])});
        for (int r = 1; r < requests; r++) {
          int n = Math.min(1 + neighbourChunks.nextInt(40), lengths[r] - done[r]);
          if (n > 0) {
            order.add(neighbourChunks.nextBoolean() ? 0 : order.size(), new int[] {r, done[r], n});
          }
        }
        Batch batch = Batch.of(shape, order, null);
        float[] o = cache.attend(batch, POOLS[threads]);
        for (int t = 0; t < batch.tokens(); t++) {
          if (batch.tokenRequest()[t] == 0) {
            System.arraycopy(o, t * width, out, batch.positions()[t] * width, width);
          }
        }
        for (int[] part : order) {
          done[part[0]] += part[2];
        }
      }
    }
    return out;
  }

  /**
   * The documented order, one (token, head) at a time with scalar arithmetic, reading K/V from the
   * logical per-request arrays rather than the pool.
   */
  static float[] reference(Cache cache, Batch batch) {
    Shape shape = cache.shape;
    int hd = shape.headDim();
    int group = shape.numHeads() / shape.numKvHeads();
    int kvWidth = shape.numKvHeads() * hd;
    float[] out = new float[batch.tokens() * shape.numHeads() * hd];
    for (int t = 0; t < batch.tokens(); t++) {
      float[] k = cache.k[batch.tokenRequest()[t]];
      float[] v = cache.v[batch.tokenRequest()[t]];
      int p = batch.positions()[t];
      int lo = shape.window() > 0 ? Math.max(0, p - shape.window() + 1) : 0;
      for (int h = 0; h < shape.numHeads(); h++) {
        int qOff = (t * shape.numHeads() + h) * hd;
        int kvOff = h / group * hd;
        float[] s = new float[p + 1];
        float m = Float.NEGATIVE_INFINITY;
        for (int j = lo; j <= p; j++) {
          float acc = 0f;
          for (int d = 0; d < hd; d++) {
            acc = Math.fma(batch.q()[qOff + d], k[j * kvWidth + kvOff + d], acc);
          }
          acc = acc * shape.scale();
          s[j] = shape.softcap() > 0f ? PagedAttention.softcap(acc, shape.softcap()) : acc;
          m = Math.max(m, s[j]);
        }
        float[] partial = new float[16];
        for (int j = lo; j <= p; j++) {
          s[j] = FastExp.exp(s[j] - m);
          partial[j % 16] += s[j];
        }
        float sum = 0f;
        for (int l = 0; l < 16; l++) {
          sum += partial[l];
        }
        for (int d = 0; d < hd; d++) {
          float acc = 0f;
          for (int j = lo; j <= p; j++) {
            acc = Math.fma(s[j], v[j * kvWidth + kvOff + d], acc);
          }
          out[qOff + d] = acc / sum;
        }
      }
    }
    return out;
  }

  /** One layer's geometry and the attention options. */
  record Shape(
      int headDim,
      int numHeads,
      int numKvHeads,
      int blockTokens,
      int window,
      float softcap,
      float scale,
      int maxContext) {

    static Shape random(SplittableRandom rnd) {
      int hd = HEAD_DIMS[rnd.nextInt(HEAD_DIMS.length)];
      int ratio = RATIOS[rnd.nextInt(RATIOS.length)];
      int kvHeads = 1 + rnd.nextInt(ratio == 7 ? 2 : 3);
      int bg = BLOCK_TOKENS[rnd.nextInt(BLOCK_TOKENS.length)];
      int window =
          switch (rnd.nextInt(4)) {
            case 0 -> 1 + rnd.nextInt(Math.max(1, bg - 1));
            case 1 -> 1 + rnd.nextInt(100);
            default -> 0;
          };
      float softcap = rnd.nextBoolean() ? 50f : 0f;
      // Keep the scalar reference quick: fewer positions for wide heads and many heads.
      int maxContext = Math.max(48, (int) Math.sqrt(1e8 / (hd * kvHeads * ratio)));
      return new Shape(
          hd,
          kvHeads * ratio,
          kvHeads,
          bg,
          window,
          softcap,
          (float) (1 / Math.sqrt(hd)),
          Math.min(300, maxContext));
    }
  }

  /** Tokens of one call: {@code q}, positions and owners. */
  record Batch(float[] q, int tokens, int[] positions, int[] tokenRequest) {

    /**
     * Parts {@code {request, first position, tokens}} in this order; with {@code shuffle}, the
     * batch's tokens in random order. Queries are seeded by (request, position) so that a token's
     * query is the same in every batch it appears in.
     */
    static Batch of(Shape shape, List<int[]> parts, Random shuffle) {
      List<int[]> tokens = new ArrayList<>();
      for (int[] part : parts) {
        for (int i = 0; i < part[2]; i++) {
          tokens.add(new int[] {part[0], part[1] + i});
        }
      }
      if (shuffle != null) {
        Collections.shuffle(tokens, shuffle);
      }
      int width = shape.numHeads() * shape.headDim();
      float[] q = new float[tokens.size() * width];
      int[] positions = new int[tokens.size()];
      int[] owners = new int[tokens.size()];
      for (int t = 0; t < tokens.size(); t++) {
        owners[t] = tokens.get(t)[0];
        positions[t] = tokens.get(t)[1];
        SplittableRandom rnd = new SplittableRandom(owners[t] * 1_000_003L + positions[t]);
        for (int i = 0; i < width; i++) {
          q[t * width + i] = value(rnd) * 3f;
        }
      }
      return new Batch(q, tokens.size(), positions, owners);
    }
  }

  /**
   * A paged pool for a few requests: logical K/V per request and position, block tables over
   * shuffled physical blocks, a foreign field in front of K and V, NaN everywhere not written.
   */
  static final class Cache {
    final Shape shape;
    final PagedAttention.LayerKv kv;
    final float[][] k;
    final float[][] v;
    final int[][] tables;
    private final int[] done;

    /** Requests already holding {@code done[r]} positions, with room for {@code fresh[r]} more. */
    Cache(Shape shape, Arena arena, int requests, int[] done, int[] fresh, SplittableRandom rnd) {
      this(shape, arena, requests, done, fresh, rnd, rnd);
    }

    Cache(
        Shape shape,
        Arena arena,
        int requests,
        int[] done,
        int[] fresh,
        SplittableRandom placement,
        SplittableRandom values) {
      this.shape = shape;
      this.done = done.clone();
      int bg = shape.blockTokens();
      int kvWidth = shape.numKvHeads() * shape.headDim();
      long field = (long) shape.numKvHeads() * bg * shape.headDim() * Float.BYTES;
      long foreign = 4L * (1 + placement.nextInt(8));
      int blocks = 1;
      int[] rows = new int[requests];
      for (int r = 0; r < requests; r++) {
        rows[r] = Math.ceilDiv(done[r] + fresh[r], bg);
        blocks += rows[r];
      }
      blocks += placement.nextInt(4);
      MemorySegment memory = arena.allocate((foreign + 2 * field) * blocks, 64);
      for (long i = 0; i < memory.byteSize(); i += 4) {
        memory.set(Tensor.F32_LE, i, Float.NaN);
      }
      kv =
          new PagedAttention.LayerKv(
              memory, foreign + 2 * field, foreign, foreign + field, bg, shape.numKvHeads(), hd());
      List<Integer> ids = new ArrayList<>();
      for (int b = 1; b < blocks; b++) {
        ids.add(b);
      }
      Collections.shuffle(ids, new Random(placement.nextLong()));
      tables = new int[requests][];
      k = new float[requests][];
      v = new float[requests][];
      int next = 0;
      for (int r = 0; r < requests; r++) {
        tables[r] = new int[rows[r]];
        for (int i = 0; i < rows[r]; i++) {
          tables[r][i] = ids.get(next++);
        }
        int positions = done[r] + fresh[r];
        k[r] = new float[positions * kvWidth];
        v[r] = new float[positions * kvWidth];
        for (int i = 0; i < k[r].length; i++) {
          k[r][i] = value(values);
          v[r][i] = value(values);
        }
        store(r, 0, done[r]);
      }
      holes();
    }

    private int hd() {
      return shape.headDim();
    }

    /** Rows that every later token's window has left become the null block, as the cache does. */
    private void holes() {
      if (shape.window() == 0) {
        return;
      }
      for (int r = 0; r < tables.length; r++) {
        int lo = Math.max(0, done[r] - shape.window() + 1);
        for (int row = 0; (row + 1) * shape.blockTokens() <= lo; row++) {
          tables[r][row] = 0;
        }
      }
    }

    /** Writes positions {@code from..to-1} of request {@code r} through {@link PagedAttention}. */
    private void store(int r, int from, int to) {
      if (to <= from) {
        return;
      }
      int n = to - from;
      int kvWidth = shape.numKvHeads() * hd();
      int[] positions = new int[n];
      int[] owners = new int[n];
      for (int i = 0; i < n; i++) {
        positions[i] = from + i;
        owners[i] = r;
      }
      PagedAttention.write(
          POOLS[1],
          kv,
          Arrays.copyOfRange(k[r], from * kvWidth, to * kvWidth),
          Arrays.copyOfRange(v[r], from * kvWidth, to * kvWidth),
          n,
          positions,
          owners,
          tables);
    }

    /** Writes the batch's K/V, attends, and returns the output. */
    float[] attend(Batch batch, ComputePool pool) {
      int kvWidth = shape.numKvHeads() * hd();
      float[] kb = new float[batch.tokens() * kvWidth];
      float[] vb = new float[batch.tokens() * kvWidth];
      for (int t = 0; t < batch.tokens(); t++) {
        int r = batch.tokenRequest()[t];
        int p = batch.positions()[t];
        System.arraycopy(k[r], p * kvWidth, kb, t * kvWidth, kvWidth);
        System.arraycopy(v[r], p * kvWidth, vb, t * kvWidth, kvWidth);
      }
      PagedAttention.write(
          pool, kv, kb, vb, batch.tokens(), batch.positions(), batch.tokenRequest(), tables);
      float[] out = new float[batch.tokens() * shape.numHeads() * hd()];
      Arrays.fill(out, Float.NaN);
      PagedAttention.attend(
          pool,
          kv,
          batch.q(),
          batch.tokens(),
          shape.numHeads(),
          shape.scale(),
          shape.softcap(),
          shape.window(),
          batch.positions(),
          batch.tokenRequest(),
          tables,
          out);
      for (int t = 0; t < batch.tokens(); t++) {
        int r = batch.tokenRequest()[t];
        done[r] = Math.max(done[r], batch.positions()[t] + 1);
      }
      holes();
      return out;
    }
  }

  /** Mostly in [-1, 1), with exact zeros, negative zeros and a few large and tiny values. */
  static float value(SplittableRandom rnd) {
    return switch (rnd.nextInt(24)) {
      case 0 -> 0f;
      case 1 -> -0f;
      case 2 -> (float) rnd.nextDouble(-4, 4);
      case 3 -> (float) (rnd.nextDouble(-1, 1) * 1e-3);
      default -> (float) rnd.nextDouble(-1, 1);
    };
  }

  private static void assertBitIdentical(
      float[] expected, float[] actual, Shape shape, Batch batch, String what) {
    int hd = shape.headDim();
    for (int i = 0; i < expected.length; i++) {
      int t = i / (shape.numHeads() * hd);
      assertEquals(
          Float.floatToRawIntBits(expected[i]),
          Float.floatToRawIntBits(actual[i]),
          what
              + " "
              + shape
              + " token="
              + t
              + " request="
              + batch.tokenRequest()[t]
              + " position="
              + batch.positions()[t]
              + " head="
              + i / hd % shape.numHeads()
              + " d="
              + i % hd
              + " expected="
              + expected[i]
              + " actual="
              + actual[i]);
    }
  }

  private static void assertBitIdentical(float[] expected, float[] actual, String what) {
    for (int i = 0; i < expected.length; i++) {
      assertEquals(
          Float.floatToRawIntBits(expected[i]),
          Float.floatToRawIntBits(actual[i]),
          what + " element " + i + " expected=" + expected[i] + " actual=" + actual[i]);
    }
  }
}
