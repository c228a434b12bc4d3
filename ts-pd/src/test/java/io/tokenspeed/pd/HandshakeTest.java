package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdTesting.awaitFailure;
import static io.tokenspeed.pd.PdTesting.eventually;
import static io.tokenspeed.pd.PdTesting.loopback;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The PD-secret handshake over loopback: who is let in, who is dropped, and how fast. */
class HandshakeTest {

  private final PdSecret secret = PdSecret.generate();

  @Test
  void shouldLandARoomWhenBothSidesShareTheSecret() throws Exception {
    TestLanding landing = new TestLanding((room, g) -> 3);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings());
        Arena arena = Arena.ofShared()) {
      Bootstrap b = PdTesting.bootstrap(new SplittableRandom(1), 40, 4096);
      Ack ack =
          PdTesting.landRoom(receiver, sender, arena, 7, b, new DoneInfo(11, CachedTokens.NONE));
      assertEquals(new Ack(new int[] {3}), ack);
      assertEquals(1, receiver.metrics().connectionsOpened());
      assertEquals(0, receiver.metrics().handshakeFailures());
      landing.assertAllReleasedOnce();
    }
  }

  @Test
  void shouldFailTheBootstrapNamingTheAddressWhenTheSecretsDiffer() throws Exception {
    TestLanding landing = new TestLanding((room, g) -> 1);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(PdSecret.generate(), PdTesting.settings())) {
      Transfer t =
          sender.bootstrap(
              1, receiver.address(), PdTesting.bootstrap(new SplittableRandom(2), 8, 64));
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.HANDSHAKE, "ACK");
      String at = receiver.address().getHostString() + ":" + receiver.address().getPort();
      assertTrue(e.getMessage().contains(at), e::getMessage);
      assertTrue(e.getMessage().contains("same secret"), e::getMessage);
      awaitFailure(t.received(), PdException.Kind.HANDSHAKE, "the fence");
      eventually(() -> receiver.metrics().handshakeFailures() == 1, "the receiver counts it");
      assertEquals(1, sender.metrics().handshakeFailures());
      assertEquals(0, receiver.metrics().connectionsOpened());
      assertEquals(0, receiver.metrics().roomsOpened());
      assertEquals(0, landing.reservations.get());
      PdTesting.assertBalanced(sender.metrics());
      assertEquals(0, sender.metrics().roomsOpen());
    }
  }

  @Test
  void shouldFailTheBootstrapWhenTheAcceptorIsAnImpostor() throws Exception {
    // A decode engine started with another secret answers the proof with a wrong one of its own.
    try (ServerSocket server = PdTesting.loopbackServer();
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      PdSecret other = PdSecret.generate();
      Thread impostor =
          Thread.ofVirtual()
              .start(
                  () -> {
                    try (var s = server.accept()) {
                      var reader =
                          new PdFrameReader(
                              java.nio.channels.Channels.newChannel(s.getInputStream()),
                              PdFrameReader.Side.DECODE,
                              PdSettings.defaults());
                      var out = java.nio.channels.Channels.newChannel(s.getOutputStream());
                      PdFrame.Hello d = (PdFrame.Hello) reader.next(true);
                      ByteBuffer a =
                          PdFrameEncoder.hello(PdFrameDescriptor.ROLE_DECODE, new byte[32]);
                      byte[] helloA = a.array().clone();
                      PdHandshake.writeFully(out, a);
                      reader.next(true);
                      PdHandshake.writeFully(
                          out,
                          PdFrameEncoder.proof(
                              other.mac(PdFrameDescriptor.ACCEPTOR_LABEL, d.frame(), helloA)));
                      s.getInputStream().read();
                    } catch (Exception ignored) {
                      // The dialer hangs up.
                    }
                  });
      var address = PdTesting.addressOf(server);
      Transfer t =
          sender.bootstrap(3, address, PdTesting.bootstrap(new SplittableRandom(3), 4, 64));
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.HANDSHAKE, "ACK");
      assertTrue(e.getMessage().contains("could not prove the PD secret"), e::getMessage);
      assertTrue(e.getMessage().contains(":" + server.getLocalPort()), e::getMessage);
      impostor.join(PdTesting.WAIT);
    }
  }

  /** Garbage of several shapes: HTTP, a huge length, a wrong type, a HELLO of another magic. */
  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"http", "huge-length", "data-first", "bad-magic", "wrong-role"})
  void shouldDropAPeerThatSendsGarbageAtOnce(String shape) throws Exception {
    TestLanding landing = new TestLanding((room, g) -> 1);
    // A long handshake timeout: the drop must come from reading the garbage, not from the timer.
    PdSettings s = PdSettings.defaults().withTimingsMs(60_000, 10_000, 100, 5_000);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing);
        PdTesting.LogCapture log = new PdTesting.LogCapture();
        RawPd raw = RawPd.connect(receiver.address())) {
      byte[] garbage =
          switch (shape) {
            case "http" -> "GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII);
            case "huge-length" -> ByteBuffer.allocate(5).putInt(0x7FFF_FFFF).put((byte) 1).array();
            case "data-first" -> ByteBuffer.allocate(5).putInt(100).put((byte) 6).array();
            case "bad-magic" -> {
              ByteBuffer h = PdFrameEncoder.hello(PdFrameDescriptor.ROLE_PREFILL, new byte[32]);
              h.put(5, (byte) 'X');
              yield h.array();
            }
            case "wrong-role" ->
                PdFrameEncoder.hello(PdFrameDescriptor.ROLE_DECODE, new byte[32]).array();
            default -> throw new IllegalArgumentException(shape);
          };
      raw.send(garbage);
      Duration took = raw.awaitClosed(Duration.ofSeconds(20));
      assertTrue(took.toMillis() < 20_000, took::toString);
      eventually(() -> receiver.metrics().handshakeFailures() == 1, "a counted handshake failure");
      String port = ":" + raw.socket.getLocalPort();
      log.awaitMessage("refused a connection from", port);
      assertEquals(0, receiver.metrics().connectionsOpened());
    }
  }

  @Test
  void shouldDropAPeerThatSendsItsHelloThenStallsWithinTheHandshakeTimeout() throws Exception {
    TestLanding landing = new TestLanding((room, g) -> 1);
    PdSettings s = PdSettings.defaults().withTimingsMs(300, 10_000, 100, 5_000);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing);
        PdTesting.LogCapture log = new PdTesting.LogCapture();
        RawPd raw = RawPd.connect(receiver.address())) {
      long start = System.nanoTime();
      raw.send(PdFrameEncoder.hello(PdFrameDescriptor.ROLE_PREFILL, new byte[32]));
      PdFrame.Hello answer = (PdFrame.Hello) raw.reader.next(true);
      assertEquals(PdFrameDescriptor.ROLE_DECODE, answer.role());
      raw.awaitClosed(Duration.ofSeconds(20));
      long tookMs = PdTesting.millisSince(start);
      assertTrue(tookMs >= 250, "dropped after " + tookMs + " ms, before the timeout");
      eventually(() -> receiver.metrics().handshakeFailures() == 1, "a counted handshake failure");
      log.awaitMessage("handshake_timeout_ms=300", ":" + raw.socket.getLocalPort());
    }
  }

  @Test
  void shouldHoldAtMostMaxConnectionsAndLetTheSenderInOnceTheStalledOnesAreDropped()
      throws Exception {
    TestLanding landing = new TestLanding((room, g) -> 2);
    PdSettings s = PdTesting.settings().withTimingsMs(1_000, 10_000, 100, 5_000);
    s = s.withMaxConnections(3);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, s, landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings());
        Arena arena = Arena.ofShared();
        RawPd a = RawPd.connect(receiver.address());
        RawPd b = RawPd.connect(receiver.address());
        RawPd c = RawPd.connect(receiver.address())) {
      // three connections that never say a word fill the receiver: a fourth is closed unread
      try (RawPd d = RawPd.connect(receiver.address())) {
        d.awaitClosed(Duration.ofSeconds(5));
      }
      eventually(() -> receiver.metrics().connectionsRefused() == 1, "a refused connection");
      // the handshake timeout drops the silent three; then a prefill engine gets in and lands
      for (RawPd silent : new RawPd[] {a, b, c}) {
        silent.awaitClosed(Duration.ofSeconds(20));
      }
      Bootstrap boot = PdTesting.bootstrap(new SplittableRandom(3), 20, 1024);
      PdTesting.landRoom(receiver, sender, arena, 9, boot, new DoneInfo(5, CachedTokens.NONE));
      assertEquals(1, receiver.metrics().connectionsRefused());
      assertEquals(3, receiver.metrics().handshakeFailures());
      assertEquals(1, receiver.metrics().connectionsOpened());
      landing.assertAllReleasedOnce();
    }
  }

  @Test
  void shouldFailTheBootstrapWhenTheAcceptorNeverAnswers() throws Exception {
    PdSettings s = PdSettings.defaults().withTimingsMs(300, 10_000, 100, 5_000);
    AtomicBoolean accepted = new AtomicBoolean();
    try (ServerSocket server = PdTesting.loopbackServer();
        KvSender sender = KvSender.open(secret, s)) {
      Thread.ofVirtual()
          .start(
              () -> {
                try (var socket = server.accept()) {
                  accepted.set(true);
                  socket.getInputStream().readAllBytes();
                } catch (Exception ignored) {
                  // Closed by the test.
                }
              });
      var address = PdTesting.addressOf(server);
      Transfer t =
          sender.bootstrap(5, address, PdTesting.bootstrap(new SplittableRandom(5), 4, 64));
      PdException e = awaitFailure(t.received(), PdException.Kind.HANDSHAKE, "the fence");
      assertTrue(e.getMessage().contains("handshake_timeout_ms=300"), e::getMessage);
      assertTrue(e.getMessage().contains(":" + server.getLocalPort()), e::getMessage);
      assertTrue(accepted.get());
      assertEquals(0, sender.connections());
    }
  }

  @Test
  void shouldFailTheBootstrapNamingTheAddressWhenNothingListens() throws Exception {
    int port;
    try (ServerSocket probe = PdTesting.loopbackServer()) {
      port = probe.getLocalPort();
    }
    try (KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      var address = new java.net.InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), port);
      Transfer t =
          sender.bootstrap(9, address, PdTesting.bootstrap(new SplittableRandom(9), 4, 64));
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.HANDSHAKE, "ACK");
      assertTrue(e.getMessage().contains(":" + port), e::getMessage);
      // The failed connection is forgotten: the next room dials again (and fails again).
      Transfer again =
          sender.bootstrap(10, address, PdTesting.bootstrap(new SplittableRandom(9), 4, 64));
      awaitFailure(again.acknowledged(), PdException.Kind.HANDSHAKE, "ACK");
      assertEquals(2, sender.metrics().handshakeFailures());
    }
  }
}
