package io.tokenspeed.model.kernel;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A fixed set of platform threads that the kernels split their outputs over.
 *
 * <p>{@link #parallelFor} cuts {@code [0, count)} into at most {@link #threads()} contiguous
 * ranges; the calling thread runs the first range itself and waits for the rest. Which thread
 * computes an output never changes the value: every kernel computes each output element wholly
 * inside one range task, in an order fixed by the kernel, so a different thread count only moves
 * range borders.
 *
 * <p>Never call {@code parallelFor} from inside a range task: the workers are a fixed pool and a
 * nested wait could starve it. The pool is not reentrant across callers either — one forward pass
 * at a time uses it (the engine's forward thread).
 */
public final class ComputePool implements AutoCloseable {

  private final int threads;
  private final ExecutorService workers;

  private ComputePool(int threads) {
    if (threads < 1) {
      throw new IllegalArgumentException("threads=" + threads + " must be at least 1");
    }
    this.threads = threads;
    if (threads == 1) {
      this.workers = null;
    } else {
      AtomicInteger n = new AtomicInteger();
      this.workers =
          Executors.newFixedThreadPool(
              threads - 1,
              r -> {
                Thread t = new Thread(r, "ts-compute-" + n.incrementAndGet());
                t.setDaemon(true);
                return t;
              });
    }
  }

  /** A pool of {@code threads} threads (the caller counts as one). */
  public static ComputePool ofThreads(int threads) {
    return new ComputePool(threads);
  }

  /** A pool sized to the machine's cores. */
  public static ComputePool ofCores() {
    return new ComputePool(Runtime.getRuntime().availableProcessors());
  }

  /** Threads that share the work, the caller included. */
  public int threads() {
    return threads;
  }

  /** One contiguous range of items, run by one thread. */
  @FunctionalInterface
  public interface RangeTask {
    /** Processes items {@code [from, to)}. */
    void run(int from, int to);
  }

  /** Runs {@code task} over {@code [0, count)} split into contiguous ranges, and waits. */
  public void parallelFor(int count, RangeTask task) {
    if (count <= 0) {
      return;
    }
    int parts = Math.min(threads, count);
    if (parts == 1) {
      task.run(0, count);
      return;
    }
    List<Future<?>> pending = new ArrayList<>(parts - 1);
    for (int p = 1; p < parts; p++) {
      int from = (int) ((long) count * p / parts);
      int to = (int) ((long) count * (p + 1) / parts);
      pending.add(workers.submit(() -> task.run(from, to)));
    }
    Throwable failure = null;
    try {
      task.run(0, (int) ((long) count / parts));
    } catch (Throwable t) {
      failure = t;
    }
    for (Future<?> f : pending) {
      try {
        f.get();
      } catch (ExecutionException e) {
        if (failure == null) {
          failure = e.getCause();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        if (failure == null) {
          failure = e;
        }
      }
    }
    if (failure instanceof RuntimeException re) {
      throw re;
    }
    if (failure instanceof Error err) {
      throw err;
    }
    if (failure != null) {
      throw new IllegalStateException("compute task failed", failure);
    }
  }

  @Override
  public void close() {
    if (workers != null) {
      workers.shutdownNow();
    }
  }
}
