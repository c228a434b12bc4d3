package io.tokenspeed.server.kvevents;

import io.tokenspeed.engine.kvevents.KvEvent;
import io.tokenspeed.engine.kvevents.KvEventSink;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.function.LongSupplier;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;
import org.zeromq.ZMQException;

/**
 * The KV events of one engine on the wire, as vLLM's {@code ZmqEventPublisher} puts them
 * (docs/kv-events.md): a PUB socket sending one multipart message per batch, {@code [topic, seq,
 * payload]} with {@code seq} the batch's sequence number (0, 1, 2, … for this publisher) as 8
 * big-endian bytes and {@code payload} its msgpack encoding ({@link KvEventCodec}); and, when asked
 * for, a ROUTER socket answering a replay request — the start sequence number as 8 big-endian bytes
 * — with every retained batch from there, {@code [seq, payload]}, then the end marker {@code [-1 as
 * 8 bytes, empty]}.
 *
 * <pre>
 *   loop thread ── publish(batch) ──▶ seq = next++ ─▶ replay ring[seq mod steps]   (never blocks)
 *                                                   └▶ queue.offer ── full: dropped++ (a gap)
 *   sender thread ◀── queue ── encode once ── PUB send [topic, seq, payload] ── published++
 *   replay thread ◀── ROUTER [id, "", start] ── [id, "", seq, payload]... [id, "", -1, ""]
 * </pre>
 *
 * <p>{@link #publish} is the engine's {@link KvEventSink}: on the loop thread it takes the batch's
 * sequence number, puts the batch in the replay ring and offers it to a bounded queue, and never
 * waits. A batch the full queue refuses is counted ({@link #dropped}) and never sent on the PUB
 * socket: subscribers see a gap in the sequence numbers, which the replay socket fills while the
 * ring still holds the batch (the newest {@code buffer_steps} batches). The sender thread encodes
 * each batch once (the replay reuses the bytes) and sends it; the PUB socket itself drops what a
 * subscriber too slow to read leaves beyond its high-water mark, which the subscriber sees as a gap
 * too. The replay thread owns the ROUTER socket. The sequence is the order of the rounds.
 */
public final class KvEventPublisher implements KvEventSink, AutoCloseable {
  private static final System.Logger LOG = System.getLogger(KvEventPublisher.class.getName());

  /** The end-of-replay marker's sequence number, -1 as 8 big-endian bytes. */
  static final byte[] END_SEQ = seqBytes(-1);

  /** The PUB socket's high-water mark, in messages (vLLM's default). */
  static final int HWM = 100_000;

  /** How long close lets the sender send what is queued. */
  static final long CLOSE_DRAIN_MS = 1_000;

  /**
   * What the publisher is.
   *
   * @param endpoint where the PUB socket binds
   * @param replayEndpoint where the replay ROUTER socket binds; null for none
   * @param topic the first frame of every message (empty: vLLM's default)
   * @param dpRank the payload's {@code dp_rank}
   * @param blockSize P, tokens per page (the events' {@code block_size})
   * @param queueSize the most batches waiting for the sender; more are dropped
   * @param bufferSteps the most batches the replay retains (the newest)
   */
  public record Settings(
      ZmqEndpoint endpoint,
      ZmqEndpoint replayEndpoint,
      String topic,
      int dpRank,
      int blockSize,
      int queueSize,
      int bufferSteps) {
    /** The default of {@code queue_size} (batches). */
    public static final int DEFAULT_QUEUE_SIZE = 10_000;

    /** The default of {@code buffer_steps} (batches), vLLM's. */
    public static final int DEFAULT_BUFFER_STEPS = 10_000;

    public Settings {
      Objects.requireNonNull(endpoint, "endpoint");
      Objects.requireNonNull(topic, "topic");
      if (dpRank < 0 || blockSize < 1 || queueSize < 1 || bufferSteps < 1) {
        throw new IllegalArgumentException(
            "dp_rank="
                + dpRank
                + ", block_size="
                + blockSize
                + ", queue_size="
                + queueSize
                + ", buffer_steps="
                + bufferSteps
                + ": dp_rank must be >= 0, the others >= 1");
      }
    }
  }

  /** One batch: its number, time and events, and its payload once encoded. */
  static final class Batch {
    final long seq;
    final double ts;
    final List<KvEvent> events;
    private volatile byte[] payload;

    Batch(long seq, double ts, List<KvEvent> events) {
      this.seq = seq;
      this.ts = ts;
      this.events = events;
    }

    byte[] payload(int dpRank, int blockSize) {
      byte[] p = payload;
      if (p == null) {
        p = KvEventCodec.encode(ts, events, dpRank, blockSize);
        payload = p;
      }
      return p;
    }
  }

  private final Settings settings;
  private final LongSupplier epochMillis;
  private final byte[] topic;
  private final ZContext context;
  private final ArrayBlockingQueue<Batch> queue;
  private final AtomicReferenceArray<Batch> ring;
  private final Thread sender;
  private final Thread replayer;

  /** Where the sockets are bound, as their threads bound them. */
  private final ZmqEndpoint bound;

  private final ZmqEndpoint boundReplay;

  /** Holds the sender's loop until {@link #startThreads} (tests); open in production. */
  private final CountDownLatch go;

  /** The next sequence number (the loop thread's). */
  private long next;

  /** The newest sequence number taken, -1 before any (for the replay thread). */
  private volatile long newest = -1;

  private final AtomicLong published = new AtomicLong();
  private final AtomicLong dropped = new AtomicLong();
  private final AtomicLong replayRequests = new AtomicLong();
  private volatile boolean closing;
  private boolean encodeFailureLogged;

  /**
   * Starts the threads; each creates and binds its own socket (a ZeroMQ socket stays with the
   * thread that made it) and reports where, or why not, before this returns.
   */
  private KvEventPublisher(Settings settings, LongSupplier epochMillis, boolean hold) {
    this.settings = settings;
    this.epochMillis = epochMillis;
    this.topic = settings.topic().getBytes(StandardCharsets.UTF_8);
    this.queue = new ArrayBlockingQueue<>(settings.queueSize());
    this.ring = new AtomicReferenceArray<>(settings.bufferSteps());
    this.go = new CountDownLatch(hold ? 1 : 0);
    this.context = new ZContext(1);
    CompletableFuture<ZmqEndpoint> pubBound = new CompletableFuture<>();
    CompletableFuture<ZmqEndpoint> replayBound = new CompletableFuture<>();
    this.sender = Thread.ofPlatform().daemon().name("ts-kv-events").start(() -> sendLoop(pubBound));
    ZmqEndpoint pubAt;
    try {
      pubAt = await(pubBound);
    } catch (RuntimeException e) {
      context.close();
      throw e;
    }
    if (settings.replayEndpoint() != null) {
      this.replayer =
          Thread.ofPlatform()
              .daemon()
              .name("ts-kv-events-replay")
              .start(() -> replayLoop(replayBound));
      try {
        this.boundReplay = await(replayBound);
      } catch (RuntimeException e) {
        closing = true;
        go.countDown();
        join(sender, 2_000);
        context.close();
        throw e;
      }
    } else {
      this.replayer = null;
      this.boundReplay = null;
    }
    this.bound = pubAt;
  }

  private static ZmqEndpoint await(CompletableFuture<ZmqEndpoint> bound) {
    try {
      return bound.get(30, TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RuntimeException r) {
        throw r;
      }
      throw new IllegalStateException(e.getCause());
    } catch (TimeoutException e) {
      throw new IllegalStateException("a KV events socket did not bind within 30 s", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while binding the KV events sockets", e);
    }
  }

  private static void join(Thread t, long ms) {
    try {
      t.join(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Binds the sockets and starts the sender (and the replay) thread.
   *
   * @throws IllegalArgumentException naming the option whose endpoint cannot be bound
   */
  public static KvEventPublisher start(Settings settings) {
    return start(settings, System::currentTimeMillis);
  }

  /** {@link #start(Settings)} with the clock that stamps each batch's {@code ts} (tests). */
  static KvEventPublisher start(Settings settings, LongSupplier epochMillis) {
    return new KvEventPublisher(settings, epochMillis, false);
  }

  /**
   * A publisher with its sockets bound whose sender sends nothing until {@link #startThreads}
   * (tests: a queue that fills).
   */
  static KvEventPublisher unstarted(Settings settings, LongSupplier epochMillis) {
    return new KvEventPublisher(settings, epochMillis, true);
  }

  /** Lets the sender of an {@link #unstarted} publisher send. */
  void startThreads() {
    go.countDown();
  }

  /** Binds {@code socket}; a failure is invalid input naming {@code option}. */
  private static ZmqEndpoint bind(ZMQ.Socket socket, ZmqEndpoint endpoint, String option) {
    socket.setIPv6(endpoint.ipv6());
    try {
      if (!socket.bind(endpoint.toString())) {
        throw new IllegalArgumentException(option + "=" + endpoint + ": cannot bind");
      }
    } catch (ZMQException e) {
      throw new IllegalArgumentException(
          option + "=" + endpoint + ": cannot bind: " + e.getMessage(), e);
    }
    ZmqEndpoint last = ZmqEndpoint.parse(socket.getLastEndpoint());
    return new ZmqEndpoint(endpoint.wildcard() ? endpoint.host() : last.host(), last.port());
  }

  /** Where the PUB socket is bound (the port chosen when 0 was asked for). */
  public ZmqEndpoint endpoint() {
    return bound;
  }

  /** Where the replay socket is bound; null without one. */
  public ZmqEndpoint replayEndpoint() {
    return boundReplay;
  }

  /** The publisher's settings. */
  public Settings settings() {
    return settings;
  }

  /** Batches sent on the PUB socket. */
  public long published() {
    return published.get();
  }

  /** Batches the full queue refused (never sent live; replayable while retained). */
  public long dropped() {
    return dropped.get();
  }

  /** Replay requests answered. */
  long replayRequests() {
    return replayRequests.get();
  }

  /** The engine's sink (the loop thread): numbers, retains and queues the batch; never waits. */
  @Override
  public void publish(List<KvEvent> batch) {
    if (closing) {
      return;
    }
    long seq = next++;
    Batch b = new Batch(seq, epochMillis.getAsLong() / 1000.0, batch);
    ring.set(slot(seq), b);
    newest = seq;
    if (!queue.offer(b)) {
      dropped.incrementAndGet();
    }
  }

  private int slot(long seq) {
    return (int) (seq % settings.bufferSteps());
  }

  /** The sender thread: owns the PUB socket; sends the queue's batches in order. */
  private void sendLoop(CompletableFuture<ZmqEndpoint> bound) {
    ZMQ.Socket pub;
    try {
      pub = context.createSocket(SocketType.PUB);
      pub.setSndHWM(HWM);
      pub.setLinger(0);
      bound.complete(bind(pub, settings.endpoint(), "--kv-events-endpoint"));
    } catch (RuntimeException e) {
      bound.completeExceptionally(e);
      return;
    }
    try {
      go.await();
      send(pub);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** Sends the queue's batches until close (then what is queued, for up to a second). */
  private void send(ZMQ.Socket pub) {
    long drainDeadline = Long.MAX_VALUE;
    while (true) {
      Batch b;
      try {
        b = queue.poll(100, TimeUnit.MILLISECONDS);
      } catch (InterruptedException e) {
        break;
      }
      if (b == null) {
        if (closing) {
          break;
        }
        // an idle socket takes in new subscribers' connections and subscriptions only when its
        // thread calls into it: do so at every idle wake-up, so they are in before the next batch
        pub.getEvents();
        continue;
      }
      if (closing && drainDeadline == Long.MAX_VALUE) {
        drainDeadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(CLOSE_DRAIN_MS);
      }
      if (System.nanoTime() > drainDeadline) {
        break;
      }
      byte[] payload;
      try {
        payload = b.payload(settings.dpRank(), settings.blockSize());
      } catch (RuntimeException e) {
        noteEncodeFailure(b, e);
        continue;
      }
      try {
        pub.sendMore(topic);
        pub.sendMore(seqBytes(b.seq));
        pub.send(payload, 0);
        published.incrementAndGet();
      } catch (ZMQException e) {
        if (closing) {
          break;
        }
        LOG.log(System.Logger.Level.WARNING, "KV events: a send failed: " + e.getMessage());
      }
    }
  }

  private void noteEncodeFailure(Batch b, RuntimeException e) {
    dropped.incrementAndGet();
    if (!encodeFailureLogged) {
      encodeFailureLogged = true;
      LOG.log(
          System.Logger.Level.WARNING,
          "KV events: batch " + b.seq + " could not be encoded and is lost: " + e,
          e);
    }
  }

  /** The replay thread: owns the ROUTER socket; answers each request in vLLM's framing. */
  private void replayLoop(CompletableFuture<ZmqEndpoint> bound) {
    ZMQ.Socket router;
    try {
      router = context.createSocket(SocketType.ROUTER);
      // a whole replay fits the peer's pipe: a ROUTER drops what overflows it
      router.setSndHWM(settings.bufferSteps() + 16);
      router.setLinger(0);
      router.setReceiveTimeOut(100);
      bound.complete(bind(router, settings.replayEndpoint(), "--kv-events-replay-endpoint"));
    } catch (RuntimeException e) {
      bound.completeExceptionally(e);
      return;
    }
    serveReplays(router);
  }

  private void serveReplays(ZMQ.Socket router) {
    while (!closing) {
      byte[][] frames;
      try {
        frames = receive(router);
      } catch (ZMQException e) {
        if (closing) {
          return;
        }
        LOG.log(System.Logger.Level.WARNING, "KV events: a replay receive failed: " + e);
        continue;
      }
      if (frames == null) {
        continue; // the receive timed out: check closing
      }
      // vLLM's framing: [identity, empty delimiter, 8-byte start]; anything else is ignored
      if (frames.length != 3 || frames[1].length != 0 || frames[2].length != 8) {
        LOG.log(
            System.Logger.Level.DEBUG,
            "KV events: a replay request of " + frames.length + " frames ignored");
        continue;
      }
      try {
        answer(router, frames[0], readSeq(frames[2]));
        replayRequests.incrementAndGet();
      } catch (ZMQException e) {
        if (closing) {
          return;
        }
        LOG.log(System.Logger.Level.WARNING, "KV events: a replay answer failed: " + e);
      }
    }
  }

  /** One multipart request, or null when none came within the receive timeout. */
  private static byte[][] receive(ZMQ.Socket router) {
    byte[] first = router.recv(0);
    if (first == null) {
      return null;
    }
    java.util.ArrayList<byte[]> frames = new java.util.ArrayList<>(3);
    frames.add(first);
    while (router.hasReceiveMore()) {
      byte[] f = router.recv(0);
      if (f == null) {
        break;
      }
      frames.add(f);
    }
    return frames.toArray(byte[][]::new);
  }

  /**
   * Every retained batch from {@code start} (unsigned, as vLLM reads it) on, oldest first, then the
   * end marker.
   */
  private void answer(ZMQ.Socket router, byte[] identity, long start) {
    long last = newest;
    long oldest = Math.max(0, last - settings.bufferSteps() + 1);
    if (last >= 0 && Long.compareUnsigned(start, last) <= 0) {
      for (long s = Math.max(start, oldest); s <= last; s++) {
        Batch b = ring.get(slot(s));
        if (b == null || b.seq != s) {
          continue; // overwritten since: no longer retained
        }
        byte[] payload;
        try {
          payload = b.payload(settings.dpRank(), settings.blockSize());
        } catch (RuntimeException e) {
          continue;
        }
        router.sendMore(identity);
        router.sendMore(new byte[0]);
        router.sendMore(seqBytes(s));
        router.send(payload, 0);
      }
    }
    router.sendMore(identity);
    router.sendMore(new byte[0]);
    router.sendMore(END_SEQ);
    router.send(new byte[0], 0);
  }

  /** Stops: the sender sends what is queued (for up to a second), then the sockets close. */
  @Override
  public void close() {
    if (closing) {
      return;
    }
    closing = true;
    go.countDown();
    join(sender, CLOSE_DRAIN_MS + 1_000);
    if (replayer != null) {
      join(replayer, 1_000);
    }
    context.close(); // the sockets' threads have ended: their sockets close here
  }

  static byte[] seqBytes(long seq) {
    byte[] b = new byte[8];
    for (int i = 0; i < 8; i++) {
      b[i] = (byte) (seq >>> (56 - 8 * i));
    }
    return b;
  }

  static long readSeq(byte[] b) {
    long v = 0;
    for (int i = 0; i < 8; i++) {
      v = (v << 8) | (b[i] & 0xff);
    }
    return v;
  }
}
