package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** The plan digest of a local report and the copies that keep or replace it. */
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
}
