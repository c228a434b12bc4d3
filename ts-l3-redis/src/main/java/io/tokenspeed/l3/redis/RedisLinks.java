package io.tokenspeed.l3.redis;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SocketOptions;
import io.lettuce.core.SslVerifyMode;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.ClusterTopologyRefreshOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.api.async.RedisClusterAsyncCommands;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.codec.RedisCodec;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.resource.ClientResources;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.ConnectException;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The store's Lettuce connections: a fixed set of multiplexed connections, handed out round-robin,
 * to one standalone server or to a Redis Cluster. They carry the startup checks, the cluster
 * topology and namespace deletion (and, over TLS, the data path); with the direct path one
 * connection is enough. Opening them is the store's whole startup check, bounded by {@code
 * connect_timeout_ms}; a failure is translated into one line that names the setting to fix.
 *
 * <pre>
 *   failure at startup                         exception                  names
 *   WRONGPASS (user/password refused)          IllegalArgumentException   username, password
 *   NOAUTH (server wants a password)           IllegalArgumentException   username, password
 *   closed or reset during the handshake       IllegalArgumentException   username, password
 *     (HELLO with AUTH), a password set
 *   cluster=true, server has cluster disabled  IllegalArgumentException   cluster
 *   cluster=false, server is a cluster node    IllegalArgumentException   cluster, uris
 *   refused, unresolvable, no answer in time,  IOException                uris, connect_timeout_ms
 *     closed during a handshake without AUTH
 * </pre>
 *
 * <p>A server may close the connection of a refused password before its WRONGPASS reply reaches the
 * client (seen under load): the handshake then only fails with "Connection closed prematurely" or a
 * reset. When the handshake carried credentials, that is reported as a credentials error naming the
 * user, as WRONGPASS would be; a connection that closes after the handshake (the INFO check) is
 * not.
 *
 * <p>Client options shared by both shapes: automatic reconnection (delay doubling from 1 ms up to
 * {@link #RECONNECT_DELAY_MAX}), commands rejected at once while disconnected instead of buffered
 * (so an outage fails calls fast rather than holding them until the command timeout), a TCP connect
 * timeout, keep-alive, and Lettuce's own command timeout equal to {@code command_timeout_ms} as a
 * backstop behind the store's per-call deadline.
 */
abstract sealed class RedisLinks permits RedisLinks.Standalone, RedisLinks.Cluster {

  /** Keys are UTF-8 text, values raw bytes. */
  static final RedisCodec<String, byte[]> CODEC =
      RedisCodec.of(StringCodec.UTF8, ByteArrayCodec.INSTANCE);

  /** Longest wait between two reconnection attempts. */
  static final Duration RECONNECT_DELAY_MAX = Duration.ofSeconds(1);

  /** How long closing may wait for the client's threads. */
  static final Duration SHUTDOWN_TIMEOUT = Duration.ofSeconds(2);

  final RedisStoreSettings settings;
  private final AtomicInteger next = new AtomicInteger();

  RedisLinks(RedisStoreSettings settings) {
    this.settings = settings;
  }

  /**
   * Opens {@code connections} connections as {@code settings} say, or throws a one-line startup
   * error.
   */
  static RedisLinks open(RedisStoreSettings settings, ClientResources resources, int connections)
      throws IOException {
    long deadlineNs =
        System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.connectTimeoutMs());
    return settings.cluster()
        ? Cluster.open(settings, resources, connections, deadlineNs)
        : Standalone.open(settings, resources, connections, deadlineNs);
  }

  /** The commands of the next connection, round-robin. */
  final RedisClusterAsyncCommands<String, byte[]> next() {
    List<? extends RedisClusterAsyncCommands<String, byte[]>> all = commands();
    return all.get(Math.floorMod(next.getAndIncrement(), all.size()));
  }

  /** One command interface per connection. */
  abstract List<? extends RedisClusterAsyncCommands<String, byte[]>> commands();

  /** A direct connection to every master, for SCAN (which walks one node's keys). */
  abstract List<RedisClusterAsyncCommands<String, byte[]>> masters(long deadlineNs)
      throws IOException;

  /** Whether a multi-key command must keep to one hash slot (Redis Cluster). */
  abstract boolean slotted();

  /** Closes every connection and the client. */
  abstract void close();

  // ------------------------------------------------------------------ standalone

  static final class Standalone extends RedisLinks {
    private final RedisClient client;
    private final List<RedisClusterAsyncCommands<String, byte[]>> commands;

    private Standalone(
        RedisStoreSettings settings,
        RedisClient client,
        List<StatefulRedisConnection<String, byte[]>> connections) {
      super(settings);
      this.client = client;
      List<RedisClusterAsyncCommands<String, byte[]>> async = new ArrayList<>();
      for (StatefulRedisConnection<String, byte[]> c : connections) {
        async.add(c.async());
      }
      this.commands = List.copyOf(async);
    }

    static Standalone open(
        RedisStoreSettings settings, ClientResources resources, int count, long deadlineNs)
        throws IOException {
      RedisStoreSettings.Endpoint endpoint = settings.endpoints().getFirst();
      RedisClient client = RedisClient.create(resources);
      client.setOptions(
          ClientOptions.builder()
              .autoReconnect(true)
              .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
              .socketOptions(socketOptions(settings))
              .timeoutOptions(TimeoutOptions.enabled(commandTimeout(settings)))
              .build());
      try {
        RedisURI uri = redisUri(settings, endpoint);
        List<Future<StatefulRedisConnection<String, byte[]>>> pending = new ArrayList<>();
        for (int i = 0; i < count; i++) {
          pending.add(client.connectAsync(CODEC, uri).toCompletableFuture());
        }
        List<StatefulRedisConnection<String, byte[]>> connections = new ArrayList<>();
        for (Future<StatefulRedisConnection<String, byte[]>> f : pending) {
          connections.add(awaitStartup(settings, f, deadlineNs, endpoint.text()));
        }
        Standalone links = new Standalone(settings, client, connections);
        links.checkNotClusterNode(endpoint, deadlineNs);
        return links;
      } catch (IOException | RuntimeException | Error e) {
        client.shutdown(Duration.ZERO, SHUTDOWN_TIMEOUT);
        throw e;
      }
    }

    /** A standalone client on a cluster node would be answered MOVED for most keys. */
    private void checkNotClusterNode(RedisStoreSettings.Endpoint endpoint, long deadlineNs)
        throws IOException {
      String info;
      try {
        info =
            awaitStartup(
                settings,
                commands.getFirst().info("cluster"),
                deadlineNs,
                endpoint.text(),
                Step.COMMAND);
      } catch (IOException e) {
        if (e.getMessage() != null && e.getMessage().contains("NOPERM")) {
          return; // a user without INFO: the check is skipped, MOVED errors will say it later
        }
        throw e;
      }
      if (info != null && info.contains("cluster_enabled:1")) {
        throw new IllegalArgumentException(
            "redis cluster=false but uri="
                + endpoint.text()
                + " is a Redis Cluster node (cluster_enabled:1); set cluster=true and list the"
                + " cluster's nodes in uris");
      }
    }

    @Override
    List<RedisClusterAsyncCommands<String, byte[]>> commands() {
      return commands;
    }

    @Override
    List<RedisClusterAsyncCommands<String, byte[]>> masters(long deadlineNs) {
      return List.of(commands.getFirst());
    }

    @Override
    boolean slotted() {
      return false;
    }

    @Override
    void close() {
      client.shutdown(Duration.ZERO, SHUTDOWN_TIMEOUT); // closes every connection it opened
    }
  }

  // ------------------------------------------------------------------ cluster

  static final class Cluster extends RedisLinks {
    private final RedisClusterClient client;
    private final java.util.concurrent.atomic.AtomicBoolean refreshing =
        new java.util.concurrent.atomic.AtomicBoolean();
    private final List<StatefulRedisClusterConnection<String, byte[]>> connections;
    private final List<RedisClusterAsyncCommands<String, byte[]>> commands;

    private Cluster(
        RedisStoreSettings settings,
        RedisClusterClient client,
        List<StatefulRedisClusterConnection<String, byte[]>> connections) {
      super(settings);
      this.client = client;
      this.connections = List.copyOf(connections);
      List<RedisClusterAsyncCommands<String, byte[]>> async = new ArrayList<>();
      for (StatefulRedisClusterConnection<String, byte[]> c : connections) {
        async.add(c.async());
      }
      this.commands = List.copyOf(async);
    }

    static Cluster open(
        RedisStoreSettings settings, ClientResources resources, int count, long deadlineNs)
        throws IOException {
      List<RedisURI> seeds = new ArrayList<>();
      for (RedisStoreSettings.Endpoint endpoint : settings.endpoints()) {
        seeds.add(redisUri(settings, endpoint));
      }
      RedisClusterClient client = RedisClusterClient.create(resources, seeds);
      client.setOptions(
          ClusterClientOptions.builder()
              .autoReconnect(true)
              .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
              .socketOptions(socketOptions(settings))
              .timeoutOptions(TimeoutOptions.enabled(commandTimeout(settings)))
              .topologyRefreshOptions(
                  ClusterTopologyRefreshOptions.builder()
                      .enableAllAdaptiveRefreshTriggers()
                      .adaptiveRefreshTriggersTimeout(Duration.ofSeconds(1))
                      .build())
              .build());
      String where = String.join(",", settings.uris());
      try {
        // the topology (CLUSTER NODES from a seed) first: every connection routes by it
        awaitStartup(
            settings, client.refreshPartitionsAsync().toCompletableFuture(), deadlineNs, where);
        List<StatefulRedisClusterConnection<String, byte[]>> connections = new ArrayList<>();
        List<CompletableFuture<StatefulRedisClusterConnection<String, byte[]>>> pending =
            new ArrayList<>();
        for (int i = 0; i < count; i++) {
          pending.add(client.connectAsync(CODEC));
        }
        for (CompletableFuture<StatefulRedisClusterConnection<String, byte[]>> f : pending) {
          connections.add(awaitStartup(settings, f, deadlineNs, where));
        }
        warmUp(settings, connections, deadlineNs);
        return new Cluster(settings, client, connections);
      } catch (IOException | RuntimeException | Error e) {
        client.shutdown(Duration.ZERO, SHUTDOWN_TIMEOUT);
        throw e;
      }
    }

    /**
     * Opens every connection's link to every master now. Lettuce opens node links lazily, on the
     * first command for a slot, and with commands rejected while disconnected that first command
     * would fail; after startup a link that drops reconnects by itself.
     */
    private static void warmUp(
        RedisStoreSettings settings,
        List<StatefulRedisClusterConnection<String, byte[]>> connections,
        long deadlineNs)
        throws IOException {
      List<CompletableFuture<StatefulRedisConnection<String, byte[]>>> links = new ArrayList<>();
      List<String> names = new ArrayList<>();
      for (StatefulRedisClusterConnection<String, byte[]> c : connections) {
        for (RedisClusterNode node : c.getPartitions()) {
          if (node.is(RedisClusterNode.NodeFlag.UPSTREAM)) {
            RedisURI uri = node.getUri();
            links.add(c.getConnectionAsync(uri.getHost(), uri.getPort()));
            names.add(uri.getHost() + ":" + uri.getPort());
          }
        }
      }
      for (int i = 0; i < links.size(); i++) {
        awaitStartup(settings, links.get(i), deadlineNs, "cluster node " + names.get(i));
      }
    }

    @Override
    List<RedisClusterAsyncCommands<String, byte[]>> commands() {
      return commands;
    }

    @Override
    List<RedisClusterAsyncCommands<String, byte[]>> masters(long deadlineNs) throws IOException {
      String where = String.join(",", settings.uris());
      await(client.refreshPartitionsAsync().toCompletableFuture(), deadlineNs, where);
      StatefulRedisClusterConnection<String, byte[]> connection = connections.getFirst();
      List<RedisClusterAsyncCommands<String, byte[]>> masters = new ArrayList<>();
      for (RedisClusterNode node : connection.getPartitions()) {
        if (node.is(RedisClusterNode.NodeFlag.UPSTREAM)) {
          StatefulRedisConnection<String, byte[]> direct =
              await(
                  connection.getConnectionAsync(node.getNodeId()), deadlineNs, node.getUri() + "");
          masters.add(direct.async());
        }
      }
      if (masters.isEmpty()) {
        throw new IOException("redis cluster " + where + " reports no master node");
      }
      return masters;
    }

    @Override
    boolean slotted() {
      return true;
    }

    /** The master of each slot, as {@code host:port}, from the topology last read; null if none. */
    String[] slotTable() {
      String[] table = new String[DirectPath.SLOTS];
      for (RedisClusterNode node : client.getPartitions()) {
        if (node.is(RedisClusterNode.NodeFlag.UPSTREAM)) {
          RedisURI uri = node.getUri();
          String address = uri.getHost() + ":" + uri.getPort();
          for (int slot : node.getSlots()) {
            table[slot] = address;
          }
        }
      }
      return table;
    }

    /**
     * Reads the topology again in the background (unless a refresh is already under way) and hands
     * the new slot table to {@code onTable}. Never blocks; a failed refresh is dropped (the next
     * MOVED asks again).
     */
    void refreshSlotTable(java.util.function.Consumer<String[]> onTable) {
      if (!refreshing.compareAndSet(false, true)) {
        return;
      }
      try {
        client
            .refreshPartitionsAsync()
            .whenComplete(
                (ignored, failure) -> {
                  try {
                    if (failure == null) {
                      onTable.accept(slotTable());
                    }
                  } finally {
                    refreshing.set(false);
                  }
                });
      } catch (RuntimeException e) {
        refreshing.set(false); // the client is shutting down
      }
    }

    @Override
    void close() {
      for (StatefulRedisClusterConnection<String, byte[]> c : connections) {
        c.close(); // with its node links
      }
      client.shutdown(Duration.ZERO, SHUTDOWN_TIMEOUT);
    }
  }

  // ------------------------------------------------------------------ shared

  private static SocketOptions socketOptions(RedisStoreSettings settings) {
    return SocketOptions.builder()
        .connectTimeout(Duration.ofMillis(settings.connectTimeoutMs()))
        .keepAlive(true)
        .tcpNoDelay(true)
        .build();
  }

  private static Duration commandTimeout(RedisStoreSettings settings) {
    return Duration.ofMillis(settings.commandTimeoutMs());
  }

  private static RedisURI redisUri(RedisStoreSettings settings, RedisStoreSettings.Endpoint e) {
    RedisURI.Builder b =
        RedisURI.Builder.redis(e.host(), e.port())
            .withTimeout(Duration.ofMillis(settings.connectTimeoutMs()));
    if (settings.tls()) {
      b.withSsl(true).withVerifyPeer(SslVerifyMode.FULL);
    }
    if (settings.password() != null) {
      if (settings.username().isEmpty()) {
        b.withPassword(settings.password().toCharArray());
      } else {
        b.withAuthentication(settings.username(), settings.password().toCharArray());
      }
    }
    return b.build();
  }

  /** What a startup step does: open connections (with their handshake) or run a command. */
  enum Step {
    /** Connects and runs the handshake: HELLO, with AUTH when a password is set. */
    HANDSHAKE,
    /** A command on a connection whose handshake succeeded. */
    COMMAND
  }

  /** Waits for a connecting step until the deadline; any failure becomes a one-line error. */
  private static <T> T awaitStartup(
      RedisStoreSettings settings, Future<T> future, long deadlineNs, String where)
      throws IOException {
    return awaitStartup(settings, future, deadlineNs, where, Step.HANDSHAKE);
  }

  /** Waits for a startup step until the deadline; any failure becomes a one-line error. */
  private static <T> T awaitStartup(
      RedisStoreSettings settings, Future<T> future, long deadlineNs, String where, Step step)
      throws IOException {
    try {
      return await(future, deadlineNs, where);
    } catch (IOException e) {
      Exception translated = explainStartup(settings, where, e, step);
      if (translated instanceof RuntimeException r) {
        throw r;
      }
      throw (IOException) translated;
    }
  }

  private static <T> T await(Future<T> future, long deadlineNs, String where) throws IOException {
    try {
      return future.get(Math.max(0, deadlineNs - System.nanoTime()), TimeUnit.NANOSECONDS);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause() == null ? e : e.getCause();
      throw new IOException(messages(cause), cause);
    } catch (TimeoutException e) {
      future.cancel(false);
      throw new IOException("no answer from " + where + " in time", e);
    } catch (InterruptedException e) {
      future.cancel(false);
      Thread.currentThread().interrupt();
      InterruptedIOException io = new InterruptedIOException("interrupted opening redis " + where);
      io.initCause(e);
      throw io;
    }
  }

  /** Translates a startup failure into the setting an operator must fix. */
  static Exception explainStartup(
      RedisStoreSettings settings, String where, Throwable failure, Step step) {
    String text = messages(failure);
    String user = settings.username().isEmpty() ? "default" : settings.username();
    if (text.contains("WRONGPASS") || text.contains("invalid password")) {
      return new IllegalArgumentException(
          "redis at "
              + where
              + " rejected username="
              + user
              + " with the configured password (WRONGPASS); check the username and password"
              + " settings",
          failure);
    }
    if (text.contains("NOAUTH")) {
      return new IllegalArgumentException(
          "redis at "
              + where
              + " requires authentication (NOAUTH) but "
              + (settings.password() == null ? "no password is set" : "AUTH was not accepted")
              + "; set username/password",
          failure);
    }
    if (text.contains("cluster support disabled")) {
      return new IllegalArgumentException(
          "redis cluster=true but "
              + where
              + " is not a cluster node (cluster support disabled); set cluster=false for a"
              + " standalone server",
          failure);
    }
    if (text.contains("NOPERM")) {
      return new IllegalArgumentException(
          "redis user="
              + user
              + " may not run the startup commands at "
              + where
              + " ("
              + firstLine(text)
              + "); grant it +@all on its key pattern, or at least PING, INFO and"
              + " CLUSTER NODES",
          failure);
    }
    if (failure instanceof InterruptedIOException) {
      return (InterruptedIOException) failure;
    }
    boolean closedInHandshake = step == Step.HANDSHAKE && closedByServer(text);
    if (closedInHandshake && settings.password() != null) {
      return new IllegalArgumentException(
          "redis at "
              + where
              + " closed the connection during the handshake that authenticates username="
              + user
              + " (HELLO with AUTH), before answering it: it refused the credentials (a server may"
              + " close before its WRONGPASS reply arrives) or it is not a Redis server; check the"
              + " username and password settings",
          failure);
    }
    String reason =
        hasCause(failure, ConnectException.class)
            ? "connection refused"
            : hasCause(failure, UnknownHostException.class)
                ? "unknown host"
                : closedInHandshake
                    ? "it closed the connection during the handshake (HELLO), before answering"
                        + " it: is it a Redis server"
                        + (settings.tls() ? " with TLS?" : " without TLS?")
                    : firstLine(text);
    return new IOException(
        "redis cannot connect to "
            + where
            + " within connect_timeout_ms="
            + settings.connectTimeoutMs()
            + ": "
            + reason,
        failure);
  }

  /**
   * Whether a failure's messages say the server closed or reset the connection: Lettuce's handshake
   * fails with "Connection closed prematurely" on an orderly close, and the socket reports
   * "Connection reset" (by peer) on a reset.
   */
  private static boolean closedByServer(String text) {
    return text.contains("Connection closed prematurely") || text.contains("Connection reset");
  }

  /** The messages of a failure, its causes and its suppressed exceptions, in one string. */
  static String messages(Throwable failure) {
    StringBuilder out = new StringBuilder();
    Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
    collect(failure, out, seen);
    return out.toString();
  }

  private static void collect(Throwable t, StringBuilder out, Set<Throwable> seen) {
    if (t == null || !seen.add(t)) {
      return;
    }
    if (t.getMessage() != null) {
      if (!out.isEmpty()) {
        out.append(" | ");
      }
      out.append(t.getMessage());
    }
    collect(t.getCause(), out, seen);
    for (Throwable s : t.getSuppressed()) {
      collect(s, out, seen);
    }
  }

  private static boolean hasCause(Throwable t, Class<? extends Throwable> type) {
    Map<Throwable, Boolean> seen = new IdentityHashMap<>();
    while (t != null && seen.put(t, Boolean.TRUE) == null) {
      if (type.isInstance(t)) {
        return true;
      }
      for (Throwable s : t.getSuppressed()) {
        if (hasCause(s, type)) {
          return true;
        }
      }
      t = t.getCause();
    }
    return false;
  }

  private static String firstLine(String text) {
    int end = text.indexOf('\n');
    String line = end < 0 ? text : text.substring(0, end);
    return line.length() > 300 ? line.substring(0, 300) + "..." : line;
  }
}
