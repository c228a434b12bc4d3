package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.L3Executor;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The loop's simulation ({@link LoopSimulation}) over many seeds and 1–4 ranks, and the planted
 * bugs it must find. The build log carries one line with the rounds simulated and the violations
 * found: {@code simulated rounds: N, violations: 0}.
 */
class LoopSimulationTest {

  /**
   * Seeds of the build's run, and rounds each: at least 10^6 rounds in all. A longer run (for a
   * release) sets {@code -Dsim.seeds=N -Dsim.rounds=M -Dsim.firstSeed=S}.
   */
  static final int SEEDS = Integer.getInteger("sim.seeds", 200);

  static final int ROUNDS_PER_SEED = Integer.getInteger("sim.rounds", 5_000);

  static final long FIRST_SEED = Long.getLong("sim.firstSeed", 0x51A0_0000L);

  private static final AtomicLong ROUNDS = new AtomicLong();
  private static final AtomicLong VIOLATIONS = new AtomicLong();
  private static final AtomicLong RESTORED = new AtomicLong();
  private static final AtomicLong SOFT_TIMEOUTS = new AtomicLong();
  private static final AtomicLong REFUSED = new AtomicLong();
  private static final AtomicLong QUARANTINES = new AtomicLong();
  private static final AtomicLong STOPS = new AtomicLong();
  private static final AtomicLong UPDATES = new AtomicLong();
  private static final AtomicLong FINISHED = new AtomicLong();

  /** Held here: a logger nobody references may be collected, and its level with it. */
  private static final Logger EXECUTOR_LOG = Logger.getLogger(L3Executor.class.getName());

  @BeforeAll
  static void quietExecutorLogs() {
    // the simulated faults make the executor log what an operator should see, thousands of times
    EXECUTOR_LOG.setLevel(Level.OFF);
  }

  /** The seeds to run: {@code -Dsim.seedList=S1,S2,...} replays chosen seeds (a failure's). */
  static LongStream seeds() {
    String list = System.getProperty("sim.seedList", "");
    if (!list.isBlank()) {
      return java.util.Arrays.stream(list.split(",")).mapToLong(x -> Long.parseLong(x.trim()));
    }
    return LongStream.range(0, SEEDS).map(i -> FIRST_SEED + i);
  }

  @ParameterizedTest
  @MethodSource("seeds")
  void shouldKeepEveryInvariantOfTheLoop(long seed) {
    LoopSimulation sim = new LoopSimulation(seed, 1 + (int) (seed % 4), LoopSimulation.Bug.NONE);
    try {
      sim.run(ROUNDS_PER_SEED);
    } catch (LoopSimulation.Violation v) {
      VIOLATIONS.incrementAndGet();
      ROUNDS.addAndGet(sim.rounds);
      throw v;
    }
    ROUNDS.addAndGet(sim.rounds);
    RESTORED.addAndGet(sim.restoredKeys);
    SOFT_TIMEOUTS.addAndGet(sim.softTimeouts);
    REFUSED.addAndGet(sim.refusedBackups);
    QUARANTINES.addAndGet(sim.quarantines);
    STOPS.addAndGet(sim.replicaStops);
    UPDATES.addAndGet(sim.weightUpdates);
    FINISHED.addAndGet(sim.requestsFinished);
    assertTrue(sim.requestsEnded > 0, "requests went through: " + sim.figures());
    if (Boolean.getBoolean("sim.verbose")) {
      System.out.println(sim.figures());
    }
  }

  @AfterAll
  static void report() {
    System.out.println("simulated rounds: " + ROUNDS.get() + ", violations: " + VIOLATIONS.get());
    System.out.println(
        "  restored keys "
            + RESTORED.get()
            + ", soft timeouts "
            + SOFT_TIMEOUTS.get()
            + ", refused backup rows "
            + REFUSED.get()
            + ", quarantines "
            + QUARANTINES.get()
            + ", replica stops "
            + STOPS.get()
            + ", weight updates "
            + UPDATES.get()
            + ", finished requests "
            + FINISHED.get());
    long rounds = ROUNDS.get();
    if (VIOLATIONS.get() == 0 && rounds >= 80_000) {
      // every path the faults open was taken, in proportion to the rounds run
      assertTrue(RESTORED.get() >= rounds / 200, "L3 restored keys: " + RESTORED.get());
      assertTrue(SOFT_TIMEOUTS.get() >= rounds / 5_000, "soft timeouts: " + SOFT_TIMEOUTS.get());
      assertTrue(REFUSED.get() >= rounds / 100, "refused backups: " + REFUSED.get());
      assertTrue(QUARANTINES.get() > 0, "quarantines: " + QUARANTINES.get());
      assertTrue(STOPS.get() >= rounds / 2_000, "replica stops: " + STOPS.get());
      assertTrue(UPDATES.get() >= rounds / 4_000, "weight updates: " + UPDATES.get());
    }
  }

  @Test
  void shouldReplayASeedExactly() {
    LoopSimulation a = new LoopSimulation(77, 3, LoopSimulation.Bug.NONE).run(3_000);
    LoopSimulation b = new LoopSimulation(77, 3, LoopSimulation.Bug.NONE).run(3_000);
    assertEquals(a.figures(), b.figures());
    assertEquals(a.store.calls, b.store.calls);
  }

  @Test
  void shouldFindAGetPublishedBeforeAgreement() {
    assertFound(LoopSimulation.Bug.PUBLISH_UNAGREED_GET, 2, "'s plan differs from rank 0's");
  }

  @Test
  void shouldFindASoftDeadlineStartedAtAStaleTick() {
    assertFound(LoopSimulation.Bug.STALE_TICK_TIMERS, 1, " soft timeouts at tick ");
  }

  @Test
  void shouldFindABackupSentToARefusingStoreBeforeItsHold() {
    assertFound(LoopSimulation.Bug.REOFFER_WITHOUT_BACKOFF, 1, "before its hold of");
  }

  @Test
  void shouldFindKvRestoredWrongByTheStore() {
    // wrong KV shows in a published block or, where none was published, in a sampled token
    assertFound(
        LoopSimulation.Bug.STORE_LANDS_WRONG_BYTES,
        1,
        "differs from its reference",
        ": its KV is wrong");
  }

  /**
   * Runs seeds with {@code bug} planted until the simulation reports a violation, expects it to be
   * the check that bug breaks (its message holds one of {@code expected}; an exception the run
   * wrapped as "unexpected" is not), then replays that seed and expects the same report.
   */
  private static void assertFound(LoopSimulation.Bug bug, int ranks, String... expected) {
    for (long seed = 1; seed <= 50; seed++) {
      String first;
      try {
        new LoopSimulation(seed, ranks, bug).run(20_000);
        continue;
      } catch (LoopSimulation.Violation v) {
        first = v.getMessage();
      }
      assertTrue(first.startsWith("seed=" + seed + " "), first);
      String found = first;
      assertFalse(found.contains(": unexpected "), () -> bug + " broke the run: " + found);
      assertTrue(
          java.util.Arrays.stream(expected).anyMatch(found::contains),
          () ->
              bug
                  + " was not found by its check ("
                  + String.join(" or ", expected)
                  + "): "
                  + found);
      String replay;
      try {
        new LoopSimulation(seed, ranks, bug).run(20_000);
        replay = "no violation";
      } catch (LoopSimulation.Violation v) {
        replay = v.getMessage();
      }
      assertEquals(first, replay, "the seed replays the violation");
      System.out.println("planted " + bug + " found: " + first);
      return;
    }
    throw new AssertionError("the simulation did not find the planted bug " + bug);
  }
}
