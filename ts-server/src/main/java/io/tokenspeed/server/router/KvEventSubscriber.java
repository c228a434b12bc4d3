package io.tokenspeed.server.router;

import io.tokenspeed.server.router.KvEventDecoder.Batch;
import io.tokenspeed.server.router.KvEventDecoder.Cleared;
import io.tokenspeed.server.router.KvEventDecoder.Event;
import io.tokenspeed.server.router.KvEventDecoder.KvEventFormatException;
import io.tokenspeed.server.router.KvEventDecoder.Removed;
import io.tokenspeed.server.router.KvEventDecoder.Stored;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.zip.CRC32C;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * Follows one backend's KV events into its {@link PrefixIndex} (its Device and Host blocks and what
 * it wrote to the shared L3 store; a removal from the store goes to every backend's, {@link
 * StoreIndex}), on a thread of its own that owns its two ZeroMQ sockets.
 *
 * <pre>
 *   SUB    ◀── [topic, seq u64 big-endian, payload]            every batch, once, in order
 *   DEALER ──▶ ["", start seq]                                  ask for the retained batches
 *          ◀── ["", seq, payload] … ["", -1, ""]               from start on, then the end
 * </pre>
 *
 * <p><b>Sequence.</b> Each batch carries the publisher's sequence number. The subscriber applies
 * batches in sequence order, each once:
 *
 * <ul>
 *   <li>Whenever its SUB socket connects (at the start, and again after the connection was lost) it
 *       asks the replay socket for every retained batch past the last one applied (at the start:
 *       from 0), so a router that starts after its backends learns what they hold as far as the
 *       publisher remembers, and a reconnection misses nothing the publisher retained.
 *   <li>A batch whose number is the next one is applied. One the start's replay already gave (the
 *       same number and the same bytes) is dropped.
 *   <li>A gap (the SUB socket dropped batches: a slow joiner, its high-water mark) is filled from
 *       the replay socket. When the replay cannot fill it (no replay socket, no answer within
 *       {@link #REPLAY_TIMEOUT_MS}, or the batches are no longer retained) the backend's Device and
 *       Host entries are cleared: a missed removal would otherwise leave a block the backend no
 *       longer holds, and an under-counted prefix only costs a routing choice.
 *   <li>A number at or below the last one the SUB socket delivered, or at or below the last one
 *       applied with other bytes than the batch applied there, means the publisher started again
 *       (the engine restarted): the entries are cleared and the new run replayed from 0.
 *   <li>A batch that does not decode is counted and handled as a lost one (cleared).
 * </ul>
 *
 * <p>The replay request is the REQ envelope (an empty delimiter frame, then the 8-byte start),
 * which a ROUTER answers to both REQ and DEALER clients; an answer with or without the delimiter is
 * read.
 *
 * <p>The thread is never interrupted (an interrupt breaks a ZeroMQ socket's signalling): {@link
 * #close} sets a flag that the thread sees within a receive timeout. Everything it throws is
 * caught, logged once per distinct message, and the sockets are made again after a pause.
 */
final class KvEventSubscriber implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(KvEventSubscriber.class.getName());

  /** How long the thread waits for a batch before it looks at its close flag. */
  static final int RECEIVE_TIMEOUT_MS = 100;

  /** How long a replay may take to send its next batch. */
  static final int REPLAY_TIMEOUT_MS = 2000;

  /** How long a connection's handshake may take before its socket is made again. */
  static final int HANDSHAKE_TIMEOUT_MS = 1000;

  /** The largest message frame read; a larger batch closes the connection (ZeroMQ's limit). */
  static final long MAX_MESSAGE_BYTES = 64L << 20;

  /** The most replayed batches whose checksums are kept (the last ones: those SUB may repeat). */
  private static final int MAX_REPLAYED_SUMS = 1 << 16;

  /** The replay's end marker: sequence -1. */
  private static final long END = -1;

  /** What the subscriber reports, for the router's metrics. */
  interface Listener {
    /** A batch was applied. */
    void onBatch();

    /** A gap in the sequence was filled by the replay ({@code replayed}) or not. */
    void onGap(boolean replayed);

    /** A payload did not decode. */
    void onMalformed();

    Listener NONE =
        new Listener() {
          @Override
          public void onBatch() {}

          @Override
          public void onGap(boolean replayed) {}

          @Override
          public void onMalformed() {}
        };
  }

  private final ZContext context;
  private final KvEventSource source;
  private final String name;
  private final PrefixIndex index;
  private final StoreIndex store;
  private final Listener listener;
  private final Thread thread;
  private volatile boolean closed;

  /** Batches applied; for tests and the log. */
  private volatile long applied;

  /** The last sequence number applied, -1 before any (volatile: tests and /ready read it). */
  private volatile long last = -1;

  /** The last sequence number the SUB socket delivered, -1 before any. */
  private long lastSub = -1;

  /**
   * The checksums of the last batches the start's replay applied, by sequence number: the SUB
   * socket may deliver them again (they went out while the replay ran), and a batch at one of those
   * numbers with other bytes is a restarted publisher's.
   */
  private final LinkedHashMap<Long, Long> replayed = new LinkedHashMap<>();

  /** The checksum of the batch applied last. */
  private long lastSum;

  private Watched replay;

  KvEventSubscriber(
      ZContext context,
      KvEventSource source,
      String name,
      PrefixIndex index,
      StoreIndex store,
      Listener listener) {
    this.context = context;
    this.source = source;
    this.name = name;
    this.index = index;
    this.store = store;
    this.listener = listener;
    this.thread =
        Thread.ofPlatform().daemon().name("ts-router-kv-events " + name).unstarted(this::run);
  }

  KvEventSource source() {
    return source;
  }

  void start() {
    thread.start();
  }

  long applied() {
    return applied;
  }

  /** The last sequence number applied, -1 before any. */
  long lastApplied() {
    return last;
  }

  private void run() {
    String lastFailure = null;
    while (!closed) {
      try {
        follow();
      } catch (RuntimeException e) {
        String why = Upstream.describe(e);
        if (!why.equals(lastFailure)) {
          lastFailure = why;
          LOG.log(Level.WARNING, "KV events of " + name + " (" + source.endpoint() + "): " + why);
        }
        index.clear();
        last = -1;
        lastSub = -1;
        pause(1000);
      } catch (Error e) {
        LOG.log(Level.SEVERE, "KV events of " + name + " stopped", e);
        throw e;
      }
    }
  }

  /** Subscribes and applies batches until closed. */
  private void follow() {
    Watched sub = null;
    try {
      while (!closed) {
        if (sub == null || sub.stalled()) {
          if (sub != null) {
            sub.close(); // its handshake stalled: a fresh socket, a fresh connection
          }
          sub = Watched.connect(context, SocketType.SUB, source.endpoint(), source.topic());
        }
        if (sub.handshakeDone() && source.replayEndpoint() != null) {
          resync(); // connected (again): what went out meanwhile comes from the replay
        }
        byte[] topic = sub.socket.recv();
        if (topic == null) {
          continue; // the receive timeout: look at the flag and the handshake
        }
        List<byte[]> frames = new ArrayList<>(3);
        while (sub.socket.hasReceiveMore()) {
          frames.add(sub.socket.recv());
        }
        if (frames.size() < 2 || frames.get(0) == null || frames.get(0).length != 8) {
          listener.onMalformed();
          continue; // not a batch: no sequence to place it by
        }
        onMessage(ByteBuffer.wrap(frames.get(0)).getLong(), frames.get(1));
      }
    } finally {
      closeReplay();
      if (sub != null) {
        sub.close();
      }
    }
  }

  /**
   * A socket and the monitor of its connection. JeroMQ's ZMTP handshake on a connection that has
   * just opened occasionally never completes (seen on loopback: the peer's greeting sits unread in
   * the socket's receive queue while the connection stays open, a few times in a hundred), and
   * nothing would ever arrive on it. So each socket's handshake is watched: one not done within
   * {@link #HANDSHAKE_TIMEOUT_MS} of the connection's opening (or of its loss) is {@linkplain
   * #stalled stalled}, and the owner makes a fresh socket.
   */
  private static final class Watched {
    private static final AtomicLong MONITORS = new AtomicLong();

    /** How long one wait for a monitor event lasts. */
    private static final int MONITOR_WAIT_MS = 50;

    final ZMQ.Socket socket;
    private final ZContext context;
    private final ZMQ.Socket monitor;
    private boolean handshaken;
    private boolean reported;
    private long sinceNs = System.nanoTime();

    private Watched(ZContext context, ZMQ.Socket socket, ZMQ.Socket monitor) {
      this.context = context;
      this.socket = socket;
      this.monitor = monitor;
    }

    /**
     * A socket of {@code type} connected to {@code endpoint} (a SUB subscribed to {@code topic}).
     */
    static Watched connect(ZContext context, SocketType type, String endpoint, String topic) {
      ZMQ.Socket socket = context.createSocket(type);
      socket.setLinger(0);
      socket.setMaxMsgSize(MAX_MESSAGE_BYTES);
      // a stalled handshake gives up (and the connection is made again) within this
      socket.setHandshakeIvl(HANDSHAKE_TIMEOUT_MS / 2);
      String address = "inproc://ts-router-kv-monitor-" + MONITORS.incrementAndGet();
      socket.monitor(
          address, ZMQ.EVENT_HANDSHAKE_PROTOCOL | ZMQ.EVENT_DISCONNECTED | ZMQ.EVENT_CLOSED);
      ZMQ.Socket monitor = context.createSocket(SocketType.PAIR);
      monitor.setLinger(0);
      monitor.setReceiveTimeOut(MONITOR_WAIT_MS);
      monitor.connect(address);
      if (type == SocketType.SUB) {
        socket.setReceiveTimeOut(RECEIVE_TIMEOUT_MS);
        socket.setRcvHWM(100_000);
      } else {
        socket.setReceiveTimeOut(REPLAY_TIMEOUT_MS);
        socket.setSendTimeOut(REPLAY_TIMEOUT_MS);
      }
      socket.connect(endpoint);
      if (type == SocketType.SUB) {
        socket.subscribe(topic.getBytes(StandardCharsets.UTF_8));
      }
      return new Watched(context, socket, monitor);
    }

    /** Takes the monitor's events. */
    private void poll() {
      ZMQ.Event e;
      while ((e = ZMQ.Event.recv(monitor, ZMQ.DONTWAIT)) != null) {
        if (e.getEvent() == ZMQ.EVENT_HANDSHAKE_PROTOCOL) {
          handshaken = true;
          reported = false;
        } else {
          handshaken = false; // lost: the socket reconnects, and its handshake is watched again
          sinceNs = System.nanoTime();
        }
      }
    }

    /** Whether the handshake completed since the last call that said so (once per connection). */
    boolean handshakeDone() {
      poll();
      if (handshaken && !reported) {
        reported = true;
        return true;
      }
      return false;
    }

    /** Whether its handshake has not completed within the timeout. */
    boolean stalled() {
      poll();
      return !handshaken && System.nanoTime() - sinceNs > HANDSHAKE_TIMEOUT_MS * 1_000_000L;
    }

    /** Waits (at most the handshake timeout) for the handshake; whether it completed. */
    boolean awaitHandshake() {
      long deadline = sinceNs + HANDSHAKE_TIMEOUT_MS * 1_000_000L;
      while (true) {
        poll();
        if (handshaken || System.nanoTime() - deadline > 0) {
          return handshaken;
        }
        ZMQ.Event e = ZMQ.Event.recv(monitor, 0); // at most the monitor's receive timeout
        if (e != null) {
          if (e.getEvent() == ZMQ.EVENT_HANDSHAKE_PROTOCOL) {
            handshaken = true;
          } else {
            sinceNs = System.nanoTime();
          }
        }
      }
    }

    void close() {
      socket.monitor(null, 0);
      context.destroySocket(monitor);
      context.destroySocket(socket);
    }
  }

  /** One batch from the SUB socket. */
  private void onMessage(long seq, byte[] payload) {
    boolean again = seq <= last && !Long.valueOf(checksum(payload)).equals(replayed.get(seq));
    if ((lastSub >= 0 && seq <= lastSub) || again) {
      // the publisher's sequence began again: its engine restarted with empty caches
      LOG.info(
          () ->
              "KV events of "
                  + name
                  + " started again at sequence "
                  + seq
                  + " (after "
                  + lastSub
                  + "): its index is cleared");
      index.clear();
      last = -1;
      replayed.clear();
    }
    lastSub = seq;
    if (seq <= last) {
      return; // the replay gave it already
    }
    replayed.clear(); // past the start's replay: no batch of it comes again
    if (seq != last + 1 && (last >= 0 || source.replayEndpoint() != null)) {
      fill(last + 1, seq, last >= 0);
    }
    apply(seq, payload);
  }

  /**
   * Catches up from the replay socket once the SUB socket connected: at the start, every batch the
   * publisher retains; after a lost connection, the batches from the last one applied on, the first
   * of which must be the one applied (the same bytes), or the publisher is another run (its engine
   * restarted) or forgot it: then the index starts over from what the replay gives.
   */
  private void resync() {
    if (last < 0) {
      fill(0, Long.MAX_VALUE, false);
      return;
    }
    List<long[]> seqs = new ArrayList<>();
    List<byte[]> payloads = new ArrayList<>();
    if (!replay(last, Long.MAX_VALUE, seqs, payloads) || seqs.isEmpty()) {
      return; // no answer, or nothing from there on: the SUB socket's next batch tells
    }
    boolean sameRun = seqs.getFirst()[0] == last && checksum(payloads.getFirst()) == lastSum;
    if (!sameRun) {
      LOG.info(
          () ->
              "KV events of "
                  + name
                  + ": after a reconnection the publisher no longer has batch "
                  + last
                  + " as applied (it restarted, or forgot it): its index is cleared");
      listener.onGap(false);
      index.clear();
      last = -1;
      lastSub = -1;
      replayed.clear();
      fill(0, Long.MAX_VALUE, false); // the new run from its start, as far as it is retained
      return;
    }
    long expect = last + 1;
    for (int i = 1; i < seqs.size(); i++) {
      long seq = seqs.get(i)[0];
      if (seq != expect) {
        listener.onGap(false); // retained with a hole: what fell in it is unknown
        index.clear();
      }
      expect = seq + 1;
      apply(seq, payloads.get(i));
      remember(seq, payloads.get(i));
    }
  }

  /** Keeps a replayed batch's checksum: the SUB socket may deliver it again. */
  private void remember(long seq, byte[] payload) {
    replayed.put(seq, checksum(payload));
    if (replayed.size() > MAX_REPLAYED_SUMS) {
      replayed.pollFirstEntry();
    }
  }

  /**
   * Asks the replay socket for the batches from {@code from} and applies those below {@code
   * before}; when they do not follow on from {@code from} without a hole and {@code counted}, the
   * gap is lost: the backend's entries are cleared first.
   */
  private void fill(long from, long before, boolean counted) {
    List<long[]> seqs = new ArrayList<>();
    List<byte[]> payloads = new ArrayList<>();
    boolean complete = source.replayEndpoint() != null && replay(from, before, seqs, payloads);
    long expect = from;
    for (long[] s : seqs) {
      if (s[0] != expect) {
        complete = false;
      }
      expect = s[0] + 1;
    }
    if (before != Long.MAX_VALUE && expect != before) {
      complete = false; // the replay stopped short of the batch in hand
    }
    if (counted) {
      listener.onGap(complete);
    }
    if (!complete && counted) {
      LOG.info(
          () ->
              "KV events of "
                  + name
                  + ": batches from "
                  + from
                  + " were lost (the replay could not give them); its index is cleared");
      index.clear();
    }
    for (int i = 0; i < seqs.size(); i++) {
      long seq = seqs.get(i)[0];
      if (seq > last) {
        apply(seq, payloads.get(i));
        if (before == Long.MAX_VALUE) {
          remember(seq, payloads.get(i));
        }
      }
    }
  }

  /** A batch's bytes in 64 bits: CRC32C and length. */
  private static long checksum(byte[] payload) {
    CRC32C crc = new CRC32C();
    crc.update(payload);
    return crc.getValue() << 32 ^ payload.length;
  }

  /**
   * Replays the batches from {@code from} (those below {@code before} kept) into the lists; false
   * when the answer did not come whole.
   */
  private boolean replay(long from, long before, List<long[]> seqs, List<byte[]> payloads) {
    for (int attempt = 0; replay == null; attempt++) {
      replay = Watched.connect(context, SocketType.DEALER, source.replayEndpoint(), "");
      if (!replay.awaitHandshake()) {
        closeReplay(); // stalled, or nobody there
        if (attempt == 2 || closed) {
          return false;
        }
      }
    }
    ZMQ.Socket socket = replay.socket;
    byte[] start = ByteBuffer.allocate(8).putLong(from).array();
    if (!socket.sendMore(new byte[0]) || !socket.send(start)) {
      closeReplay();
      return false;
    }
    while (!closed) {
      List<byte[]> frames = new ArrayList<>(3);
      byte[] first = socket.recv();
      if (first == null) {
        closeReplay(); // no answer in time: a late one must not be read as the next one's
        return false;
      }
      frames.add(first);
      while (socket.hasReceiveMore()) {
        frames.add(socket.recv());
      }
      if (frames.size() >= 3 && frames.get(0).length == 0) {
        frames.removeFirst(); // the REQ envelope's delimiter
      }
      if (frames.isEmpty() || frames.get(0).length != 8) {
        closeReplay();
        return false;
      }
      long seq = ByteBuffer.wrap(frames.get(0)).getLong();
      if (seq == END) {
        return true;
      }
      if (seq < before) {
        seqs.add(new long[] {seq});
        payloads.add(frames.size() > 1 ? frames.get(1) : new byte[0]);
      }
    }
    return false;
  }

  private void closeReplay() {
    if (replay != null) {
      replay.close();
      replay = null;
    }
  }

  /** Applies batch {@code seq}; {@link #last} names it once its events are in the index. */
  private void apply(long seq, byte[] payload) {
    try {
      applyEvents(seq, payload);
    } finally {
      lastSum = checksum(payload);
      last = seq;
    }
  }

  private void applyEvents(long seq, byte[] payload) {
    Batch batch;
    try {
      batch = KvEventDecoder.decode(payload);
    } catch (KvEventFormatException e) {
      listener.onMalformed();
      LOG.log(
          Level.FINE,
          () -> "KV events of " + name + ": batch " + seq + " dropped: " + e.getMessage());
      index.clear(); // what it changed is unknown
      return;
    }
    if (batch.dpRank() >= 0 && source.dpRank() >= 0 && batch.dpRank() != source.dpRank()) {
      return; // another rank's batch on a shared socket
    }
    for (Event e : batch.events()) {
      switch (e) {
        case Stored s -> {
          switch (s.medium()) {
            case DEVICE -> index.onStored(s.hashes(), PrefixIndex.DEVICE);
            case HOST -> index.onStored(s.hashes(), PrefixIndex.HOST);
            case STORE -> index.onStored(s.hashes(), PrefixIndex.STORE);
          }
        }
        case Removed r -> {
          switch (r.medium()) {
            case DEVICE -> index.onRemoved(r.hashes(), PrefixIndex.DEVICE);
            case HOST -> index.onRemoved(r.hashes(), PrefixIndex.HOST);
            case STORE -> store.onRemoved(r.hashes());
          }
        }
        case Cleared c -> index.clearAll();
      }
    }
    applied++;
    listener.onBatch();
  }

  private void pause(long ms) {
    long deadline = System.nanoTime() + ms * 1_000_000L;
    while (!closed && deadline - System.nanoTime() > 0) {
      try {
        Thread.sleep(20);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  /** Stops the thread (within a receive timeout) and waits for it. */
  @Override
  public void close() {
    closed = true;
    if (Thread.currentThread() != thread) {
      try {
        thread.join(5000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** Whether {@link #close} was called. */
  boolean closed() {
    return closed;
  }
}
