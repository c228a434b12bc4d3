package io.tokenspeed.l3.redis;

import io.lettuce.core.cluster.SlotHash;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.LockSupport;

/**
 * The store's data path for plain TCP: GET, SET NX and STRLEN over connections of its own, with
 * every byte read and written on the thread of the store call (see {@link DirectCall}).
 *
 * <pre>
 *   DirectPath ── nodes by host:port ── Node ── idle links (LIFO) ── DirectLink ── SocketChannel
 *       │            (standalone: one;          opened on demand,
 *       │             cluster: every master,    kept while healthy
 *       │             and any MOVED names)
 *       ├── slots[16384] → Node  (cluster: from the topology, patched by MOVED)
 *       └── reaper thread: every tick, closes the links of calls past their deadline
 * </pre>
 *
 * <p><b>Connections.</b> A call takes the links it needs from each node's pool and gives them back
 * when it ends; a pool that has none idle opens one more, so a node holds at most as many links as
 * calls have used at once ({@code connections} per call and node). Links of a node are opened at
 * startup ({@code connections} of them), so a missing or misconfigured server is reported then.
 *
 * <p><b>Outages.</b> A connection attempt that fails makes its node refuse new connections for a
 * delay doubling from 1 ms to {@link #RECONNECT_DELAY_MAX_NS} one second: a call in that window
 * fails at once, without touching the network, and the first call after it tries again. A link that
 * fails mid-call is closed, and so are the idle links of its node (after a server restart they are
 * all dead); a call whose link was taken idle and failed before any reply byte arrived (a server
 * restarted, or one that closed an idle client) sends its commands again on a fresh link, once.
 *
 * <p><b>Timeouts.</b> The reaper wakes every {@code max(1 ms, min(50 ms, command_timeout_ms/20))}
 * and closes the channel of every link whose lease's deadline has passed; the call blocked on it
 * then throws at once. A call therefore ends at most one tick after its deadline.
 */
final class DirectPath implements AutoCloseable {

  /** Longest refusal of new connections after failed attempts. */
  static final long RECONNECT_DELAY_MAX_NS = TimeUnit.SECONDS.toNanos(1);

  /** First refusal after a failed attempt. */
  static final long RECONNECT_DELAY_MIN_NS = TimeUnit.MILLISECONDS.toNanos(1);

  /** Hash slots of a Redis Cluster. */
  static final int SLOTS = 16384;

  /** Counters the path shares with its store. */
  static final class Counters {
    final LongAdder commands = new LongAdder();
    final LongAdder abandonedReads = new LongAdder();
    final LongAdder redirects = new LongAdder();
    final LongAdder connectionsOpened = new LongAdder();
  }

  /** One server: its address, its idle links and its reconnection delay. */
  static final class Node {
    private final DirectPath path;
    private final String host;
    private final int port;
    private final String name;
    private final ConcurrentLinkedDeque<DirectLink> idle = new ConcurrentLinkedDeque<>();

    /** Guarded by this. */
    private long refuseUntilNs;

    /** Guarded by this: the current delay after a failed attempt, 0 while connecting works. */
    private long delayNs;

    /** Guarded by this. */
    private String lastFailure = "";

    Node(DirectPath path, String host, int port) {
      this.path = path;
      this.host = host;
      this.port = port;
      this.name = host + ":" + port;
    }

    DirectPath path() {
      return path;
    }

    String host() {
      return host;
    }

    int port() {
      return port;
    }

    String name() {
      return name;
    }

    /** Throws at once while the node refuses connection attempts after a failure. */
    private synchronized void checkMayConnect(long nowNs) throws IOException {
      if (delayNs > 0 && nowNs - refuseUntilNs < 0) {
        throw new IOException(
            "redis at "
                + name
                + " is unreachable ("
                + lastFailure
                + "); the next connection attempt is in "
                + Math.max(1, TimeUnit.NANOSECONDS.toMillis(refuseUntilNs - nowNs))
                + " ms");
      }
    }

    private synchronized void onConnected() {
      delayNs = 0;
      lastFailure = "";
    }

    private synchronized void onConnectFailed(long nowNs, IOException e) {
      delayNs =
          delayNs == 0 ? RECONNECT_DELAY_MIN_NS : Math.min(RECONNECT_DELAY_MAX_NS, delayNs * 2);
      refuseUntilNs = nowNs + delayNs;
      lastFailure = RedisLinks.messages(e);
    }

    /** Closes every idle link (a link of this node failed: the others likely did too). */
    void closeIdle() {
      DirectLink link;
      while ((link = idle.pollFirst()) != null) {
        link.close();
      }
    }

    @Override
    public String toString() {
      return name;
    }
  }

  private final RedisStoreSettings settings;
  private final Counters counters;
  private final boolean cluster;
  private final Map<String, Node> nodes = new ConcurrentHashMap<>();
  private final Set<DirectLink> links = ConcurrentHashMap.newKeySet();
  private final Runnable topologyRefresh;
  private final AtomicBoolean closed = new AtomicBoolean();
  private final Thread reaper;
  private final long tickNs;

  /** Standalone: the one server. */
  private final Node single;

  /** Cluster: the master of each slot (null where none is known); replaced whole, never edited. */
  private volatile Node[] slots;

  private final AtomicLong topologyRefreshes = new AtomicLong();

  private DirectPath(
      RedisStoreSettings settings,
      Counters counters,
      boolean cluster,
      String host,
      int port,
      Runnable topologyRefresh) {
    this.settings = settings;
    this.counters = counters;
    this.cluster = cluster;
    this.topologyRefresh = topologyRefresh;
    this.single = cluster ? null : node(host, port);
    this.slots = new Node[SLOTS];
    this.tickNs =
        TimeUnit.MILLISECONDS.toNanos(Math.max(1, Math.min(50, settings.commandTimeoutMs() / 20)));
    this.reaper =
        Thread.ofPlatform().name("ts-l3-redis-reaper").daemon(true).unstarted(this::reapLoop);
  }

  /** The path to one standalone server; opens {@code connections} links before it returns. */
  static DirectPath standalone(
      RedisStoreSettings settings, Counters counters, String host, int port, long deadlineNs)
      throws IOException {
    DirectPath path = new DirectPath(settings, counters, false, host, port, () -> {});
    path.start(List.of(path.single), deadlineNs);
    return path;
  }

  /**
   * The path to a Redis Cluster whose masters own the slot ranges of {@code topology} (host:port
   * per slot, null where none); opens {@code connections} links to every master before it returns.
   * {@code topologyRefresh} is run (at most one at a time is asked for) after a MOVED reply; it
   * should end by calling {@link #updateTopology}.
   */
  static DirectPath cluster(
      RedisStoreSettings settings,
      Counters counters,
      String[] topology,
      Runnable topologyRefresh,
      long deadlineNs)
      throws IOException {
    DirectPath path = new DirectPath(settings, counters, true, null, 0, topologyRefresh);
    path.updateTopology(topology);
    List<Node> masters = new ArrayList<>();
    for (Node n : path.slots) {
      if (n != null && !masters.contains(n)) {
        masters.add(n);
      }
    }
    if (masters.isEmpty()) {
      path.close();
      throw new IOException("redis cluster " + settings.uris() + " reports no master with slots");
    }
    path.start(masters, deadlineNs);
    return path;
  }

  private void start(List<Node> masters, long deadlineNs) throws IOException {
    reaper.start();
    DirectLink.Lease startup = () -> deadlineNs;
    try {
      for (Node node : masters) {
        for (int i = 0; i < settings.connections(); i++) {
          DirectLink link = connect(node, startup);
          link.release(startup);
          node.idle.addFirst(link);
        }
      }
    } catch (IOException | RuntimeException | Error e) {
      close();
      throw e;
    }
  }

  RedisStoreSettings settings() {
    return settings;
  }

  Counters counters() {
    return counters;
  }

  boolean clustered() {
    return cluster;
  }

  /** Replaces the slot table: {@code topology[slot]} is the master's host:port, or null. */
  synchronized void updateTopology(String[] topology) {
    Node[] next = new Node[SLOTS];
    for (int slot = 0; slot < SLOTS; slot++) {
      String address = topology[slot];
      if (address != null) {
        int colon = address.lastIndexOf(':');
        next[slot] =
            node(address.substring(0, colon), Integer.parseInt(address.substring(colon + 1)));
      }
    }
    slots = next;
  }

  /** How many topology refreshes MOVED replies have asked for. */
  long topologyRefreshes() {
    return topologyRefreshes.get();
  }

  // ------------------------------------------------------------------ calls

  /** STRLEN per key. */
  DirectCall exists(List<String> keys, long deadlineNs) throws IOException {
    return run(new DirectCall(this, DirectCall.Op.QUERY, keys, null, deadlineNs));
  }

  /** GET per key, each value read into its destination. */
  DirectCall get(List<String> keys, List<MemorySegment> destinations, long deadlineNs)
      throws IOException {
    return run(new DirectCall(this, DirectCall.Op.GET, keys, destinations, deadlineNs));
  }

  /** SET NX per key, each value written from its source. */
  DirectCall put(List<String> keys, List<MemorySegment> sources, long deadlineNs)
      throws IOException {
    return run(new DirectCall(this, DirectCall.Op.PUT, keys, sources, deadlineNs));
  }

  private DirectCall run(DirectCall call) throws IOException {
    if (closed.get()) {
      throw new IOException("the redis store's connections are closed");
    }
    call.run();
    return call;
  }

  // ------------------------------------------------------------------ routing

  /** The node a key's command goes to. */
  Node route(String key) throws IOException {
    if (!cluster) {
      return single;
    }
    int slot = SlotHash.getSlot(key);
    Node node = slots[slot];
    if (node == null) {
      throw new IOException(
          "redis cluster "
              + settings.uris()
              + " has no master for slot "
              + slot
              + " (CLUSTERDOWN)");
    }
    return node;
  }

  /** The node at {@code host:port}, made on first use. */
  Node node(String host, int port) {
    return nodes.computeIfAbsent(host + ":" + port, k -> new Node(this, host, port));
  }

  /** A MOVED reply: the slot is served by {@code host:port} now; the whole table is refreshed. */
  void onMoved(int slot, String host, int port) {
    Node target = node(host, port);
    synchronized (this) {
      if (slots[slot] != target) {
        Node[] next = slots.clone();
        next[slot] = target;
        slots = next;
      }
    }
    topologyRefreshes.incrementAndGet();
    topologyRefresh.run();
  }

  // ------------------------------------------------------------------ links

  /** An idle link of {@code node} leased to {@code lease}, or a new one. */
  DirectLink take(Node node, DirectLink.Lease lease) throws IOException {
    DirectLink link;
    while ((link = node.idle.pollFirst()) != null) {
      if (link.lease(lease)) {
        link.reused = true;
        return link;
      }
      link.close();
    }
    link = connect(node, lease);
    link.reused = false;
    return link;
  }

  /** Gives a link back after a call that left it clean; closes it otherwise. */
  void giveBack(DirectLink link, DirectLink.Lease lease) {
    if (!link.replies.hasBuffered() && link.release(lease) && !closed.get()) {
      link.node.idle.addFirst(link);
      if (closed.get()) {
        link.node.closeIdle();
      }
    } else {
      link.close();
    }
  }

  private DirectLink connect(Node node, DirectLink.Lease lease) throws IOException {
    long nowNs = System.nanoTime();
    node.checkMayConnect(nowNs);
    try {
      DirectLink link = DirectLink.open(node, settings, lease, links::add);
      node.onConnected();
      counters.connectionsOpened.increment();
      if (closed.get()) {
        link.close();
        throw new IOException("the redis store's connections are closed");
      }
      return link;
    } catch (DirectLink.HandshakeRefused e) {
      throw e; // the server answered: no reason to hold back the next attempt
    } catch (IOException e) {
      node.onConnectFailed(nowNs, e);
      throw e;
    }
  }

  /** Called by a link that closed. */
  void forget(DirectLink link) {
    links.remove(link);
  }

  /** Links open now (idle or in use). */
  int openLinks() {
    return links.size();
  }

  private void reapLoop() {
    while (!closed.get()) {
      LockSupport.parkNanos(tickNs);
      long nowNs = System.nanoTime();
      for (DirectLink link : links) {
        link.expireIfDue(nowNs);
      }
    }
  }

  /** Closes every link and stops the reaper. Idempotent. */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    LockSupport.unpark(reaper);
    for (Node node : nodes.values()) {
      node.closeIdle();
    }
    for (DirectLink link : List.copyOf(links)) {
      link.close();
    }
    try {
      reaper.join(TimeUnit.NANOSECONDS.toMillis(tickNs) + 1000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
