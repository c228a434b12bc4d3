package io.tokenspeed.cuda.model;

import io.tokenspeed.cuda.CudaApi;
import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.DeviceBuffer;
import io.tokenspeed.cuda.DeviceCollective;
import io.tokenspeed.cuda.Nccl;
import io.tokenspeed.cuda.NcclCommunicator;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.parallel.SharedMemoryCollective;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * One rank of a tensor-parallel replica over GPUs, timed as {@link GpuBench} times one GPU: rank r
 * of T runs on GPU r with its share of a synthetic checkpoint's weights ({@link
 * CudaCausalLm#load(CudaDevice, Path, String, String, boolean, Shard, DeviceCollective)}), the
 * partial products summed through NCCL (its id agreed over a shared-memory host collective, as the
 * engine's ranks agree on it). Every rank runs the same forwards on the same ids, so the ranks meet
 * in each layer's all-reduce and rank 0's clock times the replica. Rank 0 prints {@code ours tp T
 * prefill <tokens> <ms>}, {@code ours tp T decode <batch> <ms per step>} and, first, NCCL's
 * all-reduce alone at the sizes a forward sums ({@code ours tp T allreduce <rows> x <hidden> <µs>}:
 * float32, the activations' type, best of five runs of 20 calls timed between events), with the
 * share of a decode step the 2 all-reduces per layer take. At T = 1 the model loads unsharded with
 * no collective: the baseline.
 *
 * <p>Usage: {@code TpGpuBench RANK SIZE PRESET DIR PREFILL_TOKENS,... DECODE_BATCHES,... CONTEXT
 * COLLECTIVE_FILE}; {@code bin/test-gpu --tp} starts the ranks (with {@code NCCL_NVLS_ENABLE=0}),
 * after a TP 1 run has written the checkpoint under DIR.
 */
public final class TpGpuBench {
  private static final int CALLS = 20;

  private TpGpuBench() {}

  public static void main(String[] args) throws Exception {
    int rank = Integer.parseInt(args[0]);
    int size = Integer.parseInt(args[1]);
    String preset = args[2];
    Path dir = Path.of(args[3]);
    int[] prefills = GpuBench.ints(args[4]);
    int[] batches = GpuBench.ints(args[5]);
    int context = Integer.parseInt(args[6]);
    Path file = Path.of(args[7]);
    Path folder =
        SyntheticCheckpoints.materialize(SyntheticCheckpoints.PREFIX + preset, 0, DType.BF16, dir);
    try (CudaDevice device = CudaDevice.open(rank);
        Collective host =
            size == 1
                ? Collective.single()
                : SharedMemoryCollective.open(file, rank, size, 1 << 16, Duration.ofMinutes(10))) {
      device.bind();
      NcclCommunicator nccl = size == 1 ? null : Nccl.open(Nccl.agreeOnId(host), rank, size);
      try (CudaCausalLm m =
          nccl == null
              ? CudaCausalLm.load(device, folder, preset, "bench", false)
              : CudaCausalLm.load(
                  device, folder, preset, "bench", false, new Shard(rank, size), nccl)) {
        boolean print = rank == 0;
        if (print) {
          System.out.printf(
              Locale.ROOT,
              "build: commit %s%nours tp %d rank 0 on GPU 0, attention %s%n",
              System.getProperty("tokenspeed.commit", "unknown"),
              size,
              m.attentionName());
        }
        if (nccl != null) {
          allReduces(device, nccl, m.hiddenSize(), batches, prefills, print);
        }
        try (CudaKvCache kv =
            new CudaKvCache(
                device,
                m.cacheLayout(GpuBench.BLOCK, GpuBench.BLOCK),
                GpuBench.kvBlocks(prefills, batches, context))) {
          SplittableRandom rnd = new SplittableRandom(1); // the same ids on every rank
          float[][] last = new float[1][];
          for (int n : prefills) {
            int[] ids = rnd.ints(n, 0, m.vocabSize()).toArray();
            int[] table = GpuBench.sequential(1, Math.ceilDiv(n, GpuBench.BLOCK));
            double ms = GpuBench.prefillMs(m, kv, ids, table, last);
            if (print) {
              System.out.printf(Locale.ROOT, "ours tp %d prefill %d %.2f%n", size, n, ms);
            }
          }
          for (int b : batches) {
            double[] timed = GpuBench.decodeMs(m, kv, b, context, rnd);
            if (print) {
              System.out.printf(
                  Locale.ROOT,
                  "ours tp %d decode %d %.3f (host issues its launches in %.3f)%n",
                  size,
                  b,
                  timed[0],
                  timed[1]);
            }
          }
        }
      } finally {
        if (nccl != null) {
          nccl.close();
        }
      }
    }
  }

  /**
   * NCCL's all-reduce alone over {@code rows × hidden} floats for each decode batch and prefill
   * length: the time of one call (best of five runs of {@link #CALLS} calls on the device's stream,
   * between events) and its bus bandwidth as NCCL's tests define it (2 (T - 1) / T of the bytes
   * over the time).
   */
  private static void allReduces(
      CudaDevice device,
      NcclCommunicator nccl,
      int hidden,
      int[] batches,
      int[] prefills,
      boolean print) {
    CudaApi api = device.api();
    long start = api.eventCreate(0);
    long end = api.eventCreate(0);
    int[] rows = new int[batches.length + prefills.length];
    System.arraycopy(batches, 0, rows, 0, batches.length);
    System.arraycopy(prefills, 0, rows, batches.length, prefills.length);
    try {
      for (int r : rows) {
        long count = (long) r * hidden;
        try (DeviceBuffer buffer = device.allocateZeroed(4 * count)) {
          double best = Double.MAX_VALUE;
          for (int run = -1; run < 5; run++) {
            api.eventRecord(start, device.stream());
            for (int c = 0; c < CALLS; c++) {
              nccl.allReduceSum(buffer.pointer(), count, device.stream());
            }
            api.eventRecord(end, device.stream());
            device.synchronize();
            if (run >= 0) {
              best = Math.min(best, api.eventElapsedMs(start, end) * 1e3 / CALLS);
            }
          }
          nccl.checkAsyncError();
          if (print) {
            double busGbps =
                2.0 * (nccl.size() - 1) / nccl.size() * 4 * count / (best * 1e-6) / 1e9;
            System.out.printf(
                Locale.ROOT,
                "ours tp %d allreduce %d x %d %.1f us (bus %.1f GB/s)%n",
                nccl.size(),
                r,
                hidden,
                best,
                busGbps);
          }
        }
      }
    } finally {
      api.eventDestroy(start);
      api.eventDestroy(end);
    }
  }
}
