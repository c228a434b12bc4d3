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
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.zip.CRC32C;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Failures over real loopback TCP: a peer that vanishes or falls silent mid-transfer, rooms no one
 * claims, the busy limit, landings that do not check out, and peers that break the protocol. Each
 * must end every affected room at both ends within its bound and leave no room open and no
 * destination unreleased.
 */
class FailureTest {

  private final PdSecret secret = PdSecret.generate();
  private final SplittableRandom rnd = new SplittableRandom(42);

  /** Rooms opened, ACKed and mid-DATA over one real connection. */
  private record MidTransfer(List<Registration> registrations, List<Transfer> transfers) {}

  private MidTransfer midTransfer(KvReceiver receiver, KvSender sender, Arena arena, int rooms) {
    List<Registration> regs = new ArrayList<>();
    List<Transfer> transfers = new ArrayList<>();
    for (int r = 0; r < rooms; r++) {
      Bootstrap b = PdTesting.bootstrap(rnd, 30, 16 * 1024);
      regs.add(receiver.expect(r));
      Transfer t = sender.bootstrap(r, receiver.address(), b);
      Ack ack = await(t.acknowledged(), "ACK");
      MemorySegment[][] src = PdTesting.sources(arena, r, b, ack);
      assertTrue(t.send(0, 0, src[0][0]));
      transfers.add(t);
    }
    long expected = 16 * 1024L * rooms;
    eventually(() -> receiver.metrics().bytesReceived() == expected, "the first blocks landed");
    return new MidTransfer(regs, transfers);
  }

  @ParameterizedTest(name = "{0} closes")
  @ValueSource(strings = {"prefill", "decode"})
  void shouldFailEveryOpenRoomAtBothEndsWhenOneSideClosesMidTransfer(String closing)
      throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 4);
    // A long silence timeout: the failure must come from the close itself.
    PdSettings s = PdSettings.defaults().withTimingsMs(5_000, 10_000, 100, 60_000);
    KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing);
    KvSender sender = KvSender.open(secret, s);
    try (Arena arena = Arena.ofShared()) {
      MidTransfer m = midTransfer(receiver, sender, arena, 3);
      long start = System.nanoTime();
      PdException.Kind prefillKind;
      PdException.Kind decodeKind;
      if (closing.equals("prefill")) {
        sender.close();
        prefillKind = PdException.Kind.CLOSED;
        decodeKind = PdException.Kind.CONNECTION;
      } else {
        receiver.close();
        prefillKind = PdException.Kind.CONNECTION;
        decodeKind = PdException.Kind.CLOSED;
      }
      for (int r = 0; r < 3; r++) {
        awaitFailure(m.transfers().get(r).received(), prefillKind, "the fence of room " + r);
        awaitFailure(m.registrations().get(r).landed(), decodeKind, "the landing of room " + r);
      }
      long tookMs = PdTesting.millisSince(start);
      assertTrue(tookMs < 20_000, "rooms failed after " + tookMs + " ms");
      landing.awaitAllReleasedOnce();
      assertEquals(0, receiver.openRooms());
      assertEquals(3, receiver.metrics().roomsFailed());
      assertEquals(3, sender.metrics().roomsFailed());
      PdTesting.assertBalanced(receiver.metrics());
      PdTesting.assertBalanced(sender.metrics());
    } finally {
      sender.close();
      receiver.close();
    }
  }

  @Test
  void shouldFailTheSendersRoomsWhenTheDecodeSocketIsResetMidTransfer() throws Exception {
    PdSettings s = PdSettings.defaults().withTimingsMs(5_000, 10_000, 100, 60_000);
    try (ServerSocket server = PdTesting.loopbackServer();
        KvSender sender = KvSender.open(secret, s);
        Arena arena = Arena.ofShared()) {
      InetSocketAddress at = PdTesting.addressOf(server);
      Bootstrap b = PdTesting.bootstrap(rnd, 10, 8192);
      Transfer t1 = sender.bootstrap(1, at, b);
      Transfer t2 = sender.bootstrap(2, at, b);
      try (RawPd decode = RawPd.decode(server, secret)) {
        decode.next(PdFrame.Open.class);
        decode.next(PdFrame.Open.class);
        decode.send(PdFrameEncoder.ack(1, new Ack(new int[] {4})));
        Ack ack = await(t1.acknowledged(), "ACK");
        MemorySegment[][] src = PdTesting.sources(arena, 1, b, ack);
        assertTrue(t1.send(0, 0, src[0][0]));
        PdFrame.Data d = decode.next(PdFrame.Data.class);
        decode.reader.readBlock(arena.allocate(d.blockBytes()));
        decode.abort();
      }
      PdException e1 =
          awaitFailure(
              t1.received(), PdException.Kind.CONNECTION, "room 1", Duration.ofSeconds(20));
      awaitFailure(
          t2.acknowledged(), PdException.Kind.CONNECTION, "room 2", Duration.ofSeconds(20));
      assertTrue(e1.getMessage().contains("decode engine at"), e1::getMessage);
      assertFalse(t1.send(0, 1, src(arena)), "a send after the failure is refused");
      assertEquals(0, sender.metrics().roomsOpen());
      assertEquals(1, sender.metrics().connectionFailures());
    }
  }

  private static MemorySegment src(Arena arena) {
    return arena.allocate(8192);
  }

  @Test
  void shouldFailTheReceiversRoomsWhenThePrefillSocketIsResetMidTransfer() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 4);
    PdSettings s = PdSettings.defaults().withTimingsMs(5_000, 10_000, 100, 60_000);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing);
        Arena arena = Arena.ofShared()) {
      Bootstrap b = PdTesting.bootstrap(rnd, 10, 8192);
      Registration r1 = receiver.expect(1);
      Registration r2 = receiver.expect(2);
      try (RawPd prefill = RawPd.prefill(receiver.address(), secret)) {
        prefill.send(PdFrameEncoder.bootstrap(1, b)).send(PdFrameEncoder.bootstrap(2, b));
        prefill.next(PdFrame.Accepted.class);
        prefill.next(PdFrame.Accepted.class);
        MemorySegment block = arena.allocate(8192);
        prefill.data(1, 0, 0, block).data(2, 0, 0, block);
        eventually(() -> receiver.metrics().bytesReceived() == 2 * 8192, "two blocks landed");
        // Half a DATA frame, then a reset.
        ByteBuffer prefix = ByteBuffer.allocate(PdFrameDescriptor.DATA_PREFIX_BYTES);
        PdFrameEncoder.dataPrefix(prefix, 1, 0, 1, 8192);
        prefill.send(prefix.flip()).send(new byte[4000]);
        prefill.abort();
      }
      awaitFailure(r1.landed(), PdException.Kind.CONNECTION, "room 1", Duration.ofSeconds(20));
      awaitFailure(r2.landed(), PdException.Kind.CONNECTION, "room 2", Duration.ofSeconds(20));
      landing.awaitAllReleasedOnce();
      assertEquals(0, receiver.openRooms());
      assertEquals(2, receiver.metrics().roomsFailed());
      assertEquals(1, receiver.metrics().connectionFailures());
    }
  }

  @Test
  void shouldFailTheReceiversRoomBySilenceWhenThePrefillSideStopsTalking() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 4);
    PdSettings s = PdSettings.defaults().withTimingsMs(5_000, 10_000, 100, 600);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing);
        PdTesting.LogCapture log = new PdTesting.LogCapture();
        Arena arena = Arena.ofShared();
        RawPd prefill = RawPd.prefill(receiver.address(), secret)) {
      Bootstrap b = PdTesting.bootstrap(rnd, 10, 8192);
      Registration reg = receiver.expect(1);
      prefill.send(PdFrameEncoder.bootstrap(1, b));
      prefill.next(PdFrame.Accepted.class);
      prefill.data(1, 0, 0, arena.allocate(8192));
      long start = System.nanoTime();
      // From now on the raw peer neither reads nor writes; the receiver keeps pinging into it.
      PdException e = awaitFailure(reg.landed(), PdException.Kind.CONNECTION, "landing");
      long tookMs = PdTesting.millisSince(start);
      assertTrue(tookMs >= 400, "failed after " + tookMs + " ms, before the silence timeout");
      assertTrue(tookMs < 15_000, "failed after " + tookMs + " ms");
      assertTrue(e.getMessage().contains("silence_timeout_ms=600"), e::getMessage);
      log.awaitMessage("prefill engine at", "silence_timeout_ms=600");
      landing.awaitReleased(1);
      landing.assertAllReleasedOnce();
      assertEquals(0, receiver.openRooms());
    }
  }

  @Test
  void shouldFailTheSendersRoomBySilenceWhenTheDecodeSideStopsReading() throws Exception {
    PdSettings s = PdSettings.defaults().withTimingsMs(5_000, 10_000, 100, 600);
    try (ServerSocket server = PdTesting.loopbackServer();
        KvSender sender = KvSender.open(secret, s);
        Arena arena = Arena.ofShared()) {
      InetSocketAddress at = PdTesting.addressOf(server);
      Bootstrap b = PdTesting.bootstrap(rnd, 10, 1 << 20);
      Transfer t = sender.bootstrap(1, at, b);
      try (RawPd decode = RawPd.decode(server, secret)) {
        decode.next(PdFrame.Open.class);
        decode.send(PdFrameEncoder.ack(1, new Ack(new int[] {64})));
        Ack ack = await(t.acknowledged(), "ACK");
        MemorySegment block = arena.allocate(1 << 20);
        for (int i = 0; i < ack.numBlocks(0); i++) {
          assertTrue(t.send(0, i, block));
        }
        long start = System.nanoTime();
        // The raw peer reads nothing more: the writer blocks on a full window, and nothing comes
        // in.
        PdException e = awaitFailure(t.received(), PdException.Kind.CONNECTION, "the fence");
        long tookMs = PdTesting.millisSince(start);
        assertTrue(tookMs < 15_000, "failed after " + tookMs + " ms");
        assertTrue(e.getMessage().contains("silence_timeout_ms=600"), e::getMessage);
        assertTrue(sender.metrics().bytesSent() < 64L << 20, "the window stopped the writer");
      }
      assertEquals(0, sender.metrics().roomsOpen());
    }
  }

  @Test
  void shouldRefuseAnUnknownRoomAfterTheBootstrapDeadline() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1);
    PdSettings s = PdSettings.defaults().withTimingsMs(5_000, 400, 100, 5_000);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing);
        KvSender sender = KvSender.open(secret, s)) {
      long start = System.nanoTime();
      Transfer t = sender.bootstrap(77, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.REFUSED, "ACK");
      long tookMs = PdTesting.millisSince(start);
      assertTrue(tookMs >= 350, "refused after " + tookMs + " ms, before the deadline");
      assertTrue(e.getMessage().contains("unknown room"), e::getMessage);
      awaitFailure(t.received(), PdException.Kind.REFUSED, "the fence");
      assertEquals(0, landing.reservations.get());
      assertEquals(1, receiver.metrics().roomsRefused());
      assertEquals(0, receiver.openRooms());
      assertEquals(0, sender.metrics().roomsOpen());
    }
  }

  @Test
  void shouldFailARegistrationWithATimeoutWhenNoBootstrapComes() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1);
    PdSettings s = PdSettings.defaults().withTimingsMs(5_000, 300, 100, 5_000);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing)) {
      Registration reg = receiver.expect(5);
      assertEquals(1, receiver.metrics().registrationsWaiting());
      PdException e = awaitFailure(reg.landed(), PdException.Kind.TIMEOUT, "landing");
      assertTrue(e.getMessage().contains("bootstrap_deadline_ms=300"), e::getMessage);
      assertEquals(0, receiver.metrics().registrationsWaiting());
      assertEquals(1, receiver.metrics().registrationsExpired());
      assertEquals(0, receiver.openRooms());
      assertFalse(reg.cancel("late"), "nothing left to cancel");
    }
  }

  @Test
  void shouldRefuseABootstrapWhoseRegistrationWasCancelled() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      Registration reg = receiver.expect(8);
      assertTrue(reg.cancel("the client went away"));
      awaitFailure(reg.landed(), PdException.Kind.CANCELLED, "landing");
      Transfer t = sender.bootstrap(8, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.REFUSED, "ACK");
      assertTrue(e.getMessage().contains("cancelled"), e::getMessage);
      assertEquals(0, landing.reservations.get());
    }
  }

  @Test
  void shouldRefuseWithTheLandingsReasonWhenTheEngineCannotReserve() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1).refuse(9, "foreign identity digest");
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      Registration reg = receiver.expect(9);
      Transfer t = sender.bootstrap(9, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.REFUSED, "ACK");
      assertTrue(e.getMessage().contains("foreign identity digest"), e::getMessage);
      PdException d = awaitFailure(reg.landed(), PdException.Kind.REFUSED, "landing");
      assertTrue(d.getMessage().contains("foreign identity digest"), d::getMessage);
      assertEquals(0, receiver.openRooms());
    }
  }

  @Test
  void shouldRefuseAndReleaseWhenTheLandingsBlocksDoNotMatchTheLayout() throws Exception {
    // The engine hands back blocks of another size than the BOOTSTRAP's layout.
    Landing wrong =
        (room, b) -> {
          TestLanding inner = new TestLanding((id, g) -> 2);
          Bootstrap other =
              new Bootstrap(b.promptTokens(), b.identityDigest(), new int[] {b.blockBytes(0) + 1});
          return inner.reserve(room, other);
        };
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), wrong);
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      Registration reg = receiver.expect(4);
      Transfer t = sender.bootstrap(4, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.REFUSED, "ACK");
      assertTrue(e.getMessage().contains("do not match the layout"), e::getMessage);
      awaitFailure(reg.landed(), PdException.Kind.REFUSED, "landing");
    }
  }

  @Test
  void shouldRefuseADuplicateRoomOpenOnAnotherConnection() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender first = KvSender.open(secret, PdTesting.settings());
        KvSender second = KvSender.open(secret, PdTesting.settings())) {
      Transfer t1 = first.bootstrap(6, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      eventually(() -> receiver.openRooms() == 1, "the first BOOTSTRAP read");
      Transfer t2 = second.bootstrap(6, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      PdException e = awaitFailure(t2.acknowledged(), PdException.Kind.REFUSED, "ACK");
      assertTrue(e.getMessage().contains("duplicate room"), e::getMessage);
      assertTrue(t1.cancel("done with the test"));
      await(t1.received(), "the first room's fence");
    }
  }

  @Test
  void shouldRefuseTheBootstrapBeyondTheRoomLimitAsBusy() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1);
    PdSettings s = PdTesting.settings();
    int max = s.maxRoomsPerConnection();
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing);
        KvSender sender = KvSender.open(secret, s);
        Arena arena = Arena.ofShared()) {
      Bootstrap b = PdTesting.bootstrap(rnd, 5, 64);
      List<Transfer> open = new ArrayList<>();
      for (int r = 0; r < max; r++) {
        open.add(sender.bootstrap(r, receiver.address(), b));
      }
      Transfer over = sender.bootstrap(max, receiver.address(), b);
      PdException e = awaitFailure(over.acknowledged(), PdException.Kind.REFUSED, "ACK");
      assertTrue(e.getMessage().endsWith(": busy"), e::getMessage);
      assertEquals(max, receiver.openRooms());
      for (Transfer t : open) {
        assertTrue(t.cancel("test over"));
      }
      for (Transfer t : open) {
        await(t.received(), "the fence of room " + t.room());
      }
      eventually(() -> receiver.openRooms() == 0, "every room closed");
      // Below the limit again, the same connection takes a room to the end.
      Registration reg = receiver.expect(1000);
      Transfer t = sender.bootstrap(1000, receiver.address(), b);
      Ack ack = await(t.acknowledged(), "ACK");
      PdTesting.sendAll(
          t, PdTesting.sources(arena, 1000, b, ack), new DoneInfo(1, CachedTokens.NONE));
      Landed landed = await(reg.landed(), "landing");
      assertTrue(landed.acknowledge());
      await(t.received(), "the fence");
      landed.destinations().release();
      assertEquals(1, sender.metrics().connectionsOpened());
      assertEquals(max + 2, sender.metrics().roomsOpened());
      assertEquals(max, sender.metrics().roomsCancelled());
      assertEquals(1, sender.metrics().roomsRefused());
      PdTesting.assertBalanced(receiver.metrics());
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"checksum", "missing-block"})
  void shouldFailTheLandingAndPublishNothingWhenTheBytesDoNotCheckOut(String fault)
      throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 3);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        Arena arena = Arena.ofShared();
        RawPd prefill = RawPd.prefill(receiver.address(), secret)) {
      Bootstrap b = PdTesting.bootstrap(rnd, 20, 4096);
      Registration reg = receiver.expect(1);
      prefill.send(PdFrameEncoder.bootstrap(1, b));
      Ack ack = prefill.next(PdFrame.Accepted.class).ack();
      MemorySegment[][] src = PdTesting.sources(arena, 1, b, ack);
      CRC32C crc = new CRC32C();
      int sent = fault.equals("missing-block") ? 2 : 3;
      for (int i = 0; i < sent; i++) {
        prefill.data(1, 0, i, src[0][i]);
        crc.update(src[0][i].asByteBuffer());
      }
      int value = (int) crc.getValue() ^ (fault.equals("checksum") ? 1 : 0);
      prefill.send(PdFrameEncoder.done(1, new DoneInfo(1, CachedTokens.NONE), value));
      PdException e = awaitFailure(reg.landed(), PdException.Kind.INTEGRITY, "landing");
      assertTrue(
          e.getMessage().contains(fault.equals("checksum") ? "checksum mismatch" : "2 of the 3"),
          e::getMessage);
      // The receiver says so to the prefill side, which answers; then the room is gone.
      PdFrame.Cancel cancel = (PdFrame.Cancel) prefill.nextNotPing();
      assertEquals(1, cancel.room());
      prefill.send(PdFrameEncoder.cancel(1, "answering"));
      eventually(() -> receiver.openRooms() == 0, "the room closed");
      landing.awaitReleased(1);
      landing.assertAllReleasedOnce();
      assertEquals(1, receiver.metrics().roomsFailed());
      assertEquals(0, receiver.metrics().roomsLanded());
      // The connection carries on.
      Registration next = receiver.expect(2);
      prefill.send(PdFrameEncoder.bootstrap(2, b));
      assertEquals(2, prefill.next(PdFrame.Accepted.class).room());
      assertTrue(next.cancel("test over"));
    }
  }
}
