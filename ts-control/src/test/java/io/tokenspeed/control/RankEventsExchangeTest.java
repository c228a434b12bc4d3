package io.tokenspeed.control;

import static io.tokenspeed.control.Records.get;
import static io.tokenspeed.core.storage.KeyOutcome.OK;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.Cluster.Outcome;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.function.UnaryOperator;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Every rank's {@link RankEvents} reach every rank in the agreed round of the report that carried
 * them, identical on every rank, exactly once and in no other round: over loopback TCP with ranks
 * drifting up to a round apart, over the in-memory hub (one rank included), beside random records
 * and statuses; and a round that fails carries nobody's events to anyone.
 */
class RankEventsExchangeTest {

  /**
   * A seeded run: the records, clocks and frontend of a {@link Scenario}, and on top of them the
   * events and statuses each rank sends in each round.
   */
  private static final class Plan {
    final Scenario scenario;
    final RankEvents[][] events; // [rank][round-1]
    final RankStatus[][] statuses; // [rank][round-1]

    Plan(long seed, int worldSize, int rounds) {
      scenario = new Scenario(seed, worldSize, rounds);
      events = new RankEvents[worldSize][rounds];
      statuses = new RankStatus[worldSize][rounds];
      SplittableRandom rnd = new SplittableRandom(seed ^ 0x5eed_e7e7L);
      for (int n = 1; n <= rounds; n++) {
        // Quiet rounds (nobody sends), busy rounds (everybody may) and ordinary ones.
        int mood = rnd.nextInt(5);
        for (int r = 0; r < worldSize; r++) {
          boolean sends = mood != 0 && (mood == 1 || rnd.nextInt(3) == 0);
          events[r][n - 1] = sends ? events(rnd, r, n) : RankEvents.EMPTY;
          statuses[r][n - 1] =
              rnd.nextInt(6) == 0
                  ? new RankStatus(new byte[] {(byte) r, (byte) n, (byte) rnd.nextInt()})
                  : RankStatus.EMPTY;
        }
      }
      // At least once, the largest events of all, beside whatever the others send.
      int n = rounds / 2;
      byte[] largest = new byte[RankEvents.MAX_BYTES];
      rnd.nextBytes(largest);
      ByteBuffer.wrap(largest).putInt(worldSize - 1).putInt(n);
      events[worldSize - 1][n - 1] = new RankEvents(largest);
    }

    /**
     * Events that name their rank and round when they are long enough, then random bytes: mostly
     * short, sometimes up to the limit.
     */
    private static RankEvents events(SplittableRandom rnd, int rank, int round) {
      int pick = rnd.nextInt(20);
      int length =
          pick == 0
              ? RankEvents.MAX_BYTES
              : pick < 4 ? 1 + rnd.nextInt(RankEvents.MAX_BYTES) : 1 + rnd.nextInt(48);
      byte[] bytes = new byte[length];
      rnd.nextBytes(bytes);
      if (length >= 8) {
        ByteBuffer.wrap(bytes).putInt(rank).putInt(round);
      }
      return new RankEvents(bytes);
    }

    int worldSize() {
      return scenario.worldSize;
    }

    int rounds() {
      return scenario.rounds;
    }

    /** What {@code rank} brings to round {@code n}. */
    LocalReport report(int rank, int n) {
      return scenario
          .report(rank, n)
          .withStatus(statuses[rank][n - 1])
          .withEvents(events[rank][n - 1]);
    }

    /** Every rank's events of round {@code n} by rank, or an empty list when nobody sent any. */
    List<RankEvents> eventsOf(int n) {
      List<RankEvents> out = new ArrayList<>();
      boolean any = false;
      for (int r = 0; r < worldSize(); r++) {
        out.add(events[r][n - 1]);
        any |= !events[r][n - 1].isEmpty();
      }
      return any ? out : List.of();
    }

    private List<RankStatus> statusesOf(int n) {
      List<RankStatus> out = new ArrayList<>();
      boolean any = false;
      for (int r = 0; r < worldSize(); r++) {
        out.add(statuses[r][n - 1]);
        any |= !statuses[r][n - 1].isEmpty();
      }
      return any ? out : List.of();
    }

    /** Agreed round {@code n} as every rank must receive it, events and statuses included. */
    AgreedRound expected(int n) {
      AgreedRound e = scenario.expected().get(n - 1);
      return new AgreedRound(
          e.round(),
          e.tickNs(),
          e.pressure(),
          e.frontend(),
          e.completions(),
          statusesOf(n),
          eventsOf(n));
    }

    /** Checks that the plan has quiet rounds, rounds where every rank sends, and the largest. */
    void assertCovers() {
      int quiet = 0;
      int full = 0;
      int partial = 0;
      boolean largest = false;
      for (int n = 1; n <= rounds(); n++) {
        int senders = 0;
        for (int r = 0; r < worldSize(); r++) {
          senders += events[r][n - 1].isEmpty() ? 0 : 1;
          largest |= events[r][n - 1].length() == RankEvents.MAX_BYTES;
        }
        if (senders == 0) {
          quiet++;
        } else if (senders == worldSize()) {
          full++;
        } else {
          partial++;
        }
      }
      assertTrue(quiet >= 10 && full >= 10 && largest, quiet + " " + full + " " + largest);
      assertTrue(worldSize() == 1 || partial >= 10, "partial rounds: " + partial);
    }
  }

  /**
   * Every rank received exactly rounds 1..n of {@code plan}, each equal to the expected round
   * (events at every rank's index, none where nobody sent), and each non-empty events value of the
   * plan turned up exactly once, in its own round at its own rank's index.
   */
  private static void assertDelivered(Plan plan, List<List<AgreedRound>> perRank) {
    for (int rank = 0; rank < perRank.size(); rank++) {
      List<AgreedRound> rounds = perRank.get(rank);
      assertEquals(plan.rounds(), rounds.size(), "rank " + rank);
      int found = 0;
      int sent = 0;
      for (int n = 1; n <= plan.rounds(); n++) {
        AgreedRound got = rounds.get(n - 1);
        assertEquals(n, got.round(), "rank " + rank);
        assertEquals(plan.eventsOf(n), got.events(), "rank " + rank + " round " + n + " events");
        assertEquals(plan.expected(n), got, "rank " + rank + " round " + n);
        for (int k = 0; k < plan.worldSize(); k++) {
          assertEquals(plan.events[k][n - 1], got.events(k), "rank " + rank + " round " + n);
          sent += plan.events[k][n - 1].isEmpty() ? 0 : 1;
        }
        for (RankEvents e : got.events()) {
          found += e.isEmpty() ? 0 : 1;
        }
      }
      assertEquals(sent, found, "rank " + rank + ": every events value exactly once");
      assertEquals(perRank.getFirst(), rounds, "rank " + rank + " received otherwise");
    }
  }

  static Stream<Arguments> tcpRuns() {
    return Stream.of(
        Arguments.of(61L, 2, 300),
        Arguments.of(62L, 3, 300),
        Arguments.of(63L, 2, 200),
        Arguments.of(64L, 3, 200));
  }

  /**
   * Two and three ranks over loopback TCP, each rank sending random events in random rounds beside
   * the scenario's records and random statuses. Ranks pause at random, so that one enters a round
   * while another is still a round behind and a peer's next report waits in the socket.
   */
  @ParameterizedTest(name = "seed={0} ranks={1} rounds={2}")
  @MethodSource("tcpRuns")
  void shouldDeliverEveryRanksEventsToEveryRankInTheirOwnRoundOverTcp(
      long seed, int worldSize, int rounds) throws Exception {
    Plan plan = new Plan(seed, worldSize, rounds);
    plan.assertCovers();
    List<List<AgreedRound>> perRank = new ArrayList<>();
    try (Cluster cluster = Cluster.start(worldSize)) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) -> {
                SplittableRandom pauses = new SplittableRandom(seed * 31 + rank);
                return Cluster.rounds(
                    x,
                    n -> {
                      if (pauses.nextInt(25) == 0) {
                        try {
                          Thread.sleep(1 + pauses.nextInt(3));
                        } catch (InterruptedException e) {
                          Thread.currentThread().interrupt();
                        }
                      }
                      return plan.report(rank, n);
                    },
                    rounds);
              });
      for (Outcome<List<AgreedRound>> o : outcomes) {
        perRank.add(o.get());
      }
    }
    assertDelivered(plan, perRank);
  }

  /** The same over the in-memory hub; a single rank's rounds each come from their own exchange. */
  @ParameterizedTest(name = "ranks={0}")
  @ValueSource(ints = {1, 2, 3})
  void shouldDeliverEveryRanksEventsInTheirOwnRoundOverTheHub(int worldSize) throws Exception {
    Plan plan = new Plan(70L + worldSize, worldSize, 200);
    plan.assertCovers();
    List<List<AgreedRound>> perRank = new ArrayList<>();
    try (Cluster cluster =
        Cluster.overHub(new LocalRelayHub(worldSize), UnaryOperator.identity())) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) -> {
                if (worldSize > 1) {
                  return Cluster.rounds(x, n -> plan.report(rank, n), plan.rounds());
                }
                List<AgreedRound> out = new ArrayList<>();
                for (int n = 1; n <= plan.rounds(); n++) {
                  Optional<AgreedRound> a = x.exchange(plan.report(rank, n));
                  assertTrue(a.isPresent(), "round " + n + " comes from its own exchange");
                  assertEquals(plan.events[0][n - 1], a.get().events(0), "round " + n);
                  out.add(a.get());
                }
                return out;
              });
      for (Outcome<List<AgreedRound>> o : outcomes) {
        perRank.add(o.get());
      }
    }
    assertDelivered(plan, perRank);
  }

  /** How round 3 of {@link #shouldDeliverNobodysEventsOfARoundThatFails} goes wrong. */
  enum Failure {
    /** Rank 1's poll fails: its report is an error report. */
    POLL_FAILED,
    /** Rank 1's records and events do not fit in a frame together. */
    TOO_LONG
  }

  /**
   * Round 3 fails on every rank with the same error: round 2 (held back) is the last round, with
   * its events; nobody's events of round 3 reach anyone, and nothing moves into another round.
   */
  @ParameterizedTest(name = "{0}")
  @MethodSource("failures")
  void shouldDeliverNobodysEventsOfARoundThatFails(Failure failure) throws Exception {
    int worldSize = 3;
    List<StorageDone> many = new ArrayList<>();
    for (int i = 0; i < 700; i++) {
      many.add(get(i, OK));
    }
    try (Cluster cluster =
        Cluster.start(worldSize, c -> c.withMaxFrameBytes(ControlConfig.MIN_MAX_FRAME_BYTES))) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) -> {
                List<AgreedRound> got = new ArrayList<>();
                for (int n = 1; n <= 4; n++) {
                  LocalReport local = LocalReport.idle(n);
                  RankEvents events = new RankEvents(new byte[] {(byte) rank, (byte) n});
                  if (n == 3 && rank == 1) {
                    local =
                        failure == Failure.POLL_FAILED
                            ? LocalReport.pollFailed(n, "executor down")
                            : LocalReport.of(n, PressureSnapshot.IDLE, many);
                    events = new RankEvents(new byte[RankEvents.MAX_BYTES]);
                  }
                  local = local.withEvents(events);
                  try {
                    x.exchange(local).ifPresent(got::add);
                  } catch (ProtocolException e) {
                    assertEquals(3, e.round());
                    assertEquals(2, e.lastAppliedRound());
                    got.add(e.finalRound().orElseThrow());
                    throw new FailedAt(e.getMessage(), got);
                  }
                }
                return got;
              });
      Set<String> messages = new HashSet<>();
      for (int rank = 0; rank < worldSize; rank++) {
        FailedAt f = assertInstanceOf(FailedAt.class, outcomes.get(rank).error());
        messages.add(f.getMessage());
        assertEquals(2, f.applied.size(), "rank " + rank);
        for (int n = 1; n <= 2; n++) {
          AgreedRound a = f.applied.get(n - 1);
          assertEquals(n, a.round());
          for (int k = 0; k < worldSize; k++) {
            assertEquals(
                new RankEvents(new byte[] {(byte) k, (byte) n}), a.events(k), "round " + n);
          }
        }
      }
      assertEquals(1, messages.size(), messages.toString());
      String message = messages.iterator().next();
      assertTrue(
          message.contains(
              failure == Failure.POLL_FAILED
                  ? "rank 1: local poll failed: executor down"
                  : "rank 1: report of 700 records, events of 16384 bytes is 33960 bytes, more"
                      + " than max_frame_bytes=32768"),
          message);
    }
  }

  static Stream<Failure> failures() {
    return Stream.of(Failure.values());
  }

  /** A rank's protocol error, with the rounds it applied up to it (the final round included). */
  private static final class FailedAt extends Exception {
    final List<AgreedRound> applied;

    FailedAt(String message, List<AgreedRound> applied) {
      super(message);
      this.applied = applied;
    }
  }
}
