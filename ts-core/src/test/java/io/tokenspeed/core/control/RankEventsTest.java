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
import java.util.List;
import org.junit.jupiter.api.Test;

/** A rank's events as a value, and the agreed round's events by rank. */
class RankEventsTest {

  @Test
  void shouldCopyInAndOutAndCompareByContent() {
    byte[] bytes = {1, 2, 3};
    RankEvents e = new RankEvents(bytes);
    bytes[0] = 9;
    assertArrayEquals(new byte[] {1, 2, 3}, e.bytes(), "copied in");
    e.bytes()[1] = 9;
    assertArrayEquals(new byte[] {1, 2, 3}, e.bytes(), "copied out");
    assertEquals(new RankEvents(new byte[] {1, 2, 3}), e);
    assertEquals(new RankEvents(new byte[] {1, 2, 3}).hashCode(), e.hashCode());
    assertNotEquals(new RankEvents(new byte[] {1, 2}), e);
    assertNotEquals(new RankStatus(new byte[] {1, 2, 3}), e, "events are not a status");
    assertEquals(3, e.length());
    assertFalse(e.isEmpty());
  }

  @Test
  void shouldBeEmptyWhenGivenNothingAndRefuseMoreThanTheLimit() {
    assertTrue(RankEvents.EMPTY.isEmpty());
    assertEquals(0, RankEvents.EMPTY.length());
    assertEquals(RankEvents.EMPTY, new RankEvents(null));
    assertEquals(RankEvents.EMPTY, new RankEvents(new byte[0]));
    assertEquals(16384, RankEvents.MAX_BYTES);
    assertEquals(RankEvents.MAX_BYTES, new RankEvents(new byte[RankEvents.MAX_BYTES]).length());
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> new RankEvents(new byte[RankEvents.MAX_BYTES + 1]));
    assertEquals("rank events of 16385 bytes: the most is 16384", e.getMessage());
  }

  @Test
  void shouldShowTheLengthAndTheFirstBytesWhenPrinted() {
    assertEquals("RankEvents[0 bytes ]", RankEvents.EMPTY.toString());
    assertEquals("RankEvents[2 bytes 0aff]", new RankEvents(new byte[] {10, -1}).toString());
    byte[] longer = new byte[17];
    longer[0] = 1;
    assertEquals(
        "RankEvents[17 bytes 01000000000000000000000000000000..]",
        new RankEvents(longer).toString());
  }

  @Test
  void shouldIndexEventsByRankAndGiveNoneOutsideWhenRoundsCarryThem() {
    RankEvents one = new RankEvents(new byte[] {1});
    AgreedRound round =
        new AgreedRound(
            3,
            100,
            PressureSnapshot.IDLE,
            List.of(),
            List.of(),
            List.of(),
            List.of(RankEvents.EMPTY, one));
    assertEquals(List.of(RankEvents.EMPTY, one), round.events());
    assertEquals(RankEvents.EMPTY, round.events(0));
    assertEquals(one, round.events(1));
    assertEquals(RankEvents.EMPTY, round.events(2));
    assertEquals(RankEvents.EMPTY, round.events(-1));
    assertEquals(List.of(), round.statuses());
    assertNotEquals(
        new AgreedRound(3, 100, PressureSnapshot.IDLE, List.of(), List.of(), List.of()),
        round,
        "events are part of the round");
  }

  @Test
  void shouldCarryNoEventsWhenBuiltByTheEarlierConstructors() {
    AgreedCompletion c =
        new AgreedCompletion(2, StorageKind.GET, List.of(KeyOutcome.OK), true, false);
    RankStatus s = new RankStatus(new byte[] {7});
    AgreedRound five = new AgreedRound(1, 0, PressureSnapshot.IDLE, List.of(), List.of(c));
    AgreedRound six =
        new AgreedRound(1, 0, PressureSnapshot.IDLE, List.of(), List.of(c), List.of(s));
    assertEquals(List.of(), five.events());
    assertEquals(List.of(), six.events());
    assertEquals(s, six.status(0));
    assertEquals(RankEvents.EMPTY, six.events(0));
    assertEquals(
        new AgreedRound(1, 0, PressureSnapshot.IDLE, List.of(), List.of(c), List.of(s), List.of()),
        six);
    assertThrows(
        IllegalArgumentException.class,
        () -> new AgreedRound(1, 0, PressureSnapshot.IDLE, List.of(), List.of(), List.of(), null));
  }
}
