package io.tokenspeed.control;

import io.tokenspeed.core.control.AgreedRound;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.IntFunction;
import java.util.function.UnaryOperator;

/**
 * Ranks of one replica as threads of this JVM, over real loopback TCP: each rank listens on an
 * ephemeral port bound before anyone connects, and every wait on a rank is bounded.
 */
final class Cluster implements AutoCloseable {

  /** What one rank does with its exchange. */
  @FunctionalInterface
  interface RankBody<T> {
    T run(int rank, RelayExchange exchange) throws Exception;
  }

  /** What one rank's body returned, or what it threw. */
  record Outcome<T>(T value, Throwable error) {
    T get() {
      if (error != null) {
        throw new AssertionError("rank failed: " + error, error);
      }
      return value;
    }
  }

  static final Duration WAIT = Duration.ofSeconds(60);

  final List<RelayExchange> ranks;
  private final ExecutorService threads;

  private Cluster(List<RelayExchange> ranks, ExecutorService threads) {
    this.ranks = ranks;
    this.threads = threads;
  }

  /** Listeners bound to loopback port 0, one per rank. */
  static List<ServerSocketChannel> listeners(int worldSize) throws IOException {
    List<ServerSocketChannel> out = new ArrayList<>();
    for (int r = 0; r < worldSize; r++) {
      out.add(
          ServerSocketChannel.open()
              .bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)));
    }
    return out;
  }

  static List<InetSocketAddress> addresses(List<ServerSocketChannel> listeners) throws IOException {
    List<InetSocketAddress> out = new ArrayList<>();
    for (ServerSocketChannel l : listeners) {
      out.add((InetSocketAddress) l.getLocalAddress());
    }
    return out;
  }

  /**
   * Configs for ranks at {@code addresses} with one new replica secret and short timeouts, adjusted
   * by {@code tweak}.
   */
  static List<ControlConfig> configs(
      List<InetSocketAddress> addresses, UnaryOperator<ControlConfig> tweak) {
    ReplicaSecret secret = ReplicaSecret.generate();
    List<ControlConfig> out = new ArrayList<>();
    for (int r = 0; r < addresses.size(); r++) {
      out.add(tweak.apply(ControlConfig.of(7, r, addresses, secret).withTimeouts(20_000, 20_000)));
    }
    return out;
  }

  static Cluster start(int worldSize) throws Exception {
    return start(worldSize, UnaryOperator.identity());
  }

  /** Connects {@code worldSize} ranks, each on its own thread, and waits for all of them. */
  static Cluster start(int worldSize, UnaryOperator<ControlConfig> tweak) throws Exception {
    List<ServerSocketChannel> listeners = listeners(worldSize);
    List<ControlConfig> configs = configs(addresses(listeners), tweak);
    ExecutorService threads = Executors.newFixedThreadPool(worldSize);
    List<Future<RelayExchange>> futures = new ArrayList<>();
    for (int r = 0; r < worldSize; r++) {
      ControlConfig c = configs.get(r);
      ServerSocketChannel l = listeners.get(r);
      futures.add(threads.submit(() -> RelayExchange.connect(c, l)));
    }
    List<RelayExchange> ranks = new ArrayList<>();
    try {
      for (Future<RelayExchange> f : futures) {
        ranks.add(f.get(WAIT.toMillis(), TimeUnit.MILLISECONDS));
      }
    } catch (ExecutionException | TimeoutException e) {
      ranks.forEach(RelayExchange::close);
      threads.shutdownNow();
      throw e;
    }
    return new Cluster(List.copyOf(ranks), threads);
  }

  /**
   * {@code worldSize} ranks joined over {@code hub} (in memory, no sockets), with the configs of
   * {@link #configs} adjusted by {@code tweak}; their addresses are placeholders nothing listens
   * on.
   */
  static Cluster overHub(LocalRelayHub hub, UnaryOperator<ControlConfig> tweak) throws Exception {
    List<InetSocketAddress> placeholders = new ArrayList<>();
    for (int r = 0; r < hub.worldSize(); r++) {
      placeholders.add(new InetSocketAddress(InetAddress.getLoopbackAddress(), 1 + r));
    }
    List<RelayExchange> ranks = new ArrayList<>();
    for (ControlConfig c : configs(placeholders, tweak)) {
      ranks.add(RelayExchange.connect(c, hub));
    }
    return new Cluster(List.copyOf(ranks), Executors.newFixedThreadPool(hub.worldSize()));
  }

  /** Runs {@code body} on every rank at once and waits (bounded) for every rank to finish. */
  <T> List<Outcome<T>> run(RankBody<T> body) throws Exception {
    List<Future<T>> futures = new ArrayList<>();
    for (int r = 0; r < ranks.size(); r++) {
      int rank = r;
      futures.add(threads.submit(() -> body.run(rank, ranks.get(rank))));
    }
    List<Outcome<T>> out = new ArrayList<>();
    long deadlineNs = System.nanoTime() + WAIT.toNanos();
    for (Future<T> f : futures) {
      try {
        out.add(new Outcome<>(f.get(deadlineNs - System.nanoTime(), TimeUnit.NANOSECONDS), null));
      } catch (ExecutionException e) {
        out.add(new Outcome<>(null, e.getCause()));
      } catch (TimeoutException e) {
        close();
        throw new AssertionError("a rank did not finish within " + WAIT, e);
      }
    }
    return out;
  }

  /**
   * Runs {@code rounds} rounds with {@code reportOf(n)} and, on a replica of several ranks, one
   * more idle exchange to receive the last round (rounds arrive one exchange late there; a single
   * rank's at once); returns rounds 1..{@code rounds} in order.
   */
  static List<AgreedRound> rounds(RelayExchange x, IntFunction<LocalReport> reportOf, int rounds)
      throws ControlPlaneException {
    List<AgreedRound> out = new ArrayList<>(rounds);
    long clockNs = 0;
    int exchanges = x.config().worldSize() == 1 ? rounds : rounds + 1;
    for (int n = 1; n <= exchanges; n++) {
      LocalReport local = n <= rounds ? reportOf.apply(n) : LocalReport.idle(clockNs + 1);
      clockNs = local.clockNs();
      x.exchange(local).ifPresent(out::add);
    }
    if (out.size() != rounds || (rounds > 0 && out.getLast().round() != rounds)) {
      throw new AssertionError("expected rounds 1.." + rounds + ", got " + out.size());
    }
    return out;
  }

  /**
   * Every rank exchanges three idle rounds; rank {@code closing} then closes its exchange and the
   * others enter round 4. Returns what each rank's round 4 threw (null for the closing rank).
   */
  List<Outcome<MeshException>> closeAfterThreeRounds(int closing) throws Exception {
    return run(
        (rank, x) -> {
          for (int n = 1; n <= 3; n++) {
            x.exchange(LocalReport.idle(n));
          }
          if (rank == closing) {
            x.close();
            return null;
          }
          try {
            x.exchange(LocalReport.idle(4));
          } catch (MeshException e) {
            return e;
          }
          throw new AssertionError("rank " + rank + " exchanged round 4 without rank " + closing);
        });
  }

  /** One round with {@code local}, received through a second, idle exchange. */
  static AgreedRound oneRound(RelayExchange x, LocalReport local) throws ControlPlaneException {
    return rounds(x, n -> local, 1).getFirst();
  }

  @Override
  public void close() {
    ranks.forEach(RelayExchange::close);
    threads.shutdownNow();
  }
}
