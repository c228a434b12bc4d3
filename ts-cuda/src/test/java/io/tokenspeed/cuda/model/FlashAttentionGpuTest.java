package io.tokenspeed.cuda.model;

import static io.tokenspeed.cuda.Bf16Bits.uniform;
import static io.tokenspeed.cuda.Bf16Bits.value;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.CallTimes;
import io.tokenspeed.cuda.DeviceBuffer;
import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.SplittableRandom;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The flash attention of the tensor cores ({@code flash_attention_d64/d128}), the attention of bf16
 * models in prefill and decode.
 *
 * <p>On the kernels themselves, called directly over a paged pool this test fills: every output
 * within a bf16 bound of a float64 reference, and a request's rows bit-identical alone, inside a
 * batch of others and under any cut of its tokens into tiles. Then on a synthetic bf16 model in
 * deterministic mode: prefills of 1 to 5,000 tokens give the same logits, bit for bit, whole and in
 * chunks (the later chunks attending to the earlier ones' KV in the cache), and the requests of a
 * mixed batch (prefills, a chunk, a decode) the same logits in the batch as alone. Last, the
 * kernel's time on the attention of Llama 3 8B and Llama 3.2 1B at 8k and 32k tokens (printed),
 * every output written and finite. The tensor-core attention against the float32 one on a model is
 * {@link CudaCausalLmGpuTest}'s, and decode tokens with keys planted at split boundaries against
 * float64 are {@link SplitKvGpuTest}'s.
 */
class FlashAttentionGpuTest extends OnTheGpu {

  /** Bf16 quiet NaN: the pool's unwritten slots and the output's guard. */
  static final short NAN_BF16 = (short) 0x7fc0;

  // ------------------------------------------------------------------------------ kernel level

  /** The bf16 bits of {@code v}, rounded to nearest even (finite values), as cvt.rn does. */
  static short bf16(float v) {
    int u = Float.floatToRawIntBits(v);
    u += 0x7fff + ((u >>> 16) & 1);
    return (short) (u >>> 16);
  }

  /** One request of a kernel-level problem: positions start .. start + n - 1 attend. */
  record Request(int start, int n, int[] table, float[] q) {
    int keys() {
      return start + n;
    }
  }

  /**
   * A paged pool of bf16 K and V (layer {@code layer} of {@code layers} in each block, the other
   * layer's fields and every unwritten slot NaN, so a read past the positions shows), on the host
   * and on the device, and the requests whose keys it holds.
   */
  static final class Problem implements AutoCloseable {
    final int heads;
    final int kvHeads;
    final int headDim;
    final int blockTokens;
    final long bytesPerBlock;
    final long kOffset;
    final long vOffset;
    final short[] pool;
    final List<Request> requests = new ArrayList<>();
    final DeviceBuffer devicePool;
    private final int numBlocks;

    Problem(int heads, int kvHeads, int headDim, int blockTokens, int[][] startAndN, long seed) {
      this.heads = heads;
      this.kvHeads = kvHeads;
      this.headDim = headDim;
      this.blockTokens = blockTokens;
      int layers = 2;
      int layer = 1;
      long field = (long) kvHeads * blockTokens * headDim * 2;
      this.bytesPerBlock = layers * 2 * field;
      this.kOffset = layer * 2 * field;
      this.vOffset = kOffset + field;
      int blocks = 1;
      for (int[] r : startAndN) {
        blocks += Math.ceilDiv(r[0] + r[1], blockTokens);
      }
      this.numBlocks = blocks;
      this.pool = new short[Math.toIntExact(numBlocks * bytesPerBlock / 2)];
      Arrays.fill(pool, NAN_BF16);
      List<Integer> free = new ArrayList<>();
      for (int b = 1; b < numBlocks; b++) {
        free.add(b);
      }
      SplittableRandom rnd = new SplittableRandom(seed);
      Collections.shuffle(free, new Random(seed));
      for (int[] r : startAndN) {
        int start = r[0];
        int n = r[1];
        int[] table = new int[Math.ceilDiv(start + n, blockTokens)];
        for (int i = 0; i < table.length; i++) {
          table[i] = free.removeFirst();
        }
        for (int p = 0; p < start + n; p++) {
          for (int h = 0; h < kvHeads; h++) {
            for (int e = 0; e < headDim; e++) {
              pool[keyIndex(table, p, h, e, kOffset)] = bf16(uniform(rnd, 1f));
              pool[keyIndex(table, p, h, e, vOffset)] = bf16(uniform(rnd, 1f));
            }
          }
        }
        // queries of several sizes, so that some rows' softmax is flat and some peaked
        float[] q = new float[n * heads * headDim];
        for (int t = 0; t < n; t++) {
          for (int h = 0; h < heads; h++) {
            float size = 0.5f + 3.5f * (float) ((t * 7 + h * 3) % 5) / 4f;
            for (int e = 0; e < headDim; e++) {
              q[(t * heads + h) * headDim + e] = uniform(rnd, size);
            }
          }
        }
        requests.add(new Request(start, n, table, q));
      }
      this.devicePool = device.allocate((long) pool.length * 2);
      try (Arena a = Arena.ofConfined()) {
        devicePool.copyFrom(a.allocateFrom(ValueLayout.JAVA_SHORT, pool), 0);
      }
    }

    /** The index in {@link #pool} of element e of head h at position p, in field {@code off}. */
    int keyIndex(int[] table, int p, int h, int e, long off) {
      long at =
          table[p / blockTokens] * bytesPerBlock
              + off
              + (((long) h * blockTokens + p % blockTokens) * headDim + e) * 2;
      return Math.toIntExact(at / 2);
    }

    int group() {
      return heads / kvHeads;
    }

    @Override
    public void close() {
      devicePool.close();
    }
  }

  /**
   * Tiles of the requests {@code which}: cut every {@code FA_ROWS / group} tokens, or at random.
   */
  static int[] tiles(Problem p, int[] which, SplittableRandom cutAtRandom) {
    int tileTokens = 128 / p.group();
    List<Integer> t = new ArrayList<>();
    int row = 0;
    for (int r : which) {
      int n = p.requests.get(r).n();
      for (int i = 0; i < n; ) {
        int size = cutAtRandom == null ? tileTokens : 1 + cutAtRandom.nextInt(tileTokens);
        size = Math.min(size, n - i);
        t.add(row + i);
        t.add(size);
        i += size;
      }
      row += n;
    }
    return t.stream().mapToInt(Integer::intValue).toArray();
  }

  /**
   * Runs the flash kernel ({@code mma.sync}) on the requests {@code which} of {@code p} (in that
   * order, one batch, cut into {@code tiles}); returns the bf16 output, one row per token past the
   * last checked to be left untouched.
   */
  static short[] attend(Problem p, int[] which, int[] tiles) {
    return attend(CudaCausalLm.FlashKernel.MMA, p, which, tiles);
  }

  /** {@link #attend(Problem, int[], int[])} on {@code kernel}. */
  static short[] attend(CudaCausalLm.FlashKernel kernel, Problem p, int[] which, int[] tiles) {
    return attend(kernel, null, p, which, tiles);
  }

  /**
   * {@link #attend(Problem, int[], int[])} on {@code kernel}, split over the keys by {@code split}
   * ({@link CudaCausalLm#launchFlashSplit}) unless it is null.
   */
  static short[] attend(
      CudaCausalLm.FlashKernel kernel,
      CudaCausalLm.SplitPlan split,
      Problem p,
      int[] which,
      int[] tiles) {
    int tokens = 0;
    int stride = 1;
    for (int r : which) {
      tokens += p.requests.get(r).n();
      stride = Math.max(stride, p.requests.get(r).table().length);
    }
    int width = p.heads * p.headDim;
    float[] q = new float[tokens * width];
    int[] positions = new int[tokens];
    int[] tokenRequest = new int[tokens];
    int[] tables = new int[which.length * stride];
    int row = 0;
    for (int i = 0; i < which.length; i++) {
      Request r = p.requests.get(which[i]);
      System.arraycopy(r.q(), 0, q, row * width, r.n() * width);
      System.arraycopy(r.table(), 0, tables, i * stride, r.table().length);
      for (int t = 0; t < r.n(); t++) {
        positions[row + t] = r.start() + t;
        tokenRequest[row + t] = i;
      }
      row += r.n();
    }
    short[] guarded = new short[(tokens + 1) * width];
    Arrays.fill(guarded, NAN_BF16);
    try (Arena a = Arena.ofConfined();
        DeviceBuffer dq = device.allocate((long) q.length * 4);
        DeviceBuffer dPositions = device.allocate(tokens * 4L);
        DeviceBuffer dTokenRequest = device.allocate(tokens * 4L);
        DeviceBuffer dTables = device.allocate(tables.length * 4L);
        DeviceBuffer dTiles = device.allocate(tiles.length * 4L);
        DeviceBuffer out = device.allocate(guarded.length * 2L);
        DeviceBuffer partials =
            device.allocate(
                split == null
                    ? 16
                    : CudaCausalLm.splitPartialBytes(split, tokens, p.heads, p.headDim))) {
      dq.write(0, q);
      dPositions.write(0, positions);
      dTokenRequest.write(0, tokenRequest);
      dTables.write(0, tables);
      dTiles.write(0, tiles);
      MemorySegment host = a.allocateFrom(ValueLayout.JAVA_SHORT, guarded);
      out.copyFrom(host, 0);
      var in =
          new CudaCausalLm.AttentionInputs(
              dq.pointer(),
              p.devicePool.pointer(),
              p.bytesPerBlock,
              p.kOffset,
              p.vOffset,
              p.blockTokens,
              dPositions.pointer(),
              dTokenRequest.pointer(),
              dTables.pointer(),
              stride);
      float scale = (float) (1.0 / Math.sqrt(p.headDim));
      if (split == null) {
        CudaCausalLm.launchFlash(
            device,
            kernel,
            p.headDim,
            tiles.length / 2,
            p.heads,
            p.kvHeads,
            in,
            dTiles.pointer(),
            scale,
            out.pointer(),
            p.numBlocks);
      } else {
        CudaCausalLm.launchFlashSplit(
            device,
            kernel,
            split,
            p.headDim,
            tiles.length / 2,
            tokens,
            p.heads,
            p.kvHeads,
            in,
            dTiles.pointer(),
            scale,
            partials.pointer(),
            out.pointer(),
            p.numBlocks);
      }
      device.synchronize();
      out.copyTo(0, host);
      short[] got = host.toArray(ValueLayout.JAVA_SHORT);
      int written = tokens * width;
      for (int i = written; i < got.length; i++) {
        int at = i - written;
        assertEquals(
            NAN_BF16,
            got[i],
            () -> kernel.function(p.headDim) + " wrote past the last token, at " + at);
      }
      return Arrays.copyOf(got, tokens * width);
    }
  }

  /**
   * Float64 attention of request {@code r} over its bf16-rounded queries: out[t][h][e], and the
   * mean of |v| under the same probabilities (the scale of the kernel's rounding), in {@code
   * scaleOut}.
   */
  static double[] reference(Problem p, Request r, double[] scaleOut) {
    int d = p.headDim;
    int width = p.heads * d;
    int keys = r.keys();
    double[][] k = new double[p.kvHeads][keys * d];
    double[][] v = new double[p.kvHeads][keys * d];
    for (int h = 0; h < p.kvHeads; h++) {
      for (int j = 0; j < keys; j++) {
        for (int e = 0; e < d; e++) {
          k[h][j * d + e] = value(p.pool[p.keyIndex(r.table(), j, h, e, p.kOffset)]);
          v[h][j * d + e] = value(p.pool[p.keyIndex(r.table(), j, h, e, p.vOffset)]);
        }
      }
    }
    double scale = 1.0 / Math.sqrt(d);
    double[] out = new double[r.n() * width];
    IntStream.range(0, r.n() * p.heads)
        .parallel()
        .forEach(
            item -> {
              int t = item / p.heads;
              int h = item % p.heads;
              int kv = h / p.group();
              int pos = r.start() + t;
              double[] qb = new double[d];
              for (int e = 0; e < d; e++) {
                qb[e] = value(bf16(r.q()[t * width + h * d + e]));
              }
              double[] s = new double[pos + 1];
              double max = Double.NEGATIVE_INFINITY;
              for (int j = 0; j <= pos; j++) {
                double dot = 0;
                for (int e = 0; e < d; e++) {
                  dot += qb[e] * k[kv][j * d + e];
                }
                s[j] = dot * scale;
                max = Math.max(max, s[j]);
              }
              double l = 0;
              double[] o = new double[d];
              double[] mag = new double[d];
              for (int j = 0; j <= pos; j++) {
                double w = Math.exp(s[j] - max);
                l += w;
                for (int e = 0; e < d; e++) {
                  double x = v[kv][j * d + e];
                  o[e] += w * x;
                  mag[e] += w * Math.abs(x);
                }
              }
              for (int e = 0; e < d; e++) {
                out[t * width + h * d + e] = o[e] / l;
                scaleOut[t * width + h * d + e] = mag[e] / l;
              }
            });
    return out;
  }

  /**
   * The bound of one output against float64: the probabilities multiply v as bf16 (relative error
   * at most 2^-8 each, so at most 2^-8 · Σ p|v| / Σ p over the row) and the output is rounded to
   * bf16 (2^-8 of |out| ≤ the same mean), 2^-7 together; float32 sums over {@code keys} keys add at
   * most keys · 2^-25 of it (the mma chains, the rescales and the sum of p).
   */
  static double bound(double meanAbsV, int keys) {
    return (0x1p-7 + keys * 0x1p-25) * meanAbsV + 1e-6;
  }

  /**
   * Per head size, query and KV heads and block size: prefills of 1, 17, 200, 1,000 and 5,000
   * tokens, chunks that start past earlier keys (77 tokens at 300, 250 at 129) and a decode (one
   * token at 1,000), each alone, then all in one batch, then cut into tiles at random. Every output
   * lies within {@link #bound} of float64, and a request's rows are the same bits alone, in the
   * batch and in any tiles.
   */
  @ParameterizedTest
  @CsvSource({
    "128, 32, 8, 16", // Llama 3 8B: 4 query heads per KV head
    "128, 6, 2, 12", // 3 per KV head (126 of a block's 128 rows), blocks of 12 positions
    "128, 16, 2, 64", // 8 per KV head: tiles of 16 tokens
    "64, 12, 4, 16", // llama-100m
    "64, 8, 8, 16" // one per KV head: tiles of 128 tokens
  })
  void shouldMatchFloat64AndStayBatchInvariant(
      int headDim, int heads, int kvHeads, int blockTokens) {
    matchFloat64AndStayBatchInvariant(
        CudaCausalLm.FlashKernel.MMA, headDim, heads, kvHeads, blockTokens);
  }

  /**
   * {@link #shouldMatchFloat64AndStayBatchInvariant}'s check on {@code kernel}: prints the worst
   * error over its bound (and where), the outputs that differ in bits batched and retiled; on a
   * failure, the first output past the bound and the first that differs.
   */
  static void matchFloat64AndStayBatchInvariant(
      CudaCausalLm.FlashKernel flash, int headDim, int heads, int kvHeads, int blockTokens) {
    boolean large = heads >= 16; // the float64 reference of 5,000 tokens of 16+ heads is long
    int[][] startAndN = {
      {0, 1},
      {0, 17},
      {0, 200},
      {0, 1000},
      {0, large ? 1500 : 5000},
      {300, 77},
      {129, 250},
      {1000, 1}
    };
    try (Problem p =
        new Problem(heads, kvHeads, headDim, blockTokens, startAndN, headDim * 31L + heads)) {
      int width = heads * headDim;
      int all = p.requests.size();
      int[] batch = IntStream.range(0, all).toArray();
      int[] offsets = new int[all + 1];
      for (int r = 0; r < all; r++) {
        offsets[r + 1] = offsets[r] + p.requests.get(r).n() * width;
      }
      String kernel = flash.function(headDim);
      short[] alone = new short[offsets[all]];
      Float64Check check = new Float64Check(kernel);
      for (int r = 0; r < all; r++) {
        int[] one = {r};
        short[] got = attend(flash, p, one, tiles(p, one, null));
        System.arraycopy(got, 0, alone, offsets[r], got.length);
        check.add(p, r, got);
      }
      // the same requests in one batch, then in tiles cut at random
      short[] batched = attend(flash, p, batch, tiles(p, batch, null));
      short[] retiled =
          attend(flash, p, batch, tiles(p, batch, new SplittableRandom(headDim + heads)));
      int batchDiffer = differ(batched, alone);
      int tileDiffer = differ(retiled, alone);
      System.out.printf(
          Locale.ROOT,
          "%s, %d heads on %d KV heads, blocks of %d: worst error / bound %.3f over %d outputs"
              + " (%s); %d outputs differ in bits in the batch, %d in random tiles%n",
          kernel,
          heads,
          kvHeads,
          blockTokens,
          check.worst,
          offsets[all],
          check.worstAt,
          batchDiffer,
          tileDiffer);
      if (batchDiffer > 0) {
        System.out.println(
            kernel + " batched vs alone: " + firstDifference(batched, alone, p, width));
      }
      if (tileDiffer > 0) {
        System.out.println(
            kernel + " retiled vs alone: " + firstDifference(retiled, alone, p, width));
      }
      check.assertNone();
      assertEquals(0, batchDiffer, kernel + ": outputs that change in a batch");
      assertEquals(0, tileDiffer, kernel + ": outputs that change with the tiles");
    }
  }

  /**
   * Outputs of one kernel against the float64 {@link #reference} within {@link #bound}: the worst
   * error over its bound and where, the failures and the first one described.
   */
  static final class Float64Check {
    final String kernel;
    double worst;
    String worstAt = "none";
    int failures;
    String first;

    Float64Check(String kernel) {
      this.kernel = kernel;
    }

    /** Adds request {@code r}'s output {@code got} (alone, rows [t][h·d]); returns float64's. */
    double[] add(Problem p, int r, short[] got) {
      Request req = p.requests.get(r);
      int headDim = p.headDim;
      int width = p.heads * headDim;
      double[] mag = new double[req.n() * width];
      double[] want = reference(p, req, mag);
      for (int i = 0; i < got.length; i++) {
        int keys = req.start() + i / width + 1;
        double err = Math.abs(value(got[i]) - want[i]);
        double b = bound(mag[i], keys);
        // a NaN output counts as an infinite error, once
        boolean worse = err / b > worst || (Double.isNaN(err) && worst != Double.POSITIVE_INFINITY);
        boolean fails = !(err <= b);
        if (worse || (fails && first == null)) {
          String at =
              String.format(
                  Locale.ROOT,
                  "request %d (start %d, %d tokens), token %d, head %d, dim %d: %s %.6g,"
                      + " float64 %.6g, bound %.3g",
                  r,
                  req.start(),
                  req.n(),
                  i / width,
                  i % width / headDim,
                  i % headDim,
                  kernel,
                  value(got[i]),
                  want[i],
                  b);
          if (worse) {
            worst = Double.isNaN(err) ? Double.POSITIVE_INFINITY : err / b;
            worstAt = at;
          }
          if (fails && first == null) {
            first = at;
          }
        }
        failures += fails ? 1 : 0;
      }
      return want;
    }

    void assertNone() {
      assertEquals(0, failures, () -> failures + " outputs past the bound; the first: " + first);
    }
  }

  /** Where {@code got} first differs from {@code want} (outputs [t][h·d] of {@code p}'s heads). */
  static String firstDifference(short[] got, short[] want, Problem p, int width) {
    for (int i = 0; i < want.length; i++) {
      if (got[i] != want[i]) {
        return String.format(
            Locale.ROOT,
            "first at output %d (row %d of the batch, head %d, dim %d): %.6g (0x%04x) vs %.6g"
                + " (0x%04x)",
            i,
            i / width,
            i % width / p.headDim,
            i % p.headDim,
            value(got[i]),
            got[i] & 0xffff,
            value(want[i]),
            want[i] & 0xffff);
      }
    }
    return "none";
  }

  static int differ(short[] a, short[] b) {
    assertEquals(b.length, a.length, "lengths");
    int n = 0;
    for (int i = 0; i < a.length; i++) {
      n += a[i] != b[i] ? 1 : 0;
    }
    return n;
  }

  // ------------------------------------------------------------------------------- model level

  /**
   * A 4-layer synthetic bf16 Llama of head size {@code headDim}: llama-100m's shape at 64 (12 query
   * heads on 4 KV heads), 8 query heads of 128 on 2 KV heads at 128; a vocabulary of 8,192 so that
   * 5,000 rows of logits stay small.
   */
  static Path model(int headDim, Path dir) {
    String config =
        SyntheticCheckpoints.presetConfig("llama-100m")
            .replaceFirst("\"num_hidden_layers\": 12", "\"num_hidden_layers\": 4")
            .replaceFirst("\"vocab_size\": 32000", "\"vocab_size\": 8192");
    if (headDim == 128) {
      config =
          config
              .replaceFirst("\"head_dim\": 64", "\"head_dim\": 128")
              .replaceFirst("\"hidden_size\": 768", "\"hidden_size\": 1024")
              .replaceFirst("\"num_attention_heads\": 12", "\"num_attention_heads\": 8")
              .replaceFirst("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 2");
      assertTrue(config.contains("\"head_dim\": 128") && config.contains("\"hidden_size\": 1024"));
    }
    assertTrue(config.contains("\"num_hidden_layers\": 4") && config.contains("8192"));
    return SyntheticCheckpoints.materialize(
        "flash-attention-" + headDim, config, 8, DType.BF16, dir);
  }

  static void assertSameBits(String what, float[] got, float[] want) {
    assertEquals(want.length, got.length, what + ": lengths");
    int differ = 0;
    int first = -1;
    for (int i = 0; i < want.length; i++) {
      if (Float.floatToRawIntBits(got[i]) != Float.floatToRawIntBits(want[i])) {
        differ++;
        first = first < 0 ? i : first;
      }
    }
    int at = first;
    assertEquals(
        0,
        differ,
        () ->
            what
                + ": logits that differ in any bit; the first at "
                + at
                + ": "
                + got[at]
                + " vs "
                + want[at]);
  }

  /** Every logit finite: two runs that both give NaN would otherwise have the same bits. */
  static void assertFinite(String what, float[] logits) {
    int bad = 0;
    for (float v : logits) {
      bad += Float.isFinite(v) ? 0 : 1;
    }
    assertEquals(0, bad, what + ": logits that are not finite");
  }

  /**
   * In deterministic mode (fixed-order GEMMs, so that only the attention could tell chunks and
   * batches apart): prefills of 1, 17, 200, 1,000 and 5,000 tokens give the same logits, bit for
   * bit, whole and in chunks of n / 3 + 7 tokens (cuts that fall inside a block, a tile and a key
   * tile; the later chunks attend to the earlier ones' KV in the cache); and a batch of a prefill,
   * a chunk, a decode and a short prefill gives each request its logits alone.
   */
  @ParameterizedTest
  @ValueSource(ints = {64, 128})
  void shouldGiveTheSameLogitsChunkedAsWholeAndBatchedAsAlone(int headDim, @TempDir Path dir) {
    sameLogitsChunkedAsWholeAndBatchedAsAlone(CudaCausalLm.FlashKernel.MMA, headDim, dir);
  }

  /**
   * {@link #shouldGiveTheSameLogitsChunkedAsWholeAndBatchedAsAlone} with the kernel {@code flash}.
   */
  static void sameLogitsChunkedAsWholeAndBatchedAsAlone(
      CudaCausalLm.FlashKernel flash, int headDim, Path dir) {
    Path folder = model(headDim, dir);
    SplittableRandom rnd = new SplittableRandom(41 + headDim);
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, "flash", "test", true);
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(16, 16), 1200)) {
      m.useFlash(flash);
      assertEquals(
          flash == CudaCausalLm.FlashKernel.MMA ? "cuda-flash-bf16" : "cuda-flash-wgmma-bf16",
          m.attentionName());
      int vocab = m.vocabSize();
      CudaCausalLmGpuTest.Blocks blocks = new CudaCausalLmGpuTest.Blocks(kv.numBlocks(0), 9);
      for (int n : new int[] {1, 17, 200, 1000, 5000}) {
        int[] ids = rnd.ints(n, 0, vocab).toArray();
        int[] table = blocks.table(Math.ceilDiv(n, 16));
        String what = "head size " + headDim + ", prefill " + n;
        float[] whole = CudaCausalLmGpuTest.prefill(m, kv, ids, table, n);
        assertFinite(what, whole);
        int chunk = n / 3 + 7;
        float[] chunked = CudaCausalLmGpuTest.prefill(m, kv, ids, table, chunk);
        assertSameBits(what + " in chunks of " + chunk + " vs whole", chunked, whole);
      }

      // a batch: a prefill of 250, a chunk of 272 at 128, a decode at 90, a prefill of 33
      int[] a = rnd.ints(250, 0, vocab).toArray();
      int[] b = rnd.ints(400, 0, vocab).toArray();
      int[] c = rnd.ints(91, 0, vocab).toArray();
      int[] d = rnd.ints(33, 0, vocab).toArray();
      int[] ta = blocks.table(16);
      int[] tb = blocks.table(25);
      int[] tc = blocks.table(6);
      int[] td = blocks.table(3);
      CudaCausalLmGpuTest.prefill(m, kv, Arrays.copyOf(b, 128), tb, 128);
      CudaCausalLmGpuTest.prefill(m, kv, Arrays.copyOf(c, 90), tc, 90);
      List<ForwardRequest> requests =
          List.of(
              new ForwardRequest(a, 0, new int[][] {ta}, true),
              new ForwardRequest(Arrays.copyOfRange(b, 128, 400), 128, new int[][] {tb}, true),
              new ForwardRequest(new int[] {c[90]}, 90, new int[][] {tc}, false),
              new ForwardRequest(d, 0, new int[][] {td}, true));
      ForwardResult batched = m.forward(new ForwardBatch(requests), kv);
      String[] names = {"prefill of 250", "chunk of 272 at 128", "decode at 90", "prefill of 33"};
      for (int r = 0; r < requests.size(); r++) {
        assertFinite(names[r] + " in the batch", batched.logits(r));
        ForwardResult alone = m.forward(ForwardBatch.of(requests.get(r)), kv);
        assertSameBits(names[r] + " alone vs in the batch", alone.logits(0), batched.logits(r));
      }
      System.out.printf(
          Locale.ROOT,
          "%s, head size %d: chunked = whole and alone = batched, bit for bit%n",
          flash.function(headDim),
          headDim);
    }
  }

  // ------------------------------------------------------------------------------------ timing

  /**
   * The attention of one layer of Llama 3 8B (32 query heads of 128 on 8 KV heads) and of Llama 3.2
   * 1B (32 of 64 on 8) over a causal prefill of 8,192 and 32,768 tokens from position 0, blocks of
   * 16 positions: the kernel's time (median of 5 launches after one, timed by events), its
   * arithmetic rate (4 · heads · d · Σ keys floating-point operations) and the 32 layers' total,
   * printed. Asserts that every output was written (the output starts as NaN) and is finite.
   */
  @Test
  void shouldReportAttentionTimesAt8kAnd32k() {
    try (CallTimes times = new CallTimes(device, 5)) {
      for (int headDim : new int[] {128, 64}) {
        for (int n : new int[] {8192, 32768}) {
          timeOneShape(
              new CudaCausalLm.FlashKernel[] {CudaCausalLm.FlashKernel.MMA}, headDim, n, times);
        }
      }
    }
  }

  /**
   * Times each of {@code kernels} on the same inputs (Llama 3 8B's heads at head size {@code
   * headDim}, a causal prefill of {@code n} tokens) and prints its time, rate and 32 layers' total;
   * asserts that each wrote every output, finite. With several kernels, each later one's outputs
   * are compared with the first's: their largest difference is printed, and none may exceed twice
   * {@link #bound} at |v| = 1 (each kernel lies within it of float64). Returns the times in ms.
   */
  static double[] timeOneShape(
      CudaCausalLm.FlashKernel[] kernels, int headDim, int n, CallTimes times) {
    int heads = 32;
    int kvHeads = 8;
    int blockTokens = 16;
    int width = heads * headDim;
    long field = (long) kvHeads * blockTokens * headDim * 2;
    long bytesPerBlock = 2 * field;
    int blocks = n / blockTokens;
    int tileTokens = 128 / (heads / kvHeads);
    int numTiles = Math.ceilDiv(n, tileTokens);
    int[] positions = IntStream.range(0, n).toArray();
    int[] table = IntStream.range(0, blocks).map(b -> blocks - 1 - b).toArray();
    int[] tiles = new int[2 * numTiles];
    for (int t = 0; t < numTiles; t++) {
      tiles[2 * t] = t * tileTokens;
      tiles[2 * t + 1] = Math.min(tileTokens, n - t * tileTokens);
    }
    long outputs = (long) n * width;
    DeviceBuffer[] outs = new DeviceBuffer[kernels.length];
    double[] ms = new double[kernels.length];
    try (Arena a = Arena.ofConfined();
        DeviceBuffer q = device.allocate(outputs * 4);
        DeviceBuffer pool = device.allocate(blocks * bytesPerBlock);
        DeviceBuffer dPositions = device.allocate(n * 4L);
        DeviceBuffer dTokenRequest = device.allocate(n * 4L);
        DeviceBuffer dTable = device.allocate(blocks * 4L);
        DeviceBuffer dTiles = device.allocate(tiles.length * 4L)) {
      // random queries and keys, a slice at a time
      SplittableRandom rnd = new SplittableRandom(n + headDim);
      int slice = 1 << 22;
      MemorySegment floats = a.allocate(ValueLayout.JAVA_FLOAT, slice);
      for (long at = 0; at < outputs; at += slice) {
        int count = (int) Math.min(slice, outputs - at);
        for (int i = 0; i < count; i++) {
          floats.setAtIndex(ValueLayout.JAVA_FLOAT, i, uniform(rnd, 2f));
        }
        q.copyFrom(floats.asSlice(0, count * 4L), at * 4);
      }
      MemorySegment shorts = a.allocate(ValueLayout.JAVA_SHORT, slice);
      MemorySegment other = a.allocate(ValueLayout.JAVA_SHORT, slice);
      for (long at = 0; at < blocks * bytesPerBlock / 2; at += slice) {
        int count = (int) Math.min(slice, blocks * bytesPerBlock / 2 - at);
        for (int i = 0; i < count; i++) {
          shorts.setAtIndex(ValueLayout.JAVA_SHORT, i, bf16(uniform(rnd, 1f)));
        }
        pool.copyFrom(shorts.asSlice(0, count * 2L), at * 2);
      }
      dPositions.write(0, positions);
      dTokenRequest.write(0, new int[n]);
      dTable.write(0, table);
      dTiles.write(0, tiles);
      double flops = 4.0 * heads * headDim * ((double) n * (n + 1) / 2);
      var in =
          new CudaCausalLm.AttentionInputs(
              q.pointer(),
              pool.pointer(),
              bytesPerBlock,
              0L,
              field,
              blockTokens,
              dPositions.pointer(),
              dTokenRequest.pointer(),
              dTable.pointer(),
              blocks);
      float scale = (float) (1.0 / Math.sqrt(headDim));
      for (int k = 0; k < kernels.length; k++) {
        CudaCausalLm.FlashKernel kernel = kernels[k];
        DeviceBuffer out = device.allocate(outputs * 2);
        outs[k] = out;
        for (long at = 0; at < outputs; at += slice) {
          int count = (int) Math.min(slice, outputs - at);
          shorts.asSlice(0, count * 2L).fill((byte) 0xff); // 0xffff: a bf16 NaN
          out.copyFrom(shorts.asSlice(0, count * 2L), at * 2);
        }
        String name = kernel.function(headDim);
        Runnable run =
            () ->
                CudaCausalLm.launchFlash(
                    device,
                    kernel,
                    headDim,
                    numTiles,
                    heads,
                    kvHeads,
                    in,
                    dTiles.pointer(),
                    scale,
                    out.pointer(),
                    blocks);
        run.run(); // warm-up
        for (int i = 0; i < times.calls(); i++) {
          times.start(i);
          run.run();
          times.end(i);
        }
        ms[k] = times.medianMicros() / 1e3;
        System.out.printf(
            Locale.ROOT,
            "attention timing, head size %d, %d heads on %d KV heads, %d tokens: %s %.2f ms"
                + " (%.0f TFLOP/s; 32 layers %.0f ms)%n",
            headDim,
            heads,
            kvHeads,
            n,
            name,
            ms[k],
            flops / ms[k] / 1e9,
            32 * ms[k]);
        long notFinite = 0;
        for (long at = 0; at < outputs; at += slice) {
          int count = (int) Math.min(slice, outputs - at);
          out.copyTo(at * 2, shorts.asSlice(0, count * 2L));
          for (int i = 0; i < count; i++) {
            short bits = shorts.getAtIndex(ValueLayout.JAVA_SHORT, i);
            notFinite += (bits & 0x7f80) == 0x7f80 ? 1 : 0;
          }
        }
        assertEquals(0, notFinite, name + " at " + n + " tokens: outputs unwritten or not finite");
      }
      // each later kernel against the first, a slice at a time
      for (int k = 1; k < kernels.length; k++) {
        double limit = 2 * bound(1.0, n);
        double worst = 0;
        long worstAt = -1;
        long past = 0;
        for (long at = 0; at < outputs; at += slice) {
          int count = (int) Math.min(slice, outputs - at);
          outs[0].copyTo(at * 2, shorts.asSlice(0, count * 2L));
          outs[k].copyTo(at * 2, other.asSlice(0, count * 2L));
          for (int i = 0; i < count; i++) {
            double diff =
                Math.abs(
                    value(other.getAtIndex(ValueLayout.JAVA_SHORT, i))
                        - value(shorts.getAtIndex(ValueLayout.JAVA_SHORT, i)));
            if (diff > worst) {
              worst = diff;
              worstAt = at + i;
            }
            past += diff > limit ? 1 : 0;
          }
        }
        String what = kernels[k].function(headDim) + " vs " + kernels[0].function(headDim);
        System.out.printf(
            Locale.ROOT,
            "%s at %d tokens: largest difference %.3g at output %d (token %d, head %d, dim %d),"
                + " %d outputs past %.3g; %.2fx the speed%n",
            what,
            n,
            worst,
            worstAt,
            worstAt / width,
            worstAt % width / headDim,
            worstAt % headDim,
            past,
            limit,
            ms[0] / ms[k]);
        assertEquals(0, past, what + " at " + n + " tokens: outputs apart by more than " + limit);
      }
    } finally {
      for (DeviceBuffer out : outs) {
        if (out != null) {
          out.close();
        }
      }
    }
    return ms;
  }
}
