package io.tokenspeed.model.kernel;

import io.tokenspeed.model.checkpoint.Tensor;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;
import java.util.Arrays;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * One work item of {@link PagedAttention#attend}: the tokens of one run (consecutive positions of
 * one request) times the query heads of one KV head, and the scratch it reuses from item to item.
 * Each query follows the sequence stated in {@link PagedAttention}; what the queries of an item
 * share (transposed keys, value loads, loop bounds) only moves data.
 *
 * <pre>
 *   queries i = (token, head), token-major, in blocks of 4: the last block padded by repeating
 *     its last query, or a single query alone when one is left
 *   columns c = j − base, base = 16·⌊lo(first)/16⌋, through p(last); S[i][c], one row per query
 *
 *   1. per 2L columns:  Kt[d][lane] ← K   (16×16 blocks transposed in registers; 0 outside the run)
 *      per 4 queries:   4 × 2 vector chains over d = 0 .. hd−1;  S[i][c] ← scale · acc (→ softcap)
 *   2. per query:       S[i] ← −∞ outside lo..p within its groups of 16;  m = max;
 *                       S[i] ← exp(S[i] − m)  (−∞ gives +0);  part[c mod 16] += S[i][c], c ascending;
 *                       sum = part[0] + … + part[15]
 *   3. per 4 queries, per 4L dimensions:  acc[i][d] over j ascending — each query alone on the
 *                       positions only it reads, the four together on those all four read;
 *                       out = acc / sum
 * </pre>
 *
 * <p>A vector lane is one (query, position) pair when scoring and one (query, dimension) pair when
 * summing values, so the vector width, the item's shape and the padding never enter a result.
 */
final class AttentionTile {
  private static final VectorSpecies<Float> SPECIES =
      VectorMath.SPECIES.length() > PagedAttention.GROUP
          ? FloatVector.SPECIES_512
          : VectorMath.SPECIES;
  private static final int L = SPECIES.length();

  /** Positions per step of the score pass: two vectors. */
  private static final int CHUNK = 2 * L;

  /** Positions per span of the value pass: every query block takes a span before the next. */
  private static final int VALUE_SPAN = 256;

  /** Columns of a score row are a multiple of this. */
  private static final int COLUMN_ALIGN = Math.max(CHUNK, PagedAttention.GROUP);

  private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
  private static final VectorSpecies<Integer> INT_SPECIES = SPECIES.withLanes(int.class);
  private static final int[] SWAP = swapSelectors();

  private final PagedAttention.LayerKv kv;
  private final MemorySegment memory;
  private final int hd;

  private final float[] scores;
  private final float[] keys;
  private final float[] block = new float[L * L];
  private final long[] rowAt;
  private final float[] acc;
  private final float[] psum = new float[PagedAttention.GROUP];
  private final float[] lanes = new float[L];
  private final int[] qOff;
  private final int[] lo;
  private final int[] hi;
  private final float[] sums;

  private int queries;
  private int padded;
  private int base;
  private int rowLength;

  /**
   * Scratch for tiles of up to {@code maxQueries} queries over score rows of up to {@code
   * maxRowLength} columns.
   */
  AttentionTile(PagedAttention.LayerKv kv, int maxQueries, int maxRowLength) {
    this.kv = kv;
    this.memory = kv.memory();
    this.hd = kv.headDim();
    int maxPadded = roundUp(maxQueries, 4);
    this.scores = new float[maxPadded * maxRowLength];
    this.keys = new float[hd * CHUNK];
    this.rowAt = new long[maxRowLength];
    this.acc = new float[maxPadded * hd];
    this.qOff = new int[maxPadded];
    this.lo = new int[maxPadded];
    this.hi = new int[maxPadded];
    this.sums = new float[maxPadded];
  }

  /** Columns of the score rows of a tile reading positions {@code first..last}. */
  static int rowLength(int first, int last) {
    return roundUp(last + 1 - (first & -PagedAttention.GROUP), COLUMN_ALIGN);
  }

  /**
   * Attention of tokens {@code t0..t0+tokens-1} (one request, consecutive positions) for the query
   * heads of {@code kvHead}, into {@code out}.
   */
  void attend(
      float[] q,
      float[] out,
      int t0,
      int tokens,
      int kvHead,
      int group,
      int numHeads,
      float scale,
      float softcap,
      int windowTokens,
      int[] positions,
      int[] table) {
    queries = tokens * group;
    padded = queries % 4 == 1 ? queries : roundUp(queries, 4);
    for (int i = 0; i < padded; i++) {
      int qi = Math.min(i, queries - 1);
      int t = t0 + qi / group;
      int p = positions[t];
      qOff[i] = (t * numHeads + kvHead * group + qi % group) * hd;
      hi[i] = p;
      lo[i] = windowTokens > 0 ? Math.max(0, p - windowTokens + 1) : 0;
    }
    base = lo[0] & -PagedAttention.GROUP;
    rowLength = rowLength(lo[0], hi[queries - 1]);
    locateRows(table, kvHead);
    for (int c0 = 0; c0 < rowLength; c0 += CHUNK) {
      transposeKeys(c0);
      scoreChunk(q, c0, scale, softcap);
    }
    for (int i = 0; i < queries; i++) {
      softmaxRow(i);
    }
    Arrays.fill(acc, 0, padded * hd, 0f);
    for (int from = lo[0]; from <= hi[queries - 1]; from += VALUE_SPAN) {
      int to = Math.min(from + VALUE_SPAN - 1, hi[queries - 1]);
      for (int qb = 0; qb < queries; qb += 4) {
        weightedValues(qb, from, to);
      }
    }
    for (int i = 0; i < queries; i++) {
      divide(out, qOff[i], i, sums[i]);
    }
  }

  /** Byte offset of each read position's row, for this KV head, without the field offset. */
  private void locateRows(int[] table, int kvHead) {
    int bg = kv.blockTokens();
    int first = lo[0];
    int last = hi[queries - 1];
    int row = first / bg;
    int slot = first % bg;
    long head = (long) kvHead * bg;
    for (int j = first; j <= last; j++) {
      rowAt[j - base] = table[row] * kv.bytesPerBlock() + (head + slot) * hd * 4L;
      if (++slot == bg) {
        slot = 0;
        row++;
      }
    }
  }

  /**
   * {@code keys[d·CHUNK + i]} = K of column {@code c0 + i}, zero where no query of the tile reads:
   * blocks of L positions × L dimensions, transposed in registers when L is 16 ({@link
   * #transpose16}) and through {@link #block} otherwise; dimensions past the last whole vector one
   * by one.
   */
  private void transposeKeys(int c0) {
    int whole = hd - hd % L;
    int first = lo[0] - base;
    int last = hi[queries - 1] - base;
    for (int b = 0; b < CHUNK; b += L) {
      boolean inside = c0 + b >= first && c0 + b + L - 1 <= last;
      for (int d = 0; d < whole; d += L) {
        if (L == 16 && inside) {
          transpose16(c0 + b, d, b);
        } else {
          transposeBlock(c0 + b, d, b);
        }
      }
    }
    for (int d = whole; d < hd; d++) {
      for (int i = 0; i < CHUNK; i++) {
        keys[d * CHUNK + i] = keyAt(c0 + i, d);
      }
    }
  }

  /** Whether column {@code c} holds a position the tile reads. */
  private boolean inside(int c) {
    return c >= lo[0] - base && c <= hi[queries - 1] - base;
  }

  /** K of column {@code c}, dimension {@code d}; 0 outside the tile's positions. */
  private float keyAt(int c, int d) {
    return inside(c) ? memory.get(Tensor.F32_LE, keyAddress(c, d)) : 0f;
  }

  /** Byte address of dimension {@code d} of column {@code c}'s K row. */
  private long keyAddress(int c, int d) {
    return rowAt[c] + kv.kFieldOffset() + 4L * d;
  }

  /** Columns {@code c..c+L-1} × dimensions {@code d..d+L-1} into keys at lane {@code lane}. */
  private void transposeBlock(int c, int d, int lane) {
    for (int i = 0; i < L; i++) {
      if (inside(c + i)) {
        FloatVector.fromMemorySegment(SPECIES, memory, keyAddress(c + i, d), LE)
            .intoArray(block, i * L);
      } else {
        Arrays.fill(block, i * L, (i + 1) * L, 0f);
      }
    }
    for (int i = 0; i < L; i++) {
      for (int k = 0; k < L; k++) {
        keys[(d + k) * CHUNK + lane + i] = block[i * L + k];
      }
    }
  }

  /**
   * {@link #transposeBlock} for L = 16 in registers: four stages, h = 8, 4, 2, 1; each swaps bit h
   * between row and lane index, rows {@code i} and {@code i+h} through two two-vector selections
   * ({@link #SWAP}).
   */
  private void transpose16(int c, int d, int lane) {
    long k = kv.kFieldOffset() + 4L * d;
    IntVector r0 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c] + k, LE).reinterpretAsInts();
    IntVector r1 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 1] + k, LE).reinterpretAsInts();
    IntVector r2 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 2] + k, LE).reinterpretAsInts();
    IntVector r3 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 3] + k, LE).reinterpretAsInts();
    IntVector r4 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 4] + k, LE).reinterpretAsInts();
    IntVector r5 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 5] + k, LE).reinterpretAsInts();
    IntVector r6 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 6] + k, LE).reinterpretAsInts();
    IntVector r7 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 7] + k, LE).reinterpretAsInts();
    IntVector r8 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 8] + k, LE).reinterpretAsInts();
    IntVector r9 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 9] + k, LE).reinterpretAsInts();
    IntVector r10 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 10] + k, LE).reinterpretAsInts();
    IntVector r11 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 11] + k, LE).reinterpretAsInts();
    IntVector r12 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 12] + k, LE).reinterpretAsInts();
    IntVector r13 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 13] + k, LE).reinterpretAsInts();
    IntVector r14 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 14] + k, LE).reinterpretAsInts();
    IntVector r15 =
        FloatVector.fromMemorySegment(SPECIES, memory, rowAt[c + 15] + k, LE).reinterpretAsInts();
    IntVector t;
    // h = 8: rows i and i+8
    IntVector u = IntVector.fromArray(INT_SPECIES, SWAP, 0);
    IntVector w = IntVector.fromArray(INT_SPECIES, SWAP, 16);
    t = u.selectFrom(r0, r8);
    r8 = w.selectFrom(r0, r8);
    r0 = t;
    t = u.selectFrom(r1, r9);
    r9 = w.selectFrom(r1, r9);
    r1 = t;
    t = u.selectFrom(r2, r10);
    r10 = w.selectFrom(r2, r10);
    r2 = t;
    t = u.selectFrom(r3, r11);
    r11 = w.selectFrom(r3, r11);
    r3 = t;
    t = u.selectFrom(r4, r12);
    r12 = w.selectFrom(r4, r12);
    r4 = t;
    t = u.selectFrom(r5, r13);
    r13 = w.selectFrom(r5, r13);
    r5 = t;
    t = u.selectFrom(r6, r14);
    r14 = w.selectFrom(r6, r14);
    r6 = t;
    t = u.selectFrom(r7, r15);
    r15 = w.selectFrom(r7, r15);
    r7 = t;
    // h = 4: rows i and i+4
    u = IntVector.fromArray(INT_SPECIES, SWAP, 32);
    w = IntVector.fromArray(INT_SPECIES, SWAP, 48);
    t = u.selectFrom(r0, r4);
    r4 = w.selectFrom(r0, r4);
    r0 = t;
    t = u.selectFrom(r1, r5);
    r5 = w.selectFrom(r1, r5);
    r1 = t;
    t = u.selectFrom(r2, r6);
    r6 = w.selectFrom(r2, r6);
    r2 = t;
    t = u.selectFrom(r3, r7);
    r7 = w.selectFrom(r3, r7);
    r3 = t;
    t = u.selectFrom(r8, r12);
    r12 = w.selectFrom(r8, r12);
    r8 = t;
    t = u.selectFrom(r9, r13);
    r13 = w.selectFrom(r9, r13);
    r9 = t;
    t = u.selectFrom(r10, r14);
    r14 = w.selectFrom(r10, r14);
    r10 = t;
    t = u.selectFrom(r11, r15);
    r15 = w.selectFrom(r11, r15);
    r11 = t;
    // h = 2: rows i and i+2
    u = IntVector.fromArray(INT_SPECIES, SWAP, 64);
    w = IntVector.fromArray(INT_SPECIES, SWAP, 80);
    t = u.selectFrom(r0, r2);
    r2 = w.selectFrom(r0, r2);
    r0 = t;
    t = u.selectFrom(r1, r3);
    r3 = w.selectFrom(r1, r3);
    r1 = t;
    t = u.selectFrom(r4, r6);
    r6 = w.selectFrom(r4, r6);
    r4 = t;
    t = u.selectFrom(r5, r7);
    r7 = w.selectFrom(r5, r7);
    r5 = t;
    t = u.selectFrom(r8, r10);
    r10 = w.selectFrom(r8, r10);
    r8 = t;
    t = u.selectFrom(r9, r11);
    r11 = w.selectFrom(r9, r11);
    r9 = t;
    t = u.selectFrom(r12, r14);
    r14 = w.selectFrom(r12, r14);
    r12 = t;
    t = u.selectFrom(r13, r15);
    r15 = w.selectFrom(r13, r15);
    r13 = t;
    // h = 1: rows i and i+1
    u = IntVector.fromArray(INT_SPECIES, SWAP, 96);
    w = IntVector.fromArray(INT_SPECIES, SWAP, 112);
    t = u.selectFrom(r0, r1);
    r1 = w.selectFrom(r0, r1);
    r0 = t;
    t = u.selectFrom(r2, r3);
    r3 = w.selectFrom(r2, r3);
    r2 = t;
    t = u.selectFrom(r4, r5);
    r5 = w.selectFrom(r4, r5);
    r4 = t;
    t = u.selectFrom(r6, r7);
    r7 = w.selectFrom(r6, r7);
    r6 = t;
    t = u.selectFrom(r8, r9);
    r9 = w.selectFrom(r8, r9);
    r8 = t;
    t = u.selectFrom(r10, r11);
    r11 = w.selectFrom(r10, r11);
    r10 = t;
    t = u.selectFrom(r12, r13);
    r13 = w.selectFrom(r12, r13);
    r12 = t;
    t = u.selectFrom(r14, r15);
    r15 = w.selectFrom(r14, r15);
    r14 = t;
    r0.reinterpretAsFloats().intoArray(keys, d * CHUNK + lane);
    r1.reinterpretAsFloats().intoArray(keys, (d + 1) * CHUNK + lane);
    r2.reinterpretAsFloats().intoArray(keys, (d + 2) * CHUNK + lane);
    r3.reinterpretAsFloats().intoArray(keys, (d + 3) * CHUNK + lane);
    r4.reinterpretAsFloats().intoArray(keys, (d + 4) * CHUNK + lane);
    r5.reinterpretAsFloats().intoArray(keys, (d + 5) * CHUNK + lane);
    r6.reinterpretAsFloats().intoArray(keys, (d + 6) * CHUNK + lane);
    r7.reinterpretAsFloats().intoArray(keys, (d + 7) * CHUNK + lane);
    r8.reinterpretAsFloats().intoArray(keys, (d + 8) * CHUNK + lane);
    r9.reinterpretAsFloats().intoArray(keys, (d + 9) * CHUNK + lane);
    r10.reinterpretAsFloats().intoArray(keys, (d + 10) * CHUNK + lane);
    r11.reinterpretAsFloats().intoArray(keys, (d + 11) * CHUNK + lane);
    r12.reinterpretAsFloats().intoArray(keys, (d + 12) * CHUNK + lane);
    r13.reinterpretAsFloats().intoArray(keys, (d + 13) * CHUNK + lane);
    r14.reinterpretAsFloats().intoArray(keys, (d + 14) * CHUNK + lane);
    r15.reinterpretAsFloats().intoArray(keys, (d + 15) * CHUNK + lane);
  }

  /**
   * Lane selectors of the transpose stages, h = L/2 .. 1: the upper row takes its own lane l where
   * bit h of l is clear, else lane l−h of the lower row; the lower row takes lane l+h of the upper
   * row where the bit is clear, else its own lane l (indexes ≥ L pick from the second vector).
   */
  private static int[] swapSelectors() {
    int[] swap = new int[2 * L * Integer.numberOfTrailingZeros(L)];
    int s = 0;
    for (int h = L / 2; h >= 1; h >>= 1, s += 2 * L) {
      for (int l = 0; l < L; l++) {
        boolean clear = (l & h) == 0;
        swap[s + l] = clear ? l : L + l - h;
        swap[s + L + l] = clear ? l + h : L + l;
      }
    }
    return swap;
  }

  /**
   * Scores of columns {@code c0..c0+CHUNK-1} for every query, 4 queries at a time; a last single
   * query alone.
   */
  private void scoreChunk(float[] q, int c0, float scale, float softcap) {
    int qb = 0;
    for (; qb + 4 <= padded; qb += 4) {
      scoreFour(q, qb, c0, scale);
    }
    if (qb < padded) {
      scoreOne(q, qb, c0, scale);
    }
    if (softcap > 0f) {
      for (int i = 0; i < padded; i++) {
        int from = i * rowLength + c0;
        for (int c = from; c < from + CHUNK; c++) {
          scores[c] = PagedAttention.softcap(scores[c], softcap);
        }
      }
    }
  }

  /** Queries {@code qb..qb+3} × two vectors of columns: 8 independent chains over d. */
  private void scoreFour(float[] q, int qb, int c0, float scale) {
    int o0 = qOff[qb];
    int o1 = qOff[qb + 1];
    int o2 = qOff[qb + 2];
    int o3 = qOff[qb + 3];
    FloatVector a0 = FloatVector.zero(SPECIES);
    FloatVector a1 = a0;
    FloatVector a2 = a0;
    FloatVector a3 = a0;
    FloatVector a4 = a0;
    FloatVector a5 = a0;
    FloatVector a6 = a0;
    FloatVector a7 = a0;
    for (int d = 0, k = 0; d < hd; d++, k += CHUNK) {
      FloatVector k0 = FloatVector.fromArray(SPECIES, keys, k);
      FloatVector k1 = FloatVector.fromArray(SPECIES, keys, k + L);
      FloatVector q0 = FloatVector.broadcast(SPECIES, q[o0 + d]);
      FloatVector q1 = FloatVector.broadcast(SPECIES, q[o1 + d]);
      FloatVector q2 = FloatVector.broadcast(SPECIES, q[o2 + d]);
      FloatVector q3 = FloatVector.broadcast(SPECIES, q[o3 + d]);
      a0 = q0.fma(k0, a0);
      a1 = q0.fma(k1, a1);
      a2 = q1.fma(k0, a2);
      a3 = q1.fma(k1, a3);
      a4 = q2.fma(k0, a4);
      a5 = q2.fma(k1, a5);
      a6 = q3.fma(k0, a6);
      a7 = q3.fma(k1, a7);
    }
    FloatVector sv = FloatVector.broadcast(SPECIES, scale);
    int s = qb * rowLength + c0;
    sv.mul(a0).intoArray(scores, s);
    sv.mul(a1).intoArray(scores, s + L);
    s += rowLength;
    sv.mul(a2).intoArray(scores, s);
    sv.mul(a3).intoArray(scores, s + L);
    s += rowLength;
    sv.mul(a4).intoArray(scores, s);
    sv.mul(a5).intoArray(scores, s + L);
    s += rowLength;
    sv.mul(a6).intoArray(scores, s);
    sv.mul(a7).intoArray(scores, s + L);
  }

  /** Query {@code qi} × two vectors of columns. */
  private void scoreOne(float[] q, int qi, int c0, float scale) {
    int o = qOff[qi];
    FloatVector a0 = FloatVector.zero(SPECIES);
    FloatVector a1 = a0;
    for (int d = 0, k = 0; d < hd; d++, k += CHUNK) {
      FloatVector qd = FloatVector.broadcast(SPECIES, q[o + d]);
      a0 = qd.fma(FloatVector.fromArray(SPECIES, keys, k), a0);
      a1 = qd.fma(FloatVector.fromArray(SPECIES, keys, k + L), a1);
    }
    FloatVector sv = FloatVector.broadcast(SPECIES, scale);
    int s = qi * rowLength + c0;
    sv.mul(a0).intoArray(scores, s);
    sv.mul(a1).intoArray(scores, s + L);
  }

  /**
   * Row {@code i} of the scores becomes {@code exp(s − m)} (0 outside the query's positions), and
   * {@code sums[i]} its sum in the stated order.
   */
  private void softmaxRow(int i) {
    int row = i * rowLength;
    int first = lo[i] - base;
    int last = hi[i] - base;
    int from = first & -PagedAttention.GROUP;
    int to = (last | (PagedAttention.GROUP - 1)) + 1;
    Arrays.fill(scores, row + from, row + first, Float.NEGATIVE_INFINITY);
    Arrays.fill(scores, row + last + 1, row + to, Float.NEGATIVE_INFINITY);
    float m = max(row + from, row + to);
    FastExp.expShifted(scores, row + from, row + to, m);
    Arrays.fill(psum, 0f);
    for (int c = from; c < to; c += L) {
      int l = c & (PagedAttention.GROUP - 1);
      FloatVector.fromArray(SPECIES, psum, l)
          .add(FloatVector.fromArray(SPECIES, scores, row + c))
          .intoArray(psum, l);
    }
    float sum = 0f;
    for (float x : psum) {
      sum += x;
    }
    sums[i] = sum;
  }

  /**
   * Largest of {@code scores[from..to)} ({@code to − from} a multiple of L). Maximum does not
   * depend on order, so four interleaved running maxima are as good as one.
   */
  private float max(int from, int to) {
    FloatVector m0 = FloatVector.broadcast(SPECIES, Float.NEGATIVE_INFINITY);
    FloatVector m1 = m0;
    FloatVector m2 = m0;
    FloatVector m3 = m0;
    int c = from;
    for (; c + 4 * L <= to; c += 4 * L) {
      m0 = FloatVector.fromArray(SPECIES, scores, c).max(m0);
      m1 = FloatVector.fromArray(SPECIES, scores, c + L).max(m1);
      m2 = FloatVector.fromArray(SPECIES, scores, c + 2 * L).max(m2);
      m3 = FloatVector.fromArray(SPECIES, scores, c + 3 * L).max(m3);
    }
    for (; c < to; c += L) {
      m0 = FloatVector.fromArray(SPECIES, scores, c).max(m0);
    }
    FloatVector.broadcast(SPECIES, Float.NEGATIVE_INFINITY)
        .max(m0)
        .max(m1)
        .max(m2)
        .max(m3)
        .intoArray(lanes, 0);
    float m = Float.NEGATIVE_INFINITY;
    for (float x : lanes) {
      m = Math.max(m, x);
    }
    return m;
  }

  /**
   * Adds positions {@code from..to} to {@code acc[i][d]} for queries {@code qb..qb+3}: weight · V,
   * positions ascending. Positions all four read run in one pass; the rest per query, before and
   * after it, so that each query's chain stays ascending and never reads outside its range.
   */
  private void weightedValues(int qb, int from, int to) {
    if (qb + 1 == padded) {
      valuesOf(qb, 0, 0, 0, 0, Math.max(lo[qb], from), Math.min(hi[qb], to));
      return;
    }
    int common = lo[qb];
    int commonEnd = hi[qb];
    for (int r = 1; r < 4; r++) {
      common = Math.max(common, lo[qb + r]);
      commonEnd = Math.min(commonEnd, hi[qb + r]);
    }
    int distinct = Math.min(4, queries - qb);
    if (common > commonEnd) {
      for (int r = 0; r < distinct; r++) {
        valuesOf(qb, r, r, r, r, Math.max(lo[qb + r], from), Math.min(hi[qb + r], to));
      }
      return;
    }
    for (int r = 0; r < distinct; r++) {
      valuesOf(qb, r, r, r, r, Math.max(lo[qb + r], from), Math.min(common - 1, to));
    }
    valuesOf(qb, 0, 1, 2, 3, Math.max(common, from), Math.min(commonEnd, to));
    for (int r = 0; r < distinct; r++) {
      valuesOf(qb, r, r, r, r, Math.max(commonEnd + 1, from), Math.min(hi[qb + r], to));
    }
  }

  /**
   * For positions {@code from..to} ascending: {@code acc[r][d] = fma(w[r][j], V_j[d], acc[r][d])}
   * for the rows {@code r0..r3} (repeats allowed: they compute the same values).
   */
  private void valuesOf(int qb, int r0, int r1, int r2, int r3, int from, int to) {
    if (from > to) {
      return;
    }
    int w0 = (qb + r0) * rowLength - base;
    int w1 = (qb + r1) * rowLength - base;
    int w2 = (qb + r2) * rowLength - base;
    int w3 = (qb + r3) * rowLength - base;
    int x0 = (qb + r0) * hd;
    int x1 = (qb + r1) * hd;
    int x2 = (qb + r2) * hd;
    int x3 = (qb + r3) * hd;
    boolean single = r0 == r1 && r1 == r2 && r2 == r3;
    int d = 0;
    for (; d + 4 * L <= hd; d += 4 * L) {
      if (single) {
        valuesOne(w0, x0 + d, d, from, to);
      } else {
        values4(w0, w1, w2, w3, x0 + d, x1 + d, x2 + d, x3 + d, d, from, to);
      }
    }
    for (; d + L <= hd; d += L) {
      values1(w0, w1, w2, w3, x0 + d, x1 + d, x2 + d, x3 + d, d, from, to);
    }
    for (; d < hd; d++) {
      valuesScalar(w0, w1, w2, w3, x0 + d, x1 + d, x2 + d, x3 + d, d, from, to);
    }
  }

  /** Four queries × four vectors of dimensions {@code d..d+4L-1}. */
  private void values4(
      int w0, int w1, int w2, int w3, int x0, int x1, int x2, int x3, int d, int from, int to) {
    FloatVector a00 = FloatVector.fromArray(SPECIES, acc, x0);
    FloatVector a01 = FloatVector.fromArray(SPECIES, acc, x0 + L);
    FloatVector a02 = FloatVector.fromArray(SPECIES, acc, x0 + 2 * L);
    FloatVector a03 = FloatVector.fromArray(SPECIES, acc, x0 + 3 * L);
    FloatVector a10 = FloatVector.fromArray(SPECIES, acc, x1);
    FloatVector a11 = FloatVector.fromArray(SPECIES, acc, x1 + L);
    FloatVector a12 = FloatVector.fromArray(SPECIES, acc, x1 + 2 * L);
    FloatVector a13 = FloatVector.fromArray(SPECIES, acc, x1 + 3 * L);
    FloatVector a20 = FloatVector.fromArray(SPECIES, acc, x2);
    FloatVector a21 = FloatVector.fromArray(SPECIES, acc, x2 + L);
    FloatVector a22 = FloatVector.fromArray(SPECIES, acc, x2 + 2 * L);
    FloatVector a23 = FloatVector.fromArray(SPECIES, acc, x2 + 3 * L);
    FloatVector a30 = FloatVector.fromArray(SPECIES, acc, x3);
    FloatVector a31 = FloatVector.fromArray(SPECIES, acc, x3 + L);
    FloatVector a32 = FloatVector.fromArray(SPECIES, acc, x3 + 2 * L);
    FloatVector a33 = FloatVector.fromArray(SPECIES, acc, x3 + 3 * L);
    long field = kv.vFieldOffset() + 4L * d;
    for (int j = from; j <= to; j++) {
      long at = rowAt[j - base] + field;
      FloatVector v0 = FloatVector.fromMemorySegment(SPECIES, memory, at, LE);
      FloatVector v1 = FloatVector.fromMemorySegment(SPECIES, memory, at + 4L * L, LE);
      FloatVector v2 = FloatVector.fromMemorySegment(SPECIES, memory, at + 8L * L, LE);
      FloatVector v3 = FloatVector.fromMemorySegment(SPECIES, memory, at + 12L * L, LE);
      FloatVector e = FloatVector.broadcast(SPECIES, scores[w0 + j]);
      a00 = e.fma(v0, a00);
      a01 = e.fma(v1, a01);
      a02 = e.fma(v2, a02);
      a03 = e.fma(v3, a03);
      e = FloatVector.broadcast(SPECIES, scores[w1 + j]);
      a10 = e.fma(v0, a10);
      a11 = e.fma(v1, a11);
      a12 = e.fma(v2, a12);
      a13 = e.fma(v3, a13);
      e = FloatVector.broadcast(SPECIES, scores[w2 + j]);
      a20 = e.fma(v0, a20);
      a21 = e.fma(v1, a21);
      a22 = e.fma(v2, a22);
      a23 = e.fma(v3, a23);
      e = FloatVector.broadcast(SPECIES, scores[w3 + j]);
      a30 = e.fma(v0, a30);
      a31 = e.fma(v1, a31);
      a32 = e.fma(v2, a32);
      a33 = e.fma(v3, a33);
    }
    // Repeated rows hold equal values, so the order of these stores does not matter.
    a00.intoArray(acc, x0);
    a01.intoArray(acc, x0 + L);
    a02.intoArray(acc, x0 + 2 * L);
    a03.intoArray(acc, x0 + 3 * L);
    a10.intoArray(acc, x1);
    a11.intoArray(acc, x1 + L);
    a12.intoArray(acc, x1 + 2 * L);
    a13.intoArray(acc, x1 + 3 * L);
    a20.intoArray(acc, x2);
    a21.intoArray(acc, x2 + L);
    a22.intoArray(acc, x2 + 2 * L);
    a23.intoArray(acc, x2 + 3 * L);
    a30.intoArray(acc, x3);
    a31.intoArray(acc, x3 + L);
    a32.intoArray(acc, x3 + 2 * L);
    a33.intoArray(acc, x3 + 3 * L);
  }

  /** One query × four vectors of dimensions {@code d..d+4L-1}. */
  private void valuesOne(int w, int x, int d, int from, int to) {
    FloatVector a0 = FloatVector.fromArray(SPECIES, acc, x);
    FloatVector a1 = FloatVector.fromArray(SPECIES, acc, x + L);
    FloatVector a2 = FloatVector.fromArray(SPECIES, acc, x + 2 * L);
    FloatVector a3 = FloatVector.fromArray(SPECIES, acc, x + 3 * L);
    long field = kv.vFieldOffset() + 4L * d;
    for (int j = from; j <= to; j++) {
      long at = rowAt[j - base] + field;
      FloatVector e = FloatVector.broadcast(SPECIES, scores[w + j]);
      a0 = e.fma(FloatVector.fromMemorySegment(SPECIES, memory, at, LE), a0);
      a1 = e.fma(FloatVector.fromMemorySegment(SPECIES, memory, at + 4L * L, LE), a1);
      a2 = e.fma(FloatVector.fromMemorySegment(SPECIES, memory, at + 8L * L, LE), a2);
      a3 = e.fma(FloatVector.fromMemorySegment(SPECIES, memory, at + 12L * L, LE), a3);
    }
    a0.intoArray(acc, x);
    a1.intoArray(acc, x + L);
    a2.intoArray(acc, x + 2 * L);
    a3.intoArray(acc, x + 3 * L);
  }

  /** Four queries × one vector of dimensions {@code d..d+L-1}. */
  private void values1(
      int w0, int w1, int w2, int w3, int x0, int x1, int x2, int x3, int d, int from, int to) {
    FloatVector a0 = FloatVector.fromArray(SPECIES, acc, x0);
    FloatVector a1 = FloatVector.fromArray(SPECIES, acc, x1);
    FloatVector a2 = FloatVector.fromArray(SPECIES, acc, x2);
    FloatVector a3 = FloatVector.fromArray(SPECIES, acc, x3);
    long field = kv.vFieldOffset() + 4L * d;
    for (int j = from; j <= to; j++) {
      FloatVector v = FloatVector.fromMemorySegment(SPECIES, memory, rowAt[j - base] + field, LE);
      a0 = FloatVector.broadcast(SPECIES, scores[w0 + j]).fma(v, a0);
      a1 = FloatVector.broadcast(SPECIES, scores[w1 + j]).fma(v, a1);
      a2 = FloatVector.broadcast(SPECIES, scores[w2 + j]).fma(v, a2);
      a3 = FloatVector.broadcast(SPECIES, scores[w3 + j]).fma(v, a3);
    }
    a0.intoArray(acc, x0);
    a1.intoArray(acc, x1);
    a2.intoArray(acc, x2);
    a3.intoArray(acc, x3);
  }

  /** Four queries × dimension {@code d}, for head widths that are not a multiple of L. */
  private void valuesScalar(
      int w0, int w1, int w2, int w3, int x0, int x1, int x2, int x3, int d, int from, int to) {
    float a0 = acc[x0];
    float a1 = acc[x1];
    float a2 = acc[x2];
    float a3 = acc[x3];
    long field = kv.vFieldOffset() + 4L * d;
    for (int j = from; j <= to; j++) {
      float v = memory.get(Tensor.F32_LE, rowAt[j - base] + field);
      a0 = Math.fma(scores[w0 + j], v, a0);
      a1 = Math.fma(scores[w1 + j], v, a1);
      a2 = Math.fma(scores[w2 + j], v, a2);
      a3 = Math.fma(scores[w3 + j], v, a3);
    }
    acc[x0] = a0;
    acc[x1] = a1;
    acc[x2] = a2;
    acc[x3] = a3;
  }

  /** {@code out[o+d] = acc[i][d] / sum}. */
  private void divide(float[] out, int o, int i, float sum) {
    int x = i * hd;
    int d = 0;
    for (; d + L <= hd; d += L) {
      FloatVector.fromArray(SPECIES, acc, x + d).div(sum).intoArray(out, o + d);
    }
    for (; d < hd; d++) {
      out[o + d] = acc[x + d] / sum;
    }
  }

  private static int roundUp(int n, int multiple) {
    return (n + multiple - 1) / multiple * multiple;
  }
}
