package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.model.sampling.SamplingParams;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;

/**
 * An engine whose loop the test runs, so that a test about the order of rounds, store calls and
 * deadlines needs no sleep. The engine starts paused on a clock only the test moves; with L3 its
 * executor has no workers, and its store calls run on the test's thread when the test steps. Each
 * {@link #step} is one turn of the production loop ({@link LoopRunner#step}): its idle policy, its
 * waits and its round, with the waits moved onto the manual clock.
 *
 * <pre>
 *   a wait of ms    the store calls the executor has queued run now, in the order a worker takes
 *                   them; when one ran, its completion record woke the loop and no time passes;
 *                   otherwise the clock moves ms on (nothing else could wake the loop meanwhile)
 *   a round         runs at the clock, then costs ROUND_NS of it
 * </pre>
 *
 * <p>Outside a step nothing moves: no round runs, no store call happens and the clock stands, so a
 * test submits, cancels, moves the clock and holds store calls inside the store ({@link
 * #holdStore}) exactly between two turns. Close it only after {@link #settle}: a paused engine's
 * close does not drain.
 */
final class SteppedEngine implements AutoCloseable {
  /** What a round costs on the manual clock: a spinning loop still moves time on. */
  static final long ROUND_NS = TimeUnit.MICROSECONDS.toNanos(100);

  /** The most turns a wait for an outcome runs before it fails. */
  private static final int MAX_STEPS = 200_000;

  final AtomicLong clock = new AtomicLong(TimeUnit.SECONDS.toNanos(1));
  final Engine engine;
  private final LoopRunner runner;
  private final List<L3Executor> executors = new ArrayList<>();
  private RoundResult last = RoundResult.NONE;
  private long rounds;
  private long storeCalls;

  /** Store calls taken while the store is held: inside it, not answered yet. */
  private final List<Runnable> held = new ArrayList<>();

  /** Held calls the store was told to answer: they run at the loop's next wait. */
  private final List<Runnable> answering = new ArrayList<>();

  /** Whether store calls stay inside the store, unanswered ({@link #holdStore}). */
  private boolean holdStore;

  /** Starts an engine of {@code settings} (its clock and L3 executor are replaced) paused. */
  SteppedEngine(EngineSettings.Builder settings) {
    this.engine =
        Engine.start(
            settings
                .nanoClock(clock::get)
                .simulation(new Simulation(this::attach, null, Simulation.Planting.NONE))
                .conclude());
    this.runner = engine.steppedRunner(this::awaitWork);
  }

  private void attach(L3Executor executor, L3ExecutorConfig config) {
    executors.add(executor);
  }

  /** Rounds run so far. */
  long rounds() {
    return rounds;
  }

  /** Store calls run so far. */
  long storeCalls() {
    return storeCalls;
  }

  /** The round's own state (ask between steps). */
  Round round() {
    return engine.round();
  }

  /** The loop's wait: store calls, else time. */
  private void awaitWork(long ms) {
    if (runStoreCalls() == 0) {
      clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(ms));
    }
  }

  /**
   * Runs every store call the executor has queued, and those their completions queue; returns how
   * many ran. While the store is held they are taken and kept instead.
   */
  int runStoreCalls() {
    int ran = answering.size();
    answering.forEach(Runnable::run);
    answering.clear();
    for (boolean took = true; took; ) {
      took = false;
      for (L3Executor executor : executors) {
        for (StorageKind kind : StorageKind.values()) {
          for (Runnable call; (call = executor.takeWork(kind)) != null; ) {
            took = true;
            if (holdStore) {
              held.add(call);
            } else {
              call.run();
              ran++;
            }
          }
        }
      }
    }
    storeCalls += ran;
    return ran;
  }

  /** From now on store calls stay inside the store, unanswered, until {@link #releaseStore}. */
  void holdStore() {
    holdStore = true;
  }

  /** Store calls inside the held store. */
  int heldStoreCalls() {
    return held.size();
  }

  /**
   * The held store answers: its calls run at the loop's next wait, in the order they were taken,
   * and their completions wake it; later calls run as they come until the store is held again.
   */
  void releaseStore() {
    holdStore = false;
    answering.addAll(held);
    held.clear();
  }

  /** One turn of the loop: its wait, then a round when one is due; true when a round ran. */
  boolean step() throws Exception {
    RoundResult r = runner.step(last);
    if (r == null) {
      return false;
    }
    last = r;
    rounds++;
    clock.addAndGet(ROUND_NS);
    return true;
  }

  /**
   * Runs a round now, whether or not the idle policy has one due (an idle engine's housekeeping on
   * demand); returns what it did.
   */
  RoundResult runRound() throws Exception {
    last = round().doWork(clock.get());
    rounds++;
    clock.addAndGet(ROUND_NS);
    return last;
  }

  /** Runs rounds ({@link #runRound}) until {@code done}; fails naming {@code what} if never. */
  void runRoundsUntil(BooleanSupplier done, String what) throws Exception {
    for (int n = 0; !done.getAsBoolean(); n++) {
      assertTrue(n < MAX_STEPS, () -> "never happened within " + MAX_STEPS + " rounds: " + what);
      runRound();
    }
  }

  /** Moves the clock {@code ms} on (no round runs). */
  void advanceMs(long ms) {
    clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(ms));
  }

  /** Turns the loop until {@code done}; fails naming {@code what} when it never is. */
  void stepUntil(BooleanSupplier done, String what) throws Exception {
    for (int steps = 0; !done.getAsBoolean(); steps++) {
      assertTrue(steps < MAX_STEPS, () -> "never happened within " + MAX_STEPS + " turns: " + what);
      step();
    }
  }

  /** Turns the loop until {@code future} is done; returns its value. */
  <T> T await(CompletableFuture<T> future) throws Exception {
    stepUntil(future::isDone, "the loop completes " + future);
    return future.get();
  }

  /** Turns the loop until {@code h} ended; returns its result. */
  GenerationResult finish(RequestHandle h) throws Exception {
    return await(h.result());
  }

  /** Submits {@code prompt} and turns the loop until the request ended; returns its handle. */
  RequestHandle serve(int[] prompt, SamplingParams params) throws Exception {
    RequestHandle h = engine.submit(prompt, params);
    finish(h);
    return h;
  }

  /**
   * Turns the loop until it would only wait for work: no request active or queued, no L3 work
   * pending (refused backups waiting for their paced retry included), no round due for housekeeping
   * or an agreement.
   */
  void settle() throws Exception {
    stepUntil(this::idle, "the engine settles");
  }

  /** Whether the loop would only wait for work (see {@link #settle}). */
  boolean idle() {
    Round r = round();
    return !r.hasActiveRequests()
        && !r.requestsPending()
        && !r.workArrived()
        && !r.storagePending()
        && !r.storageAgreementDue()
        && !last.housekeeping();
  }

  /** Turns the loop until the clock has moved {@code ms} on; returns the rounds that ran. */
  long runForMs(long ms) throws Exception {
    long endNs = clock.get() + TimeUnit.MILLISECONDS.toNanos(ms);
    long before = rounds;
    for (int steps = 0; clock.get() - endNs < 0; steps++) {
      assertTrue(steps < MAX_STEPS, () -> "the clock stood still for " + MAX_STEPS + " turns");
      step();
    }
    return rounds - before;
  }

  @Override
  public void close() {
    engine.close();
  }
}
