package io.tokenspeed.pd;

import java.net.InetSocketAddress;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The prefill engine's end of the KV transfer: it opens rooms on decode engines ({@link
 * #bootstrap}) and streams their blocks.
 *
 * <p>One connection per decode address, dialed on the first room for it and kept for the rooms that
 * follow; a connection that failed is forgotten, and the next room dials again. Every connection
 * proves the {@link PdSecret} both ways before its first BOOTSTRAP is written (see {@link
 * PdHandshake}); rooms opened meanwhile wait in its queue, and fail with {@link
 * PdException.Kind#HANDSHAKE}, naming the address, when it cannot be set up.
 *
 * <p>A timer thread per sender sends PINGs on idle connections with open rooms, fails silent ones
 * and handshakes that overran their deadline (see {@link PdSettings}).
 */
public final class KvSender implements AutoCloseable {

  private static final Logger LOG = Logger.getLogger(KvSender.class.getName());

  final PdSecret secret;
  final PdSettings settings;
  final Counters counters = new Counters();
  private final ConcurrentHashMap<InetSocketAddress, SenderLink> links = new ConcurrentHashMap<>();
  private final ScheduledExecutorService timer;
  private volatile boolean closed;

  private KvSender(PdSecret secret, PdSettings settings) {
    this.secret = secret;
    this.settings = settings;
    this.timer =
        Executors.newSingleThreadScheduledExecutor(
            Thread.ofPlatform().daemon().name("ts-pd-sender-timer").factory());
    long tick = settings.tickMs();
    timer.scheduleWithFixedDelay(this::tick, tick, tick, TimeUnit.MILLISECONDS);
  }

  /** A sender proving {@code secret}, with {@code settings}. */
  public static KvSender open(PdSecret secret, PdSettings settings) {
    return new KvSender(Objects.requireNonNull(secret), Objects.requireNonNull(settings));
  }

  /**
   * Opens {@code room} on the decode engine at {@code decode}: queues its BOOTSTRAP on the
   * connection to that address, dialing it first if there is none. Never blocks on the network.
   *
   * @throws IllegalArgumentException when {@code bootstrap} exceeds the settings' limits, or the
   *     room is already open on that connection
   * @throws IllegalStateException when the sender is closed
   */
  public Transfer bootstrap(long room, InetSocketAddress decode, Bootstrap bootstrap) {
    Objects.requireNonNull(decode);
    checkLimits(bootstrap);
    while (true) {
      if (closed) {
        throw new IllegalStateException("the KV sender is closed");
      }
      SenderLink[] created = new SenderLink[1];
      SenderLink link = links.computeIfAbsent(decode, a -> created[0] = SenderLink.create(this, a));
      Transfer t;
      try {
        // A new connection dials only once its first room is open on it, so it cannot be down
        // before that room is: a retry happens only after a connection that was up failed.
        t = link.open(room, bootstrap);
      } finally {
        if (created[0] != null) {
          created[0].start();
        }
      }
      if (t != null) {
        if (closed) {
          link.fail(new PdException(PdException.Kind.CLOSED, "the KV sender was closed"));
        }
        return t;
      }
      links.remove(decode, link);
    }
  }

  /** The counters now. */
  public PdMetrics metrics() {
    return counters.snapshot();
  }

  /** The connections now up or being set up. */
  public int connections() {
    return links.size();
  }

  /**
   * Closes every connection (their open rooms fail with {@link PdException.Kind#CLOSED}) and waits
   * a bounded time for their threads to end.
   */
  @Override
  public void close() {
    closed = true;
    List<SenderLink> all = List.copyOf(links.values());
    for (SenderLink l : all) {
      l.fail(new PdException(PdException.Kind.CLOSED, "the KV sender was closed"));
    }
    try {
      for (SenderLink l : all) {
        l.join(5_000);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    timer.shutdownNow();
  }

  void onLinkDown(SenderLink link) {
    links.remove(link.address, link);
  }

  private void tick() {
    try {
      long now = System.nanoTime();
      for (SenderLink l : links.values()) {
        l.tick(now);
      }
    } catch (RuntimeException e) {
      // A later tick must still run: log, and go on.
      LOG.log(Level.SEVERE, "the KV sender's timer failed", e);
    }
  }

  private void checkLimits(Bootstrap b) {
    if (b.numTokens() > settings.maxPromptTokens() || b.numGroups() > settings.maxCacheGroups()) {
      throw new IllegalArgumentException(
          "bootstrap of "
              + b.numTokens()
              + " tokens and "
              + b.numGroups()
              + " cache groups exceeds max_prompt_tokens="
              + settings.maxPromptTokens()
              + " or max_cache_groups="
              + settings.maxCacheGroups());
    }
    for (int g = 0; g < b.numGroups(); g++) {
      if (b.blockBytes(g) > settings.maxBlockBytes()) {
        throw new IllegalArgumentException(
            "bootstrap group "
                + g
                + " has "
                + b.blockBytes(g)
                + " bytes per block, over max_block_bytes="
                + settings.maxBlockBytes());
      }
    }
  }
}
