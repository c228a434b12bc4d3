package io.tokenspeed.engine;

import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * The loop's front door for other threads: administrative tasks for the loop thread, the wake-up of
 * its wait, and close. Callers never reach the round's state; they leave a task here and wake the
 * loop, and the round's head runs the tasks ({@link #runTasks}) before its exchange.
 *
 * <p>Every field is written by callers and read by the loop thread (or the other way round for
 * {@link #fatal}): the queue is concurrent, the flags are volatile, and nothing here ever blocks a
 * caller.
 */
final class LoopProxy {
  /** Permits for the loop's wait: released by submit, cancel, administration, close and L3. */
  private final Semaphore wake = new Semaphore(0);

  /** Administrative tasks for the loop thread, run before the next round. */
  private final ConcurrentLinkedQueue<Task> tasks = new ConcurrentLinkedQueue<>();

  private record Task(Runnable run, CompletableFuture<?> result) {}

  private volatile boolean closing;
  private volatile Throwable fatal;
  private volatile long drainDeadlineNs;

  // ---------------------------------------------------------------- any thread

  /**
   * Runs {@code task} on the loop thread before its next round; completes with its result, or with
   * what it threw.
   */
  <T> CompletableFuture<T> onLoop(Callable<T> task) {
    CompletableFuture<T> f = new CompletableFuture<>();
    if (closing) {
      f.completeExceptionally(new IllegalStateException("engine is closed"));
      return f;
    }
    tasks.add(
        new Task(
            () -> {
              try {
                f.complete(task.call());
              } catch (Throwable t) {
                f.completeExceptionally(t);
              }
            },
            f));
    wake();
    return f;
  }

  /** Wakes the loop from its wait (any thread; never blocks). */
  void wake() {
    if (wake.availablePermits() == 0) {
      wake.release();
    }
  }

  /**
   * Asks the loop to end: it cancels every request and lets pending L3 work finish until {@code
   * drainDeadlineNs}.
   */
  void close(long drainDeadlineNs) {
    this.drainDeadlineNs = drainDeadlineNs;
    closing = true;
    wake();
  }

  boolean closing() {
    return closing;
  }

  /** What ended the loop, or null. */
  Throwable fatal() {
    return fatal;
  }

  // ---------------------------------------------------------------- the loop thread

  /** Runs the administrative tasks queued so far (the round's head). */
  void runTasks() {
    for (Task task; (task = tasks.poll()) != null; ) {
      task.run().run();
    }
  }

  boolean tasksPending() {
    return !tasks.isEmpty();
  }

  /** The end of the L3 drain that close allows. */
  long drainDeadlineNs() {
    return drainDeadlineNs;
  }

  /** The loop failed with {@code t}: it refuses new work, as nothing would serve it. */
  void failed(Throwable t) {
    fatal = t;
    closing = true;
  }

  /**
   * Waits up to {@code ms} for a reason to run a round: a request, a cancellation, an
   * administrative task, close, or an L3 completion record.
   */
  void awaitWork(long ms) throws InterruptedException {
    wake.tryAcquire(ms, TimeUnit.MILLISECONDS);
    wake.drainPermits();
  }

  /** Fails the administrative tasks the loop did not run (after it ended). */
  void failPendingTasks() {
    for (Task task; (task = tasks.poll()) != null; ) {
      task.result().completeExceptionally(new IllegalStateException("engine closed"));
    }
  }
}
