package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdTesting.await;
import static io.tokenspeed.pd.PdTesting.awaitFailure;
import static io.tokenspeed.pd.PdTesting.loopback;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.SplittableRandom;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Authenticated peers that break the protocol: each violation closes the connection with a logged
 * error naming the peer and what it did, fails the rooms on it, and releases their destinations;
 * none makes the receiver allocate what a length field claims.
 */
class ProtocolViolationTest {

  /** A violation by a prefill peer, after room 1 (3 blocks of 4096 bytes) was ACKed. */
  enum ByPrefill {
    DATA_FOR_AN_UNKNOWN_ROOM("sent DATA for room 99, which is not open"),
    DATA_BLOCK_OUT_OF_RANGE("outside its ACK"),
    DATA_GROUP_OUT_OF_RANGE("outside its ACK"),
    DATA_OF_THE_WRONG_SIZE("the group's blocks have 4096"),
    DATA_TWICE("twice"),
    DATA_BEFORE_THE_ACK("before its ACK"),
    DATA_LONGER_THAN_ANY_BLOCK("sent a DATA frame of length"),
    BOOTSTRAP_CLAIMING_A_GIGABYTE("sent a BOOTSTRAP frame of length 1073741824"),
    BOOTSTRAP_WITH_TOO_FEW_BYTES("shorter than its"),
    SECOND_BOOTSTRAP_OF_A_ROOM("second BOOTSTRAP for room 1"),
    DONE_FOR_AN_UNKNOWN_ROOM("sent DONE for room 99"),
    ACK_FROM_THE_PREFILL_SIDE("sent a ACK frame, which the decode side never reads"),
    UNKNOWN_TYPE("sent a type=42 frame"),
    ZERO_LENGTH("sent a type=0 frame");

    final String logged;

    ByPrefill(String logged) {
      this.logged = logged;
    }
  }

  private final PdSecret secret = PdSecret.generate();

  @ParameterizedTest(name = "{0}")
  @EnumSource(ByPrefill.class)
  void shouldCloseTheConnectionNamingThePeerWhenAPrefillPeerBreaksTheProtocol(ByPrefill v)
      throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 3);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        PdTesting.LogCapture log = new PdTesting.LogCapture();
        Arena arena = Arena.ofShared();
        RawPd prefill = RawPd.prefill(receiver.address(), secret)) {
      Bootstrap b = PdTesting.bootstrap(new SplittableRandom(v.ordinal()), 20, 4096);
      Registration reg = receiver.expect(1);
      prefill.send(PdFrameEncoder.bootstrap(1, b));
      prefill.next(PdFrame.Accepted.class);
      MemorySegment block = arena.allocate(4096);
      try {
        violate(v, prefill, b, block, arena);
      } catch (java.net.SocketException e) {
        // The receiver hung up before the whole violation was written: what it read sufficed.
      }
      prefill.awaitClosed(Duration.ofSeconds(20));
      PdException e = awaitFailure(reg.landed(), PdException.Kind.CONNECTION, "landing");
      String peer = "prefill engine at /127.0.0.1:" + prefill.socket.getLocalPort();
      assertTrue(e.getMessage().contains(peer), e::getMessage);
      assertTrue(e.getMessage().contains(v.logged), e::getMessage);
      log.awaitMessage(peer, v.logged);
      landing.awaitAllReleasedOnce();
      assertEquals(0, receiver.openRooms());
      assertEquals(1, receiver.metrics().connectionFailures());
      PdTesting.assertBalanced(receiver.metrics());
    }
  }

  private static void violate(
      ByPrefill v, RawPd prefill, Bootstrap b, MemorySegment block, Arena arena)
      throws java.io.IOException {
    switch (v) {
      case DATA_FOR_AN_UNKNOWN_ROOM -> prefill.data(99, 0, 0, block);
      case DATA_BLOCK_OUT_OF_RANGE -> prefill.data(1, 0, 3, block);
      case DATA_GROUP_OUT_OF_RANGE -> prefill.data(1, 1, 0, block);
      case DATA_OF_THE_WRONG_SIZE -> prefill.data(1, 0, 0, arena.allocate(4095));
      case DATA_TWICE -> prefill.data(1, 0, 1, block).data(1, 0, 1, block);
      case DATA_BEFORE_THE_ACK -> prefill.send(PdFrameEncoder.bootstrap(2, b)).data(2, 0, 0, block);
      case DATA_LONGER_THAN_ANY_BLOCK ->
          prefill.send(ByteBuffer.allocate(5).putInt(Integer.MAX_VALUE).put((byte) 6).flip());
      case BOOTSTRAP_CLAIMING_A_GIGABYTE ->
          prefill.send(ByteBuffer.allocate(5).putInt(1 << 30).put((byte) 3).flip());
      case BOOTSTRAP_WITH_TOO_FEW_BYTES -> {
        // Claims 1000 tokens in a frame that has room for 10.
        ByteBuffer f =
            PdFrameEncoder.bootstrap(3, PdTesting.bootstrap(new SplittableRandom(1), 10, 64));
        f.putInt(5 + 8, 1000);
        prefill.send(f);
      }
      case SECOND_BOOTSTRAP_OF_A_ROOM -> prefill.send(PdFrameEncoder.bootstrap(1, b));
      case DONE_FOR_AN_UNKNOWN_ROOM ->
          prefill.send(PdFrameEncoder.done(99, new DoneInfo(1, CachedTokens.NONE), 0));
      case ACK_FROM_THE_PREFILL_SIDE -> prefill.send(PdFrameEncoder.ack(1, new Ack(new int[] {1})));
      case UNKNOWN_TYPE -> prefill.send(ByteBuffer.allocate(5).putInt(1).put((byte) 42).flip());
      case ZERO_LENGTH -> prefill.send(ByteBuffer.allocate(5).putInt(0).put((byte) 0).flip());
    }
  }

  /** A violation by a decode peer, after room 1 was opened. */
  enum ByDecode {
    ACK_FOR_AN_UNKNOWN_ROOM("sent ACK for room 99, which is not open"),
    ACK_WITH_OTHER_GROUPS("with 2 cache groups; its BOOTSTRAP has 1"),
    RECEIVED_BEFORE_DONE("sent RECEIVED for room 1 before its DONE"),
    REFUSE_AFTER_ACK("sent REFUSE for room 1 after its ACK"),
    DATA_FROM_THE_DECODE_SIDE("sent a DATA frame, which the prefill side never reads"),
    ACK_RESERVING_TOO_MANY("reserving 4294967295 blocks");

    final String logged;

    ByDecode(String logged) {
      this.logged = logged;
    }
  }

  @ParameterizedTest(name = "{0}")
  @EnumSource(ByDecode.class)
  void shouldFailTheRoomsNamingThePeerWhenADecodePeerBreaksTheProtocol(ByDecode v)
      throws Exception {
    try (ServerSocket server = PdTesting.loopbackServer();
        KvSender sender = KvSender.open(secret, PdTesting.settings());
        PdTesting.LogCapture log = new PdTesting.LogCapture()) {
      InetSocketAddress at = PdTesting.addressOf(server);
      Transfer t = sender.bootstrap(1, at, PdTesting.bootstrap(new SplittableRandom(3), 10, 64));
      try (RawPd decode = RawPd.decode(server, secret)) {
        decode.next(PdFrame.Open.class);
        try {
          violate(v, decode, t);
        } catch (java.net.SocketException e) {
          // The sender hung up before the whole violation was written: what it read sufficed.
        }
        decode.awaitClosed(Duration.ofSeconds(20));
      }
      PdException e = awaitFailure(t.received(), PdException.Kind.CONNECTION, "the fence");
      assertTrue(
          e.getMessage().contains("decode engine at " + at.getHostString() + ":" + at.getPort()),
          e::getMessage);
      assertTrue(e.getMessage().contains(v.logged), e::getMessage);
      log.awaitMessage("decode engine at", v.logged);
      assertEquals(0, sender.metrics().roomsOpen());
    }
  }

  private static void violate(ByDecode v, RawPd decode, Transfer t) throws java.io.IOException {
    switch (v) {
      case ACK_FOR_AN_UNKNOWN_ROOM -> decode.send(PdFrameEncoder.ack(99, new Ack(new int[] {1})));
      case ACK_WITH_OTHER_GROUPS -> decode.send(PdFrameEncoder.ack(1, new Ack(new int[] {1, 1})));
      case RECEIVED_BEFORE_DONE -> {
        decode.send(PdFrameEncoder.ack(1, new Ack(new int[] {1})));
        await(t.acknowledged(), "ACK");
        decode.send(PdFrameEncoder.received(1));
      }
      case REFUSE_AFTER_ACK ->
          decode
              .send(PdFrameEncoder.ack(1, new Ack(new int[] {1})))
              .send(PdFrameEncoder.refuse(1, "changed my mind"));
      case DATA_FROM_THE_DECODE_SIDE -> {
        // One write: the reader may close the connection as soon as it has the header.
        ByteBuffer frame = ByteBuffer.allocate(PdFrameDescriptor.DATA_PREFIX_BYTES + 64);
        PdFrameEncoder.dataPrefix(frame, 1, 0, 0, 64);
        decode.send(frame.position(frame.capacity()).flip());
      }
      case ACK_RESERVING_TOO_MANY -> {
        ByteBuffer ack = PdFrameEncoder.ack(1, new Ack(new int[] {1}));
        ack.putInt(ack.limit() - 4, -1);
        decode.send(ack);
      }
    }
  }
}
