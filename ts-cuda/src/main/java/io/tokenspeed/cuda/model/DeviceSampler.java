package io.tokenspeed.cuda.model;

import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.DeviceBuffer;
import io.tokenspeed.cuda.PinnedHost;
import io.tokenspeed.model.sampling.Penalties;
import io.tokenspeed.model.sampling.RowSampling;
import io.tokenspeed.model.sampling.SampledRow;
import io.tokenspeed.model.sampling.Sampler;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Samples the next tokens from logits rows that stay in GPU memory: the {@code sample_rows} kernel
 * of {@code kernels.cu} runs the CPU {@link Sampler}'s arithmetic, one block per row, and only the
 * chosen ids — with their log probabilities and the most likely alternatives for the rows that ask
 * — come down. A round's rows cost one upload of their settings (48 bytes a row), one launch and
 * one download (192 bytes a row), however large the vocabulary.
 *
 * <pre>
 *   host: RowSampling ──► SampleRow {temperature, top_p, min_p, u = Sampler.uniform(seed, step),
 *                                    top_k, num_top, logit_row}    pinned, copied up
 *   device: sample_rows<<<rows, 1024>>>(logits, vocab, rows, outs, Sampler.weightScale(vocab))
 *   host: SampleOut {token, error, logprob, top ids and logprobs}  copied down ──► SampledRow
 * </pre>
 *
 * <p>The same row gives the host sampler's token: the kernel's weights are the sampler's integers,
 * whose sums do not depend on the order they are added in, and its order questions are answered
 * over the sampler's order keys. Log probabilities are those of {@code LogSoftmax} up to the
 * rounding of a sum of doubles taken in another order (the normalizer's last bits), so they may
 * differ from the host's by an ulp of a float. A row with a NaN or +Infinity, or with every logit
 * -Infinity, fails with the host sampler's message.
 *
 * <p>A row with penalties ({@link Penalties}) is first copied on the device and penalized there
 * ({@code penalize_rows}: the same float operations as {@link Penalties#apply}); the token is drawn
 * from the copy, the log probabilities read the raw row. Its distinct prior ids and their output
 * counts go up with the row's settings (8 bytes an id).
 *
 * <p>The caller's thread only, on the device's compute stream, after the kernels that wrote the
 * logits; not thread-safe.
 */
final class DeviceSampler implements AutoCloseable {
  static final int ROW_BYTES = 48;
  static final int OUT_BYTES = 192;
  static final int PENALTY_BYTES = 32;
  private static final int THREADS = 1024;
  private static final int MAX_TOP = 20;

  private final CudaDevice device;
  private final int vocab;
  private final double scale;
  private int capacity;
  private DeviceBuffer rowsDevice;
  private DeviceBuffer outsDevice;
  private Arena arena;
  private MemorySegment rowsHost;
  private MemorySegment outsHost;
  private PinnedHost rowsPinned;
  private PinnedHost outsPinned;

  // the penalized rows: their copies, their settings and their (id, count) pairs, grown as needed
  private int penalizedCapacity;
  private DeviceBuffer penalizedDevice;
  private int pairCapacity;
  private DeviceBuffer pairsDevice;
  private DeviceBuffer penaltyRowsDevice;
  private Arena penaltyArena;
  private MemorySegment pairsHost;
  private MemorySegment penaltyRowsHost;
  private PinnedHost pairsPinned;
  private PinnedHost penaltyRowsPinned;

  DeviceSampler(CudaDevice device, int vocab) {
    this.device = device;
    this.vocab = vocab;
    this.scale = Sampler.weightScale(vocab);
  }

  /**
   * The tokens of {@code rows} (null entries are skipped and give null), row {@code i} sampled from
   * row {@code logitRows[i]} of the {@code [rows][vocab]} float32 matrix at {@code logits}. Waits
   * for the compute stream.
   *
   * @throws IllegalArgumentException for a row with a NaN or +Infinity logit, or with every logit
   *     -Infinity (the host sampler's message)
   */
  List<SampledRow> sample(long logits, int[] logitRows, List<RowSampling> rows) {
    int n = 0;
    for (RowSampling r : rows) {
      n += r == null ? 0 : 1;
    }
    List<SampledRow> out = new ArrayList<>(Arrays.asList(new SampledRow[rows.size()]));
    if (n == 0) {
      // a batch of prompt chunks that end no prompt: nothing to sample, but the caller's contract
      // still holds (the forward has finished when this returns), for the copies the engine
      // issues next read what it wrote: a Device → Host copy of a page on the copy stream would
      // otherwise race the forward still writing it
      device.synchronize();
      return out;
    }
    ensure(n);
    int penalized = 0;
    int pairs = 0;
    for (RowSampling r : rows) {
      if (r != null && r.penalties() != null) {
        penalized++;
        pairs += r.penalties().ids().length;
      }
    }
    if (penalized > 0) {
      ensurePenalties(penalized, pairs);
    }
    int j = 0;
    int p = 0;
    int pair = 0;
    for (int i = 0; i < rows.size(); i++) {
      RowSampling r = rows.get(i);
      if (r == null) {
        continue;
      }
      SamplingParams sp = r.params();
      long at = (long) j * ROW_BYTES;
      rowsHost.set(ValueLayout.JAVA_DOUBLE, at, sp.temperature());
      rowsHost.set(ValueLayout.JAVA_DOUBLE, at + 8, sp.topP());
      rowsHost.set(ValueLayout.JAVA_DOUBLE, at + 16, sp.minP());
      double u = sp.isGreedy() ? 0 : Sampler.uniform(r.seed(), r.step());
      rowsHost.set(ValueLayout.JAVA_DOUBLE, at + 24, u);
      rowsHost.set(ValueLayout.JAVA_INT, at + 32, sp.isTopKOn() ? sp.topK() : 0);
      rowsHost.set(ValueLayout.JAVA_INT, at + 36, r.topLogprobs());
      rowsHost.set(ValueLayout.JAVA_INT, at + 40, logitRows[i]);
      Penalties pen = r.penalties();
      rowsHost.set(ValueLayout.JAVA_INT, at + 44, pen == null ? -1 : p);
      if (pen != null) {
        long pa = (long) p * PENALTY_BYTES;
        int[] ids = pen.ids();
        int[] counts = pen.outputCounts();
        penaltyRowsHost.set(ValueLayout.JAVA_INT, pa, logitRows[i]);
        penaltyRowsHost.set(ValueLayout.JAVA_INT, pa + 4, p);
        penaltyRowsHost.set(ValueLayout.JAVA_INT, pa + 8, pair);
        penaltyRowsHost.set(ValueLayout.JAVA_INT, pa + 12, ids.length);
        penaltyRowsHost.set(ValueLayout.JAVA_FLOAT, pa + 16, pen.presence());
        penaltyRowsHost.set(ValueLayout.JAVA_FLOAT, pa + 20, pen.frequency());
        penaltyRowsHost.set(ValueLayout.JAVA_FLOAT, pa + 24, pen.repetition());
        penaltyRowsHost.set(ValueLayout.JAVA_INT, pa + 28, 0);
        MemorySegment.copy(ids, 0, pairsHost, ValueLayout.JAVA_INT, 4L * pair, ids.length);
        long countsAt = 4L * (pairCapacity + pair);
        MemorySegment.copy(counts, 0, pairsHost, ValueLayout.JAVA_INT, countsAt, ids.length);
        pair += ids.length;
        p++;
      }
      j++;
    }
    long stream = device.stream();
    device
        .api()
        .memcpyAsync(rowsDevice.pointer(), rowsHost.address(), (long) n * ROW_BYTES, stream);
    long penalizedRows = 0L;
    if (penalized > 0) {
      long rowBytes = (long) penalized * PENALTY_BYTES;
      device
          .api()
          .memcpyAsync(penaltyRowsDevice.pointer(), penaltyRowsHost.address(), rowBytes, stream);
      long idBytes = 4L * pair;
      long countsAt = 4L * pairCapacity;
      device.api().memcpyAsync(pairsDevice.pointer(), pairsHost.address(), idBytes, stream);
      device
          .api()
          .memcpyAsync(
              pairsDevice.pointer() + countsAt, pairsHost.address() + countsAt, idBytes, stream);
      device.launch(
          "penalize_rows",
          penalized,
          1,
          THREADS,
          0,
          logits,
          penalizedDevice.pointer(),
          vocab,
          penaltyRowsDevice.pointer(),
          pairsDevice.pointer(),
          pairsDevice.pointer() + 4L * pairCapacity);
      penalizedRows = penalizedDevice.pointer();
    }
    device.launch(
        "sample_rows",
        n,
        1,
        THREADS,
        0,
        logits,
        penalizedRows,
        vocab,
        rowsDevice.pointer(),
        outsDevice.pointer(),
        scale);
    device
        .api()
        .memcpyAsync(outsHost.address(), outsDevice.pointer(), (long) n * OUT_BYTES, stream);
    device.synchronize();
    j = 0;
    for (int i = 0; i < rows.size(); i++) {
      RowSampling r = rows.get(i);
      if (r == null) {
        continue;
      }
      out.set(i, read((long) j * OUT_BYTES, r.topLogprobs()));
      j++;
    }
    return out;
  }

  private SampledRow read(long at, int topLogprobs) {
    int error = outsHost.get(ValueLayout.JAVA_INT, at + 4);
    if (error == 1) {
      int pos = outsHost.get(ValueLayout.JAVA_INT, at + 8);
      float value = Float.intBitsToFloat(outsHost.get(ValueLayout.JAVA_INT, at + 12));
      throw new IllegalArgumentException(
          "logit at token id " + pos + " is " + value + ": logits must be finite or -Infinity");
    }
    if (error == 2) {
      throw new IllegalArgumentException(
          "every logit is -Infinity (vocabSize=" + vocab + "): no token can be sampled");
    }
    int token = outsHost.get(ValueLayout.JAVA_INT, at);
    if (topLogprobs == TokenLogprobs.NO_LOGPROBS) {
      return new SampledRow(token, null);
    }
    float logprob = outsHost.get(ValueLayout.JAVA_FLOAT, at + 16);
    int numTop = outsHost.get(ValueLayout.JAVA_INT, at + 20);
    int[] ids = new int[numTop];
    float[] lps = new float[numTop];
    for (int k = 0; k < numTop; k++) {
      ids[k] = outsHost.get(ValueLayout.JAVA_INT, at + 24 + 4L * k);
      lps[k] = outsHost.get(ValueLayout.JAVA_FLOAT, at + 24 + 4L * MAX_TOP + 4L * k);
    }
    return new SampledRow(token, new TokenLogprobs(token, logprob, ids, lps));
  }

  /** Room for {@code n} rows: the buffers grow to at least twice their size. */
  private void ensure(int n) {
    if (n <= capacity) {
      return;
    }
    int size = Math.max(n, Math.max(64, 2 * capacity));
    release();
    rowsDevice = device.allocate((long) size * ROW_BYTES);
    outsDevice = device.allocate((long) size * OUT_BYTES);
    arena = Arena.ofShared();
    rowsHost = arena.allocate((long) size * ROW_BYTES, 64);
    outsHost = arena.allocate((long) size * OUT_BYTES, 64);
    rowsPinned = PinnedHost.register(device, rowsHost);
    outsPinned = PinnedHost.register(device, outsHost);
    capacity = size;
  }

  /**
   * Room for {@code rows} penalized copies and {@code pairs} (id, count) pairs: each grows to at
   * least twice its size. The pairs' buffer holds every id first, then every count, {@link
   * #pairCapacity} apart.
   */
  private void ensurePenalties(int rows, int pairs) {
    if (penaltyArena == null) {
      penaltyArena = Arena.ofShared();
    }
    if (rows > penalizedCapacity) {
      int size = Math.max(rows, Math.max(8, 2 * penalizedCapacity));
      if (penalizedDevice != null) {
        device.synchronize();
        penalizedDevice.close();
        penaltyRowsPinned.close();
        penaltyRowsDevice.close();
      }
      penalizedDevice = device.allocate((long) size * vocab * Float.BYTES);
      penaltyRowsDevice = device.allocate((long) size * PENALTY_BYTES);
      penaltyRowsHost = penaltyArena.allocate((long) size * PENALTY_BYTES, 64);
      penaltyRowsPinned = PinnedHost.register(device, penaltyRowsHost);
      penalizedCapacity = size;
    }
    if (pairs > pairCapacity || pairsDevice == null) {
      int size = Math.max(pairs, Math.max(4096, 2 * pairCapacity));
      if (pairsDevice != null) {
        device.synchronize();
        pairsPinned.close();
        pairsDevice.close();
      }
      pairsDevice = device.allocate(8L * size);
      pairsHost = penaltyArena.allocate(8L * size, 64);
      pairsPinned = PinnedHost.register(device, pairsHost);
      pairCapacity = size;
    }
  }

  private void release() {
    if (capacity == 0) {
      return;
    }
    device.synchronize();
    rowsPinned.close();
    outsPinned.close();
    arena.close();
    rowsDevice.close();
    outsDevice.close();
    capacity = 0;
  }

  @Override
  public void close() {
    release();
    if (penalizedDevice != null) {
      device.synchronize();
      penalizedDevice.close();
      penaltyRowsPinned.close();
      penaltyRowsDevice.close();
      penalizedDevice = null;
    }
    if (pairsDevice != null) {
      pairsPinned.close();
      pairsDevice.close();
      pairsDevice = null;
    }
    if (penaltyArena != null) {
      penaltyArena.close();
      penaltyArena = null;
    }
  }
}
