package io.tokenspeed.engine;

import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;

/**
 * The engine's loop thread: it runs {@link Round}s while there is work and sleeps until there is.
 * It alone reads the clock for the loop, once per round, and hands the time to {@link
 * Round#doWork}; it owns the idle policy, close and what a failure does.
 *
 * <pre>
 *   work          requests active, work arrived, an idle round due (housekeeping), or an agreement
 *                 the next round returns: a round at once
 *   storage wait  the last round planned no forward while L3 work is pending, or the control
 *                 state withheld the forward (frozen, draining): a storage tick, or less when a
 *                 completion record or work wakes the loop
 *   idle          a wait until work arrives, at most the idle wait, at most a storage tick while L3
 *                 facts are still to come, until a refused backup's paced retry; on a replica's
 *                 leader a heartbeat round at least every {@link #HEARTBEAT_MS}, and a round when
 *                 it holds cost figures to send
 *   follower      a replica's other ranks run a round after another: the leader paces them, as
 *                 the exchange waits for its report
 * </pre>
 *
 * <p>Rounds run while requests are active and, once they are not, until the background work is
 * done: a round after a request ends, rounds while demotions are planned, and, with L3, a round per
 * completion record or storage tick while storage operations are pending. Closing cancels every
 * request and lets pending L3 work drain until the deadline close gave; a failure ends every
 * request with it and, on a replica, aborts the collective so that the other ranks stop too.
 */
final class LoopRunner {
  private static final long IDLE_WAIT_MS = 20;

  /**
   * On a tensor-parallel replica, the longest the leader lets the ranks wait in the exchange while
   * the replica idles: an idle round at least this often proves every rank alive.
   */
  static final long HEARTBEAT_MS = 100;

  /**
   * The longest wait between rounds while only L3 work is pending: a completion record wakes the
   * loop at once, so this only paces the ticks that expire soft deadlines.
   */
  static final long STORAGE_TICK_MS = 5;

  /**
   * How the loop waits for a reason to run a round: {@link LoopProxy#awaitWork} in production. A
   * test that steps a paused engine's loop passes a wait of its own that moves a manual clock
   * instead of the thread's time ({@link #step}).
   */
  interface Waits {
    /** Waits up to {@code ms} for work (returns earlier when work arrives). */
    void awaitWork(long ms) throws InterruptedException;
  }

  private final Round round;
  private final LoopProxy loop;
  private final LongSupplier nanoClock;
  private final Waits waits;
  private final Thread thread;
  private long lastRoundNs;

  LoopRunner(Round round, LoopProxy loop, LongSupplier nanoClock) {
    this(round, loop, nanoClock, loop::awaitWork);
  }

  /**
   * A runner whose waits are {@code waits}' (tests step it with {@link #step}; its thread is never
   * started).
   */
  LoopRunner(Round round, LoopProxy loop, LongSupplier nanoClock, Waits waits) {
    this.round = round;
    this.loop = loop;
    this.nanoClock = nanoClock;
    this.waits = waits;
    this.lastRoundNs = nanoClock.getAsLong();
    this.thread = new Thread(this::run, "ts-engine-loop");
    this.thread.setDaemon(true);
  }

  /** Starts the loop thread. */
  void start() {
    thread.start();
  }

  /** Waits at most {@code ms} for the loop thread to end. */
  void join(long ms) throws InterruptedException {
    thread.join(ms);
  }

  boolean alive() {
    return thread.isAlive();
  }

  /** Whether the loop thread has ended. */
  boolean ended() {
    return thread.getState() == Thread.State.TERMINATED;
  }

  private void run() {
    try {
      RoundResult last = RoundResult.NONE;
      while (!last.stopAgreed()
          && (round.replicated()
              || !loop.closing()
              || round.hasActiveRequests()
              || round.requestsPending()
              || draining())) {
        if (round.follower()) {
          if (loop.closing()) {
            break; // a follower that stops alone leaves the mesh: the others stop, naming it
          }
          last = runRound();
          continue;
        }
        if (loop.closing()) {
          round.cancelAll(draining());
        }
        RoundResult r = step(last);
        last = r == null ? last : r;
      }
    } catch (Throwable t) {
      failed(t);
    }
    round.ended();
  }

  /**
   * A round failed with {@code t}: the loop refuses new work, every request it knows of ends with
   * the failure and, on a replica, the collective aborts. The loop ends after it.
   */
  void failed(Throwable t) {
    loop.failed(t);
    round.fail(t);
  }

  /**
   * One turn of a leader's or a single rank's loop after {@code last}: the wait the idle policy
   * asks for, then a round when one is due. Returns the round's result, or null when the wait ended
   * with no round due. The loop thread calls it; a test that steps a paused engine calls it in its
   * place, on one thread.
   */
  RoundResult step(RoundResult last) throws Exception {
    Turn turn = nextTurn(last);
    if (turn.waitMs() > 0) {
      waits.awaitWork(turn.waitMs());
    }
    if (turn.idle() && !dueAfterIdle(turn, nanoClock.getAsLong())) {
      return null;
    }
    return runRound();
  }

  private RoundResult runRound() throws Exception {
    long nowNs = nanoClock.getAsLong();
    roundStarted(nowNs);
    return round.doWork(nowNs);
  }

  /**
   * What the idle policy asks of the next turn: wait up to {@code waitMs} (returning earlier when
   * work arrives; 0: none); after an {@code idle} wait a round follows only when {@link
   * #dueAfterIdle} says so, after any other wait it follows at once. {@code busy}: L3 facts were
   * still to come when the idle wait began.
   */
  record Turn(long waitMs, boolean idle, boolean busy) {
    static final Turn NOW = new Turn(0, false, false);
  }

  /**
   * The idle policy after {@code last} (see the class essay). Reads the clock only for a refused
   * backup's retry. A simulation of the loop asks it in the loop's place and moves its clock by the
   * wait.
   */
  Turn nextTurn(RoundResult last) {
    boolean arrived = round.workArrived() || round.awaitingAgreement();
    boolean agreementDue = round.storageAgreementDue(); // the next round returns it
    if (!round.hasActiveRequests() && !arrived && !last.housekeeping() && !agreementDue) {
      boolean busy = round.storageBusy();
      long retryInNs = round.backupRetryInNs(nanoClock.getAsLong());
      return new Turn(busy ? STORAGE_TICK_MS : idleWaitMs(retryInNs), true, busy);
    }
    if ((last.storageWait() || last.forwardWithheld()) && !arrived && !agreementDue) {
      // nothing to compute until L3 answers or the freeze lifts
      return new Turn(STORAGE_TICK_MS, false, false);
    }
    return Turn.NOW;
  }

  /**
   * After {@code turn}'s idle wait, at {@code nowNs}: whether a round is due — L3 facts still to
   * come (a round per event or tick), a backup retry due, a heartbeat due, work arrived, or cost
   * figures the leader would send (which the round sends). Otherwise the metrics snapshot is
   * refreshed when stale.
   */
  boolean dueAfterIdle(Turn turn, long nowNs) {
    boolean retryDue = round.backupRetryInNs(nowNs) <= 0;
    boolean heartbeat =
        round.replicated() && nowNs - lastRoundNs >= TimeUnit.MILLISECONDS.toNanos(HEARTBEAT_MS);
    if (turn.busy() || retryDue || heartbeat || round.workArrived() || round.costsPending(nowNs)) {
      return true;
    }
    round.refreshIdleMetrics(nowNs);
    return false;
  }

  /** A round starts at {@code nowNs} (the heartbeat counts from it). */
  void roundStarted(long nowNs) {
    lastRoundNs = nowNs;
  }

  /**
   * When the next heartbeat round is due on a replica's leader: {@link #HEARTBEAT_MS} after the
   * last round (a single rank has none: see {@link Round#replicated}).
   */
  long heartbeatDueNs() {
    return lastRoundNs + TimeUnit.MILLISECONDS.toNanos(HEARTBEAT_MS);
  }

  /**
   * Closing with L3 work left — refused backups waiting for their paced retry included, so that a
   * transient outage at shutdown does not cost the pages a short-lived process wrote through:
   * rounds go on until it is done or the drain deadline passes.
   */
  private boolean draining() {
    return round.storagePending() && nanoClock.getAsLong() < loop.drainDeadlineNs();
  }

  /**
   * An idle wait: until the next backup retry, at least one storage tick, at most the idle wait.
   */
  private static long idleWaitMs(long retryInNs) {
    if (retryInNs == Long.MAX_VALUE) {
      return IDLE_WAIT_MS;
    }
    long ms = TimeUnit.NANOSECONDS.toMillis(Math.max(0, retryInNs));
    return Math.clamp(ms, STORAGE_TICK_MS, IDLE_WAIT_MS);
  }
}
