package io.tokenspeed.engine.sim;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.device.DeviceBytes;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;
import java.util.SplittableRandom;

/**
 * A tiny deterministic model for simulations of the engine, whose next token depends on every byte
 * of the sequence's KV, so that a wrong block anywhere changes what it generates.
 *
 * <p><b>KV.</b> Each token writes one row of {@code 8 · rowWords} bytes per cache group: group 0
 * keeps the full history, group 1 (when {@code windowTokens > 0}) a sliding window. A row's words
 * belong to the model's layers: two layers (words below {@code ceil(rowWords / 2)} and the rest)
 * when a row has two words or more, else one. Layer {@code l}'s words of the row of position {@code
 * p} are a hash of the token, {@code p}, the rank, the group, {@code l} and layer {@code l}'s words
 * of the row of {@code p - 1} <em>as read back from the Device memory the block table names</em> (a
 * window of one token reads nothing). A prefix restored from the Host tier or L3 is therefore read,
 * not recomputed: a wrong restored word propagates into every later row of its layer.
 *
 * <pre>
 *   group g, block b (model id, b ≥ 1) at tier offset (b − 1) · bpb(g),  bpb(g) = bg · rowBytes
 *   a block holds its layers one after the other, field layers.l.kv = bg rows of layer l's words:
 *     | layers.0.kv: rows 0..bg-1, words 0..h-1 | layers.1.kv: rows 0..bg-1, words h..rowWords-1 |
 *   word w of position p:  block = table[g][p / bg],
 *     offset in block = 8 · (bg · first(l) + (p mod bg) · words(l) + w − first(l)),  l = layer(w)
 *   words_l(p) = H(token_p, p, rank, g, l, words_l(p − 1) read from memory)   words_l(−1) = H(seed)
 * </pre>
 *
 * <p><b>Layers.</b> The forward computes layer by layer: layer {@code l}'s words of every chunk row
 * and their share of the logits' sums, after its {@link io.tokenspeed.model.LayerGate} opened for
 * {@code l} ({@link #waitsForLayers}). So the engine's loads staged by layer run under the
 * simulation as they do under a real model, and a stage whose bytes are not in place when its gate
 * opens gives wrong rows.
 *
 * <p><b>Logits.</b> The logits of position {@code p} are one-hot at the token
 *
 * <pre>
 *   next(p) = ( Σ_ranks Σ_g Σ_rows q in view(g, p) Σ_words k of row q  a(q, k, g) · word )  mod V
 *   view(full, p) = rows 0 .. p          view(window W, p) = rows p − W + 1 .. p
 *   a(q, k, g) ∈ [1, 256]                V = vocabSize, a prime above 256
 * </pre>
 *
 * Every rank computes its own partial sum mod V over its own rows; the partials are added by the
 * collective in rank order (exact in float: each is below V), so every rank samples the same token.
 * Since V is a prime above 256, byte {@code i} of a word weighs {@code a · 256^i ≢ 0 (mod V)}, and
 * one wrong byte in any row of the view changes its partial sum by {@code a · 256^i · δ ≢ 0 (mod
 * V)}: the token changes for certain, unless the wrong byte lies in the row the step reads as its
 * previous one (the step then also writes a different row, and the token stays the same with chance
 * 1/V). Several wrong bytes change it with chance 1 − 1/V per step, and the wrong row stays in the
 * view of every later step.
 *
 * <p><b>Cost.</b> A step reads the whole view once per request (for the last row; incrementally for
 * {@code allLogits}): {@code O(numTokens · rowWords)} multiply-adds, microseconds for a few hundred
 * tokens. {@link #reference} computes the same tokens from the tokens alone, as a run without any
 * cache reuse produces them.
 *
 * <p>One thread computes (the rank's loop); the Device memory is copied to and from by the engine's
 * copy thread, ordered by the engine's fences.
 */
public final class SimModel implements DeviceModel {

  /** The attention backend the deployment identity names for this model's KV. */
  public static final String ATTENTION_BACKEND = "sim";

  /** Rows of a view summed between two reductions mod V: 4096 rows of 64 terms below 2^36 each. */
  private static final int REDUCE_EVERY_ROWS = 4096;

  /** Bytes of one row word. */
  private static final int WORD_BYTES = Long.BYTES;

  private final int vocabSize;
  private final int rowWords;
  private final int rowBytes;
  private final int windowTokens;
  private final long seed;
  private final Shard shard;
  private final Collective collective;
  private final ModelIdentity identity;

  /** {@code 2^16}, {@code 2^32} and {@code 2^48} mod V. */
  private final long pow16;

  private final long pow32;
  private final long pow48;

  /** Layers: 2 when a row has two words or more, else 1. */
  private final int layers;

  /** Set by {@link #allocate}: the block granularity and pool size of each group. */
  private int[] blockGranularity;

  private int[] poolBlocks;

  /**
   * The model of rank {@code collective.rank()} of {@code collective.size()}.
   *
   * @param vocabSize V, a prime in (256, 65536)
   * @param rowWords 8-byte words of a token's row per group, at least 1
   * @param windowTokens the sliding group's window, or 0 for the full-history group alone
   * @param seed what the rows hash with (two seeds are two models)
   */
  public SimModel(int vocabSize, int rowWords, int windowTokens, long seed, Collective collective) {
    this(vocabSize, rowWords, windowTokens, seed, collective, ModelIdentity.DEFAULT_WEIGHT_VERSION);
  }

  /**
   * The same model under weight version {@code weightVersion} (its L3 namespace): the weights, and
   * so the rows and the tokens, do not change with it.
   */
  public SimModel(
      int vocabSize,
      int rowWords,
      int windowTokens,
      long seed,
      Collective collective,
      String weightVersion) {
    if (vocabSize <= 256 || vocabSize >= 65_536 || !isPrime(vocabSize)) {
      throw new IllegalArgumentException(
          "vocab_size=" + vocabSize + " must be a prime in (256, 65536)");
    }
    if (rowWords < 1 || rowWords > 64) {
      throw new IllegalArgumentException("row_words=" + rowWords + " must be in [1, 64]");
    }
    if (windowTokens < 0) {
      throw new IllegalArgumentException("window_tokens=" + windowTokens + " must be >= 0");
    }
    if (collective == null) {
      throw new IllegalArgumentException("the collective is missing");
    }
    this.vocabSize = vocabSize;
    this.rowWords = rowWords;
    this.rowBytes = rowWords * WORD_BYTES;
    this.layers = rowWords >= 2 ? 2 : 1;
    this.windowTokens = windowTokens;
    this.seed = seed;
    this.collective = collective;
    this.shard = new Shard(collective.rank(), collective.size());
    this.pow16 = (1L << 16) % vocabSize;
    this.pow32 = pow16 * pow16 % vocabSize;
    this.pow48 = pow32 * pow16 % vocabSize;
    byte[] revision = new byte[32];
    new SplittableRandom(seed).nextBytes(revision);
    this.identity =
        new ModelIdentity(
            "sim-" + vocabSize + "-" + rowWords + "-" + windowTokens,
            HexFormat.of().formatHex(revision),
            weightVersion);
  }

  /** The model of a replica of one rank. */
  public SimModel(int vocabSize, int rowWords, int windowTokens, long seed) {
    this(vocabSize, rowWords, windowTokens, seed, Collective.single());
  }

  private static boolean isPrime(int n) {
    for (int d = 2; d * d <= n; d++) {
      if (n % d == 0) {
        return false;
      }
    }
    return n > 1;
  }

  @Override
  public String deviceName() {
    return "sim";
  }

  @Override
  public boolean computesOnHost() {
    return false;
  }

  @Override
  public ModelIdentity identity() {
    return identity;
  }

  @Override
  public String attentionBackend() {
    return ATTENTION_BACKEND;
  }

  @Override
  public Collective collective() {
    return collective;
  }

  @Override
  public Shard shard() {
    return shard;
  }

  @Override
  public int vocabSize() {
    return vocabSize;
  }

  /** Cache groups: 1, or 2 with a sliding window. */
  public int numGroups() {
    return windowTokens > 0 ? 2 : 1;
  }

  /** Bytes of one token's row in each group. */
  public int rowBytes() {
    return rowBytes;
  }

  @Override
  public CacheLayout cacheLayout(int prefixGranularity, int blockGranularity) {
    List<CacheGroupSpec> groups = new ArrayList<>();
    for (int g = 0; g < numGroups(); g++) {
      GroupKind kind =
          g == 0 ? new GroupKind.FullHistory() : new GroupKind.SlidingWindow(windowTokens);
      groups.add(
          new CacheGroupSpec(
              g,
              kind,
              blockGranularity,
              layerFields(blockGranularity),
              new Sharding.HeadPartitioned()));
    }
    return new CacheLayout(prefixGranularity, "sim", groups);
  }

  /** The fields of a block of {@code bg} rows: {@code layers.l.kv} per layer, in layer order. */
  private List<CacheField> layerFields(int bg) {
    List<CacheField> fields = new ArrayList<>(layers);
    for (int l = 0; l < layers; l++) {
      fields.add(new CacheField("layers." + l + ".kv", (long) bg * words(l) * WORD_BYTES));
    }
    return fields;
  }

  /** The first word of layer {@code l}. */
  private int first(int l) {
    return l == 0 ? 0 : (rowWords + 1) / 2;
  }

  /** Words of layer {@code l} in a row. */
  private int words(int l) {
    return layers == 1 ? rowWords : (l == 0 ? (rowWords + 1) / 2 : rowWords / 2);
  }

  /** The layer of word {@code w}. */
  private int layerOf(int w) {
    return layers == 1 || w < first(1) ? 0 : 1;
  }

  /**
   * Where word {@code w} of the row {@code rowInBlock} rows into a block of {@code bg} rows lies,
   * in bytes from the block's start (see the class comment).
   */
  public long wordOffset(int bg, int rowInBlock, int w) {
    int l = layerOf(w);
    return ((long) bg * first(l) + (long) rowInBlock * words(l) + w - first(l)) * WORD_BYTES;
  }

  /** The model waits on its batch's gate before each layer. */
  @Override
  public boolean waitsForLayers() {
    return true;
  }

  @Override
  public DeviceBytes allocate(
      CacheLayout layout, long leadingPad, long tierBytes, int[] poolBlocks) {
    if (layout.numGroups() != numGroups() || poolBlocks.length != numGroups()) {
      throw new IllegalArgumentException(
          "layout of " + layout.numGroups() + " groups, the model has " + numGroups());
    }
    int[] bg = new int[numGroups()];
    for (int g = 0; g < bg.length; g++) {
      bg[g] = layout.group(g).blockGranularity();
      long end = Math.multiplyExact((long) poolBlocks[g] - 1, (long) bg[g] * rowBytes);
      if (end > tierBytes) {
        throw new IllegalArgumentException(
            "group " + g + "'s " + poolBlocks[g] + " blocks need " + end + " of " + tierBytes);
      }
    }
    this.blockGranularity = bg;
    this.poolBlocks = poolBlocks.clone();
    return new Bytes(tierBytes);
  }

  /**
   * Told the tokens of every forward, before it computes: a simulation that runs the engine on a
   * simulated clock moves the clock by the forward's cost here, so that the engine measures a
   * prefill that costs time (its cost model fits it). Null: none.
   */
  private volatile java.util.function.IntConsumer forwardTokens;

  /** See {@link #forwardTokens}. */
  public void onForward(java.util.function.IntConsumer tokens) {
    this.forwardTokens = tokens;
  }

  @Override
  public ForwardResult forward(ForwardBatch batch, DeviceBytes kv) {
    if (!(kv instanceof Bytes bytes) || blockGranularity == null) {
      throw new IllegalArgumentException("the sim model computes over its own allocation: " + kv);
    }
    MemorySegment m = bytes.segment;
    int numRows = 0;
    int tokens = 0;
    for (ForwardRequest r : batch.requests()) {
      numRows += r.numLogitRows();
      tokens += r.numTokens();
    }
    java.util.function.IntConsumer cost = forwardTokens;
    if (cost != null) {
      cost.accept(tokens);
    }
    long[] sums = new long[numRows];
    for (int l = 0; l < layers; l++) {
      batch.gate().awaitLayer(l);
      int at = 0;
      for (ForwardRequest r : batch.requests()) {
        at = forward(r, l, m, sums, at);
      }
    }
    float[] partials = new float[numRows];
    for (int i = 0; i < numRows; i++) {
      partials[i] = sums[i] % vocabSize;
    }
    collective.allReduceSum(partials, 0, numRows);
    List<float[]> logits = new ArrayList<>(batch.requests().size());
    int at = 0;
    for (ForwardRequest r : batch.requests()) {
      float[] out = new float[r.numLogitRows() * vocabSize];
      for (int i = 0; i < r.numLogitRows(); i++) {
        out[i * vocabSize + ((int) partials[at++]) % vocabSize] = 1f;
      }
      logits.add(out);
    }
    return new ForwardResult(vocabSize, logits);
  }

  /**
   * Writes layer {@code l}'s words of the rows of {@code r}'s chunk; adds that layer's share of its
   * partial sums, mod V, at {@code sums[at..]}.
   */
  private int forward(ForwardRequest r, int l, MemorySegment m, long[] sums, int at) {
    int[] tokens = r.tokenIds();
    int start = r.startPosition();
    int[][] tables = r.blockTables();
    if (tables.length != numGroups()) {
      throw new IllegalArgumentException(
          "block tables of " + tables.length + " groups, the model has " + numGroups());
    }
    for (int g = 0; g < numGroups(); g++) {
      for (int j = 0; j < tokens.length; j++) {
        int p = start + j;
        long prev = hasPrevious(g, p) ? fold(m, tables, g, p - 1, l) : seed;
        writeWords(m, tables, g, p, l, tokens[j], prev);
      }
    }
    int last = start + tokens.length - 1;
    if (!r.allLogits()) {
      sums[at] = (sums[at] + sumMod(m, tables, last, l)) % vocabSize;
      return at + 1;
    }
    for (int p = start; p <= last; p++, at++) {
      sums[at] = (sums[at] + sumMod(m, tables, p, l)) % vocabSize;
    }
    return at;
  }

  private boolean hasPrevious(int g, int p) {
    return p > 0 && (g == 0 || windowTokens > 1);
  }

  /** The byte offset of the block that holds position {@code p}'s row of group {@code g}. */
  private long blockOffset(int[][] tables, int g, int p) {
    int bg = blockGranularity[g];
    int row = p / bg;
    int[] table = tables[g];
    int block = row < table.length ? table[row] : 0;
    if (block < 1 || block >= poolBlocks[g]) {
      throw new IllegalStateException(
          "group "
              + g
              + " position "
              + p
              + " has block "
              + block
              + " in its table row "
              + row
              + " (blocks 1.."
              + (poolBlocks[g] - 1)
              + ")");
    }
    return ((long) block - 1) * bg * rowBytes;
  }

  /** The byte offset of word {@code w} of position {@code p}'s row of group {@code g}. */
  private long offset(int[][] tables, int g, int p, int w) {
    return blockOffset(tables, g, p) + wordOffset(blockGranularity[g], p % blockGranularity[g], w);
  }

  /** Layer {@code l}'s words of position {@code p}'s row of group {@code g}, folded. */
  private long fold(MemorySegment m, int[][] tables, int g, int p, int l) {
    long h = 0;
    for (int w = first(l); w < first(l) + words(l); w++) {
      h = h * 0x9E3779B97F4A7C15L + m.get(ValueLayout.JAVA_LONG_UNALIGNED, offset(tables, g, p, w));
    }
    return h;
  }

  private void writeWords(
      MemorySegment m, int[][] tables, int g, int p, int l, int token, long prev) {
    long h = layerSeed(token, p, g, l, prev);
    for (int w = first(l); w < first(l) + words(l); w++) {
      h = mix(h + w);
      m.set(ValueLayout.JAVA_LONG_UNALIGNED, offset(tables, g, p, w), h);
    }
  }

  private long layerSeed(int token, int p, int g, int l, long prev) {
    return rowSeed(token, p, g, prev) ^ (l * 0xE7037ED1A0B428DBL);
  }

  private long rowSeed(int token, int p, int g, long prev) {
    return seed
        ^ (token * 0xBF58476D1CE4E5B9L)
        ^ (p * 0x94D049BB133111EBL)
        ^ ((shard.rank() + 1L) * 0xD6E8FEB86659FD93L)
        ^ ((g + 1L) * 0xA0761D6478BD642FL)
        ^ mix(prev);
  }

  /**
   * Layer {@code l}'s share of this rank's partial sum mod V for the logits of position {@code p}:
   * the layer's words of the view's rows, read block by block.
   */
  private long sumMod(MemorySegment m, int[][] tables, int p, int l) {
    long sum = 0;
    for (int g = 0; g < numGroups(); g++) {
      int bg = blockGranularity[g];
      int q = firstViewed(g, p);
      while (q <= p) {
        long block = blockOffset(tables, g, q);
        int last = Math.min(p, (q / bg + 1) * bg - 1);
        for (; q <= last; q++) {
          for (int w = first(l); w < first(l) + words(l); w++) {
            long word = m.get(ValueLayout.JAVA_LONG_UNALIGNED, block + wordOffset(bg, q % bg, w));
            sum += wordSum(word, q, w, g);
          }
        }
        if ((q & REDUCE_EVERY_ROWS - 1) < bg) {
          sum %= vocabSize; // terms are below 2^36: no overflow between reductions
        }
      }
    }
    return sum % vocabSize;
  }

  private int firstViewed(int g, int p) {
    return g == 0 ? 0 : Math.max(0, p - windowTokens + 1);
  }

  /**
   * Word {@code w} of row {@code q}'s term, {@code a(q, w, g) · word} reduced mod V: the word's
   * four 16-bit parts times {@code 2^(16k) mod V}, so that the term stays below 2^36 and a view of
   * many rows adds up without a division per word. Byte {@code i} of the word weighs {@code a ·
   * 256^i}, non-zero mod V (V is a prime above 256 and {@code a} is in [1, 256]).
   */
  private long wordSum(long word, int q, int w, int g) {
    long index = (long) q * rowWords + w;
    long a = 1 + ((index * 0x9E3779B1L + g * 0x85EBCA6BL) >>> 13 & 0xFF);
    long reduced =
        (word & 0xFFFF)
            + ((word >>> 16) & 0xFFFF) * pow16
            + ((word >>> 32) & 0xFFFF) * pow32
            + (word >>> 48) * pow48;
    return a * reduced;
  }

  private static long mix(long z) {
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    return z ^ (z >>> 31);
  }

  /**
   * The tokens greedy decoding generates after {@code prompt}, {@code numTokens} of them, as a run
   * of this replica ({@code shard().size()} ranks) without any cache reuse produces them: computed
   * from the tokens alone, no memory read.
   */
  public int[] reference(int[] prompt, int numTokens) {
    if (prompt.length == 0) {
      throw new IllegalArgumentException("the prompt is empty");
    }
    int size = shard.size();
    int length = prompt.length + numTokens;
    int[] tokens = Arrays.copyOf(prompt, length);
    // rows[rank][g][p], words of each row
    long[][][][] rows = new long[size][numGroups()][length][rowWords];
    SimModel[] ranks = new SimModel[size];
    for (int rank = 0; rank < size; rank++) {
      ranks[rank] = rank == shard.rank() ? this : new SimModel(this, rank);
    }
    for (int p = 0; p < length - 1; p++) {
      long total = 0;
      for (int rank = 0; rank < size; rank++) {
        SimModel r = ranks[rank];
        for (int g = 0; g < numGroups(); g++) {
          r.referenceRow(
              tokens[p], p, g, r.hasPrevious(g, p) ? rows[rank][g][p - 1] : null, rows[rank][g][p]);
        }
        long sum = 0;
        for (int g = 0; g < numGroups(); g++) {
          for (int q = firstViewed(g, p); q <= p; q++) {
            for (int w = 0; w < rowWords; w++) {
              sum += wordSum(rows[rank][g][q][w], q, w, g);
            }
            sum %= vocabSize;
          }
        }
        total += sum;
      }
      if (p >= prompt.length - 1) {
        tokens[p + 1] = (int) (total % vocabSize);
      }
    }
    return Arrays.copyOfRange(tokens, prompt.length, length);
  }

  /**
   * The KV rows rank {@code rank} writes for the first {@code length} positions of {@code tokens}
   * in group {@code group}, as a run without any cache reuse writes them: {@code rowWords} words
   * per position, position after position, computed from the tokens alone.
   */
  public long[] referenceRows(int[] tokens, int length, int rank, int group) {
    if (length < 0 || length > tokens.length) {
      throw new IllegalArgumentException(
          "length=" + length + " must be in [0, " + tokens.length + "]");
    }
    if (rank < 0 || rank >= shard.size() || group < 0 || group >= numGroups()) {
      throw new IllegalArgumentException(
          "rank " + rank + " of " + shard.size() + ", group " + group + " of " + numGroups());
    }
    SimModel r = rank == shard.rank() ? this : new SimModel(this, rank);
    long[] rows = new long[length * rowWords];
    long[] previous = new long[rowWords];
    long[] row = new long[rowWords];
    for (int p = 0; p < length; p++) {
      r.referenceRow(tokens[p], p, group, r.hasPrevious(group, p) ? previous : null, row);
      System.arraycopy(row, 0, rows, p * rowWords, rowWords);
      long[] t = previous;
      previous = row;
      row = t;
    }
    return rows;
  }

  /**
   * The words of the row of {@code token} at {@code p} in group {@code g} into {@code out}, from
   * the previous row's words ({@code null}: none read), as the forward writes them layer by layer.
   */
  private void referenceRow(int token, int p, int g, long[] previous, long[] out) {
    for (int l = 0; l < layers; l++) {
      long prev = seed;
      if (previous != null) {
        long h = 0;
        for (int w = first(l); w < first(l) + words(l); w++) {
          h = h * 0x9E3779B97F4A7C15L + previous[w];
        }
        prev = h;
      }
      long h = layerSeed(token, p, g, l, prev);
      for (int w = first(l); w < first(l) + words(l); w++) {
        h = mix(h + w);
        out[w] = h;
      }
    }
  }

  /** Words of one row (a row is {@link #rowBytes()} bytes). */
  public int rowWords() {
    return rowWords;
  }

  /** A copy of {@code other} as rank {@code rank} (for the reference): its rows differ. */
  private SimModel(SimModel other, int rank) {
    this.vocabSize = other.vocabSize;
    this.rowWords = other.rowWords;
    this.rowBytes = other.rowBytes;
    this.layers = other.layers;
    this.windowTokens = other.windowTokens;
    this.seed = other.seed;
    this.collective = other.collective;
    this.shard = new Shard(rank, other.shard.size());
    this.identity = other.identity;
    this.pow16 = other.pow16;
    this.pow32 = other.pow32;
    this.pow48 = other.pow48;
  }

  @Override
  public void close() {}

  /**
   * The Device tier of the sim model: plain memory, every copy done when its call returns, in call
   * order. It does not claim to be host memory ({@link #hostSegment()} is empty), so the engine
   * drives it as it drives a GPU's.
   */
  private static final class Bytes implements DeviceBytes {
    private final Arena arena = Arena.ofShared();
    private final MemorySegment segment;

    Bytes(long tierBytes) {
      this.segment = arena.allocate(tierBytes, 64);
    }

    @Override
    public long byteSize() {
      return segment.byteSize();
    }

    @Override
    public void copyFromHost(MemorySegment src, long dstOffset) {
      MemorySegment.copy(src, 0, segment, dstOffset, src.byteSize());
    }

    @Override
    public void copyToHost(long srcOffset, MemorySegment dst) {
      MemorySegment.copy(segment, srcOffset, dst, 0, dst.byteSize());
    }

    @Override
    public void copyWithin(long srcOffset, long dstOffset, long bytes) {
      MemorySegment.copy(segment, srcOffset, segment, dstOffset, bytes);
    }

    @Override
    public void awaitCopies() {}

    @Override
    public Optional<MemorySegment> hostSegment() {
      return Optional.empty();
    }

    @Override
    public void close() {
      arena.close();
    }
  }
}
