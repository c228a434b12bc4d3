package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;

/**
 * Three ranks, rank 2 played by hand: it reports rounds 1–3 to both peers, its round 4 to rank 0
 * only, and dies. Rank 0 then holds round 4 and rank 1 does not; the survivors must still stop at
 * one last round. Shared by the plain and the TLS mesh tests.
 */
final class DyingRank {

  /** How the hand-played rank 2 joins one peer. */
  @FunctionalInterface
  interface Joiner {
    RawPeer join(InetSocketAddress peer, ReplicaSecret secret) throws Exception;
  }

  private DyingRank() {}

  /**
   * Runs the scenario with configs adjusted by {@code tweak}; {@code kill} ends rank 2's
   * connections as its death would. Returns each survivor's last applied round, rank 0 first.
   */
  static List<Long> run(UnaryOperator<ControlConfig> tweak, Joiner joiner, boolean kill)
      throws Exception {
    List<ServerSocketChannel> listeners = Cluster.listeners(3);
    List<ControlConfig> configs =
        Cluster.configs(
            Cluster.addresses(listeners), c -> tweak.apply(c.withTimeouts(10_000, 20_000)));
    listeners.get(2).close();
    ExecutorService threads = Executors.newFixedThreadPool(2);
    try {
      List<Future<RelayExchange>> connecting = new ArrayList<>();
      for (int r = 0; r < 2; r++) {
        ControlConfig c = configs.get(r);
        ServerSocketChannel l = listeners.get(r);
        connecting.add(threads.submit(() -> RelayExchange.connect(c, l)));
      }
      ReplicaSecret secret = configs.getFirst().secret();
      List<InetSocketAddress> at = configs.getFirst().addresses();
      try (RawPeer to0 = joiner.join(at.get(0), secret);
          RawPeer to1 = joiner.join(at.get(1), secret)) {
        List<RelayExchange> xs = new ArrayList<>();
        for (Future<RelayExchange> f : connecting) {
          xs.add(f.get(30, TimeUnit.SECONDS));
        }
        List<Future<ControlPlaneException>> survivors = new ArrayList<>();
        for (RelayExchange x : xs) {
          survivors.add(
              threads.submit(
                  () -> {
                    for (long n = 1; ; n++) {
                      try {
                        x.exchange(LocalReport.idle(n));
                      } catch (ControlPlaneException e) {
                        return e;
                      }
                    }
                  }));
        }
        for (long n = 1; n <= 3; n++) {
          to0.send(RawPeer.report(2, n));
          to1.send(RawPeer.report(2, n));
          assertNotNull(to0.readFrame());
          assertNotNull(to1.readFrame());
        }
        to0.send(RawPeer.report(2, 4)); // rank 1 never receives round 4 from rank 2
        assertNotNull(to0.readFrame());
        assertNotNull(to1.readFrame());
        if (kill) {
          to0.kill(); // a killed process sends no close_notify
          to1.kill();
        } else {
          to0.close();
          to1.close();
        }
        List<Long> applied = new ArrayList<>();
        for (Future<ControlPlaneException> f : survivors) {
          ControlPlaneException e = f.get(60, TimeUnit.SECONDS);
          MeshException m = assertInstanceOf(MeshException.class, e);
          // Either this survivor saw rank 2 go, or the other survivor's FINAL came first.
          assertTrue(
              m.peerRank() == 2
                  || (m.reason() == MeshException.Reason.PEER_STOPPED
                      && m.getMessage().contains("after losing rank 2")),
              m.getMessage());
          applied.add(e.lastAppliedRound());
        }
        for (RelayExchange x : xs) {
          x.close();
        }
        return applied;
      }
    } finally {
      threads.shutdownNow();
    }
  }
}
