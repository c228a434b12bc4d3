package io.tokenspeed.cuda.model;

import io.tokenspeed.cuda.CudaApi;
import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.DeviceBuffer;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * Prefill and decode times of the GPU forward pass on a synthetic checkpoint, as {@code
 * bin/test-gpu --bench} runs it beside PyTorch on the same card and the same weights. Prints one
 * line per figure: {@code ours <mode> prefill <tokens> <ms>} and {@code ours <mode> decode <batch>
 * <ms per step>} (best of the repeats, after a warm-up). Each mode after the first also prints how
 * far its prefill logits lie from the first mode's (the same prompt: {@code max |diff|}, and
 * whether they are bit-identical).
 *
 * <p>Usage: {@code GpuBench PRESET DIR PREFILL_TOKENS,... DECODE_BATCHES,... CONTEXT MODES} (modes:
 * normal, deterministic, float32-attention: normal GEMMs with the float32 attention, split-kv:
 * normal with the split-KV decode attention for every decode batch, decode only, flash: normal with
 * the flash kernel for every decode batch (the split-KV rule off), decode only, graphs: normal with
 * decode steps replayed as CUDA graphs where they can be, i.e. on {@code gemv_bf16} at up to 8
 * rows, whatever {@code tokenspeed.cuda.graphs} says; eager: normal without graphs; mma, wgmma:
 * normal with that flash kernel for every batch, decode-only ones included, where normal's default
 * on Hopper takes wgmma for prefill and mma for decode), for example {@code llama-1b /tmp/synthetic
 * 2048,8192 1,16,64 512 normal,deterministic}.
 */
public final class GpuBench {
  static final int BLOCK = 16;
  private static final int STEPS = 32;
  private static final int REPEATS = 3;
  private static final int CHUNK = 512;
  private static final int CONTEXT_CHUNK = 8192;

  private GpuBench() {}

  /** Tokens of a restored prefix's suffix ({@link #suffix}): what is left after an L3 restore. */
  private static final int SUFFIX = 64;

  /**
   * The forward of the last {@link #SUFFIX} tokens of {@code ids} over the KV of the ones before
   * them (the prefill just written it), as after an L3 restore: with the prefill attention unsplit
   * and split over the keys (the default rule), best of {@link #REPEATS} after one pass each; then
   * the default again.
   */
  private static void suffix(CudaCausalLm m, CudaKvCache kv, int[] ids, int[] table, String mode) {
    int n = ids.length;
    ForwardBatch batch =
        ForwardBatch.of(
            new ForwardRequest(
                Arrays.copyOfRange(ids, n - SUFFIX, n), n - SUFFIX, everyGroup(kv, table), false));
    double[] best = {Double.MAX_VALUE, Double.MAX_VALUE};
    long splitBefore = m.prefillSplitForwards();
    for (int k = 0; k < 2; k++) {
      m.useSplitKv(k == 0 ? CudaCausalLm.SplitKv.OFF : CudaCausalLm.SplitKv.AUTO);
      for (int r = 0; r <= REPEATS; r++) {
        long s = System.nanoTime();
        m.forward(batch, kv);
        double ms = (System.nanoTime() - s) / 1e6;
        if (r > 0) {
          best[k] = Math.min(best[k], ms);
        }
      }
    }
    m.useSplitKv(CudaCausalLm.SplitKv.AUTO);
    System.out.printf(
        Locale.ROOT,
        "ours %s suffix %d after %d: unsplit %.2f, split %.2f (unsplit / split %.2f; %d of %d"
            + " passes split)%n",
        mode,
        SUFFIX,
        n - SUFFIX,
        best[0],
        best[1],
        best[0] / best[1],
        m.prefillSplitForwards() - splitBefore,
        REPEATS + 1);
  }

  public static void main(String[] args) {
    String preset = args[0];
    Path dir = Path.of(args[1]);
    int[] prefills = ints(args[2]);
    int[] batches = ints(args[3]);
    int context = Integer.parseInt(args[4]);
    List<String> modes = List.of(args[5].split(","));
    long t0 = System.nanoTime();
    Path folder =
        SyntheticCheckpoints.materialize(SyntheticCheckpoints.PREFIX + preset, 0, DType.BF16, dir);
    System.out.printf(
        Locale.ROOT,
        "checkpoint %s in %.1f s: %s%n",
        preset,
        (System.nanoTime() - t0) / 1e9,
        folder);
    Map<Integer, float[]> firstLogits = new HashMap<>();
    try (CudaDevice device = CudaDevice.open(0)) {
      // the commit bin/gpu-bundle built (bin/test-gpu passes it on), so that figures name it
      System.out.printf(
          Locale.ROOT, "build: commit %s%n", System.getProperty("tokenspeed.commit", "unknown"));
      double copyBytesPerSecond = copyBandwidth(device);
      System.out.printf(
          Locale.ROOT,
          "device copy bandwidth %.0f GB/s (%d MiB copied device to device, read + written)%n",
          copyBytesPerSecond / 1e9,
          COPY_BYTES >> 20);
      for (String mode : modes) {
        boolean det = mode.equals("deterministic");
        long l0 = System.nanoTime();
        CudaCausalLm.Attention attention =
            mode.equals("float32-attention") ? CudaCausalLm.Attention.TILED : null;
        try (CudaCausalLm m = CudaCausalLm.load(device, folder, preset, "bench", det, attention)) {
          // split-kv: every decode batch splits; flash: none does (normal: the default rule)
          boolean splitKv = mode.equals("split-kv");
          boolean flash = mode.equals("flash");
          if (splitKv || flash) {
            m.useSplitKv(splitKv);
          }
          if (mode.equals("mma") || mode.equals("wgmma") || mode.equals("tma")) {
            // every batch on that flash kernel, decode-only ones too (normal: the default rule)
            m.useFlash(CudaCausalLm.FlashKernel.valueOf(mode.toUpperCase(Locale.ROOT)));
          }
          if (mode.equals("graphs")) {
            m.useGraphs(true); // replays only where every product is the project's own kernel
          } else if (mode.equals("eager")) {
            m.useGraphs(false); // every step launched kernel by kernel
          }
          System.out.printf(
              Locale.ROOT,
              "ours %s load %.1f s, attention %s%n",
              mode,
              (System.nanoTime() - l0) / 1e9,
              m.attentionName());
          int blocks = kvBlocks(prefills, batches, context);
          try (CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(BLOCK, BLOCK), blocks)) {
            SplittableRandom rnd = new SplittableRandom(1);
            // prefill batches never split: the split-kv and flash modes time decode only
            for (int n : splitKv || flash ? new int[0] : prefills) {
              if (!List.of("normal", "mma", "wgmma", "tma").contains(mode) && n > 8192) {
                continue; // the slower modes' cost is clear at 8k; 32k would take minutes
              }
              if (n > m.maxPositions()) {
                System.out.printf(
                    Locale.ROOT,
                    "ours %s prefill %d skipped: beyond max_position_embeddings %d%n",
                    mode,
                    n,
                    m.maxPositions());
                continue;
              }
              int[] ids = rnd.ints(n, 0, m.vocabSize()).toArray();
              int[] table = sequential(1, Math.ceilDiv(n, BLOCK));
              float[][] last = new float[1][];
              double best = prefillMs(m, kv, ids, table, last);
              float[] logits = last[0];
              System.out.printf(Locale.ROOT, "ours %s prefill %d %.2f%n", mode, n, best);
              // the split applies to the tensor-core attention only (not to the hybrid models')
              if (List.of("normal", "wgmma", "tma").contains(mode)
                  && n >= 2 * SUFFIX
                  && m.attentionName().startsWith("cuda-flash")) {
                suffix(m, kv, ids, table, mode);
              }
              float[] before = firstLogits.putIfAbsent(n, logits);
              if (before != null) {
                double diff = 0;
                for (int i = 0; i < logits.length; i++) {
                  diff = Math.max(diff, Math.abs(logits[i] - before[i]));
                }
                System.out.printf(
                    Locale.ROOT,
                    "ours %s prefill %d logits vs %s: max |diff| %.3g, bit-identical %s%n",
                    mode,
                    n,
                    modes.get(0),
                    diff,
                    Arrays.equals(logits, before));
              }
            }
            // the engine's way: chunks of 512 tokens, each attending over the chunks before it
            for (int n : splitKv ? new int[0] : prefills) {
              if (n > 8192 || n > m.maxPositions()) {
                continue;
              }
              int[] ids = rnd.ints(n, 0, m.vocabSize()).toArray();
              int[] table = sequential(1, Math.ceilDiv(n, BLOCK));
              double first = 0;
              double best = Double.MAX_VALUE;
              for (int r = 0; r <= REPEATS; r++) {
                long s = System.nanoTime();
                for (int from = 0; from < n; from += CHUNK) {
                  int to = Math.min(n, from + CHUNK);
                  m.forward(
                      ForwardBatch.of(
                          new ForwardRequest(
                              Arrays.copyOfRange(ids, from, to),
                              from,
                              everyGroup(kv, table),
                              false)),
                      kv);
                }
                double ms = (System.nanoTime() - s) / 1e6;
                if (r == 0) {
                  first = ms;
                } else {
                  best = Math.min(best, ms);
                }
              }
              System.out.printf(
                  Locale.ROOT,
                  "ours %s chunked-prefill %d (chunks of %d) %.2f (first pass %.2f)%n",
                  mode,
                  n,
                  CHUNK,
                  best,
                  first);
            }
            for (int b : batches) {
              double[] timed = decodeMs(m, kv, b, context, rnd);
              double best = timed[0];
              double bestEnqueue = timed[1];
              // the host's share: issuing the step's launches, while the GPU may already compute
              System.out.printf(
                  Locale.ROOT,
                  "ours %s decode %d %.3f (host issues its launches in %.3f)%n",
                  mode,
                  b,
                  best,
                  bestEnqueue);
              // the floor: the bytes the step must read (weights once, each request's KV) at the
              // copy bandwidth measured above
              long kvBytes =
                  (long) b
                      * (context + STEPS / 2)
                      * (m.cacheLayout(BLOCK, BLOCK).group(0).bytesPerBlock() / BLOCK);
              double floorMs = (m.weightBytesPerStep() + kvBytes) / copyBytesPerSecond * 1e3;
              System.out.printf(
                  Locale.ROOT,
                  "ours %s decode %d floor %.3f ms (%.2f GB of weights + %.3f GB of KV at %.0f"
                      + " GB/s): step / floor %.2f%n",
                  mode,
                  b,
                  floorMs,
                  m.weightBytesPerStep() / 1e9,
                  kvBytes / 1e9,
                  copyBytesPerSecond / 1e9,
                  best / floorMs);
            }
          }
        }
      }
    }
  }

  /**
   * The best of {@link #REPEATS} forwards of {@code ids} as one prefill over blocks {@code table},
   * after one untimed pass; {@code last[0]} receives the last pass's logits.
   */
  static double prefillMs(CudaCausalLm m, CudaKvCache kv, int[] ids, int[] table, float[][] last) {
    double best = Double.MAX_VALUE;
    for (int r = 0; r <= REPEATS; r++) {
      long s = System.nanoTime();
      last[0] =
          m.forward(ForwardBatch.of(new ForwardRequest(ids, 0, everyGroup(kv, table), false)), kv)
              .logits(0);
      double ms = (System.nanoTime() - s) / 1e6;
      if (r > 0) {
        best = Math.min(best, ms);
      }
    }
    return best;
  }

  /**
   * A decode step of {@code batch} requests over {@code context} tokens each: fills the requests'
   * KV (one request at a time, in chunks, so that long contexts at large batches fit the scratch),
   * then times {@link #STEPS} steps, best of {@link #REPEATS} after one untimed pass. Returns the
   * milliseconds per step and the host's share of them (issuing the step's launches).
   */
  static double[] decodeMs(
      CudaCausalLm m, CudaKvCache kv, int batch, int context, SplittableRandom rnd) {
    int rows = Math.ceilDiv(context + STEPS + 1, BLOCK);
    List<int[]> tables = new ArrayList<>();
    for (int i = 0; i < batch; i++) {
      int[] table = sequential(1 + i * rows, rows);
      tables.add(table);
      int[] ids = rnd.ints(context, 0, m.vocabSize()).toArray();
      for (int from = 0; from < context; from += CONTEXT_CHUNK) {
        int to = Math.min(context, from + CONTEXT_CHUNK);
        m.forward(
            ForwardBatch.of(
                new ForwardRequest(
                    Arrays.copyOfRange(ids, from, to), from, everyGroup(kv, table), false)),
            kv);
      }
    }
    double best = Double.MAX_VALUE;
    double bestEnqueue = 0;
    for (int r = 0; r <= REPEATS; r++) {
      long s = System.nanoTime();
      long e0 = m.enqueueNanos();
      for (int step = 0; step < STEPS; step++) {
        List<ForwardRequest> decode = new ArrayList<>();
        for (int i = 0; i < batch; i++) {
          // each repeat decodes the same positions again: same work every time
          decode.add(
              new ForwardRequest(
                  new int[] {rnd.nextInt(m.vocabSize())},
                  context + step,
                  everyGroup(kv, tables.get(i)),
                  false));
        }
        m.forward(new ForwardBatch(decode), kv);
      }
      double ms = (System.nanoTime() - s) / 1e6 / STEPS;
      if (r > 0 && ms < best) {
        best = ms;
        bestEnqueue = (m.enqueueNanos() - e0) / 1e6 / STEPS;
      }
    }
    return new double[] {best, bestEnqueue};
  }

  /** KV blocks for the longest prefill and the largest decode batch, with room to spare. */
  static int kvBlocks(int[] prefills, int[] batches, int context) {
    int maxBatch = Arrays.stream(batches).max().orElse(0);
    int maxTokens =
        Math.max(Arrays.stream(prefills).max().orElse(0), maxBatch * (context + STEPS + 1));
    return 2 + Math.ceilDiv(maxTokens, BLOCK) + 64;
  }

  /** Bytes of the device-to-device copy that measures the bandwidth. */
  private static final long COPY_BYTES = 1L << 30;

  /**
   * The device's copy bandwidth: the best of five {@code cudaMemcpyAsync} device-to-device copies
   * of {@link #COPY_BYTES}, timed between events, counting the bytes read and written.
   */
  static double copyBandwidth(CudaDevice device) {
    CudaApi api = device.api();
    long start = api.eventCreate(0);
    long end = api.eventCreate(0);
    try (DeviceBuffer a = device.allocate(COPY_BYTES);
        DeviceBuffer b = device.allocate(COPY_BYTES)) {
      double best = Double.MAX_VALUE;
      for (int i = -1; i < 5; i++) {
        api.eventRecord(start, device.stream());
        api.memcpyAsync(b.pointer(), a.pointer(), COPY_BYTES, device.stream());
        api.eventRecord(end, device.stream());
        device.synchronize();
        if (i >= 0) {
          best = Math.min(best, api.eventElapsedMs(start, end));
        }
      }
      return 2.0 * COPY_BYTES / (best / 1e3);
    } finally {
      api.eventDestroy(start);
      api.eventDestroy(end);
    }
  }

  /**
   * The same block ids for every cache group of {@code kv} (each group has a pool of its own, of
   * the same number of blocks): a hybrid model's sliding-window or State group as its full one.
   */
  static int[][] everyGroup(CudaKvCache kv, int[] table) {
    int[][] t = new int[kv.layout().numGroups()][];
    Arrays.fill(t, table);
    return t;
  }

  static int[] sequential(int first, int n) {
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = first + i;
    }
    return t;
  }

  static int[] ints(String csv) {
    return Arrays.stream(csv.split(","))
        .filter(s -> !s.isBlank())
        .mapToInt(Integer::parseInt)
        .toArray();
  }
}
