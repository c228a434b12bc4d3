package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.WholeLoopSimulation.Planted;
import io.tokenspeed.engine.sim.SimStore;
import io.tokenspeed.l3.L3Executor;
import java.util.Arrays;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The whole-loop simulation ({@link WholeLoopSimulation}) of the production round over many seeds
 * and TP 1–4, and the planted bugs it must catch. The build log carries one line: {@code whole-loop
 * simulation (real round): rounds=N seeds=S tp=1..4 violations=0 planted=P/P caught}.
 */
class WholeLoopSimulationTest {

  /**
   * Seeds of the build's run and rounds each. A longer run sets {@code -Dsim.seeds=N -Dsim.rounds=M
   * -Dsim.firstSeed=S}; {@code -Dsim.seedList=S1,S2,...} replays chosen seeds.
   */
  static final int SEEDS = Integer.getInteger("sim.seeds", 200);

  static final int ROUNDS_PER_SEED = Integer.getInteger("sim.rounds", 5_000);

  static final long FIRST_SEED = Long.getLong("sim.firstSeed", 0x5100_0000L);

  private static final AtomicLong ROUNDS = new AtomicLong();
  private static final AtomicLong SEEDS_RUN = new AtomicLong();
  private static final AtomicLong VIOLATIONS = new AtomicLong();
  private static final AtomicLong FINISHED = new AtomicLong();
  private static final AtomicLong SOFT_TIMEOUTS = new AtomicLong();
  private static final AtomicLong QUARANTINES = new AtomicLong();
  private static final AtomicLong UPDATES = new AtomicLong();
  private static final AtomicLong RETRACTIONS = new AtomicLong();
  private static final AtomicLong REFUSED = new AtomicLong();
  private static final AtomicLong DAMAGED = new AtomicLong();
  private static final AtomicLong HUNG = new AtomicLong();
  private static final AtomicLong REPLICA_STOPS = new AtomicLong();
  private static final AtomicLong RANK_STALLS = new AtomicLong();
  private static final AtomicLong STOPPED_REQUESTS = new AtomicLong();
  private static final AtomicLong OBJECTS_CHECKED = new AtomicLong();
  private static final AtomicLong HOST_BLOCKS_CHECKED = new AtomicLong();
  private static final AtomicLong FROZEN_ROUNDS = new AtomicLong();
  private static final AtomicLong FROZEN_COMPLETIONS = new AtomicLong();
  private static final AtomicLong FROZEN_SOFT_TIMEOUTS = new AtomicLong();
  private static final AtomicLong FROZEN_CANCELLATIONS = new AtomicLong();
  private static final AtomicLong COST_MODEL_SEEDS = new AtomicLong();
  private static final AtomicLong ABANDONED = new AtomicLong();
  private static final AtomicLong EARLY_H2D_SEEDS = new AtomicLong();
  private static final AtomicLong EARLY_H2D_BLOCKS = new AtomicLong();
  private static final AtomicLong STAGED_LOAD_BYTES = new AtomicLong();
  private static final Set<Planted> CAUGHT = ConcurrentHashMap.newKeySet();
  private static final int PLANTED = Planted.values().length - 1;

  /** Held here: a logger nobody references may be collected, and its level with it. */
  private static final Logger EXECUTOR_LOG = Logger.getLogger(L3Executor.class.getName());

  private static final Logger ROUND_LOG = Logger.getLogger(Round.class.getName());

  private static Level executorLevel;
  private static Level roundLevel;

  @BeforeAll
  static void quietLogs() {
    // the simulated faults make the executor and the loop log what an operator should see
    executorLevel = EXECUTOR_LOG.getLevel();
    roundLevel = ROUND_LOG.getLevel();
    EXECUTOR_LOG.setLevel(Level.OFF);
    ROUND_LOG.setLevel(Level.OFF);
  }

  /** The seeds to run. */
  static LongStream seeds() {
    String list = System.getProperty("sim.seedList", "");
    if (!list.isBlank()) {
      return Arrays.stream(list.split(",")).mapToLong(x -> Long.parseLong(x.trim()));
    }
    return LongStream.range(0, SEEDS).map(i -> FIRST_SEED + i);
  }

  /** TP 2, 3 and 4 for one seed in sixteen each, TP 1 for the others. */
  static int tpOf(long seed) {
    return switch ((int) Math.floorMod(seed, 16)) {
      case 3 -> 2;
      case 7 -> 3;
      case 11 -> 4;
      default -> 1;
    };
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldKeepEveryInvariantOfTheRealRound(long seed) {
    try (WholeLoopSimulation sim = new WholeLoopSimulation(seed, tpOf(seed), Planted.NONE)) {
      try {
        sim.run(ROUNDS_PER_SEED);
      } catch (WholeLoopSimulation.Violation v) {
        VIOLATIONS.incrementAndGet();
        throw v;
      } finally {
        ROUNDS.addAndGet(sim.roundsRun);
        SEEDS_RUN.incrementAndGet();
      }
      FINISHED.addAndGet(sim.requestsFinished);
      SOFT_TIMEOUTS.addAndGet(sim.softTimeouts);
      QUARANTINES.addAndGet(sim.quarantines > 0 ? 1 : 0);
      UPDATES.addAndGet(sim.weightUpdates);
      RETRACTIONS.addAndGet(sim.retractions());
      REFUSED.addAndGet(sim.store.count(SimStore.Fault.REFUSED));
      DAMAGED.addAndGet(
          sim.store.count(SimStore.Fault.SHORT_READ) + sim.store.count(SimStore.Fault.CORRUPTED));
      HUNG.addAndGet(sim.store.count(SimStore.Fault.HUNG));
      REPLICA_STOPS.addAndGet(sim.replicaStops);
      RANK_STALLS.addAndGet(sim.rankStalls);
      STOPPED_REQUESTS.addAndGet(sim.requestsStopped);
      OBJECTS_CHECKED.addAndGet(sim.objectsChecked);
      HOST_BLOCKS_CHECKED.addAndGet(sim.hostBlocksChecked);
      FROZEN_ROUNDS.addAndGet(sim.frozenRounds);
      COST_MODEL_SEEDS.addAndGet(sim.costModel() ? 1 : 0);
      ABANDONED.addAndGet(sim.restoresAbandoned);
      EARLY_H2D_SEEDS.addAndGet(sim.earlyH2d() ? 1 : 0);
      EARLY_H2D_BLOCKS.addAndGet(sim.earlyH2dBlocks());
      STAGED_LOAD_BYTES.addAndGet(sim.stagedLoadedBytes());
      FROZEN_COMPLETIONS.addAndGet(sim.frozenCompletions);
      FROZEN_SOFT_TIMEOUTS.addAndGet(sim.frozenSoftTimeouts);
      FROZEN_CANCELLATIONS.addAndGet(sim.frozenCancellations);
      assertTrue(sim.requestsFinished > 0, "requests went through: " + sim.figures());
      if (Boolean.getBoolean("sim.verbose")) {
        System.out.println(sim.figures());
      }
    }
  }

  @ParameterizedTest(name = "tp={0}")
  @MethodSource("replayCases")
  void shouldReplayASeedExactly(int tp) {
    String a;
    String b;
    try (WholeLoopSimulation s = new WholeLoopSimulation(77 + tp, tp, Planted.NONE)) {
      a = s.run(3_000).figures();
    }
    try (WholeLoopSimulation s = new WholeLoopSimulation(77 + tp, tp, Planted.NONE)) {
      b = s.run(3_000).figures();
    }
    assertEquals(a, b);
  }

  static java.util.stream.IntStream replayCases() {
    return java.util.stream.IntStream.of(1, 3);
  }

  @ParameterizedTest(name = "{0}")
  @EnumSource(value = Planted.class, names = "NONE", mode = EnumSource.Mode.EXCLUDE)
  void shouldCatchEveryPlantedBug(Planted bug) {
    String[] expected =
        switch (bug) {
          case PUBLISH_FAILED_GET, STORE_LANDS_WRONG_BYTES, EARLY_PUBLISHES_FAILED_ROWS ->
              new String[] {": its KV is wrong", " published Host block "};
          case VICTIM_KEEPS_DEVICE_KV, LOADS_SKIP_LAST_STAGE -> new String[] {": its KV is wrong"};
          case RETIRED_BY_ANY_RANK -> new String[] {"did not quarantine"};
          case REOFFER_WITHOUT_HOLD -> new String[] {"before its hold of"};
          case STORE_WRITES_WRONG_BYTES -> new String[] {" wrote an object, but "};
          case SERVES_ALONE -> new String[] {": it serves alone"};
          case FAILED_LOOP_LEAVES_REQUESTS -> new String[] {": its caller hangs"};
          case FROZEN_ROUND_RUNS ->
              new String[] {"a frozen round planned a forward", "a frozen round started "};
          case NONE -> throw new IllegalArgumentException();
        };
    int tp =
        switch (bug) {
          case RETIRED_BY_ANY_RANK, SERVES_ALONE, FAILED_LOOP_LEAVES_REQUESTS -> 2;
          default -> 1;
        };
    boolean needsHostileStore =
        switch (bug) {
          case STORE_LANDS_WRONG_BYTES,
              STORE_WRITES_WRONG_BYTES,
              SERVES_ALONE,
              FAILED_LOOP_LEAVES_REQUESTS,
              FROZEN_ROUND_RUNS,
              LOADS_SKIP_LAST_STAGE ->
              false;
          default -> true;
        };
    for (long seed = 1; seed <= 100; seed++) {
      if (needsHostileStore && seed % 4 == 0) {
        continue; // a seed with a well-behaved store
      }
      String first;
      try (WholeLoopSimulation s = new WholeLoopSimulation(seed, tp, bug)) {
        s.run(20_000);
        continue;
      } catch (WholeLoopSimulation.Violation v) {
        first = v.getMessage();
      }
      String found = first;
      assertFalse(found.contains(": unexpected "), () -> bug + " broke the run: " + found);
      assertTrue(
          Arrays.stream(expected).anyMatch(found::contains),
          () ->
              bug
                  + " was not caught by its check ("
                  + String.join(" or ", expected)
                  + "): "
                  + found);
      CAUGHT.add(bug);
      System.out.println("planted " + bug + " caught: " + first);
      return;
    }
    throw new AssertionError("the simulation did not catch the planted bug " + bug);
  }

  @AfterAll
  static void report() {
    EXECUTOR_LOG.setLevel(executorLevel); // the other tests of this JVM read these logs
    ROUND_LOG.setLevel(roundLevel);
    System.out.println(
        "whole-loop simulation (real round): rounds="
            + ROUNDS.get()
            + " seeds="
            + SEEDS_RUN.get()
            + " tp=1..4 violations="
            + VIOLATIONS.get()
            + " planted="
            + CAUGHT.size()
            + "/"
            + PLANTED
            + " caught");
    System.out.println(
        "  finished requests "
            + FINISHED.get()
            + ", soft timeouts "
            + SOFT_TIMEOUTS.get()
            + ", seeds with quarantine "
            + QUARANTINES.get()
            + ", weight updates "
            + UPDATES.get()
            + ", retractions "
            + RETRACTIONS.get()
            + ", refused PUT rows "
            + REFUSED.get()
            + ", damaged reads "
            + DAMAGED.get()
            + ", hung calls "
            + HUNG.get());
    System.out.println(
        "  replica stops (a rank died or stalled past the round timeout) "
            + REPLICA_STOPS.get()
            + ", requests ended by them "
            + STOPPED_REQUESTS.get()
            + ", ranks stalled within the round timeout "
            + RANK_STALLS.get()
            + ", objects written checked "
            + OBJECTS_CHECKED.get()
            + ", Host blocks published checked "
            + HOST_BLOCKS_CHECKED.get());
    System.out.println(
        "  frozen rounds "
            + FROZEN_ROUNDS.get()
            + " (no forward, no storage operation started), in which L3 completions were agreed"
            + " in "
            + FROZEN_COMPLETIONS.get()
            + ", soft deadlines expired "
            + FROZEN_SOFT_TIMEOUTS.get()
            + " and requests were cancelled "
            + FROZEN_CANCELLATIONS.get());
    System.out.println(
        "  seeds with early Host-to-Device copies "
            + EARLY_H2D_SEEDS.get()
            + ", Device blocks they published "
            + EARLY_H2D_BLOCKS.get()
            + "; bytes loaded in stages of layers while the forward computed "
            + STAGED_LOAD_BYTES.get()
            + "; seeds with the cost model "
            + COST_MODEL_SEEDS.get()
            + ", restores they abandoned as slower than computing "
            + ABANDONED.get());
    long rounds = ROUNDS.get();
    if (VIOLATIONS.get() == 0 && rounds >= 500_000) {
      // a full run takes every path the faults open
      assertTrue(SOFT_TIMEOUTS.get() > 0, "soft timeouts: " + SOFT_TIMEOUTS.get());
      assertTrue(QUARANTINES.get() > 0, "seeds with quarantine: " + QUARANTINES.get());
      assertTrue(UPDATES.get() > 0, "weight updates: " + UPDATES.get());
      assertTrue(
          COST_MODEL_SEEDS.get() > 0,
          "seeds run with the cost model on: " + COST_MODEL_SEEDS.get());
      assertTrue(
          ABANDONED.get() > 0,
          "restores abandoned in slow spells, over "
              + COST_MODEL_SEEDS.get()
              + " seeds with the cost model: "
              + ABANDONED.get());
      assertTrue(
          EARLY_H2D_BLOCKS.get() > 0,
          "Device blocks published by early copies in "
              + EARLY_H2D_SEEDS.get()
              + " seeds: "
              + EARLY_H2D_BLOCKS.get());
      assertTrue(STAGED_LOAD_BYTES.get() > 0, "bytes loaded in stages: " + STAGED_LOAD_BYTES.get());
      assertTrue(RETRACTIONS.get() > 0, "retractions: " + RETRACTIONS.get());
      assertTrue(REFUSED.get() > 0, "refused PUT rows: " + REFUSED.get());
      assertTrue(DAMAGED.get() > 0, "damaged reads: " + DAMAGED.get());
      assertTrue(HUNG.get() > 0, "hung calls: " + HUNG.get());
      // about 50 in a million rounds: a rank's fault every 2 to 40 s of a TP > 1 seed
      assertTrue(REPLICA_STOPS.get() >= rounds / 100_000, "replica stops: " + REPLICA_STOPS.get());
      assertTrue(RANK_STALLS.get() > 0, "ranks stalled within the timeout: " + RANK_STALLS.get());
      assertTrue(OBJECTS_CHECKED.get() > 0, "objects checked: " + OBJECTS_CHECKED.get());
      assertTrue(
          HOST_BLOCKS_CHECKED.get() > 0, "Host blocks checked: " + HOST_BLOCKS_CHECKED.get());
      // frozen rounds still deliver completions, expire deadlines and cancel
      assertTrue(FROZEN_COMPLETIONS.get() > 0, "frozen completions: " + FROZEN_COMPLETIONS.get());
      assertTrue(
          FROZEN_SOFT_TIMEOUTS.get() > 0, "frozen soft timeouts: " + FROZEN_SOFT_TIMEOUTS.get());
      assertTrue(
          FROZEN_CANCELLATIONS.get() > 0, "frozen cancellations: " + FROZEN_CANCELLATIONS.get());
    }
  }
}
