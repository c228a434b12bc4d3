package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.Cluster.Outcome;
import io.tokenspeed.control.MeshException.Reason;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.control.RankEvents;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The in-memory transport against the TCP mesh: the same reports agree on the same rounds, and a
 * rank that leaves, dies or freezes makes its peers fail and settle as over TCP. Failures that need
 * a deadline run under a simulated clock, so no test waits out a round timeout in wall time.
 */
class LocalRelayHubTest {

  private static final long ROUND_TIMEOUT_MS = 1_500;

  /** The configs' timeouts: a short round timeout (simulated wherever it must pass). */
  private static final UnaryOperator<ControlConfig> TIMEOUTS =
      c -> c.withTimeouts(ROUND_TIMEOUT_MS, 20_000);

  /** Every rank's rounds of {@code scenario}, over {@code cluster}. */
  private static List<List<AgreedRound>> runScenario(Cluster cluster, Scenario scenario)
      throws Exception {
    List<List<AgreedRound>> out = new ArrayList<>();
    for (Outcome<List<AgreedRound>> o :
        cluster.run(
            (rank, x) -> Cluster.rounds(x, n -> scenario.report(rank, n), scenario.rounds))) {
      out.add(o.get());
    }
    return out;
  }

  @ParameterizedTest(name = "ranks={0}")
  @ValueSource(ints = {1, 2, 3, 4})
  void shouldAgreeOnTheRoundsTheTcpMeshAgreesOnWhenRanksReportTheSameScenario(int worldSize)
      throws Exception {
    Scenario scenario = new Scenario(4_000L + worldSize, worldSize, 400);
    List<List<AgreedRound>> overTcp;
    try (Cluster tcp = Cluster.start(worldSize)) {
      overTcp = runScenario(tcp, scenario);
    }
    List<List<AgreedRound>> overHub;
    try (Cluster hub = Cluster.overHub(new LocalRelayHub(worldSize), UnaryOperator.identity())) {
      overHub = runScenario(hub, scenario);
    }
    for (int r = 0; r < worldSize; r++) {
      assertEquals(scenario.expected(), overHub.get(r), "rank " + r + " over the hub");
      assertEquals(overTcp.get(r), overHub.get(r), "rank " + r);
    }
  }

  @Test
  void shouldFailTheOthersAsTheTcpMeshDoesWhenARankCloses() throws Exception {
    List<Outcome<MeshException>> overTcp;
    try (Cluster tcp = Cluster.start(3)) {
      overTcp = tcp.closeAfterThreeRounds(1);
    }
    List<Outcome<MeshException>> overHub;
    try (Cluster hub = Cluster.overHub(new LocalRelayHub(3), UnaryOperator.identity())) {
      overHub = hub.closeAfterThreeRounds(1);
    }
    for (int r : new int[] {0, 2}) {
      MeshException tcp = overTcp.get(r).get();
      MeshException local = overHub.get(r).get();
      assertEquals(Reason.DISCONNECTED, local.reason(), local.getMessage());
      assertEquals(tcp.reason(), local.reason());
      assertEquals(tcp.peerRank(), local.peerRank());
      assertEquals(tcp.round(), local.round());
      assertEquals(tcp.lastAppliedRound(), local.lastAppliedRound());
      assertEquals(tcp.finalRound(), local.finalRound());
      // Word for word: the same replica id, peer and round.
      assertEquals(tcp.getMessage(), local.getMessage());
      assertEquals(3, local.lastAppliedRound());
    }
  }

  @Test
  void shouldFailTheOthersWithDisconnectedAndItsOwnExchangeWhenARankIsKilled() throws Exception {
    LocalRelayHub hub = new LocalRelayHub(3);
    try (Cluster cluster = Cluster.overHub(hub, TIMEOUTS)) {
      List<Outcome<ControlPlaneException>> outcomes =
          cluster.run(
              (rank, x) -> {
                for (int n = 1; n <= 3; n++) {
                  x.exchange(LocalReport.idle(n));
                }
                if (rank == 2) {
                  hub.kill(2);
                }
                return assertThrows(
                    ControlPlaneException.class, () -> x.exchange(LocalReport.idle(4)));
              });
      for (int r : new int[] {0, 1}) {
        MeshException e = assertInstanceOf(MeshException.class, outcomes.get(r).get());
        assertEquals(Reason.DISCONNECTED, e.reason(), e.getMessage());
        assertEquals(2, e.peerRank());
        assertTrue(e.getMessage().startsWith("rank 2 disconnected in round 4"), e.getMessage());
        assertEquals(3, e.lastAppliedRound());
      }
      MeshException dead = assertInstanceOf(MeshException.class, outcomes.get(2).get());
      assertEquals(Reason.IO, dead.reason(), dead.getMessage());
      assertEquals("rank 2 was killed in round 4", dead.getMessage());
    }
  }

  @Test
  void shouldRefuseARankWhoseSettingsDifferOrThatJoinedAlready() throws Exception {
    LocalRelayHub hub = new LocalRelayHub(2);
    try (Cluster cluster = Cluster.overHub(hub, UnaryOperator.identity())) {
      MeshException twice =
          assertThrows(
              MeshException.class, () -> RelayExchange.connect(cluster.ranks.get(1).config(), hub));
      assertEquals(Reason.HANDSHAKE, twice.reason());
      assertTrue(twice.getMessage().contains("rank 1 has already joined"), twice.getMessage());
      MeshException window =
          assertThrows(
              MeshException.class,
              () -> RelayExchange.connect(cluster.ranks.get(1).config().withWindow(10, 10), hub));
      assertTrue(window.getMessage().contains("rank 1 has already joined"), window.getMessage());
    }
    LocalRelayHub fresh = new LocalRelayHub(2);
    try (Cluster cluster = Cluster.overHub(fresh, UnaryOperator.identity())) {
      // a third hub rank cannot exist; a second replica's rank 0 with another window cannot join
      ControlConfig other = cluster.ranks.get(0).config().withWindow(10, 10);
      LocalRelayHub half = new LocalRelayHub(2);
      RelayExchange.connect(cluster.ranks.get(1).config(), half).close();
      MeshException limits =
          assertThrows(MeshException.class, () -> RelayExchange.connect(other, half));
      assertEquals(Reason.HANDSHAKE, limits.reason());
      assertTrue(limits.getMessage().contains("must be equal on every rank"), limits.getMessage());
    }
    ControlConfig rank0;
    try (Cluster other = Cluster.overHub(new LocalRelayHub(2), UnaryOperator.identity())) {
      rank0 = other.ranks.get(0).config();
    }
    MeshException e =
        assertThrows(MeshException.class, () -> RelayExchange.connect(rank0, new LocalRelayHub(3)));
    assertTrue(e.getMessage().contains("world_size=2, the hub has 3 ranks"), e.getMessage());
  }

  /**
   * A simulated clock: rank threads run their bodies while this thread advances the clock by a
   * round timeout at a time until every body has returned.
   */
  private static final class SimulatedRun implements AutoCloseable {
    final AtomicLong clockNs = new AtomicLong(1_000_000_000L);
    final LocalRelayHub hub;
    final Cluster cluster;
    final ExecutorService threads;

    SimulatedRun(int worldSize) throws Exception {
      hub = new LocalRelayHub(worldSize, clockNs::get);
      cluster = Cluster.overHub(hub, TIMEOUTS);
      threads = Executors.newFixedThreadPool(worldSize);
    }

    Future<ControlPlaneException> start(int rank, long fromRound) {
      RelayExchange x = cluster.ranks.get(rank);
      return threads.submit(
          () -> {
            for (long n = fromRound; ; n++) {
              try {
                x.exchange(LocalReport.idle(clockNs.get() + n));
              } catch (ControlPlaneException e) {
                return e;
              }
            }
          });
    }

    /** Advances the clock until {@code f} is done; returns what it returned. */
    <T> T advanceUntil(Future<T> f) throws Exception {
      long wallDeadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (true) {
        try {
          return f.get(1, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
          if (System.nanoTime() - wallDeadlineNs >= 0) {
            throw new AssertionError("a rank did not finish", e);
          }
          clockNs.addAndGet(TimeUnit.MILLISECONDS.toNanos(ROUND_TIMEOUT_MS) / 4);
          hub.timeAdvanced();
        } catch (ExecutionException e) {
          throw new AssertionError("a rank failed: " + e.getCause(), e.getCause());
        }
      }
    }

    /** Every rank runs {@code rounds} rounds together. */
    void warmUp(int rounds) throws Exception {
      for (Outcome<Integer> o :
          cluster.run(
              (rank, x) -> {
                for (int n = 1; n <= rounds; n++) {
                  x.exchange(LocalReport.idle(n));
                }
                return rounds;
              })) {
        o.get();
      }
    }

    @Override
    public void close() {
      cluster.close();
      threads.shutdownNow();
    }
  }

  @Test
  void shouldTimeOutNamingTheHeldRankAndStopEveryRankAtOneRoundWhenItResumes() throws Exception {
    try (SimulatedRun run = new SimulatedRun(3)) {
      run.warmUp(5);
      run.hub.hold(2);
      Future<ControlPlaneException> frozen = run.start(2, 6);
      List<Future<ControlPlaneException>> survivors = List.of(run.start(0, 6), run.start(1, 6));
      for (Future<ControlPlaneException> f : survivors) {
        MeshException e = assertInstanceOf(MeshException.class, run.advanceUntil(f));
        assertEquals(Reason.TIMEOUT, e.reason(), e.getMessage());
        assertEquals(2, e.peerRank());
        assertEquals(6, e.round());
        assertTrue(
            e.getMessage()
                .startsWith(
                    "rank 2 sent no complete frame within round_timeout_ms=1500 in round 6"),
            e.getMessage());
        // Both survivors gathered round 5 and heard each other: round 5 is the last.
        assertEquals(5, e.finalRound().orElseThrow().round());
        assertEquals(5, e.lastAppliedRound());
      }
      run.hub.release(2);
      MeshException late = assertInstanceOf(MeshException.class, run.advanceUntil(frozen));
      assertEquals(Reason.PEER_STOPPED, late.reason(), late.getMessage());
      assertTrue(late.getMessage().contains("after losing rank 2"), late.getMessage());
      // It gathered round 6 (its peers' reports preceded their FINALs) and fails in round 7, but
      // settles on its peers' round 5: round 6 is never applied.
      assertEquals(7, late.round(), late.getMessage());
      assertEquals(5, late.lastAppliedRound(), late.getMessage());
      assertTrue(late.finalRound().isEmpty());
    }
  }

  /**
   * Ranks 1 and 2 freeze in round 6: rank 0 times out, settles alone and stops at round 5 (the
   * round it held back). When they resume, each finds rank 0's FINAL where its report was due and
   * settles on the same round with the other and rank 0.
   */
  @Test
  void shouldStopLateRanksAtTheRoundOfTheFinalTheyFindWhenTwoRanksFreeze() throws Exception {
    try (SimulatedRun run = new SimulatedRun(3)) {
      run.warmUp(5);
      run.hub.hold(1);
      run.hub.hold(2);
      List<Future<ControlPlaneException>> frozen = List.of(run.start(1, 6), run.start(2, 6));
      MeshException first =
          assertInstanceOf(MeshException.class, run.advanceUntil(run.start(0, 6)));
      assertEquals(Reason.TIMEOUT, first.reason());
      assertTrue(
          first.getMessage().startsWith("ranks [1, 2] sent no complete frame"), first.getMessage());
      assertEquals(5, first.lastAppliedRound());
      run.hub.release(1);
      run.hub.release(2);
      for (Future<ControlPlaneException> f : frozen) {
        MeshException e = assertInstanceOf(MeshException.class, run.advanceUntil(f));
        assertEquals(Reason.PEER_STOPPED, e.reason(), e.getMessage());
        assertEquals(0, e.peerRank());
        assertTrue(e.getMessage().contains("after losing rank 1"), e.getMessage());
        assertEquals(5, e.lastAppliedRound());
      }
    }
  }

  /**
   * Rank 2 dies after its frame of round 6 reached its peers: they gather round 6 and find its end
   * of stream in round 7. Both held round 6 back when they fail, and both settle on it: its events
   * (rank 2's last word in that round) reach both in the final round.
   */
  @Test
  void shouldSettleOnTheHeldRoundWhenADeadRanksLastFrameReachedEveryPeer() throws Exception {
    try (SimulatedRun run = new SimulatedRun(3)) {
      run.warmUp(5);
      RelayExchange x2 = run.cluster.ranks.get(2);
      Future<Object> rank2 =
          run.threads.submit(
              () -> {
                x2.exchange(LocalReport.idle(6).withEvents(new RankEvents(new byte[] {2, 6})));
                run.hub.kill(2);
                return assertThrows(MeshException.class, () -> x2.exchange(LocalReport.idle(7)));
              });
      List<Future<ControlPlaneException>> survivors = List.of(run.start(0, 6), run.start(1, 6));
      for (Future<ControlPlaneException> f : survivors) {
        MeshException e = assertInstanceOf(MeshException.class, run.advanceUntil(f));
        assertEquals(Reason.DISCONNECTED, e.reason(), e.getMessage());
        assertEquals(2, e.peerRank(), e.getMessage());
        assertEquals(7, e.round(), e.getMessage());
        assertEquals(6, e.finalRound().orElseThrow().round(), e.getMessage());
        assertEquals(
            List.of(RankEvents.EMPTY, RankEvents.EMPTY, new RankEvents(new byte[] {2, 6})),
            e.finalRound().orElseThrow().events());
        assertEquals(6, e.lastAppliedRound(), e.getMessage());
      }
      MeshException dead = assertInstanceOf(MeshException.class, run.advanceUntil(rank2));
      assertEquals(Reason.IO, dead.reason());
    }
  }
}
