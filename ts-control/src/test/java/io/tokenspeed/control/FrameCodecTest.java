package io.tokenspeed.control;

import static io.tokenspeed.control.Records.get;
import static io.tokenspeed.core.storage.KeyOutcome.FAILED;
import static io.tokenspeed.core.storage.KeyOutcome.INVALID;
import static io.tokenspeed.core.storage.KeyOutcome.MISSING;
import static io.tokenspeed.core.storage.KeyOutcome.OK;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.Decoded.Malformed;
import io.tokenspeed.control.Decoded.Reason;
import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class FrameCodecTest {

  private static final FrameDecoder DECODER = new FrameDecoder(Frames.MAX);

  // Offsets in a report frame with no frontend messages, first record at 69.
  private static final int DIGEST = 52;
  private static final int STATUS = 60;
  private static final int FRONTEND = 61;
  private static final int COMPLETIONS = 65;
  private static final int RECORD = 69;
  // Offsets in an error report frame.
  private static final int REASON_LENGTH = 61;
  private static final int REASON = 63;
  private static final int KIND = RECORD + 8;
  private static final int FLAGS = RECORD + 9;
  private static final int NUM_KEYS = RECORD + 18;
  private static final int MASKS = RECORD + 22;

  private static Frame.Report report(StorageDone... records) {
    return new Frame.Report(1, 9, 123, PressureSnapshot.IDLE, null, List.of(), List.of(records));
  }

  private static Malformed malformed(byte[] bytes) {
    return assertInstanceOf(Malformed.class, DECODER.decode(bytes));
  }

  private static void assertRejected(byte[] bytes, Reason reason, String detail) {
    Malformed m = malformed(bytes);
    assertEquals(reason, m.reason(), m.toString());
    assertTrue(m.detail().contains(detail), m.toString());
  }

  static LongStream seeds() {
    return LongStream.range(0, 50);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldDecodeWhatItEncodedWhenFramesAreRandom(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int i = 0; i < 200; i++) {
      Frame f = Frames.randomFrame(rnd);
      byte[] bytes = Frames.encode(f);
      assertEquals(FrameEncoder.encodedLength(f), bytes.length);
      Decoded d = DECODER.decode(bytes);
      assertEquals(new Decoded.Ok(f), d, "seed " + seed + " frame " + i);
    }
  }

  @Test
  void shouldRoundTripEveryPlanDigestWhenReportsCarryRandomDigests() {
    SplittableRandom rnd = new SplittableRandom(7_2026L);
    // [zero, negative, positive] digests seen in valid reports, then in error reports
    int[] seen = new int[6];
    for (int i = 0; i < 5_000; i++) {
      if (!(Frames.randomFrame(rnd) instanceof Frame.Report r)) {
        continue;
      }
      byte[] bytes = Frames.encode(r);
      assertEquals(r.planDigest(), ByteBuffer.wrap(bytes).getLong(DIGEST), "frame " + i);
      Frame decoded = assertInstanceOf(Decoded.Ok.class, DECODER.decode(bytes)).frame();
      assertEquals(r, decoded, "frame " + i);
      assertEquals(r.planDigest(), ((Frame.Report) decoded).planDigest(), "frame " + i);
      long d = r.planDigest();
      seen[(r.failed() ? 3 : 0) + (d == 0 ? 0 : d < 0 ? 1 : 2)]++;
    }
    for (int i = 0; i < seen.length; i++) {
      assertTrue(seen[i] > 20, "digest class " + i + ": " + Arrays.toString(seen));
    }
  }

  @Test
  void shouldWriteThePlanDigestAfterThePressureWhenEncodingAReport() {
    long digest = 0x9a0b_1c2d_3e4f_5061L; // negative
    for (Frame.Report r :
        List.of(
            new Frame.Report(2, 5, 7, PressureSnapshot.IDLE, digest, null, List.of(), List.of()),
            Frame.Report.ofError(2, 5, 7, PressureSnapshot.IDLE, digest, "bad poll"))) {
      byte[] b = Frames.encode(r);
      assertArrayEquals(
          new byte[] {(byte) 0x9a, 0x0b, 0x1c, 0x2d, 0x3e, 0x4f, 0x50, 0x61},
          Arrays.copyOfRange(b, DIGEST, DIGEST + 8),
          r.toString());
      assertEquals(
          r.failed() ? FrameDescriptor.STATUS_ERROR : FrameDescriptor.STATUS_OK, b[STATUS]);
      assertEquals(new Decoded.Ok(r), DECODER.decode(b));
      // Any other digest is just as valid, and decodes as itself.
      byte[] other = b.clone();
      ByteBuffer.wrap(other).putLong(DIGEST, Long.MIN_VALUE);
      Frame.Report back =
          (Frame.Report)
              assertInstanceOf(Decoded.Ok.class, DECODER.decode(Frames.withCrc(other))).frame();
      assertEquals(Long.MIN_VALUE, back.planDigest());
      assertEquals(r.error(), back.error());
    }
    assertEquals(0, report().planDigest(), "the old constructor reports no plan");
    assertEquals(
        0, Frame.Report.ofError(1, 1, 0, PressureSnapshot.IDLE, "x").planDigest(), "nor ofError");
  }

  @Test
  void shouldSizeReportsByTheirCompletionsWhenEncoding() {
    assertEquals(73, Frames.encode(report()).length);
    assertEquals(73 + 25, Frames.encode(report(get(1, OK))).length);
    assertEquals(73 + 22 + 3 * 2, Frames.encode(report(get(1, Records.ok(9)))).length);
    Frame.Report withFrontend =
        new Frame.Report(
            0,
            1,
            0,
            PressureSnapshot.IDLE,
            null,
            List.of(FrontendMessage.newRequest(1, new byte[5]), FrontendMessage.cancel(2)),
            List.of());
    assertEquals(73 + 13 + 5 + 13, Frames.encode(withFrontend).length);
  }

  @Test
  void shouldCarryARankStatusAfterTheRecordsOnlyWhenThereIsOne() {
    byte[] bytes = {1, 2, 3, (byte) 0xff};
    Frame.Report with =
        new Frame.Report(
            1,
            9,
            123,
            PressureSnapshot.IDLE,
            0,
            null,
            List.of(),
            List.of(get(1, OK)),
            new RankStatus(bytes));
    byte[] b = Frames.encode(with);
    assertEquals(73 + 25 + 3 + 4, b.length, "tag, u16 length and the bytes, after the record");
    assertEquals(FrameDescriptor.SECTION_STATUS, b[b.length - 4 - 7]);
    assertEquals(4, ByteBuffer.wrap(b).getShort(b.length - 4 - 6));
    assertArrayEquals(bytes, Arrays.copyOfRange(b, b.length - 4 - 4, b.length - 4));
    assertEquals(new Decoded.Ok(with), DECODER.decode(b));
    assertEquals(73 + 25, Frames.encode(report(get(1, OK))).length, "no status, no bytes");

    byte[] zero = Frames.encode(report(get(1, OK)));
    byte[] longer = Arrays.copyOf(zero, zero.length + 3); // a status of length 0
    longer[zero.length - 4] = FrameDescriptor.SECTION_STATUS;
    ByteBuffer.wrap(longer).putShort(zero.length - 3, (short) 0);
    assertRejected(
        Frames.withCrc(Frames.withBodyLength(longer)),
        Reason.BAD_FIELD,
        "rank status length=0 must be in [1, 1024]");
    byte[] cut = b.clone();
    ByteBuffer.wrap(cut).putShort(cut.length - 4 - 6, (short) 5);
    assertRejected(Frames.withCrc(cut), Reason.BAD_LENGTH, "rank status length=5, 4 bytes remain");
  }

  @Test
  void shouldRefuseAStatusInAnErrorReportOrOverTheLimit() {
    RankStatus one = new RankStatus(new byte[] {1});
    org.junit.jupiter.api.Assertions.assertThrows(
        IllegalArgumentException.class,
        () ->
            new Frame.Report(
                1, 1, 0, PressureSnapshot.IDLE, 0, "bad poll", List.of(), List.of(), one));
    org.junit.jupiter.api.Assertions.assertThrows(
        IllegalArgumentException.class, () -> new RankStatus(new byte[RankStatus.MAX_BYTES + 1]));
  }

  @Test
  void shouldWriteTheDocumentedOrdinalsAndMasksWhenEncodingARecord() {
    byte[] b =
        Frames.encode(report(get(77, OK, MISSING, INVALID, FAILED, OK, OK, OK, OK, INVALID)));
    ByteBuffer buf = ByteBuffer.wrap(b);
    assertEquals(FrameDescriptor.MAGIC, buf.getInt(0));
    assertEquals(FrameDescriptor.VERSION, buf.getShort(4));
    assertEquals(FrameDescriptor.TYPE_REPORT, b[6]);
    assertEquals(77, buf.getLong(RECORD));
    assertEquals(1, b[KIND]); // GET
    assertEquals(1, b[FLAGS]); // retired
    assertEquals(9, buf.getInt(NUM_KEYS));
    // ok: keys 0, 4..7 | object: 1, 2, 8 | invalid: 2, 8
    assertArrayEquals(
        new byte[] {(byte) 0b1111_0001, 0, 0b0000_0110, 1, 0b0000_0100, 1},
        Arrays.copyOfRange(b, MASKS, MASKS + 6));
    byte[] q =
        Frames.encode(report(new StorageDone(1, StorageKind.PUT, List.of(OK), false, 0, true)));
    assertEquals(2, q[KIND]);
    assertEquals(2, q[FLAGS]); // detached
    byte[] f =
        Frames.encode(
            new Frame.Report(
                0,
                1,
                0,
                PressureSnapshot.IDLE,
                null,
                List.of(FrontendMessage.cancel(5)),
                List.of()));
    assertEquals(1, f[FRONTEND + 4]); // CANCEL
  }

  @Test
  void shouldRejectEveryTruncationWhenAFrameIsCutShort() {
    byte[] b = Frames.encode(report(get(1, OK, MISSING), get(2, Records.ok(20))));
    for (int n = 0; n < b.length; n++) {
      Malformed m = malformed(Arrays.copyOf(b, n));
      assertEquals(Reason.TRUNCATED, m.reason(), "prefix " + n + ": " + m);
    }
  }

  @Test
  void shouldRejectHeadersWhenMagicVersionTypeFlagsOrLengthAreWrong() {
    byte[] b = Frames.encode(report());
    byte[] magic = b.clone();
    magic[0] = 'X';
    assertRejected(magic, Reason.BAD_MAGIC, "magic=0x58534350");
    byte[] version = b.clone();
    ByteBuffer.wrap(version).putShort(4, (short) 1);
    assertRejected(Frames.withCrc(version), Reason.UNSUPPORTED_VERSION, "version=1");
    byte[] type = b.clone();
    type[6] = 5;
    assertRejected(type, Reason.BAD_TYPE, "type=5");
    byte[] flags = b.clone();
    flags[7] = 1;
    assertRejected(flags, Reason.BAD_TYPE, "flags=1");
    byte[] huge = b.clone();
    ByteBuffer.wrap(huge).putInt(8, -1);
    assertRejected(huge, Reason.TOO_LARGE, "body_length=4294967295");
    byte[] longer = b.clone();
    ByteBuffer.wrap(longer).putInt(8, b.length - 16 + 1);
    assertRejected(longer, Reason.TRUNCATED, "declares 74 bytes, 73 present");
    byte[] shorter = b.clone();
    ByteBuffer.wrap(shorter).putInt(8, b.length - 16 - 1);
    assertRejected(shorter, Reason.TRAILING_BYTES, "declares 72 bytes, 73 present");
    byte[] hello =
        Frames.encode(
            new Frame.Hello(1, 2, 1, ControlConfig.MIN_MAX_FRAME_BYTES, 1, 1, Bytes32.random()));
    ByteBuffer.wrap(hello).putInt(8, 31);
    assertRejected(hello, Reason.BAD_LENGTH, "hello body_length=31");
    byte[] proof = Frames.encode(new Frame.Proof(Bytes32.random()));
    ByteBuffer.wrap(proof).putInt(8, 33);
    assertRejected(proof, Reason.BAD_LENGTH, "proof body_length=33");
    byte[] last = Frames.encode(new Frame.Final(1, 5, -1));
    ByteBuffer.wrap(last).putInt(8, 12);
    assertRejected(last, Reason.BAD_LENGTH, "final body_length=12");
    byte[] crc = b.clone();
    crc[30] ^= 0x10;
    assertRejected(crc, Reason.BAD_CHECKSUM, "crc32c=");
  }

  @Test
  void shouldRejectRecordsWhenMasksContradictThemselves() {
    byte[] b = Frames.encode(report(get(5, OK, FAILED, MISSING)));
    // mask bytes: ok at MASKS, object at MASKS+1, invalid at MASKS+2
    byte[] both = b.clone();
    both[MASKS + 1] |= 1; // key 0: ok and object failure
    assertRejected(
        Frames.withCrc(both), Reason.BAD_FIELD, "key 0 reports success and object failure");
    byte[] invalidOnly = b.clone();
    invalidOnly[MASKS + 2] |= 2; // key 1: invalid without object failure
    assertRejected(
        Frames.withCrc(invalidOnly), Reason.BAD_FIELD, "key 1 is invalid without object failure");
    byte[] padding = b.clone();
    padding[MASKS] |= 0x10; // key 4 of a 3-key record
    assertRejected(Frames.withCrc(padding), Reason.BAD_FIELD, "beyond num_keys=3");
    byte[] query = b.clone();
    query[KIND] = 0; // QUERY with a MISSING key
    assertRejected(
        Frames.withCrc(query), Reason.BAD_FIELD, "QUERY key 2 reports an object failure");
    byte[] put = b.clone();
    put[KIND] = 2;
    assertRejected(Frames.withCrc(put), Reason.BAD_FIELD, "PUT key 2 reports an object failure");
  }

  @Test
  void shouldRejectFieldsWhenTheyAreOutOfRange() {
    byte[] b = Frames.encode(report(get(5, OK, FAILED, MISSING)));
    byte[] kind = b.clone();
    kind[KIND] = 3;
    assertRejected(Frames.withCrc(kind), Reason.BAD_FIELD, "kind=3");
    byte[] flags = b.clone();
    flags[FLAGS] = 4;
    assertRejected(Frames.withCrc(flags), Reason.BAD_FIELD, "flags=4");
    byte[] zeroKeys = b.clone();
    ByteBuffer.wrap(zeroKeys).putInt(NUM_KEYS, 0);
    assertRejected(Frames.withCrc(zeroKeys), Reason.BAD_FIELD, "num_keys=0");
    byte[] manyKeys = b.clone();
    ByteBuffer.wrap(manyKeys).putInt(NUM_KEYS, 1 << 30);
    assertRejected(Frames.withCrc(manyKeys), Reason.BAD_LENGTH, "num_keys=1073741824");
    byte[] count = b.clone();
    ByteBuffer.wrap(count).putInt(COMPLETIONS, Integer.MAX_VALUE);
    assertRejected(Frames.withCrc(count), Reason.BAD_LENGTH, "completion count=2147483647");
    byte[] negativeCount = b.clone();
    ByteBuffer.wrap(negativeCount).putInt(COMPLETIONS, -1);
    assertRejected(Frames.withCrc(negativeCount), Reason.BAD_LENGTH, "completion count=-1");
    byte[] status = b.clone();
    status[STATUS] = 2;
    assertRejected(Frames.withCrc(status), Reason.BAD_FIELD, "status=2");
    byte[] round = b.clone();
    ByteBuffer.wrap(round).putLong(16, 0);
    assertRejected(Frames.withCrc(round), Reason.BAD_FIELD, "round=0");
    byte[] pressure = b.clone();
    ByteBuffer.wrap(pressure).putInt(32, -3);
    assertRejected(Frames.withCrc(pressure), Reason.BAD_FIELD, "queued_jobs=-3");
    byte[] opId = b.clone();
    ByteBuffer.wrap(opId).putLong(RECORD, -1);
    assertRejected(Frames.withCrc(opId), Reason.BAD_FIELD, "operation_id=-1");
  }

  @Test
  void shouldRejectBodiesWhenBytesAreLeftOverOrMissing() {
    byte[] b = Frames.encode(report(get(5, Records.ok(9))));
    byte[] one = Arrays.copyOf(b, b.length + 1); // too short for a status's length
    System.arraycopy(b, b.length - 4, one, one.length - 4, 4);
    assertRejected(
        Frames.withCrc(Frames.withBodyLength(one)), Reason.TRAILING_BYTES, "1 bytes after");
    byte[] longer = Arrays.copyOf(b, b.length + 6); // a status of 1 byte, then 2 bytes more
    longer[b.length - 4] = FrameDescriptor.SECTION_STATUS;
    ByteBuffer.wrap(longer).putShort(b.length - 3, (short) 1);
    assertRejected(
        Frames.withCrc(Frames.withBodyLength(longer)), Reason.TRAILING_BYTES, "2 bytes after");
    byte[] shorter = Arrays.copyOf(b, b.length - 1);
    assertRejected(
        Frames.withCrc(Frames.withBodyLength(shorter)),
        Reason.BAD_LENGTH,
        "needs 6 mask bytes, 5 remain");
  }

  @Test
  void shouldRejectFrontendMessagesWhenTheyAreMalformed() {
    Frame.Report r =
        new Frame.Report(
            0,
            1,
            0,
            PressureSnapshot.IDLE,
            null,
            List.of(FrontendMessage.cancel(5), FrontendMessage.newRequest(6, new byte[] {9})),
            List.of());
    byte[] b = Frames.encode(r);
    int first = FRONTEND + 4;
    byte[] kind = b.clone();
    int unknown = FrontendMessage.Kind.values().length; // one past the last kind
    kind[first] = (byte) unknown;
    assertRejected(Frames.withCrc(kind), Reason.BAD_FIELD, "kind=" + unknown);
    byte[] cancelWithPayload = b.clone();
    int second = first + 13;
    cancelWithPayload[second] = 1; // the new request becomes a cancellation with a payload
    assertRejected(Frames.withCrc(cancelWithPayload), Reason.BAD_FIELD, "carries payload_length=1");
    byte[] payload = b.clone();
    ByteBuffer.wrap(payload).putInt(second + 9, 1000);
    assertRejected(Frames.withCrc(payload), Reason.BAD_LENGTH, "payload_length=1000");
    byte[] id = b.clone();
    ByteBuffer.wrap(id).putLong(first + 1, -2);
    assertRejected(Frames.withCrc(id), Reason.BAD_FIELD, "request_id=-2");
  }

  @Test
  void shouldRejectErrorReportsWhenTheReasonIsEmptyOrNotUtf8() {
    byte[] b = Frames.encode(Frame.Report.ofError(1, 1, 0, PressureSnapshot.IDLE, "ab"));
    assertEquals(
        Frame.Report.ofError(1, 1, 0, PressureSnapshot.IDLE, "ab"),
        ((Decoded.Ok) DECODER.decode(b)).frame());
    byte[] utf8 = b.clone();
    utf8[REASON] = (byte) 0xc0; // an overlong encoding's lead byte
    assertRejected(Frames.withCrc(utf8), Reason.BAD_FIELD, "not valid UTF-8");
    byte[] empty = Arrays.copyOf(b, b.length - 2);
    ByteBuffer.wrap(empty).putShort(REASON_LENGTH, (short) 0);
    assertRejected(
        Frames.withCrc(Frames.withBodyLength(empty)), Reason.BAD_FIELD, "error reason length=0");
    byte[] longer = b.clone();
    ByteBuffer.wrap(longer).putShort(REASON_LENGTH, (short) 3);
    assertRejected(Frames.withCrc(longer), Reason.BAD_LENGTH, "error reason length=3");
  }

  @Test
  void shouldClipLongReasonsOnACodePointWhenTheyExceedTheLimit() {
    String reason = "\uD83D\uDE00".repeat(3000); // 12,000 bytes
    String clipped = FrameEncoder.clipReason(reason);
    int bytes = clipped.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
    assertTrue(bytes <= FrameDescriptor.MAX_ERROR_BYTES, "" + bytes);
    assertTrue(clipped.endsWith("\uD83D\uDE00..."));
    assertEquals("short", FrameEncoder.clipReason("short"));
    byte[] b = Frames.encode(Frame.Report.ofError(0, 1, 0, PressureSnapshot.IDLE, clipped));
    assertInstanceOf(Decoded.Ok.class, DECODER.decode(b));
  }

  @Test
  void shouldRefuseToEncodeWhenAFrameExceedsTheLimit() {
    List<StorageDone> many = new ArrayList<>();
    for (int i = 0; i < 200; i++) {
      many.add(get(i, KeyOutcome.OK));
    }
    Frame.Report r = report(many.toArray(StorageDone[]::new));
    IllegalArgumentException e =
        org.junit.jupiter.api.Assertions.assertThrows(
            IllegalArgumentException.class, () -> FrameEncoder.encode(r, 4096));
    assertTrue(e.getMessage().contains("exceeds max_frame_bytes=4096"));
  }
}
