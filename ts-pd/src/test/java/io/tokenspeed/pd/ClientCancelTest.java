package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdTesting.await;
import static io.tokenspeed.pd.PdTesting.awaitFailure;
import static io.tokenspeed.pd.PdTesting.eventually;
import static io.tokenspeed.pd.PdTesting.loopback;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The reason code {@link PdFrameDescriptor#CLIENT_CANCELLED} (docs/pd.md, "Frames"): a CANCEL or
 * REFUSE whose reason carries it reaches the other side as {@link PdException#peerClientCancelled},
 * from either side and at each point where a room can be cancelled; any other reason is a failure
 * there. A room the prefill side cancelled before the decode engine's registration came fails that
 * registration at once, with the CANCEL's reason.
 */
class ClientCancelTest {
  private final PdSecret secret = PdSecret.generate();
  private final SplittableRandom rnd = new SplittableRandom(7);

  private static final String CLIENT = PdFrameDescriptor.clientCancelled(null);
  private static final String FAILURE = "the decode engine's Host tier has no room";

  @Test
  void shouldTellAClientCancellationFromAnyOtherReason() {
    assertEquals("client cancelled", CLIENT);
    assertEquals("client cancelled: it left", PdFrameDescriptor.clientCancelled("it left"));
    assertTrue(PdFrameDescriptor.isClientCancelled("client cancelled"));
    assertTrue(PdFrameDescriptor.isClientCancelled("client cancelled: it left"));
    assertFalse(PdFrameDescriptor.isClientCancelled("client cancelledx"));
    assertFalse(PdFrameDescriptor.isClientCancelled("the client cancelled the request"));
    assertFalse(PdFrameDescriptor.isClientCancelled("cancelled: client cancelled"));
    assertFalse(PdFrameDescriptor.isClientCancelled(""));
    assertFalse(PdFrameDescriptor.isClientCancelled(null));
  }

  /** The decode side cancels after the ACK: the prefill side's fence says why. */
  @ParameterizedTest(name = "client={0}")
  @ValueSource(booleans = {true, false})
  void shouldTellThePrefillSideWhetherTheDecodeHalfsClientCancelled(boolean client)
      throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 2);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      Registration reg = receiver.expect(1);
      Transfer t = sender.bootstrap(1, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      await(t.acknowledged(), "ACK");
      assertTrue(reg.cancel(client ? CLIENT : FAILURE));
      PdException e = awaitFailure(t.received(), PdException.Kind.CANCELLED, "the fence");
      assertEquals(client, e.peerClientCancelled(), e::getMessage);
      PdException own = awaitFailure(reg.landed(), PdException.Kind.CANCELLED, "landing");
      assertFalse(own.peerClientCancelled(), "this side's own cancel: " + own.getMessage());
      eventually(() -> receiver.openRooms() == 0, "the room closed");
    }
  }

  /** The decode side cancels before the ACK, while the engine reserves. */
  @Test
  void shouldFailThePrefillSidesAckAsCancelledByTheClient() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 2);
    var gate = landing.hold(2);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      Registration reg = receiver.expect(2);
      Transfer t = sender.bootstrap(2, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      eventually(() -> landing.reservations.get() == 1, "the reservation");
      assertTrue(reg.cancel(CLIENT));
      gate.complete(null);
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.CANCELLED, "ACK");
      assertTrue(e.peerClientCancelled(), e::getMessage);
      landing.awaitReleased(2);
    }
  }

  /** The decode side's registration is cancelled before its BOOTSTRAP: the REFUSE says why. */
  @ParameterizedTest(name = "client={0}")
  @ValueSource(booleans = {true, false})
  void shouldRefuseABootstrapWithTheCodeOfTheCancelledRegistration(boolean client)
      throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      Registration reg = receiver.expect(3);
      assertTrue(reg.cancel(client ? CLIENT : FAILURE));
      Transfer t = sender.bootstrap(3, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      PdException e = awaitFailure(t.acknowledged(), PdException.Kind.REFUSED, "ACK");
      assertEquals(client, e.peerClientCancelled(), e::getMessage);
      assertTrue(
          e.getMessage().contains(client ? "refused room 3: client cancelled" : ": cancelled"),
          e::getMessage);
      assertEquals(0, landing.reservations.get());
    }
  }

  /** The prefill side cancels after the ACK: the landing says why. */
  @ParameterizedTest(name = "client={0}")
  @ValueSource(booleans = {true, false})
  void shouldTellTheDecodeSideWhetherThePrefillHalfsClientCancelled(boolean client)
      throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 2);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, PdTesting.settings(), landing);
        KvSender sender = KvSender.open(secret, PdTesting.settings())) {
      Registration reg = receiver.expect(4);
      Transfer t = sender.bootstrap(4, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      await(t.acknowledged(), "ACK");
      assertTrue(t.cancel(client ? CLIENT : FAILURE));
      PdException e = awaitFailure(reg.landed(), PdException.Kind.CANCELLED, "landing");
      assertEquals(client, e.peerClientCancelled(), e::getMessage);
      await(t.received(), "the fence"); // this side's cancel, answered
      landing.awaitReleased(4);
    }
  }

  /**
   * The prefill side cancels a room no registration claimed yet: a registration that comes within
   * the bootstrap deadline fails at once with the CANCEL's reason, waits for nothing and counts no
   * waiting registration; one that comes after it waits for a BOOTSTRAP as any other.
   */
  @ParameterizedTest(name = "client={0}")
  @ValueSource(booleans = {true, false})
  void shouldFailARegistrationAtOnceWhenThePrefillSideCancelledItsRoomBefore(boolean client)
      throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1);
    PdSettings settings = PdSettings.defaults().withTimingsMs(5_000, 1_000, 100, 5_000);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, settings, landing);
        KvSender sender = KvSender.open(secret, settings)) {
      Transfer t = sender.bootstrap(5, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      eventually(() -> receiver.metrics().roomsOpened() == 1, "the BOOTSTRAP came");
      assertTrue(t.cancel(client ? CLIENT : FAILURE));
      await(t.received(), "the fence");
      eventually(() -> receiver.openRooms() == 0, "the unclaimed room closed");

      Registration reg = receiver.expect(5);
      PdException e =
          awaitFailure(reg.landed(), PdException.Kind.CANCELLED, "landing", Duration.ofMillis(200));
      assertEquals(client, e.peerClientCancelled(), e::getMessage);
      assertTrue(e.getMessage().contains(client ? CLIENT : FAILURE), e::getMessage);
      assertEquals(0, receiver.metrics().registrationsWaiting());
      assertFalse(reg.cancel("too late"), "the failed registration has nothing to cancel");
      assertEquals(0, receiver.openRooms());

      // forgotten once used: the next registration of the room waits for its BOOTSTRAP
      Registration again = receiver.expect(5);
      awaitFailure(again.landed(), PdException.Kind.TIMEOUT, "landing");
      assertEquals(0, landing.reservations.get());
    }
  }

  /** A cancelled unclaimed room is forgotten after the bootstrap deadline. */
  @Test
  void shouldForgetACancelledUnclaimedRoomAfterTheBootstrapDeadline() throws Exception {
    TestLanding landing = new TestLanding((id, g) -> 1);
    PdSettings settings = PdSettings.defaults().withTimingsMs(5_000, 300, 100, 5_000);
    try (KvReceiver receiver = KvReceiver.open(loopback(), secret, settings, landing);
        KvSender sender = KvSender.open(secret, settings)) {
      Transfer t = sender.bootstrap(6, receiver.address(), PdTesting.bootstrap(rnd, 5, 64));
      eventually(() -> receiver.metrics().roomsOpened() == 1, "the BOOTSTRAP came");
      assertTrue(t.cancel(CLIENT));
      await(t.received(), "the fence");
      Thread.sleep(800); // past the deadline and a tick
      Registration reg = receiver.expect(6);
      awaitFailure(reg.landed(), PdException.Kind.TIMEOUT, "landing");
    }
  }
}
