package io.tokenspeed.control;

import static io.tokenspeed.control.Records.get;
import static io.tokenspeed.core.storage.KeyOutcome.OK;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.Decoded.Malformed;
import io.tokenspeed.control.Decoded.Reason;
import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The report's optional sections (a status, events, both or neither) in the layout of {@link
 * FrameDescriptor}: how they round-trip beside any records, how malformed sections are refused, and
 * the frame limits they imply.
 */
class ReportSectionsCodecTest {

  private static final FrameDecoder DECODER = new FrameDecoder(Frames.MAX);

  /** Where the sections start in a report frame with no frontend messages and no records. */
  private static final int SECTIONS = 69;

  static LongStream seeds() {
    return LongStream.range(0, 40);
  }

  private static Frame.Report report(
      List<StorageDone> records, RankStatus status, RankEvents events) {
    return new Frame.Report(
        1, 9, 123, PressureSnapshot.IDLE, 0, null, List.of(), records, status, events);
  }

  private static Frame.Report bare(RankStatus status, RankEvents events) {
    return report(List.of(), status, events);
  }

  private static byte[] bytes(SplittableRandom rnd, int length) {
    byte[] out = new byte[length];
    rnd.nextBytes(out);
    return out;
  }

  /** A length in [1, max]: mostly short, sometimes any, sometimes exactly {@code max}. */
  private static int length(SplittableRandom rnd, int max) {
    return switch (rnd.nextInt(4)) {
      case 0 -> max;
      case 1 -> 1 + rnd.nextInt(max);
      default -> 1 + rnd.nextInt(Math.min(max, 40));
    };
  }

  /** {@code frame} with {@code extra} appended to its body; body length and checksum fixed. */
  private static byte[] appended(byte[] frame, byte[] extra) {
    byte[] out = Arrays.copyOf(frame, frame.length + extra.length);
    System.arraycopy(extra, 0, out, frame.length - 4, extra.length);
    return Frames.withCrc(Frames.withBodyLength(out));
  }

  /** A raw section: tag, u16 length, then {@code length} bytes of {@code fill}. */
  private static byte[] section(int tag, int length, int present) {
    ByteBuffer b = ByteBuffer.allocate(3 + present);
    b.put((byte) tag).putShort((short) length);
    for (int i = 0; i < present; i++) {
      b.put((byte) (i * 7 + 1));
    }
    return b.array();
  }

  private static byte[] concat(byte[]... parts) {
    int n = 0;
    for (byte[] p : parts) {
      n += p.length;
    }
    ByteBuffer b = ByteBuffer.allocate(n);
    for (byte[] p : parts) {
      b.put(p);
    }
    return b.array();
  }

  private static void assertRejected(byte[] bytes, Reason reason, String detail) {
    Malformed m = assertInstanceOf(Malformed.class, DECODER.decode(bytes));
    assertEquals(reason, m.reason(), m.toString());
    assertTrue(m.detail().contains(detail), m.toString());
  }

  /**
   * Every combination of status, events and records, with random contents and random lengths up to
   * each limit: the frame has the documented size and layout and decodes to the report it encoded.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldRoundTripEveryCombinationOfStatusEventsAndRecordsWhenSeeded(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int i = 0; i < 40; i++) {
      int combination = i % 8;
      boolean withStatus = (combination & 1) != 0;
      boolean withEvents = (combination & 2) != 0;
      boolean withRecords = (combination & 4) != 0;
      long expected = 73;
      List<FrontendMessage> frontend = new ArrayList<>();
      if (rnd.nextInt(4) == 0) {
        byte[] payload = bytes(rnd, rnd.nextInt(30));
        frontend.add(FrontendMessage.newRequest(rnd.nextLong(Long.MAX_VALUE), payload));
        frontend.add(FrontendMessage.cancel(rnd.nextLong(Long.MAX_VALUE)));
        expected += 13 + payload.length + 13;
      }
      List<StorageDone> records = new ArrayList<>();
      for (int k = withRecords ? 1 + rnd.nextInt(6) : 0; k > 0; k--) {
        StorageDone d = Frames.randomRecord(rnd, rnd.nextLong(Long.MAX_VALUE));
        records.add(d);
        expected += 22 + 3 * FrameDescriptor.maskBytes(d.outcomes().size());
      }
      RankStatus status =
          withStatus
              ? new RankStatus(bytes(rnd, length(rnd, RankStatus.MAX_BYTES)))
              : RankStatus.EMPTY;
      RankEvents events =
          withEvents
              ? new RankEvents(bytes(rnd, length(rnd, RankEvents.MAX_BYTES)))
              : RankEvents.EMPTY;
      int sections =
          (withStatus ? 3 + status.length() : 0) + (withEvents ? 3 + events.length() : 0);
      expected += sections;
      Frame.Report r =
          new Frame.Report(
              rnd.nextInt(ControlConfig.MAX_WORLD_SIZE),
              1 + rnd.nextLong(Long.MAX_VALUE - 1),
              rnd.nextLong(),
              new PressureSnapshot(rnd.nextInt(9), rnd.nextLong(99), rnd.nextLong(99)),
              Frames.randomDigest(rnd),
              null,
              frontend,
              records,
              status,
              events);
      String what = "seed " + seed + " report " + i + " " + r;
      byte[] b = Frames.encode(r);
      assertEquals(expected, b.length, what);
      assertEquals(expected, FrameEncoder.encodedLength(r), what);
      ByteBuffer buf = ByteBuffer.wrap(b);
      int at = b.length - 4 - sections;
      if (withStatus) {
        assertEquals(FrameDescriptor.SECTION_STATUS, b[at], what);
        assertEquals(status.length(), Short.toUnsignedInt(buf.getShort(at + 1)), what);
        assertArrayEquals(status.bytes(), Arrays.copyOfRange(b, at + 3, at + 3 + status.length()));
        at += 3 + status.length();
      }
      if (withEvents) {
        assertEquals(FrameDescriptor.SECTION_EVENTS, b[at], what);
        assertEquals(events.length(), Short.toUnsignedInt(buf.getShort(at + 1)), what);
        assertArrayEquals(events.bytes(), Arrays.copyOfRange(b, at + 3, at + 3 + events.length()));
        at += 3 + events.length();
      }
      assertEquals(b.length - 4, at, what);
      Frame.Report back =
          (Frame.Report) assertInstanceOf(Decoded.Ok.class, DECODER.decode(b), what).frame();
      assertEquals(r, back, what);
      assertEquals(events, back.events(), what);
      assertEquals(status, back.status(), what);
      assertArrayEquals(b, Frames.encode(back), what);
    }
  }

  @Test
  void shouldCarryEventsInTheirOwnSectionAfterTheStatusWhenThereAreAny() {
    assertEquals(73, Frames.encode(bare(RankStatus.EMPTY, RankEvents.EMPTY)).length, "idle");
    RankEvents events = new RankEvents(new byte[] {1, 2, (byte) 0xfe});
    byte[] only = Frames.encode(bare(RankStatus.EMPTY, events));
    assertEquals(73 + 3 + 3, only.length);
    assertEquals(FrameDescriptor.SECTION_EVENTS, only[SECTIONS]);
    assertEquals(3, ByteBuffer.wrap(only).getShort(SECTIONS + 1));
    assertArrayEquals(events.bytes(), Arrays.copyOfRange(only, SECTIONS + 3, SECTIONS + 6));

    byte[] both = Frames.encode(bare(new RankStatus(new byte[] {7}), events));
    assertEquals(73 + 4 + 6, both.length);
    assertArrayEquals(
        new byte[] {1, 0, 1, 7, 2, 0, 3, 1, 2, (byte) 0xfe},
        Arrays.copyOfRange(both, SECTIONS, SECTIONS + 10),
        "status section, then events section");
    assertEquals(
        new Decoded.Ok(bare(new RankStatus(new byte[] {7}), events)), DECODER.decode(both));
  }

  @Test
  void shouldRejectEventsWhenTheirLengthIsZeroAboveTheLimitOrBeyondTheBody() {
    byte[] idle = Frames.encode(bare(RankStatus.EMPTY, RankEvents.EMPTY));
    assertRejected(
        appended(idle, section(FrameDescriptor.SECTION_EVENTS, 0, 0)),
        Reason.BAD_FIELD,
        "rank events length=0 must be in [1, 16384]");
    int over = RankEvents.MAX_BYTES + 1;
    assertRejected(
        appended(idle, section(FrameDescriptor.SECTION_EVENTS, over, over)),
        Reason.BAD_FIELD,
        "rank events length=16385 must be in [1, 16384]");
    assertRejected(
        appended(idle, section(FrameDescriptor.SECTION_EVENTS, 0xffff, 10)),
        Reason.BAD_FIELD,
        "rank events length=65535 must be in [1, 16384]");
    assertRejected(
        appended(idle, section(FrameDescriptor.SECTION_EVENTS, 4, 3)),
        Reason.BAD_LENGTH,
        "rank events length=4, 3 bytes remain");
    assertRejected(
        appended(
            idle,
            concat(
                section(FrameDescriptor.SECTION_STATUS, 2, 2),
                section(FrameDescriptor.SECTION_EVENTS, RankEvents.MAX_BYTES, 100))),
        Reason.BAD_LENGTH,
        "rank events length=16384, 100 bytes remain");
    assertRejected(
        appended(idle, section(FrameDescriptor.SECTION_STATUS, 1025, 1025)),
        Reason.BAD_FIELD,
        "rank status length=1025 must be in [1, 1024]");
    // The largest events of all are accepted.
    byte[] largest =
        appended(idle, section(FrameDescriptor.SECTION_EVENTS, RankEvents.MAX_BYTES, 16384));
    Frame.Report r =
        (Frame.Report) assertInstanceOf(Decoded.Ok.class, DECODER.decode(largest)).frame();
    assertEquals(RankEvents.MAX_BYTES, r.events().length());
  }

  @Test
  void shouldRejectSectionsWhenTheirTagIsUnknownRepeatedOrOutOfOrder() {
    byte[] idle = Frames.encode(bare(RankStatus.EMPTY, RankEvents.EMPTY));
    byte[] status = section(FrameDescriptor.SECTION_STATUS, 2, 2);
    byte[] events = section(FrameDescriptor.SECTION_EVENTS, 3, 3);
    for (int tag : new int[] {0, 3, 255}) {
      assertRejected(
          appended(idle, section(tag, 1, 1)),
          Reason.BAD_FIELD,
          "report section tag=" + tag + " must be 1 (status) or 2 (events)");
    }
    assertRejected(
        appended(idle, concat(status, events, section(9, 1, 1))),
        Reason.BAD_FIELD,
        "report section tag=9");
    assertRejected(
        appended(idle, concat(status, status)),
        Reason.BAD_FIELD,
        "report section tag=1 after tag=1");
    assertRejected(
        appended(idle, concat(events, events)),
        Reason.BAD_FIELD,
        "report section tag=2 after tag=2");
    assertRejected(
        appended(idle, concat(events, status)),
        Reason.BAD_FIELD,
        "report section tag=1 after tag=2: each section comes at most once");
    // One or two bytes where a section's header is due are left over.
    assertRejected(appended(idle, new byte[] {2}), Reason.TRAILING_BYTES, "1 bytes after");
    assertRejected(
        appended(idle, concat(status, events, new byte[] {2, 0})),
        Reason.TRAILING_BYTES,
        "2 bytes after");
    // The valid order decodes.
    Frame.Report both =
        (Frame.Report)
            assertInstanceOf(
                    Decoded.Ok.class, DECODER.decode(appended(idle, concat(status, events))))
                .frame();
    assertEquals(new RankStatus(new byte[] {1, 8}), both.status());
    assertEquals(new RankEvents(new byte[] {1, 8, 15}), both.events());
  }

  /**
   * A frame with both sections whose body is cut anywhere inside them (length and checksum fixed,
   * as a buggy encoder would send) is refused, except where the cut drops the events section whole.
   */
  @Test
  void shouldRejectEveryCutInsideTheSectionsUnlessItDropsTheEventsWhole() {
    RankStatus status = new RankStatus(new byte[] {5, 6, 7});
    RankEvents events = new RankEvents(new byte[] {1, 2, 3, 4, 5});
    byte[] b = Frames.encode(report(List.of(get(3, OK)), status, events));
    int sections = 3 + status.length() + 3 + events.length();
    for (int cut = 1; cut <= sections; cut++) {
      byte[] shorter = Arrays.copyOf(b, b.length - cut);
      System.arraycopy(b, b.length - 4, shorter, shorter.length - 4, 4);
      Decoded d = DECODER.decode(Frames.withCrc(Frames.withBodyLength(shorter)));
      if (cut == 3 + events.length()) {
        assertEquals(
            new Decoded.Ok(report(List.of(get(3, OK)), status, RankEvents.EMPTY)), d, "cut " + cut);
      } else if (cut == sections) {
        assertEquals(
            new Decoded.Ok(report(List.of(get(3, OK)), RankStatus.EMPTY, RankEvents.EMPTY)),
            d,
            "cut " + cut);
      } else {
        Malformed m = assertInstanceOf(Malformed.class, d, "cut " + cut);
        assertTrue(
            Set.of(Reason.BAD_LENGTH, Reason.TRAILING_BYTES).contains(m.reason()), "cut " + cut);
      }
    }
  }

  @Test
  void shouldRefuseEventsInAnErrorReportOrOverTheLimit() {
    RankEvents one = new RankEvents(new byte[] {1});
    assertThrows(
        IllegalArgumentException.class,
        () ->
            new Frame.Report(
                1,
                1,
                0,
                PressureSnapshot.IDLE,
                0,
                "bad poll",
                List.of(),
                List.of(),
                RankStatus.EMPTY,
                one));
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> new RankEvents(new byte[RankEvents.MAX_BYTES + 1]));
    assertEquals("rank events of 16385 bytes: the most is 16384", e.getMessage());
    assertEquals(
        RankEvents.EMPTY,
        Frame.Report.ofError(1, 1, 0, PressureSnapshot.IDLE, 0, "bad poll").events());
    assertEquals(
        RankEvents.EMPTY,
        new Frame.Report(1, 1, 0, PressureSnapshot.IDLE, 0, null, List.of(), List.of(), null, null)
            .events(),
        "null is none");
  }

  /**
   * The smallest frame limit holds the largest status and events of a report without records, and
   * the longest error report, so neither ever fails a round for its size alone.
   */
  @Test
  void shouldFitTheLargestSectionsAndTheLongestErrorWithinTheSmallestFrameLimit() {
    SplittableRandom rnd = new SplittableRandom(17);
    Frame.Report largest =
        bare(
            new RankStatus(bytes(rnd, RankStatus.MAX_BYTES)),
            new RankEvents(bytes(rnd, RankEvents.MAX_BYTES)));
    assertEquals(17_487, FrameDescriptor.MAX_BARE_REPORT_FRAME_BYTES);
    assertEquals(FrameDescriptor.MAX_BARE_REPORT_FRAME_BYTES, FrameEncoder.encodedLength(largest));
    Frame.Report longestError =
        Frame.Report.ofError(
            1, 1, 0, PressureSnapshot.IDLE, -1, "x".repeat(FrameDescriptor.MAX_ERROR_BYTES));
    assertEquals(4_163, FrameDescriptor.MAX_ERROR_REPORT_FRAME_BYTES);
    assertEquals(
        FrameDescriptor.MAX_ERROR_REPORT_FRAME_BYTES, FrameEncoder.encodedLength(longestError));
    assertTrue(ControlConfig.MIN_MAX_FRAME_BYTES >= FrameDescriptor.MAX_BARE_REPORT_FRAME_BYTES);
    assertTrue(ControlConfig.MIN_MAX_FRAME_BYTES >= FrameDescriptor.MAX_ERROR_REPORT_FRAME_BYTES);

    FrameDecoder smallest = new FrameDecoder(ControlConfig.MIN_MAX_FRAME_BYTES);
    for (Frame f : List.of(largest, longestError)) {
      byte[] b = FrameEncoder.encode(f, ControlConfig.MIN_MAX_FRAME_BYTES);
      assertEquals(new Decoded.Ok(f), smallest.decode(b));
    }
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> FrameEncoder.encode(largest, FrameDescriptor.MAX_BARE_REPORT_FRAME_BYTES - 1));
    assertEquals("frame of 17487 bytes exceeds max_frame_bytes=17486", e.getMessage());
    assertThrows(
        IllegalArgumentException.class,
        () -> new FrameDecoder(ControlConfig.MIN_MAX_FRAME_BYTES - 1));
  }
}
