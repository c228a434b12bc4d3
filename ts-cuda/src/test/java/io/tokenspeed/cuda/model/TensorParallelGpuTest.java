package io.tokenspeed.cuda.model;

import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.argmax;
import static io.tokenspeed.cuda.model.CudaCausalLmGpuTest.relative;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.DeviceCollective;
import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.Callable;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The sharded GPU model on one GPU: T ranks of a tensor-parallel replica, each its own {@link
 * CudaCausalLm} with its share of the weights and its own KV, run side by side on one device and
 * summed through {@link OneGpu} (an all-reduce over the ranks' buffers on the device's one stream,
 * in rank order), against the unsharded model: prefill logits and greedy decode. What several GPUs
 * add, NCCL between processes, is {@code NcclGpuTest}'s; the sharding's arithmetic is checked here.
 */
class TensorParallelGpuTest extends OnTheGpu {

  /**
   * The ranks' all-reduce on one device: each rank names its buffer and waits at a barrier; the
   * last to arrive, before any leaves, enqueues on the shared stream the sum of every rank's buffer
   * into rank 0's ({@code add_rows}, in rank order) and its copy back to the others. Every rank's
   * earlier kernels are on that stream before the barrier, its later ones after.
   */
  static final class OneGpu {
    final CudaDevice device;
    final int size;
    final long[] buffers;
    long count;
    final CyclicBarrier barrier;

    OneGpu(CudaDevice device, int size) {
      this.device = device;
      this.size = size;
      this.buffers = new long[size];
      this.barrier = new CyclicBarrier(size, this::sum);
    }

    private void sum() {
      int rows = count % 1024 == 0 ? Math.toIntExact(count / 1024) : 1;
      int n = Math.toIntExact(count / rows);
      for (int r = 1; r < size; r++) {
        device.launch("add_rows", rows, 1, 256, 0, buffers[0], buffers[r], n);
      }
      for (int r = 1; r < size; r++) {
        device.api().memcpyAsync(buffers[r], buffers[0], 4 * count, device.stream());
      }
    }

    DeviceCollective rank(int rank) {
      return new DeviceCollective() {
        @Override
        public int rank() {
          return rank;
        }

        @Override
        public int size() {
          return size;
        }

        @Override
        public void allReduceSum(long buffer, long n, long stream) {
          buffers[rank] = buffer;
          count = n;
          try {
            barrier.await(60, TimeUnit.SECONDS);
          } catch (InterruptedException | BrokenBarrierException | TimeoutException e) {
            throw new IllegalStateException("rank " + rank + ": the all-reduce broke", e);
          }
        }

        @Override
        public void close() {}
      };
    }
  }

  /** The same call on every rank at once; returns each rank's result. */
  static <T> List<T> onEveryRank(ExecutorService pool, List<Callable<T>> calls) throws Exception {
    List<Future<T>> futures = new ArrayList<>();
    for (Callable<T> c : calls) {
      futures.add(pool.submit(c));
    }
    List<T> out = new ArrayList<>();
    for (Future<T> f : futures) {
      out.add(f.get(300, TimeUnit.SECONDS));
    }
    return out;
  }

  @ParameterizedTest(name = "{0} {1} at TP {2}")
  @CsvSource({
    "llama, F32, 2",
    "llama, F32, 4",
    "qwen2, F32, 2",
    "gemma3, F32, 2",
    "jamba, F32, 2",
    "synthetic:llama-100m, BF16, 2",
    "synthetic:llama-100m, BF16, 4"
  })
  void shouldComputeTheUnshardedModelsLogitsAndIds(
      String name, String dtype, int size, @TempDir Path dir) throws Exception {
    DType type = DType.valueOf(dtype);
    Path folder =
        name.startsWith("synthetic:")
            ? SyntheticCheckpoints.materialize(name, 3, type, dir)
            : Fixtures.extract(name, dir);
    boolean det = type == DType.BF16; // bf16: the fixed-order products on every rank
    int steps = 8;
    int[] ids;
    float[] want;
    int[] wantIds = new int[steps];
    try (CudaCausalLm m = CudaCausalLm.load(device, folder, name, "test", det);
        CudaKvCache kv = new CudaKvCache(device, m.cacheLayout(16, 4), 256)) {
      ids = new java.util.Random(7).ints(150, 0, m.vocabSize()).toArray();
      int[][] tables = RecurrentGpuTest.tables(kv, 1, ids.length + steps);
      want = CudaCausalLmGpuTest.prefill(m, kv, ids, tables, 64);
      int next = argmax(want, (ids.length - 1) * m.vocabSize(), m.vocabSize());
      for (int s = 0; s < steps; s++) {
        wantIds[s] = next;
        float[] row =
            m.forward(
                    ForwardBatch.of(
                        new ForwardRequest(new int[] {next}, ids.length + s, tables, false)),
                    kv)
                .last(0);
        next = argmax(row, 0, row.length);
      }
    }
    OneGpu oneGpu = new OneGpu(device, size);
    List<CudaCausalLm> ranks = new ArrayList<>();
    List<CudaKvCache> caches = new ArrayList<>();
    ExecutorService pool = Executors.newFixedThreadPool(size);
    try {
      for (int r = 0; r < size; r++) {
        CudaCausalLm m =
            CudaCausalLm.load(
                device, folder, name, "test", det, new Shard(r, size), oneGpu.rank(r));
        ranks.add(m);
        caches.add(new CudaKvCache(device, m.cacheLayout(16, 4), 256));
      }
      int vocab = ranks.getFirst().vocabSize();
      List<int[][]> tables = new ArrayList<>();
      for (int r = 0; r < size; r++) {
        tables.add(RecurrentGpuTest.tables(caches.get(r), 1, ids.length + steps));
      }
      List<Callable<float[]>> prefills = new ArrayList<>();
      for (int r = 0; r < size; r++) {
        int rank = r;
        prefills.add(
            () ->
                CudaCausalLmGpuTest.prefill(
                    ranks.get(rank), caches.get(rank), ids, tables.get(rank), 64));
      }
      List<float[]> got = onEveryRank(pool, prefills);
      for (int r = 1; r < size; r++) {
        assertArrayEquals(got.getFirst(), got.get(r), "rank " + r + " vs rank 0: the same sums");
      }
      double err = relative(got.getFirst(), want);
      int[] gotIds = new int[steps];
      int next = argmax(got.getFirst(), (ids.length - 1) * vocab, vocab);
      for (int s = 0; s < steps; s++) {
        gotIds[s] = next;
        int position = ids.length + s;
        int token = next;
        List<Callable<float[]>> steps1 = new ArrayList<>();
        for (int r = 0; r < size; r++) {
          int rank = r;
          steps1.add(
              () ->
                  ranks
                      .get(rank)
                      .forward(
                          ForwardBatch.of(
                              new ForwardRequest(
                                  new int[] {token}, position, tables.get(rank), false)),
                          caches.get(rank))
                      .last(0));
        }
        float[] row = onEveryRank(pool, steps1).getFirst();
        next = argmax(row, 0, row.length);
      }
      System.out.printf(
          Locale.ROOT,
          "%s %s, TP %d on one GPU: prefill logits vs TP 1 %.2e; greedy ids %s (TP 1 %s)%n",
          name,
          dtype,
          size,
          err,
          Arrays.toString(gotIds),
          Arrays.toString(wantIds));
      assertTrue(err <= (det ? 2e-2 : 1e-3), name + " TP " + size + ": " + err);
      assertArrayEquals(wantIds, gotIds, name + " TP " + size + ": greedy ids");
    } finally {
      pool.shutdownNow();
      caches.forEach(CudaKvCache::close);
      ranks.forEach(CudaCausalLm::close);
    }
  }
}
