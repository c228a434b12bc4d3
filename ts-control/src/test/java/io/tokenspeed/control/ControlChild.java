package io.tokenspeed.control;

import io.tokenspeed.core.control.AgreedRound;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * One rank of a replica in its own JVM, for {@link ControlProcessIT}.
 *
 * <pre>
 *   ControlChild world_size rank seed rounds round_timeout_ms endless [poison_rank@round]
 * </pre>
 *
 * Protocol on standard output and input: the child binds an ephemeral loopback port and prints
 * {@code port N}; it reads one line {@code ports P0,P1,...} naming every rank's port; it joins the
 * mesh ({@code connected}), runs the seeded {@link Scenario}'s rounds (printing {@code round N}
 * every 100 rounds) and prints {@code digest HEX} of its agreed rounds. With {@code endless=true}
 * it then keeps exchanging idle rounds until the exchange fails. The replica secret comes from the
 * environment ({@link ReplicaSecret#fromEnvironment()}). Rounds arrive one exchange late (see
 * {@link RelayExchange}): after its scenario's rounds the child runs one more idle exchange to
 * receive the last one. On failure it prints {@code error REASON peer=P round=N waited_ms=W
 * applied=A MESSAGE} (or {@code protocol round=N applied=A MESSAGE}), where A is the last round it
 * applied (the exception's final round included), keeps its sockets open until its standard input
 * ends, and exits with status 3. With {@code poison_rank@round}, that rank's poll fails in that
 * round.
 */
public final class ControlChild {

  private ControlChild() {}

  public static void main(String[] args) throws Exception {
    int worldSize = Integer.parseInt(args[0]);
    int rank = Integer.parseInt(args[1]);
    long seed = Long.parseLong(args[2]);
    int rounds = Integer.parseInt(args[3]);
    long roundTimeoutMs = Long.parseLong(args[4]);
    boolean endless = Boolean.parseBoolean(args[5]);
    // Rank poisonRank's poll fails in round poisonRound: every rank must raise the same error.
    int poisonRank = -1;
    int poisonRound = -1;
    if (args.length > 6) {
      String[] at = args[6].split("@");
      poisonRank = Integer.parseInt(at[0]);
      poisonRound = Integer.parseInt(at[1]);
    }

    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    ServerSocketChannel listener =
        ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
    say("port " + ((InetSocketAddress) listener.getLocalAddress()).getPort());
    String line = in.readLine();
    if (line == null || !line.startsWith("ports ")) {
      throw new IllegalStateException("expected 'ports ...', got " + line);
    }
    List<InetSocketAddress> addresses = new ArrayList<>();
    for (String port : line.substring(6).split(",")) {
      addresses.add(
          new InetSocketAddress(InetAddress.getLoopbackAddress(), Integer.parseInt(port)));
    }
    if (addresses.size() != worldSize) {
      throw new IllegalStateException("got " + addresses.size() + " ports for " + worldSize);
    }
    ControlConfig config =
        ControlConfig.of(7, rank, addresses, ReplicaSecret.fromEnvironment())
            .withTimeouts(roundTimeoutMs, 30_000)
            .withHandshakeTimeout(2_000);
    Scenario scenario = new Scenario(seed, worldSize, rounds);

    RelayExchange x;
    try {
      x = RelayExchange.connect(config, listener);
    } catch (MeshException e) {
      say(
          "error "
              + e.reason()
              + " peer="
              + e.peerRank()
              + " round=0 waited_ms=0 applied="
              + e.lastAppliedRound()
              + " "
              + e.getMessage());
      System.exit(3);
      return;
    }
    say("connected");
    long startNs = 0;
    Scenario.Digest digest = new Scenario.Digest();
    try {
      long tickNs = 0;
      for (int n = 1; n <= rounds + 1; n++) {
        startNs = System.nanoTime();
        LocalReport local =
            n > rounds
                ? LocalReport.idle(tickNs + 1_000)
                : rank == poisonRank && n == poisonRound
                    ? LocalReport.pollFailed(n, "injected poll failure on rank " + rank)
                    : scenario.report(rank, n);
        Optional<AgreedRound> a = x.exchange(local);
        if (a.isPresent()) {
          digest.add(a.get());
          tickNs = Math.max(tickNs, a.get().tickNs());
        }
        tickNs = Math.max(tickNs, local.clockNs());
        if (n % 100 == 0) {
          say("round " + n);
        }
      }
      say("pending " + x.pendingOperations());
      say("digest " + digest.hex());
      for (long n = rounds + 2; endless; n++) {
        startNs = System.nanoTime();
        tickNs += 1_000;
        x.exchange(LocalReport.idle(tickNs));
        if (n % 100 == 0) {
          say("round " + n);
        }
        LockSupport.parkNanos(200_000); // keeps three spinning JVMs from starving a small machine
      }
    } catch (MeshException e) {
      long waitedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
      say(
          "error "
              + e.reason()
              + " peer="
              + e.peerRank()
              + " round="
              + e.round()
              + " waited_ms="
              + waitedMs
              + " applied="
              + e.lastAppliedRound()
              + " "
              + e.getMessage());
      holdUntilStdinEnds(in, x);
    } catch (ProtocolException e) {
      say(
          "protocol round="
              + e.round()
              + " applied="
              + e.lastAppliedRound()
              + " "
              + e.getMessage());
      holdUntilStdinEnds(in, x);
    }
    x.close();
  }

  private static void holdUntilStdinEnds(BufferedReader in, RelayExchange x) throws Exception {
    while (in.readLine() != null) {
      // The parent closes our input once it has read every rank's verdict.
    }
    x.close();
    System.exit(3);
  }

  private static void say(String line) {
    System.out.println(line);
    System.out.flush();
  }
}
