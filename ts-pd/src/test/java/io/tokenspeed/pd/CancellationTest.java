package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdTesting.await;
import static io.tokenspeed.pd.PdTesting.awaitFailure;
import static io.tokenspeed.pd.PdTesting.eventually;
import static io.tokenspeed.pd.PdTesting.loopback;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Cancellation at every point of a room's life, from either side or both at once: both sides'
 * stages end, the destinations are released exactly once (by the receiver, or by the engine once
 * handed over), no room stays open, and the same connection carries the next room to the end.
 */
class CancellationTest {

  enum Point {
    BEFORE_ACK,
    AFTER_ACK_BEFORE_DATA,
    MID_DATA,
    AFTER_DONE_BEFORE_RECEIVED
  }

  enum Side {
    PREFILL,
    DECODE,
    BOTH
  }

  static Stream<Arguments> cases() {
    return Stream.of(Point.values())
        .flatMap(p -> Stream.of(Side.values()).map(s -> Arguments.of(p, s)));
  }

  private static final String REASON = "the client went away";

  @ParameterizedTest(name = "{0} by {1}")
  @MethodSource("cases")
  void shouldEndBothSidesAndKeepTheConnectionWhenARoomIsCancelled(Point point, Side side)
      throws Exception {
    PdSecret secret = PdSecret.generate();
    TestLanding landing = new TestLanding((id, g) -> g == 0 ? 6 : 3);
    SplittableRandom rnd = new SplittableRandom(point.ordinal() * 10L + side.ordinal());
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings());
        Arena arena = Arena.ofShared()) {
      long room = 100;
      Bootstrap b = PdTesting.bootstrap(rnd, 50, 32 * 1024, 4096);
      CompletableFuture<Void> gate = point == Point.BEFORE_ACK ? landing.hold(room) : null;
      Registration reg = receiver.expect(room);
      Transfer t = sender.bootstrap(room, receiver.address(), b);
      Landed landed = null;
      MemorySegment[][] src = null;
      switch (point) {
        case BEFORE_ACK -> eventually(() -> landing.reservations.get() == 1, "the reservation");
        case AFTER_ACK_BEFORE_DATA -> await(t.acknowledged(), "ACK");
        case MID_DATA -> {
          Ack ack = await(t.acknowledged(), "ACK");
          src = PdTesting.sources(arena, room, b, ack);
          for (int i = 0; i < 4; i++) {
            assertTrue(t.send(0, i, src[0][i]));
          }
          eventually(() -> receiver.metrics().bytesReceived() > 0, "some DATA landed");
        }
        case AFTER_DONE_BEFORE_RECEIVED -> {
          Ack ack = await(t.acknowledged(), "ACK");
          PdTesting.sendAll(
              t, PdTesting.sources(arena, room, b, ack), new DoneInfo(3, CachedTokens.NONE));
          landed = await(reg.landed(), "landing");
        }
      }

      switch (side) {
        case PREFILL -> assertTrue(t.cancel(REASON));
        case DECODE -> assertTrue(reg.cancel(REASON));
        case BOTH -> {
          CompletableFuture<Boolean> p = CompletableFuture.supplyAsync(() -> t.cancel(REASON));
          boolean d = reg.cancel(REASON);
          assertTrue(await(p, "the prefill side's cancel") || d);
        }
      }
      if (gate != null) {
        gate.complete(null); // The engine's reservation completes after the cancel.
      }
      if (src != null && side != Side.DECODE) {
        assertFalse(t.send(0, 5, src[0][5]), "a send after the cancel is refused");
      }

      // The prefill side: the fence completes; normally when it cancelled, else with the reason.
      switch (side) {
        case PREFILL -> await(t.received(), "the fence");
        case DECODE -> {
          PdException e = awaitFailure(t.received(), PdException.Kind.CANCELLED, "the fence");
          assertTrue(e.getMessage().contains(REASON), e::getMessage);
        }
        case BOTH -> {
          try {
            t.received()
                .toCompletableFuture()
                .get(PdTesting.WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
          } catch (ExecutionException e) {
            assertEquals(PdException.Kind.CANCELLED, ((PdException) e.getCause()).kind());
          }
        }
      }
      if (point == Point.BEFORE_ACK) {
        awaitFailure(t.acknowledged(), PdException.Kind.CANCELLED, "ACK");
      }

      // The decode side: the landing fails, or, once handed over, acknowledging does nothing.
      if (landed == null) {
        PdException e = awaitFailure(reg.landed(), PdException.Kind.CANCELLED, "landing");
        assertTrue(e.getMessage().contains(REASON), e::getMessage);
      } else {
        eventually(() -> receiver.openRooms() == 0, "the room closed on the decode side");
        assertFalse(landed.acknowledge(), "acknowledge after a cancel");
        PdTesting.assertLandedBytes(room, landed.destinations(), b);
        landed.destinations().release(); // Handed over: the engine's to release.
      }
      eventually(() -> receiver.openRooms() == 0, "no room open on the decode side");
      eventually(() -> sender.metrics().roomsOpen() == 0, "no room open on the prefill side");
      landing.awaitReleased(room);
      assertEquals(1, sender.metrics().roomsCancelled(), () -> sender.metrics().toString());
      assertEquals(1, receiver.metrics().roomsCancelled(), () -> receiver.metrics().toString());

      // The connection carries the next room to the end.
      long next = 101;
      Registration reg2 = receiver.expect(next);
      Transfer t2 = sender.bootstrap(next, receiver.address(), b);
      Ack ack2 = await(t2.acknowledged(), "ACK of the next room");
      PdTesting.sendAll(
          t2, PdTesting.sources(arena, next, b, ack2), new DoneInfo(5, CachedTokens.NONE));
      Landed landed2 = await(reg2.landed(), "landing of the next room");
      PdTesting.assertLandedBytes(next, landed2.destinations(), b);
      assertTrue(landed2.acknowledge());
      await(t2.received(), "the next room's fence");
      landed2.destinations().release();

      assertEquals(1, sender.metrics().connectionsOpened());
      assertEquals(1, receiver.metrics().connectionsOpened());
      assertEquals(
          0, receiver.metrics().connectionFailures() + sender.metrics().connectionFailures());
      PdTesting.assertBalanced(sender.metrics());
      PdTesting.assertBalanced(receiver.metrics());
      eventually(() -> receiver.metrics().roomsOpen() == 0, "nothing open");
      landing.assertAllReleasedOnce();
    }
  }

  /**
   * The fence holds while the writer is stuck: a decode peer stops reading with 64 MiB of DATA
   * queued, then cancels. The prefill side must not complete its fence until its answering CANCEL
   * is written (the blocked DATA frame may still be reading its segment), and must drop the DATA it
   * had not started writing.
   */
  @org.junit.jupiter.api.Test
  void shouldHoldTheFenceUntilTheAnswerIsWrittenAndDropUnwrittenBlocksWhenTheDecodeSideCancels()
      throws Exception {
    PdSecret secret = PdSecret.generate();
    try (java.net.ServerSocket server = PdTesting.loopbackServer();
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      java.net.InetSocketAddress at = PdTesting.addressOf(server);
      Bootstrap b = PdTesting.bootstrap(new SplittableRandom(11), 10, 1 << 20);
      Transfer t = sender.bootstrap(1, at, b);
      Arena sources = Arena.ofShared();
      try (RawPd decode = RawPd.decode(server, secret);
          Arena scratch = Arena.ofConfined()) {
        decode.next(PdFrame.Open.class);
        decode.send(PdFrameEncoder.ack(1, new Ack(new int[] {64})));
        Ack ack = await(t.acknowledged(), "ACK");
        MemorySegment[][] src = PdTesting.sources(sources, 1, b, ack);
        for (int i = 0; i < 64; i++) {
          assertTrue(t.send(0, i, src[0][i]));
        }
        // The writer fills the window and blocks; the peer reads nothing yet and cancels.
        long sent = -1;
        while (sent != sender.metrics().bytesSent()) {
          sent = sender.metrics().bytesSent();
          Thread.sleep(100);
        }
        assertTrue(sent < 64L << 20, "the window stopped the writer after " + sent + " bytes");
        decode.send(PdFrameEncoder.cancel(1, REASON));
        Thread.sleep(300);
        assertFalse(
            t.received().toCompletableFuture().isDone(),
            "the fence completed while a DATA frame was still being written");
        // The peer drains: the DATA already on its way, then the answering CANCEL.
        MemorySegment sink = scratch.allocate(1 << 20);
        int frames = 0;
        while (true) {
          PdFrame f = decode.nextNotPing();
          if (f instanceof PdFrame.Data d) {
            decode.reader.readBlock(sink.asSlice(0, d.blockBytes()));
            frames++;
          } else {
            assertEquals(new PdFrame.Cancel(1, "answering the decode side's cancel"), f);
            break;
          }
        }
        PdException e = awaitFailure(t.received(), PdException.Kind.CANCELLED, "the fence");
        assertTrue(e.getMessage().contains(REASON), e::getMessage);
        assertTrue(frames < 64, "every DATA frame was written despite the cancel: " + frames);
        // Past the fence the segments are the engine's to free.
        sources.close();
        assertEquals(0, sender.metrics().roomsOpen());
        assertEquals(1, sender.metrics().roomsCancelled());
      }
    }
  }
}
