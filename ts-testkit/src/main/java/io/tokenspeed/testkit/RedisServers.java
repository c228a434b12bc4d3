package io.tokenspeed.testkit;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * Starts real {@code redis-server} processes for live tests: a standalone server, or a Redis
 * Cluster of masters, on free loopback ports.
 *
 * <ul>
 *   <li><b>Never skipped.</b> When no {@code redis-server} is installed, the embedded Redis 6.2
 *       server of the test-scope artifact is used (see {@link RedisBinary}); where that does not
 *       exist either, every start fails with a message that says how to install one ({@value
 *       #INSTALL_HINT}): a live test does not silently pass on a machine without the server.
 *   <li><b>Stopped by pid.</b> Each server is a foreground child process; {@link RedisServer#kill}
 *       sends SIGKILL to that pid. A JVM shutdown hook kills whatever a test left running, so a
 *       failed test does not leak servers (a JVM that is itself killed with SIGKILL cannot).
 *   <li><b>Bounded.</b> Starting a server waits at most {@link RedisServer#START_TIMEOUT} for PING;
 *       forming a cluster waits at most {@link #CLUSTER_TIMEOUT} for {@code cluster_state:ok} on
 *       every node. A failure names the node and quotes its log.
 *   <li><b>Ports are probed, not reserved.</b> A port is free when a loopback socket can bind it; a
 *       server that loses the race for it exits with "Address already in use" and is started again
 *       on another port ({@value #START_ATTEMPTS} attempts).
 * </ul>
 *
 * <p>A cluster is formed with plain commands rather than {@code redis-cli --cluster create}, which
 * waits in one-second steps: each master adds its slot range ({@code CLUSTER ADDSLOTS}, which Redis
 * 6.2 has too) and a distinct config epoch, the first meets the others, and the harness polls
 * {@code CLUSTER INFO} every 20 ms. A cluster master refuses writes for two seconds after its start
 * (Redis's writable delay), so forming a cluster takes a little over two seconds.
 *
 * <pre>
 *   port P, cluster bus P + 10000 (both probed free)
 *   node 0: slots [0, 5460]     node 1: [5461, 10922]     node 2: [10923, 16383]
 * </pre>
 *
 * <p>{@link #sharedStandalone()} and {@link #sharedCluster()} start one server (or cluster) per JVM
 * for the tests that only read and write keys; a test that kills, pauses, restarts or reconfigures
 * a server starts its own.
 */
public final class RedisServers {

  /** How to install the server, quoted by every failure to find it. */
  public static final String INSTALL_HINT = "apt-get install -y redis-server";

  /** How long forming a cluster may take once its nodes run. */
  public static final Duration CLUSTER_TIMEOUT = Duration.ofSeconds(20);

  /** Hash slots of a Redis Cluster. */
  public static final int SLOTS = 16384;

  private static final int START_ATTEMPTS = 5;
  private static final int CLUSTER_BUS_OFFSET = 10000;
  private static final int CLUSTER_PORT_MIN = 20000;
  private static final int CLUSTER_PORT_MAX = 55000;

  private static final Set<RedisServer> LIVE = ConcurrentHashMap.newKeySet();
  private static final Set<Path> SHARED_DIRECTORIES = ConcurrentHashMap.newKeySet();
  private static RedisServer sharedStandalone;
  private static RedisCluster sharedCluster;

  static {
    Runtime.getRuntime()
        .addShutdownHook(
            Thread.ofPlatform()
                .name("ts-testkit-redis-reaper")
                .unstarted(
                    () -> {
                      for (RedisServer server : List.copyOf(LIVE)) {
                        try {
                          server.kill();
                        } catch (RuntimeException e) {
                          System.err.println("could not kill " + server + ": " + e);
                        }
                      }
                      for (Path dir : SHARED_DIRECTORIES) {
                        deleteTree(dir);
                      }
                    }));
  }

  private RedisServers() {}

  /**
   * The {@code redis-server} executable: {@code $TOKENSPEED_REDIS_SERVER}, else the one on {@code
   * PATH}, else the embedded server (see {@link RedisBinary}); fails with {@value #INSTALL_HINT}
   * when there is none.
   */
  public static Path requireBinary() {
    return RedisBinary.require();
  }

  /** Starts a standalone server on a free loopback port, working in a new directory under dir. */
  public static RedisServer startStandalone(Path dir) {
    return startStandalone(dir, List.of());
  }

  /** {@link #startStandalone(Path)} with extra {@code redis-server} arguments. */
  public static RedisServer startStandalone(Path dir, List<String> extraArgs) {
    Path binary = requireBinary();
    for (int attempt = 1; ; attempt++) {
      int port = freePort();
      try {
        return RedisServer.start(binary, dir.resolve("standalone-" + port), port, extraArgs);
      } catch (RedisServer.StartFailure e) {
        if (!e.portTaken() || attempt >= START_ATTEMPTS) {
          throw e;
        }
      }
    }
  }

  /**
   * Starts {@code masters} cluster-enabled servers and forms a cluster of them (no replicas); waits
   * until every node reports {@code cluster_state:ok} and knows every other node.
   */
  public static RedisCluster startCluster(Path dir, int masters) {
    if (masters < 1 || masters > 16) {
      throw new IllegalArgumentException("masters=" + masters + " must be in [1, 16]");
    }
    Path binary = requireBinary();
    List<RedisServer> nodes = new ArrayList<>();
    try {
      Set<Integer> used = new HashSet<>();
      for (int i = 0; i < masters; i++) {
        nodes.add(startClusterNode(binary, dir, used));
      }
      for (int i = 0; i < masters; i++) {
        int first = i * SLOTS / masters;
        int last = (i + 1) * SLOTS / masters - 1;
        List<String> addSlots = new ArrayList<>(last - first + 3);
        addSlots.add("CLUSTER");
        addSlots.add("ADDSLOTS");
        for (int slot = first; slot <= last; slot++) {
          addSlots.add(Integer.toString(slot));
        }
        nodes.get(i).command(addSlots.toArray(String[]::new));
        nodes.get(i).command("CLUSTER", "SET-CONFIG-EPOCH", Integer.toString(i + 1));
      }
      for (int i = 1; i < masters; i++) {
        nodes
            .getFirst()
            .command("CLUSTER", "MEET", "127.0.0.1", Integer.toString(nodes.get(i).port()));
      }
      awaitClusterOk(nodes);
      return new RedisCluster(nodes);
    } catch (RuntimeException e) {
      for (RedisServer node : nodes) {
        try {
          node.kill();
        } catch (RuntimeException suppressed) {
          e.addSuppressed(suppressed);
        }
      }
      throw e;
    }
  }

  /**
   * One standalone server for every test of this JVM that only reads and writes keys; killed by the
   * shutdown hook. Tests flush it before use.
   */
  public static synchronized RedisServer sharedStandalone() {
    if (sharedStandalone == null || !sharedStandalone.isAlive()) {
      sharedStandalone = startStandalone(sharedDirectory());
    }
    return sharedStandalone;
  }

  /** One 3-master cluster for every test of this JVM that only reads and writes keys. */
  public static synchronized RedisCluster sharedCluster() {
    if (sharedCluster == null || !sharedCluster.nodes().stream().allMatch(RedisServer::isAlive)) {
      if (sharedCluster != null) {
        sharedCluster.close();
      }
      sharedCluster = startCluster(sharedDirectory(), 3);
    }
    return sharedCluster;
  }

  /** A loopback port that a socket could bind just now. */
  public static int freePort() {
    try (ServerSocket socket = new ServerSocket()) {
      socket.setReuseAddress(false);
      socket.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
      return socket.getLocalPort();
    } catch (IOException e) {
      throw new UncheckedIOException("no free loopback port", e);
    }
  }

  static void remember(RedisServer server) {
    LIVE.add(server);
  }

  static void forget(RedisServer server) {
    LIVE.remove(server);
  }

  private static RedisServer startClusterNode(Path binary, Path dir, Set<Integer> used) {
    for (int attempt = 1; ; attempt++) {
      int port = freeClusterPort(used);
      List<String> args =
          List.of(
              "--cluster-enabled",
              "yes",
              "--cluster-config-file",
              "nodes-" + port + ".conf",
              "--cluster-node-timeout",
              "5000");
      try {
        return RedisServer.start(binary, dir.resolve("cluster-" + port), port, args);
      } catch (RedisServer.StartFailure e) {
        if (!e.portTaken() || attempt >= START_ATTEMPTS) {
          throw e;
        }
      }
    }
  }

  /** A port P such that P and its cluster bus port P + 10000 are both free and unused here. */
  private static int freeClusterPort(Set<Integer> used) {
    for (int attempt = 0; attempt < 200; attempt++) {
      int port = ThreadLocalRandom.current().nextInt(CLUSTER_PORT_MIN, CLUSTER_PORT_MAX);
      if (used.contains(port)
          || used.contains(port + CLUSTER_BUS_OFFSET)
          || used.contains(port - CLUSTER_BUS_OFFSET)) {
        continue;
      }
      if (bindable(port) && bindable(port + CLUSTER_BUS_OFFSET)) {
        used.add(port);
        used.add(port + CLUSTER_BUS_OFFSET);
        return port;
      }
    }
    throw new IllegalStateException(
        "no free loopback port pair P, P+10000 in ["
            + CLUSTER_PORT_MIN
            + ", "
            + CLUSTER_PORT_MAX
            + ")");
  }

  private static boolean bindable(int port) {
    try (ServerSocket socket = new ServerSocket()) {
      socket.setReuseAddress(false);
      socket.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
      return true;
    } catch (IOException e) {
      return false;
    }
  }

  private static void awaitClusterOk(List<RedisServer> nodes) {
    long deadlineNs = System.nanoTime() + CLUSTER_TIMEOUT.toNanos();
    String expectKnown = "cluster_known_nodes:" + nodes.size();
    while (true) {
      List<String> infos = new ArrayList<>();
      boolean ok = true;
      for (RedisServer node : nodes) {
        String info = String.valueOf(node.command("CLUSTER", "INFO"));
        infos.add(node.hostAndPort() + ": " + info.replace("\r\n", " "));
        ok &=
            info.contains("cluster_state:ok")
                && info.contains(expectKnown + "\r\n")
                && info.contains("cluster_slots_ok:" + SLOTS);
      }
      if (ok) {
        return;
      }
      if (System.nanoTime() - deadlineNs > 0) {
        StringBuilder message =
            new StringBuilder("the cluster did not reach cluster_state:ok within ")
                .append(CLUSTER_TIMEOUT);
        for (int i = 0; i < nodes.size(); i++) {
          message.append("\n").append(infos.get(i));
          message.append("\nlog of ").append(nodes.get(i)).append(":\n");
          message.append(nodes.get(i).logTail());
        }
        throw new IllegalStateException(message.toString());
      }
      LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
    }
  }

  private static Path sharedDirectory() {
    try {
      Path dir = Files.createTempDirectory("ts-testkit-redis-");
      SHARED_DIRECTORIES.add(dir);
      return dir;
    } catch (IOException e) {
      throw new UncheckedIOException("cannot create a directory for shared redis servers", e);
    }
  }

  private static void deleteTree(Path dir) {
    try (var paths = Files.walk(dir)) {
      for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    } catch (IOException | UncheckedIOException e) {
      System.err.println("could not delete " + dir + ": " + e);
    }
  }
}
