package io.tokenspeed.control;

import static io.tokenspeed.control.Records.get;
import static io.tokenspeed.control.Records.ok;
import static io.tokenspeed.control.Records.put;
import static io.tokenspeed.core.storage.KeyOutcome.FAILED;
import static io.tokenspeed.core.storage.KeyOutcome.INVALID;
import static io.tokenspeed.core.storage.KeyOutcome.MISSING;
import static io.tokenspeed.core.storage.KeyOutcome.OK;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.Cluster.Outcome;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.LoopHeadFeedback;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/** Ranks as threads of this JVM over real loopback TCP. */
class RelayExchangeTest {

  /** rank -> round -> records that rank reports in that round. */
  private static final class Schedule {
    final Map<Integer, Map<Integer, List<StorageDone>>> byRank = new HashMap<>();

    Schedule at(int rank, int round, StorageDone... records) {
      byRank
          .computeIfAbsent(rank, r -> new HashMap<>())
          .computeIfAbsent(round, n -> new ArrayList<>())
          .addAll(List.of(records));
      return this;
    }

    LocalReport report(int rank, int round) {
      List<StorageDone> records =
          byRank.getOrDefault(rank, Map.of()).getOrDefault(round, List.of());
      return LocalReport.of(1_000L * round + rank, PressureSnapshot.IDLE, records);
    }
  }

  /** Runs {@code rounds} rounds of {@code schedule} on {@code worldSize} ranks. */
  private static List<List<AgreedRound>> run(int worldSize, int rounds, Schedule schedule)
      throws Exception {
    try (Cluster cluster = Cluster.start(worldSize)) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) -> {
                return Cluster.rounds(x, n -> schedule.report(rank, n), rounds);
              });
      List<List<AgreedRound>> perRank = new ArrayList<>();
      for (Outcome<List<AgreedRound>> o : outcomes) {
        perRank.add(o.get());
      }
      for (int r = 1; r < worldSize; r++) {
        assertEquals(perRank.getFirst(), perRank.get(r), "rank " + r + " agreed differently");
      }
      return perRank;
    }
  }

  private static List<Long> ids(AgreedRound round) {
    return round.completions().stream().map(AgreedCompletion::operationId).toList();
  }

  @ParameterizedTest(name = "ranks={0}")
  @ValueSource(ints = {2, 4})
  void shouldAgreeEachOperationWhenItsLastOwnerReportsWhenOwnersCompleteOutOfOrder(int worldSize)
      throws Exception {
    Schedule s =
        new Schedule()
            .at(0, 1, get(3, OK, OK))
            .at(0, 2, get(1, OK))
            .at(0, 3, get(2, OK, OK, OK))
            .at(1, 1, get(2, OK, FAILED, OK))
            .at(1, 2, get(3, MISSING, OK))
            .at(1, 3, get(1, OK));
    if (worldSize == 4) {
      s.at(2, 1, get(1, OK), get(2, OK, OK, INVALID), get(3, OK, OK))
          .at(3, 1, get(1, OK))
          .at(3, 2, get(3, OK, OK), get(2, OK, OK, MISSING));
    }
    List<AgreedRound> rounds = run(worldSize, 4, s).getFirst();

    assertEquals(List.of(), ids(rounds.get(0)));
    assertEquals(List.of(3L), ids(rounds.get(1)));
    assertEquals(List.of(1L, 2L), ids(rounds.get(2)));
    assertEquals(List.of(), ids(rounds.get(3)));
    assertEquals(List.of(MISSING, OK), rounds.get(1).completions().getFirst().outcomes());
    List<KeyOutcome> op2 = rounds.get(2).completions().get(1).outcomes();
    assertEquals(worldSize == 4 ? List.of(OK, FAILED, INVALID) : List.of(OK, FAILED, OK), op2);
  }

  /**
   * Each rank's status reaches every rank, indexed by rank, in the round that carried it; a round
   * in which no rank sent one carries none.
   */
  @ParameterizedTest(name = "ranks={0}")
  @ValueSource(ints = {2, 3})
  void shouldDeliverEveryRanksStatusToEveryRankInTheRoundThatCarriedIt(int worldSize)
      throws Exception {
    List<List<AgreedRound>> perRank;
    try (Cluster cluster = Cluster.start(worldSize)) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) ->
                  Cluster.rounds(
                      x,
                      n -> {
                        LocalReport idle = LocalReport.idle(1_000L * n + rank);
                        // round 2: every rank; round 3: only the last rank; round 4: none
                        boolean sends = n == 2 || (n == 3 && rank == worldSize - 1);
                        return sends
                            ? idle.withStatus(new RankStatus(new byte[] {(byte) rank, (byte) n}))
                            : idle;
                      },
                      5));
      perRank = new ArrayList<>();
      for (Outcome<List<AgreedRound>> o : outcomes) {
        perRank.add(o.get());
      }
    }
    for (int r = 1; r < worldSize; r++) {
      assertEquals(perRank.getFirst(), perRank.get(r), "rank " + r + " received otherwise");
    }
    List<AgreedRound> rounds = perRank.getFirst(); // rounds 1..4 (one exchange late)
    assertEquals(List.of(), rounds.get(0).statuses(), "round 1: none sent");
    for (int rank = 0; rank < worldSize; rank++) {
      assertEquals(
          new RankStatus(new byte[] {(byte) rank, 2}), rounds.get(1).status(rank), "round 2");
      assertEquals(
          rank == worldSize - 1 ? new RankStatus(new byte[] {(byte) rank, 3}) : RankStatus.EMPTY,
          rounds.get(2).status(rank),
          "round 3");
    }
    assertEquals(worldSize, rounds.get(2).statuses().size());
    assertEquals(List.of(), rounds.get(3).statuses(), "round 4: none sent");
  }

  @Test
  void shouldRetainPartialRecordsWhenOneRankReportsRoundsAfterTheOthers() throws Exception {
    Schedule s = new Schedule();
    for (int r = 0; r < 3; r++) {
      s.at(r, 1, get(10, OK, OK)).at(r, 2, put(11, OK));
    }
    s.at(3, 2, put(11, FAILED)).at(3, 8, Records.unretired(get(10, OK, MISSING)));
    try (Cluster cluster = Cluster.start(4)) {
      List<Outcome<List<String>>> outcomes =
          cluster.run(
              (rank, x) -> {
                // Round n arrives with exchange n+1; the window is read right after exchange n.
                List<String> trace = new ArrayList<>();
                List<Integer> pendingAfter = new ArrayList<>();
                for (int n = 1; n <= 10; n++) {
                  LocalReport local = n <= 9 ? s.report(rank, n) : LocalReport.idle(100_000);
                  java.util.Optional<AgreedRound> a = x.exchange(local);
                  if (a.isPresent()) {
                    long k = a.get().round();
                    trace.add(k + ":" + ids(a.get()) + " pending=" + pendingAfter.get((int) k - 1));
                  }
                  pendingAfter.add(x.pendingOperations());
                }
                return trace;
              });
      List<String> expected =
          List.of(
              "1:[] pending=1",
              "2:[11] pending=1",
              "3:[] pending=1",
              "4:[] pending=1",
              "5:[] pending=1",
              "6:[] pending=1",
              "7:[] pending=1",
              "8:[10] pending=0",
              "9:[] pending=0");
      for (Outcome<List<String>> o : outcomes) {
        assertEquals(expected, o.get());
      }
    }
    List<AgreedRound> rounds = run(4, 8, s).getFirst();
    AgreedCompletion late = rounds.get(7).completions().getFirst();
    assertEquals(List.of(OK, MISSING), late.outcomes());
    assertEquals(false, late.retired());
    assertEquals(List.of(FAILED), rounds.get(1).completions().getFirst().outcomes());
  }

  @ParameterizedTest(name = "ranks={0}")
  @ValueSource(ints = {2, 4})
  void shouldRaiseTheSameProtocolErrorOnEveryRankWhenOneReportIsInvalid(int worldSize)
      throws Exception {
    try (Cluster cluster = Cluster.start(worldSize)) {
      List<Outcome<Long>> outcomes =
          cluster.run(
              (rank, x) -> {
                for (int n = 1; n <= 5; n++) {
                  List<StorageDone> records =
                      rank == 1 && n == 3 ? List.of(get(5, OK), get(5, OK)) : List.of();
                  x.exchange(LocalReport.of(n, PressureSnapshot.IDLE, records));
                }
                return x.round();
              });
      assertSameErrorEverywhere(outcomes, 3, "rank 1: operation 5 appears twice in one report");
    }
  }

  /**
   * Every rank failed with an equal ProtocolException in {@code round}, containing {@code text}.
   */
  private static <T> void assertSameErrorEverywhere(
      List<Outcome<T>> outcomes, long round, String text) {
    Set<String> messages = new HashSet<>();
    for (Outcome<T> o : outcomes) {
      ProtocolException e = assertInstanceOf(ProtocolException.class, o.error(), "" + o);
      assertEquals(round, e.round());
      messages.add(e.getMessage());
    }
    assertEquals(1, messages.size(), messages.toString());
    String message = messages.iterator().next();
    assertTrue(message.contains(text), message);
  }

  /**
   * Regression: a late second report of an agreed operation stopped the replica with a protocol
   * error. Operation 0 is agreed in round 1 together with more than agreedMemory others; in round 2
   * one owner reports it again, late, beside a new operation: every rank drops it identically,
   * counts it, and goes on agreeing.
   */
  @ParameterizedTest(name = "ranks={0}")
  @ValueSource(ints = {2, 3})
  void shouldDropALateReportOfAnAgreedOperationIdenticallyOnEveryRank(int worldSize)
      throws Exception {
    int many = new Agreement(worldSize, 64, 1).agreedMemory() + 1_000;
    List<StorageDone> first = new ArrayList<>(many);
    for (long id = 0; id < many; id++) {
      first.add(get(id, OK));
    }
    Schedule s = new Schedule();
    for (int r = 0; r < worldSize; r++) {
      s.at(r, 1, first.toArray(StorageDone[]::new)).at(r, 2, get(many, OK));
      s.at(r, 3, get(many + 1L, OK));
    }
    s.at(worldSize - 1, 2, get(0, FAILED)); // late, and not what it said the first time
    s.at(0, 3, get(many - 1L, OK));
    try (Cluster cluster = Cluster.start(worldSize)) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) -> {
                List<AgreedRound> out = Cluster.rounds(x, n -> s.report(rank, n), 3);
                assertEquals(2, x.lateReports(), "rank " + rank);
                assertEquals(0, x.pendingOperations(), "rank " + rank);
                return out;
              });
      List<AgreedRound> leader = outcomes.getFirst().get();
      for (int r = 1; r < worldSize; r++) {
        assertEquals(leader, outcomes.get(r).get(), "rank " + r + " agreed differently");
      }
      assertEquals(many, leader.get(0).completions().size());
      assertEquals(OK, leader.get(0).completions().getFirst().outcomes().getFirst());
      assertEquals(List.of((long) many), ids(leader.get(1)));
      assertEquals(List.of(many + 1L), ids(leader.get(2)));
    }
  }

  /**
   * A window sized from credits above the 65,536 operations the control plane used to hold: one
   * owner reports 70,000 operations two rounds before the other, and every rank holds them all and
   * then agrees them, none stopping.
   */
  @Test
  void shouldHoldMoreThan65536PendingOperationsWhenTheCreditsAllowThem() throws Exception {
    int operations = 70_000;
    InFlightBound credits =
        new InFlightBound(
            100_000, "async.max_operations=100000", 100_000L * 4, "async.max_query_keys=4");
    List<StorageDone> all = new ArrayList<>(operations);
    for (long id = 0; id < operations; id++) {
      all.add(get(id, OK));
    }
    Schedule s =
        new Schedule()
            .at(0, 1, all.toArray(StorageDone[]::new))
            .at(1, 3, all.toArray(StorageDone[]::new));
    try (Cluster cluster = Cluster.start(2, c -> c.withWindowFor(credits))) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) -> {
                assertEquals(100_000, x.config().windowOperations());
                List<AgreedRound> out = new ArrayList<>();
                for (int n = 1; n <= 4; n++) {
                  x.exchange(s.report(rank, n)).ifPresent(out::add);
                  if (n <= 2) {
                    assertEquals(operations, x.pendingOperations(), "round " + n);
                  }
                }
                assertEquals(0, x.pendingOperations());
                return out;
              });
      for (Outcome<List<AgreedRound>> o : outcomes) {
        List<AgreedRound> agreed = o.get();
        assertEquals(List.of(), agreed.get(0).completions());
        assertEquals(List.of(), agreed.get(1).completions());
        assertEquals(operations, agreed.get(2).completions().size());
      }
    }
  }

  @Test
  void shouldListEveryFailedRankInRankOrderWhenSeveralPollsFailInOneRound() throws Exception {
    try (Cluster cluster = Cluster.start(4)) {
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                x.exchange(LocalReport.idle(1));
                x.exchange(
                    rank >= 2
                        ? LocalReport.pollFailed(2, "store said " + rank)
                        : LocalReport.idle(2));
                return null;
              });
      assertSameErrorEverywhere(
          outcomes,
          2,
          "invalid report from rank 2: local poll failed: store said 2; "
              + "rank 3: local poll failed: store said 3");
    }
  }

  @Test
  void shouldRethrowTheSameErrorWhenCalledAgainAfterAFailure() throws Exception {
    try (Cluster cluster = Cluster.start(2)) {
      List<Outcome<Boolean>> outcomes =
          cluster.run(
              (rank, x) -> {
                ProtocolException first = null;
                try {
                  x.exchange(LocalReport.pollFailed(1, "broken"));
                } catch (ProtocolException e) {
                  first = e;
                }
                try {
                  x.exchange(LocalReport.idle(2));
                } catch (ProtocolException e) {
                  assertSame(first, e);
                  return true;
                }
                return false;
              });
      for (Outcome<Boolean> o : outcomes) {
        assertTrue(o.get());
      }
    }
  }

  @Test
  void shouldRaiseTheSameErrorWhenOwnersReportDifferentKeyCountsInOneRound() throws Exception {
    try (Cluster cluster = Cluster.start(3)) {
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                StorageDone d = rank == 2 ? get(9, OK, OK, OK) : get(9, OK, OK);
                x.exchange(LocalReport.of(1, PressureSnapshot.IDLE, List.of(d)));
                return null;
              });
      assertSameErrorEverywhere(
          outcomes, 1, "operation 9 has 3 keys on rank 2 but 2 on rank 0: per-key masks");
    }
  }

  @Test
  void shouldReportLocallyWhenARecordContradictsAnEarlierOwnerRecord() throws Exception {
    try (Cluster cluster = Cluster.start(2)) {
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                x.exchange(
                    LocalReport.of(
                        1, PressureSnapshot.IDLE, rank == 0 ? List.of(get(4, OK)) : List.of()));
                x.exchange(
                    LocalReport.of(
                        2, PressureSnapshot.IDLE, rank == 1 ? List.of(put(4, OK)) : List.of()));
                return null;
              });
      assertSameErrorEverywhere(
          outcomes,
          2,
          "invalid report from rank 1: operation 4 is PUT on rank 1 but GET on rank 0");
    }
  }

  @Test
  void shouldRaiseTheSameErrorNamingTheLimitWhenTheWindowOverflows() throws Exception {
    try (Cluster cluster = Cluster.start(2, c -> c.withWindow(2, 100))) {
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                x.exchange(
                    LocalReport.of(
                        1,
                        PressureSnapshot.IDLE,
                        rank == 0 ? List.of(get(1, OK), get(2, OK)) : List.of()));
                x.exchange(
                    LocalReport.of(
                        2,
                        PressureSnapshot.IDLE,
                        rank == 0 ? List.of(get(3, OK)) : List.of(get(1, OK))));
                x.exchange(
                    LocalReport.of(
                        3, PressureSnapshot.IDLE, rank == 0 ? List.of(get(4, OK)) : List.of()));
                return null;
              });
      assertSameErrorEverywhere(
          outcomes, 3, "3 operations await owner reports, more than max_pending_operations=2");
    }
    try (Cluster cluster = Cluster.start(2, c -> c.withWindow(100, 4))) {
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                x.exchange(
                    LocalReport.of(
                        1,
                        PressureSnapshot.IDLE,
                        rank == 1 ? List.of(get(1, ok(3)), get(2, ok(2))) : List.of()));
                return null;
              });
      assertSameErrorEverywhere(
          outcomes, 1, "5 keys of partially reported operations exceed max_pending_keys=4");
    }
  }

  @Test
  void shouldRaiseTheSameErrorWhenALocalReportDoesNotFitInAFrame() throws Exception {
    try (Cluster cluster =
        Cluster.start(2, c -> c.withMaxFrameBytes(ControlConfig.MIN_MAX_FRAME_BYTES))) {
      List<StorageDone> many = new ArrayList<>();
      for (int i = 0; i < 1_400; i++) {
        many.add(get(i, OK));
      }
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                x.exchange(LocalReport.of(1, PressureSnapshot.IDLE, rank == 1 ? many : List.of()));
                return null;
              });
      assertSameErrorEverywhere(
          outcomes, 1, "report of 1400 records is 35073 bytes, more than max_frame_bytes=32768");
    }
  }

  @Test
  void shouldRaiseTheSameDivergenceErrorOnEveryRankWhenRank2ReportsAnotherPlanDigest()
      throws Exception {
    // Rounds 1-5: every rank reports the same digest (0 before the first plan, then seeded random
    // ones, one of them negative). Round 6: rank 2 reports another plan of round 5.
    SplittableRandom rnd = new SplittableRandom(6_2026L);
    long[] agreed = {0, 0, rnd.nextLong(), rnd.nextLong() | Long.MIN_VALUE, -1, rnd.nextLong()};
    long ours = 0x1f2e_3d4c_5b6a_7988L;
    long theirs = 0x9a0b_1c2d_3e4f_5061L;
    try (Cluster cluster = Cluster.start(3)) {
      List<Outcome<ProtocolException>> outcomes =
          cluster.run(
              (rank, x) -> {
                List<Long> delivered = new ArrayList<>();
                for (int n = 1; n <= 5; n++) {
                  x.exchange(LocalReport.idle(n).withPlanDigest(agreed[n]))
                      .ifPresent(a -> delivered.add(a.round()));
                }
                assertEquals(List.of(1L, 2L, 3L, 4L), delivered, "rank " + rank);
                LocalReport sixth = LocalReport.idle(6).withPlanDigest(rank == 2 ? theirs : ours);
                ProtocolException e =
                    assertThrows(ProtocolException.class, () -> x.exchange(sixth));
                // The exchange has ended: later calls throw the same exception again.
                ProtocolException again =
                    assertThrows(
                        ProtocolException.class,
                        () -> x.exchange(LocalReport.idle(7).withPlanDigest(ours)));
                assertSame(e, again);
                assertEquals(6, x.round());
                return e;
              });
      for (Outcome<ProtocolException> o : outcomes) {
        ProtocolException e = o.get();
        assertEquals(6, e.round());
        assertEquals(
            "protocol error in round 6: the plans of round 5 diverged: "
                + "rank 0: 1f2e3d4c5b6a7988, rank 1: 1f2e3d4c5b6a7988, rank 2: 9a0b1c2d3e4f5061",
            e.getMessage());
        // Every rank stops having applied round 5, which the exception carries.
        assertEquals(5, e.finalRound().orElseThrow().round());
        assertEquals(5, e.lastAppliedRound());
      }
    }
  }

  @Test
  void shouldRaiseTheInvalidReportErrorWhenAnErrorReportAndDivergentDigestsMeetInOneRound()
      throws Exception {
    try (Cluster cluster = Cluster.start(3)) {
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                x.exchange(LocalReport.idle(1).withPlanDigest(0));
                LocalReport second =
                    switch (rank) {
                      case 0 -> LocalReport.idle(2).withPlanDigest(5);
                      case 1 -> LocalReport.pollFailed(2, "store down").withPlanDigest(6);
                      default -> LocalReport.idle(2).withPlanDigest(7);
                    };
                x.exchange(second);
                return null;
              });
      assertSameErrorEverywhere(outcomes, 2, "invalid report from rank 1: local poll failed");
      String message = ((ProtocolException) outcomes.getFirst().error()).getMessage();
      assertTrue(!message.contains("diverged"), message);
    }
  }

  @Test
  void shouldAcceptAnyPlanDigestWhenTheReplicaHasOneRank() throws Exception {
    SplittableRandom rnd = new SplittableRandom(1_2026L);
    long[] digests = new long[41];
    for (int n = 1; n <= 40; n++) {
      digests[n] = n % 4 == 0 ? Frames.randomDigest(rnd) : rnd.nextLong();
    }
    try (Cluster cluster = Cluster.start(1)) {
      List<AgreedRound> rounds =
          Cluster.rounds(
              cluster.ranks.getFirst(),
              n -> LocalReport.of(n, PressureSnapshot.IDLE, List.of()).withPlanDigest(digests[n]),
              40);
      assertEquals(40, rounds.size());
    }
  }

  @Test
  void shouldTakeTheLeadersClockAndMaxPressureWhenRanksDiffer() throws Exception {
    try (Cluster cluster = Cluster.start(3)) {
      List<Outcome<AgreedRound>> outcomes =
          cluster.run(
              (rank, x) -> {
                PressureSnapshot p =
                    switch (rank) {
                      case 0 -> new PressureSnapshot(1, 500, 7);
                      case 1 -> new PressureSnapshot(9, 100, 3);
                      default -> new PressureSnapshot(2, 200, 40);
                    };
                LocalReport local =
                    new LocalReport(-5_000 + rank * 777_777, p, List.of(), List.of(), null);
                if (rank == 0) {
                  local =
                      local.withFrontend(
                          List.of(
                              FrontendMessage.newRequest(3, new byte[] {1, 2}),
                              FrontendMessage.cancel(2)));
                }
                return Cluster.oneRound(x, local);
              });
      for (Outcome<AgreedRound> o : outcomes) {
        AgreedRound a = o.get();
        assertEquals(-5_000, a.tickNs());
        assertEquals(new PressureSnapshot(9, 500, 40), a.pressure());
        assertEquals(List.of(2L), a.cancellations());
        assertEquals(FrontendMessage.newRequest(3, new byte[] {1, 2}), a.newRequests().getFirst());
      }
    }
  }

  @Test
  void shouldRaiseTheSameErrorWhenARankOtherThanTheLeaderBringsFrontendMessages() throws Exception {
    try (Cluster cluster = Cluster.start(2)) {
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                LocalReport local = LocalReport.idle(1);
                x.exchange(
                    rank == 1 ? local.withFrontend(List.of(FrontendMessage.cancel(1))) : local);
                return null;
              });
      assertSameErrorEverywhere(
          outcomes, 1, "rank 1 is not the TP leader but brought 1 frontend messages");
    }
  }

  @Test
  void shouldRaiseTheSameErrorWhenTheLeadersClockGoesBackwards() throws Exception {
    try (Cluster cluster = Cluster.start(2)) {
      List<Outcome<Void>> outcomes =
          cluster.run(
              (rank, x) -> {
                x.exchange(LocalReport.idle(Long.MAX_VALUE - 10));
                x.exchange(LocalReport.idle(Long.MIN_VALUE + 10)); // wraps: still forward
                x.exchange(LocalReport.idle(rank == 0 ? Long.MIN_VALUE : 0));
                return null;
              });
      assertSameErrorEverywhere(outcomes, 3, "the leader's clock went backwards");
    }
  }

  /**
   * The loop-head contract end to end: a cancellation that arrives in the same round as its read's
   * completion detaches the read first, so the read never publishes.
   */
  @Test
  void shouldNotPublishAReadWhenItsCancellationArrivesInTheSameRound() throws Exception {
    try (Cluster cluster = Cluster.start(2)) {
      List<Outcome<List<String>>> outcomes =
          cluster.run(
              (rank, x) -> {
                // A toy scheduler: operation 40 reads for request 7, operation 41 for request 8.
                Map<Long, Long> requestOf = new HashMap<>(Map.of(40L, 7L, 41L, 8L));
                List<String> published = new ArrayList<>();
                LoopHeadFeedback head =
                    new LoopHeadFeedback() {
                      @Override
                      public void onTick(long round, long tickNs, PressureSnapshot pressure) {}

                      @Override
                      public void onNewRequest(FrontendMessage message) {}

                      @Override
                      public void onCancel(long requestId) {
                        requestOf.values().removeIf(id -> id == requestId);
                      }

                      @Override
                      public void onCompletion(AgreedCompletion c) {
                        Long request = requestOf.remove(c.operationId());
                        if (request != null && c.retired() && !c.detached()) {
                          published.add("op " + c.operationId() + " for request " + request);
                        }
                      }
                    };
                LocalReport local =
                    LocalReport.of(1, PressureSnapshot.IDLE, List.of(get(40, OK), get(41, OK)));
                if (rank == 0) {
                  local = local.withFrontend(List.of(FrontendMessage.cancel(7)));
                }
                Cluster.oneRound(x, local).applyTo(head);
                return published;
              });
      for (Outcome<List<String>> o : outcomes) {
        assertEquals(List.of("op 41 for request 8"), o.get());
      }
    }
  }

  @Test
  void shouldDeliverTheTickEveryRoundWhenRoundsAreIdle() throws Exception {
    try (Cluster cluster = Cluster.start(2)) {
      List<Outcome<List<Long>>> outcomes =
          cluster.run(
              (rank, x) -> {
                List<Long> ticks = new ArrayList<>();
                for (int n = 1; n <= 201; n++) {
                  java.util.Optional<AgreedRound> a = x.exchange(LocalReport.idle(n * 10L + rank));
                  // Round n-1 arrives with exchange n: every rank is known to hold it by then.
                  assertEquals(n == 1, a.isEmpty());
                  if (a.isPresent()) {
                    assertEquals(n - 1, a.get().round());
                    assertEquals(n - 1, x.deliveredRound());
                    assertTrue(a.get().completions().isEmpty() && a.get().frontend().isEmpty());
                    ticks.add(a.get().tickNs());
                  }
                }
                return ticks;
              });
      for (Outcome<List<Long>> o : outcomes) {
        List<Long> ticks = o.get();
        assertEquals(200, ticks.size());
        for (int n = 1; n <= 200; n++) {
          assertEquals(n * 10L, ticks.get(n - 1));
        }
      }
    }
  }

  @Test
  void shouldDeliverEachRoundFromTheExchangeThatGatheredItWhenTheReplicaHasOneRank()
      throws Exception {
    try (Cluster cluster = Cluster.start(1)) {
      RelayExchange x = cluster.ranks.getFirst();
      for (int n = 1; n <= 50; n++) {
        java.util.Optional<AgreedRound> a =
            x.exchange(
                LocalReport.of(
                    n * 7L, PressureSnapshot.IDLE, n % 5 == 0 ? List.of(get(n, OK)) : List.of()));
        assertTrue(a.isPresent(), "round " + n + " is delivered by its own exchange");
        assertEquals(n, a.get().round());
        assertEquals(n, x.deliveredRound());
        assertEquals(n * 7L, a.get().tickNs());
        assertEquals(n % 5 == 0 ? List.of((long) n) : List.of(), ids(a.get()));
      }
    }
  }

  @Test
  void shouldAgreeAtOnceWhenTheReplicaHasOneOwner() throws Exception {
    try (Cluster cluster = Cluster.start(1)) {
      RelayExchange x = cluster.ranks.getFirst();
      AgreedRound a =
          Cluster.oneRound(
              x, LocalReport.of(5, PressureSnapshot.IDLE, List.of(get(2, MISSING), get(1, OK))));
      assertEquals(List.of(1L, 2L), ids(a));
      assertEquals(5, a.tickNs());
    }
  }

  static Stream<Arguments> randomRuns() {
    return Stream.of(
        Arguments.of(101L, 2, 3000), Arguments.of(202L, 4, 2000), Arguments.of(303L, 3, 1500));
  }

  @ParameterizedTest(name = "seed={0} ranks={1} rounds={2}")
  @MethodSource("randomRuns")
  void shouldAgreeIdenticallyOnEveryRankWhenRunningSeededRandomRounds(
      long seed, int worldSize, int rounds) throws Exception {
    Scenario scenario = new Scenario(seed, worldSize, rounds);
    assertTrue(scenario.totalCompletions() > rounds, "the scenario carries completions");
    assertTrue(scenario.maxOwnerSpread() >= 20, "some owner reports many rounds late");
    assertTrue(scenario.maxPendingOperations() >= 5, "operations wait on late owners");
    try (Cluster cluster = Cluster.start(worldSize)) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) -> {
                List<AgreedRound> out = Cluster.rounds(x, n -> scenario.report(rank, n), rounds);
                assertEquals(0, x.pendingOperations());
                return out;
              });
      String expectedDigest = scenario.expectedDigest();
      for (int r = 0; r < worldSize; r++) {
        List<AgreedRound> agreed = outcomes.get(r).get();
        for (int n = 0; n < rounds; n++) {
          assertEquals(
              scenario.expected().get(n), agreed.get(n), "rank " + r + " round " + (n + 1));
        }
        Scenario.Digest d = new Scenario.Digest();
        agreed.forEach(d::add);
        assertEquals(expectedDigest, d.hex(), "rank " + r);
      }
    }
  }

  @Test
  void shouldKeepEveryRankAliveWhenNothingIsAgreedForManyRounds() throws Exception {
    // A read pending on one owner for 500 rounds does not hold back later operations.
    Schedule s = new Schedule().at(0, 1, get(1, OK)).at(1, 500, get(1, OK));
    for (int n = 2; n < 500; n++) {
      s.at(0, n, get(n, OK)).at(1, n, get(n, FAILED));
    }
    List<AgreedRound> rounds = run(2, 500, s).getFirst();
    for (int n = 2; n < 500; n++) {
      assertEquals(List.of((long) n), ids(rounds.get(n - 1)));
    }
    assertEquals(List.of(1L), ids(rounds.get(499)));
    assertNotNull(rounds.get(499).completions().getFirst());
  }
}
