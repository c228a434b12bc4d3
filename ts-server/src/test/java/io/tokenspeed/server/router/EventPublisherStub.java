package io.tokenspeed.server.router;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * A KV event publisher as the events contract describes it, for the router's tests: a ZeroMQ PUB
 * socket sending [topic, seq, payload] and a ROUTER socket replaying the batches it retains, on
 * loopback ports. A test may keep a batch from the PUB socket (a gap the subscriber must fill),
 * bound what it retains (a gap it cannot), or start the sequence again (a restarted engine).
 *
 * <p>Payloads are built with {@link #batch} from events written as in the contract.
 */
final class EventPublisherStub implements AutoCloseable {
  /** An event as the contract writes it. */
  sealed interface Ev {}

  record Stored(long[] hashes, String medium) implements Ev {}

  record Removed(long[] hashes, String medium) implements Ev {}

  record Cleared() implements Ev {}

  private final ZContext context = new ZContext(1);
  private final ZMQ.Socket pub;
  private final int pubPort;
  private final int replayPort;
  private final String topic;
  private final Deque<Object[]> retained = new ArrayDeque<>();
  private final Thread replayThread;
  private final AtomicInteger replays = new AtomicInteger();
  private volatile boolean closed;
  private volatile int retain = Integer.MAX_VALUE;
  private long next;
  private final int dpRank;

  EventPublisherStub(String topic, int dpRank) {
    this(topic, dpRank, 0, 0);
  }

  /** A publisher on the given ports (0: a random one each): an engine restarted where it was. */
  EventPublisherStub(String topic, int dpRank, int pubPortWanted, int replayPortWanted) {
    this.topic = topic;
    this.dpRank = dpRank;
    pub = context.createSocket(SocketType.PUB);
    pub.setLinger(0);
    pub.setSndHWM(1_000_000);
    pubPort = bind(pub, pubPortWanted);
    ZMQ.Socket router = context.createSocket(SocketType.ROUTER);
    router.setLinger(0);
    router.setReceiveTimeOut(50);
    replayPort = bind(router, replayPortWanted);
    replayThread =
        Thread.ofPlatform().daemon().name("stub-kv-replay").start(() -> serveReplays(router));
  }

  private static int bind(ZMQ.Socket socket, int port) {
    if (port == 0) {
      return socket.bindToRandomPort("tcp://127.0.0.1");
    }
    socket.bind("tcp://127.0.0.1:" + port);
    return port;
  }

  int pubPort() {
    return pubPort;
  }

  int replayPort() {
    return replayPort;
  }

  String endpoint() {
    return "tcp://127.0.0.1:" + pubPort;
  }

  String replayEndpoint() {
    return "tcp://127.0.0.1:" + replayPort;
  }

  /** The {@code /kv-events} answer of a backend publishing here with block size {@code p}. */
  String discovery(int p, boolean withReplay) {
    return "{\"endpoint\":\""
        + endpoint()
        + "\""
        + (withReplay ? ",\"replay_endpoint\":\"" + replayEndpoint() + "\"" : "")
        + ",\"topic\":\""
        + topic
        + "\",\"block_size\":"
        + p
        + ",\"dp_rank\":"
        + dpRank
        + ",\"hash\":\"sha256-page-prefix-u64\"}";
  }

  /** Retain only the last {@code n} batches for replays. */
  void retain(int n) {
    synchronized (retained) {
      retain = n;
      while (retained.size() > n) {
        retained.removeFirst();
      }
    }
  }

  /** Replays served so far. */
  int replays() {
    return replays.get();
  }

  /** The next batch's sequence number. */
  synchronized long next() {
    return next;
  }

  /** Publishes {@code events} as the next batch; {@code drop}: retained, but not sent on PUB. */
  synchronized long publish(List<Ev> events, boolean drop) {
    return publishPayload(batch(events, dpRank), drop);
  }

  /** Publishes {@code payload} as the next batch (a test's own bytes). */
  synchronized long publishPayload(byte[] payload, boolean drop) {
    long seq = next++;
    synchronized (retained) {
      retained.addLast(new Object[] {seq, payload});
      while (retained.size() > retain) {
        retained.removeFirst();
      }
    }
    if (!drop) {
      pub.sendMore(topic.getBytes(StandardCharsets.UTF_8));
      pub.sendMore(ByteBuffer.allocate(8).putLong(seq).array());
      pub.send(payload);
    }
    return seq;
  }

  /** The engine restarted: the sequence begins again at 0 and nothing is retained. */
  synchronized void restart() {
    next = 0;
    synchronized (retained) {
      retained.clear();
    }
  }

  private void serveReplays(ZMQ.Socket router) {
    try {
      while (!closed) {
        byte[] id = router.recv();
        if (id == null) {
          continue;
        }
        List<byte[]> rest = new ArrayList<>();
        while (router.hasReceiveMore()) {
          rest.add(router.recv());
        }
        byte[] start = rest.isEmpty() ? null : rest.getLast();
        if (start == null || start.length != 8) {
          continue;
        }
        replays.incrementAndGet();
        long from = ByteBuffer.wrap(start).getLong();
        List<Object[]> copy;
        synchronized (retained) {
          copy = new ArrayList<>(retained);
        }
        for (Object[] r : copy) {
          if ((long) r[0] >= from) {
            router.sendMore(id);
            router.sendMore(new byte[0]);
            router.sendMore(ByteBuffer.allocate(8).putLong((long) r[0]).array());
            router.send((byte[]) r[1]);
          }
        }
        router.sendMore(id);
        router.sendMore(new byte[0]);
        router.sendMore(ByteBuffer.allocate(8).putLong(-1).array());
        router.send(new byte[0]);
      }
    } finally {
      context.destroySocket(router);
    }
  }

  /** The MessagePack payload of a batch of {@code events}. */
  static byte[] batch(List<Ev> events, int dpRank) {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      p.packArrayHeader(3);
      p.packDouble(System.currentTimeMillis() / 1000.0);
      p.packArrayHeader(events.size());
      for (Ev e : events) {
        switch (e) {
          case Stored s -> {
            p.packArrayHeader(7);
            p.packString("BlockStored");
            hashes(p, s.hashes());
            p.packNil();
            p.packArrayHeader(0);
            p.packInt(16);
            p.packNil();
            p.packString(s.medium());
          }
          case Removed r -> {
            p.packArrayHeader(3);
            p.packString("BlockRemoved");
            hashes(p, r.hashes());
            p.packString(r.medium());
          }
          case Cleared c -> {
            p.packArrayHeader(1);
            p.packString("AllBlocksCleared");
          }
        }
      }
      p.packInt(dpRank);
      return p.toByteArray();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Hashes as unsigned 64-bit integers (a negative long is a u64 above 2^63). */
  static void hashes(MessageBufferPacker p, long[] hashes) throws IOException {
    p.packArrayHeader(hashes.length);
    for (long h : hashes) {
      if (h >= 0) {
        p.packLong(h);
      } else {
        p.packBigInteger(new java.math.BigInteger(Long.toUnsignedString(h)));
      }
    }
  }

  @Override
  public void close() {
    closed = true;
    try {
      replayThread.join(2000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    synchronized (this) {
      context.destroySocket(pub);
    }
    context.close();
  }

  @Override
  public String toString() {
    return "EventPublisherStub" + Arrays.asList(endpoint(), replayEndpoint());
  }
}
