package io.tokenspeed.core.control;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageKind;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class ControlRecordsTest {

  private static AgreedCompletion get(long op, KeyOutcome... outcomes) {
    return new AgreedCompletion(op, StorageKind.GET, List.of(outcomes), true, false);
  }

  @Test
  void shouldExposeMasksWhenAgreedCompletionMixesOutcomes() {
    AgreedCompletion c =
        get(7, KeyOutcome.OK, KeyOutcome.MISSING, KeyOutcome.INVALID, KeyOutcome.FAILED);
    assertEquals(4, c.numKeys());
    assertEquals(1, c.okCount());
    assertTrue(c.ok(0));
    assertFalse(c.ok(3));
    assertTrue(c.objectFailure(1));
    assertTrue(c.objectFailure(2));
    assertFalse(c.objectFailure(3));
  }

  @Test
  void shouldRejectObjectFailureWhenKindIsNotGet() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                new AgreedCompletion(
                    3, StorageKind.QUERY, List.of(KeyOutcome.MISSING), true, false));
    assertTrue(e.getMessage().contains("only GET"), e.getMessage());
    assertThrows(
        IllegalArgumentException.class,
        () -> new AgreedCompletion(3, StorageKind.PUT, List.of(), true, false));
    assertThrows(
        IllegalArgumentException.class,
        () -> new AgreedCompletion(-1, StorageKind.PUT, List.of(KeyOutcome.OK), true, false));
  }

  @Test
  void shouldCompareByContentWhenPayloadsAreEqual() {
    byte[] body = {1, 2, 3};
    FrontendMessage a = FrontendMessage.newRequest(5, body);
    body[0] = 9;
    FrontendMessage b = FrontendMessage.newRequest(5, new byte[] {1, 2, 3});
    assertEquals(a, b);
    assertEquals(a.hashCode(), b.hashCode());
    assertArrayEquals(new byte[] {1, 2, 3}, a.payload());
    a.payload()[1] = 7;
    assertEquals(b, a);
    assertNotEquals(a, FrontendMessage.cancel(5));
    assertEquals(0, FrontendMessage.cancel(5).payloadLength());
  }

  @Test
  void shouldRejectCancellationWhenItCarriesPayload() {
    assertThrows(
        IllegalArgumentException.class,
        () -> new FrontendMessage(FrontendMessage.Kind.CANCEL, 1, new byte[] {1}));
    assertThrows(IllegalArgumentException.class, () -> FrontendMessage.cancel(-1));
  }

  @Test
  void shouldApplyTickThenFrontendThenCompletionsWhenRoundIsApplied() {
    AgreedRound round =
        new AgreedRound(
            4,
            1_000,
            new PressureSnapshot(1, 2, 3),
            List.of(
                FrontendMessage.newRequest(10, new byte[] {1}),
                FrontendMessage.cancel(10),
                FrontendMessage.cancel(8)),
            List.of(get(2, KeyOutcome.OK), get(5, KeyOutcome.FAILED)));
    List<String> calls = new ArrayList<>();
    round.applyTo(
        new LoopHeadFeedback() {
          @Override
          public void onTick(long r, long tickNs, PressureSnapshot pressure) {
            calls.add("tick " + r + " " + tickNs + " " + pressure.queuedJobs());
          }

          @Override
          public void onNewRequest(FrontendMessage message) {
            calls.add("new " + message.requestId());
          }

          @Override
          public void onCancel(long requestId) {
            calls.add("cancel " + requestId);
          }

          @Override
          public void onCompletion(AgreedCompletion completion) {
            calls.add("done " + completion.operationId());
          }
        });
    assertEquals(
        List.of("tick 4 1000 1", "new 10", "cancel 10", "cancel 8", "done 2", "done 5"), calls);
    assertEquals(List.of(10L, 8L), round.cancellations());
    assertEquals(1, round.newRequests().size());
  }

  @Test
  void shouldRejectRoundWhenCompletionsAreNotAscending() {
    assertThrows(
        IllegalArgumentException.class,
        () ->
            new AgreedRound(
                1,
                0,
                PressureSnapshot.IDLE,
                List.of(),
                List.of(get(5, KeyOutcome.OK), get(5, KeyOutcome.OK))));
    assertThrows(
        IllegalArgumentException.class,
        () -> new AgreedRound(0, 0, PressureSnapshot.IDLE, List.of(), List.of()));
  }
}
