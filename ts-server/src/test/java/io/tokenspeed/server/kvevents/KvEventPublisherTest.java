package io.tokenspeed.server.kvevents;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.kvevents.KvEvent;
import io.tokenspeed.engine.kvevents.KvMedium;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageUnpacker;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * The publisher over real sockets on loopback: the PUB frames, the bounded queue that drops and
 * counts without ever blocking the caller, and the replay socket's answer in vLLM's ROUTER framing
 * to a DEALER (every retained batch from the start asked for, then the end marker) and to a REQ.
 */
class KvEventPublisherTest {

  private static final ZmqEndpoint ANY = ZmqEndpoint.parse("tcp://127.0.0.1:0");

  private static KvEventPublisher.Settings settings(int queue, int steps) {
    return new KvEventPublisher.Settings(ANY, ANY, "kv@test", 3, 16, queue, steps);
  }

  /**
   * A JeroMQ client socket. Its ZeroMQ handshake now and then never completes (1 to 10 % of
   * connects on a 2-core machine, to a libzmq server as well, where libzmq clients never stalled);
   * a short handshake interval drops such a connection and reconnects (100 of 100 replays then
   * answered).
   */
  static ZMQ.Socket client(ZContext ctx, SocketType type) {
    ZMQ.Socket s = ctx.createSocket(type);
    s.setHandshakeIvl(500);
    return s;
  }

  /** A batch whose one event tells it apart: a removal of hash {@code n} from the Device. */
  private static List<KvEvent> batch(long n) {
    return List.of(new KvEvent.BlockRemoved(KvMedium.DEVICE, new long[] {n}));
  }

  /** The hash of a {@link #batch}'s payload. */
  private static long marker(byte[] payload) throws Exception {
    try (MessageUnpacker u = KvEventCodec.unpacker(payload)) {
      assertEquals(3, u.unpackArrayHeader());
      u.unpackDouble();
      assertEquals(1, u.unpackArrayHeader());
      assertEquals(3, u.unpackArrayHeader());
      assertEquals("BlockRemoved", u.unpackString());
      assertEquals(1, u.unpackArrayHeader());
      long h = u.unpackLong();
      assertEquals("GPU", u.unpackString());
      assertEquals(3, u.unpackInt(), "dp_rank");
      return h;
    }
  }

  /** A DEALER's replay request from {@code start}: every answer, the end marker last. */
  private static List<byte[][]> replay(ZContext ctx, KvEventPublisher p, long start) {
    ZMQ.Socket dealer = client(ctx, SocketType.DEALER);
    dealer.setReceiveTimeOut(5_000);
    dealer.connect(p.replayEndpoint().toString());
    dealer.sendMore(new byte[0]);
    dealer.send(KvEventPublisher.seqBytes(start), 0);
    List<byte[][]> out = new ArrayList<>();
    while (true) {
      List<byte[]> frames = new ArrayList<>();
      byte[] f = dealer.recv(0);
      assertNotNull(f, "the replay did not answer within 5 s");
      frames.add(f);
      while (dealer.hasReceiveMore()) {
        frames.add(dealer.recv(0));
      }
      assertEquals(3, frames.size(), "[empty, seq, payload]");
      assertEquals(0, frames.get(0).length, "the delimiter");
      out.add(new byte[][] {frames.get(1), frames.get(2)});
      if (KvEventPublisher.readSeq(frames.get(1)) == -1) {
        assertEquals(0, frames.get(2).length, "the end marker's payload is empty");
        dealer.close();
        return out;
      }
    }
  }

  @Test
  void shouldSendTopicSequenceAndPayloadOnThePubSocket() throws Exception {
    try (ZContext ctx = new ZContext();
        KvEventPublisher p = KvEventPublisher.start(settings(100, 100), () -> 1_700_000_000_500L)) {
      // a PUB socket drops what it sends before the subscription arrives: publish until seen
      ZMQ.Socket sub = client(ctx, SocketType.SUB);
      sub.subscribe("kv@".getBytes(StandardCharsets.UTF_8));
      sub.setReceiveTimeOut(200);
      sub.connect(p.endpoint().toString());
      byte[] topic = null;
      long n = 0;
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (topic == null && System.nanoTime() < deadline) {
        p.publish(batch(n++));
        topic = sub.recv(0);
      }
      assertNotNull(topic, "nothing arrived; published " + p.published() + " of " + n);
      assertEquals("kv@test", new String(topic, StandardCharsets.UTF_8));
      assertTrue(sub.hasReceiveMore());
      byte[] seq = sub.recv(0);
      assertEquals(8, seq.length);
      long s = KvEventPublisher.readSeq(seq);
      assertTrue(sub.hasReceiveMore());
      byte[] payload = sub.recv(0);
      assertEquals(s, marker(payload), "batch n carries marker n and sequence number n");
      try (MessageUnpacker u = KvEventCodec.unpacker(payload)) {
        u.unpackArrayHeader();
        assertEquals(1_700_000_000.5, u.unpackDouble(), "ts: seconds since the epoch");
      }
      assertTrue(!sub.hasReceiveMore(), "three frames");
    }
  }

  @Test
  void shouldDropAndCountWithoutBlockingWhenTheQueueIsFullAndReplayTheGap() throws Exception {
    try (ZContext ctx = new ZContext();
        KvEventPublisher p =
            KvEventPublisher.unstarted(settings(2, 8), System::currentTimeMillis)) {
      long start = System.nanoTime();
      for (int i = 0; i < 6; i++) {
        p.publish(batch(i)); // the sender is not running: two fit, four are dropped
      }
      assertTrue(
          System.nanoTime() - start < TimeUnit.MILLISECONDS.toNanos(500),
          "publish waited for the full queue");
      assertEquals(4, p.dropped());
      p.startThreads();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (p.published() < 2 && System.nanoTime() < deadline) {
        Thread.sleep(5);
      }
      assertEquals(2, p.published(), "the two queued batches went out");
      List<byte[][]> all = replay(ctx, p, 0);
      assertEquals(7, all.size(), "six batches and the end marker");
      for (int i = 0; i < 6; i++) {
        assertEquals(i, KvEventPublisher.readSeq(all.get(i)[0]));
        assertEquals(i, marker(all.get(i)[1]), "the dropped batches too");
      }
      assertEquals(-1, KvEventPublisher.readSeq(all.get(6)[0]));
    }
  }

  @Test
  void shouldReplayExactlyTheRetainedBatchesFromTheStartThenTheEndMarker() throws Exception {
    try (ZContext ctx = new ZContext();
        KvEventPublisher p = KvEventPublisher.start(settings(100, 5), System::currentTimeMillis)) {
      assertEquals(List.of(), markers(replay(ctx, p, 0)), "nothing yet: only the end marker");
      for (int i = 0; i < 12; i++) {
        p.publish(batch(100 + i));
      }
      // 12 batches, 5 retained: 7..11
      assertEquals(List.of(7L, 8L, 9L, 10L, 11L), seqs(replay(ctx, p, 0)));
      assertEquals(List.of(9L, 10L, 11L), seqs(replay(ctx, p, 9)));
      assertEquals(List.of(109L, 110L, 111L), markers(replay(ctx, p, 9)));
      assertEquals(List.of(11L), seqs(replay(ctx, p, 11)));
      assertEquals(List.of(), seqs(replay(ctx, p, 12)), "past the newest: the end marker only");
      assertEquals(List.of(), seqs(replay(ctx, p, -2)), "2^64 - 2 read unsigned, as vLLM does");
    }
  }

  @Test
  void shouldAnswerAReqSocketItsFirstBatchAsVllmsRouterDoes() throws Exception {
    try (ZContext ctx = new ZContext();
        KvEventPublisher p =
            KvEventPublisher.start(settings(100, 100), System::currentTimeMillis)) {
      for (int i = 0; i < 3; i++) {
        p.publish(batch(i));
      }
      ZMQ.Socket req = client(ctx, SocketType.REQ);
      req.setReceiveTimeOut(5_000);
      req.connect(p.replayEndpoint().toString());
      req.send(KvEventPublisher.seqBytes(1), 0); // REQ adds the empty delimiter itself
      byte[] seq = req.recv(0);
      assertNotNull(seq, "no answer");
      assertEquals(1, KvEventPublisher.readSeq(seq));
      assertTrue(req.hasReceiveMore());
      assertEquals(1, marker(req.recv(0)));
      req.close();
    }
  }

  @Test
  void shouldIgnoreAReplayRequestInAnotherFraming() throws Exception {
    try (ZContext ctx = new ZContext();
        KvEventPublisher p =
            KvEventPublisher.start(settings(100, 100), System::currentTimeMillis)) {
      p.publish(batch(0));
      ZMQ.Socket dealer = client(ctx, SocketType.DEALER);
      dealer.setReceiveTimeOut(1_500);
      dealer.connect(p.replayEndpoint().toString());
      dealer.send(KvEventPublisher.seqBytes(0), 0); // no delimiter: vLLM ignores it too
      assertNull(dealer.recv(0));
      dealer.close();
      assertEquals(List.of(0L), seqs(replay(ctx, p, 0)), "the socket still serves");
    }
  }

  @Test
  void shouldNameTheOptionOfAnEndpointThatCannotBeBound() {
    try (KvEventPublisher first =
        KvEventPublisher.start(settings(10, 10), System::currentTimeMillis)) {
      ZmqEndpoint taken = first.endpoint();
      IllegalArgumentException e =
          assertThrows(
              IllegalArgumentException.class,
              () ->
                  KvEventPublisher.start(
                      new KvEventPublisher.Settings(taken, null, "", 0, 16, 10, 10)));
      assertTrue(e.getMessage().startsWith("--kv-events-endpoint=" + taken), e.getMessage());
    }
  }

  private static List<Long> seqs(List<byte[][]> answers) {
    List<Long> out = new ArrayList<>();
    for (byte[][] a : answers.subList(0, answers.size() - 1)) {
      out.add(KvEventPublisher.readSeq(a[0]));
    }
    assertArrayEquals(
        KvEventPublisher.END_SEQ, answers.getLast()[0], "the end marker comes last, once");
    return out;
  }

  private static List<Long> markers(List<byte[][]> answers) throws Exception {
    List<Long> out = new ArrayList<>();
    for (byte[][] a : answers.subList(0, answers.size() - 1)) {
      out.add(marker(a[1]));
    }
    return out;
  }
}
