package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** The plan digest and events of a local report and the copies that keep or replace them. */
class LocalReportTest {

  @Test
  void shouldReportNoPlanWhenBuiltWithoutADigest() {
    assertEquals(0, LocalReport.idle(1).planDigest());
    assertEquals(0, LocalReport.of(1, PressureSnapshot.IDLE, List.of()).planDigest());
    assertEquals(0, LocalReport.pollFailed(1, "down").planDigest());
    assertEquals(
        0, new LocalReport(1, PressureSnapshot.IDLE, List.of(), List.of(), null).planDigest());
  }

  @Test
  void shouldKeepEveryOtherComponentWhenTheDigestOrFrontendIsReplaced() {
    SplittableRandom rnd = new SplittableRandom(3_2026L);
    for (int i = 0; i < 100; i++) {
      long digest = Frames.randomDigest(rnd);
      LocalReport base =
          new LocalReport(
              rnd.nextLong(),
              new PressureSnapshot(rnd.nextInt(9), rnd.nextLong(99), rnd.nextLong(99)),
              List.of(Records.get(rnd.nextLong(1_000), KeyOutcome.OK)),
              List.of(),
              rnd.nextBoolean() ? null : "poll " + i);
      LocalReport withDigest = base.withPlanDigest(digest);
      assertEquals(
          new LocalReport(
              base.clockNs(),
              base.pressure(),
              base.completions(),
              base.frontend(),
              base.pollError(),
              digest),
          withDigest);
      List<FrontendMessage> frontend = List.of(FrontendMessage.cancel(i));
      LocalReport both = withDigest.withFrontend(frontend);
      assertEquals(digest, both.planDigest(), "withFrontend keeps the digest");
      assertEquals(frontend, both.frontend());
      assertEquals(both, base.withFrontend(frontend).withPlanDigest(digest));
    }
  }

  @Test
  void shouldCarryNoEventsWhenBuiltByTheConstructorsAndFactoriesThatNameNone() {
    RankStatus status = new RankStatus(new byte[] {4});
    for (LocalReport r :
        List.of(
            LocalReport.idle(1),
            LocalReport.of(1, PressureSnapshot.IDLE, List.of()),
            LocalReport.pollFailed(1, "down"),
            new LocalReport(1, PressureSnapshot.IDLE, List.of(), List.of(), null),
            new LocalReport(1, PressureSnapshot.IDLE, List.of(), List.of(), null, 5),
            new LocalReport(1, PressureSnapshot.IDLE, List.of(), List.of(), null, 5, status),
            new LocalReport(1, PressureSnapshot.IDLE, List.of(), List.of(), null, 5, status, null),
            LocalReport.idle(1).withEvents(null))) {
      assertEquals(RankEvents.EMPTY, r.events(), r.toString());
    }
  }

  @Test
  void shouldKeepEveryOtherComponentWhenTheEventsAreReplacedAndKeepTheEventsOtherwise() {
    SplittableRandom rnd = new SplittableRandom(4_2026L);
    for (int i = 0; i < 100; i++) {
      byte[] bytes = new byte[1 + rnd.nextInt(RankEvents.MAX_BYTES)];
      rnd.nextBytes(bytes);
      RankEvents events = new RankEvents(bytes);
      RankStatus status = new RankStatus(new byte[] {(byte) i});
      long digest = Frames.randomDigest(rnd);
      LocalReport base =
          new LocalReport(
              rnd.nextLong(),
              new PressureSnapshot(rnd.nextInt(9), rnd.nextLong(99), rnd.nextLong(99)),
              List.of(Records.get(rnd.nextLong(1_000), KeyOutcome.OK)),
              List.of(),
              rnd.nextBoolean() ? null : "poll " + i,
              digest,
              status);
      LocalReport with = base.withEvents(events);
      assertEquals(
          new LocalReport(
              base.clockNs(),
              base.pressure(),
              base.completions(),
              base.frontend(),
              base.pollError(),
              digest,
              status,
              events),
          with);
      List<FrontendMessage> frontend = List.of(FrontendMessage.cancel(i));
      RankStatus other = new RankStatus(new byte[] {1, 2});
      for (LocalReport copy :
          List.of(
              with.withFrontend(frontend),
              with.withPlanDigest(digest + 1),
              with.withStatus(other),
              with.withStatus(RankStatus.EMPTY))) {
        assertEquals(events, copy.events(), "the other copies keep the events");
      }
      assertEquals(base, with.withEvents(RankEvents.EMPTY));
      assertEquals(status, with.status());
    }
  }
}
