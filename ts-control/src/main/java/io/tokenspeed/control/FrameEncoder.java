package io.tokenspeed.control;

import static io.tokenspeed.control.FrameDescriptor.COMPLETION_FIXED_BYTES;
import static io.tokenspeed.control.FrameDescriptor.FLAG_DETACHED;
import static io.tokenspeed.control.FrameDescriptor.FLAG_RETIRED;
import static io.tokenspeed.control.FrameDescriptor.FRAMING_BYTES;
import static io.tokenspeed.control.FrameDescriptor.FRONTEND_FIXED_BYTES;
import static io.tokenspeed.control.FrameDescriptor.HELLO_BODY_BYTES;
import static io.tokenspeed.control.FrameDescriptor.REPORT_FIXED_BYTES;

import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.zip.CRC32C;

/**
 * Writes {@link Frame}s in the layout of {@link FrameDescriptor}. Encoding is deterministic: equal
 * frames give equal bytes, which is what lets every rank agree on the same decoded reports.
 */
public final class FrameEncoder {

  private FrameEncoder() {}

  /**
   * The encoded length of {@code frame} in bytes, framing included (a long: it may overflow int).
   */
  public static long encodedLength(Frame frame) {
    return FRAMING_BYTES + bodyLength(frame);
  }

  /**
   * Encodes {@code frame}.
   *
   * @throws IllegalArgumentException when the frame is longer than {@code maxFrameBytes}, or an
   *     error report's reason is longer than {@link FrameDescriptor#MAX_ERROR_BYTES}
   */
  public static byte[] encode(Frame frame, int maxFrameBytes) {
    long length = encodedLength(frame);
    if (length > maxFrameBytes) {
      throw new IllegalArgumentException(
          "frame of " + length + " bytes exceeds max_frame_bytes=" + maxFrameBytes);
    }
    byte[] out = new byte[(int) length];
    ByteBuffer buf = ByteBuffer.wrap(out);
    buf.putInt(FrameDescriptor.MAGIC);
    buf.putShort((short) FrameDescriptor.VERSION);
    switch (frame) {
      case Frame.Hello h -> {
        buf.put((byte) FrameDescriptor.TYPE_HELLO).put((byte) 0).putInt(HELLO_BODY_BYTES);
        buf.putLong(h.replicaId())
            .putInt(h.worldSize())
            .putInt(h.rank())
            .putInt(h.maxFrameBytes())
            .putInt(h.maxPendingOperations())
            .putLong(h.maxPendingKeys());
        h.nonce().write(buf);
      }
      case Frame.Proof p -> {
        buf.put((byte) FrameDescriptor.TYPE_PROOF).put((byte) 0);
        buf.putInt(FrameDescriptor.PROOF_BODY_BYTES);
        p.mac().write(buf);
      }
      case Frame.Final f -> {
        buf.put((byte) FrameDescriptor.TYPE_FINAL).put((byte) 0);
        buf.putInt(FrameDescriptor.FINAL_BODY_BYTES);
        buf.putInt(f.rank()).putLong(f.gatheredRound()).putInt(f.blamedRank());
      }
      case Frame.Report r -> {
        buf.put((byte) FrameDescriptor.TYPE_REPORT).put((byte) 0);
        buf.putInt((int) (length - FRAMING_BYTES));
        writeReport(buf, r);
      }
    }
    CRC32C crc = new CRC32C();
    crc.update(out, 0, out.length - 4);
    buf.putInt((int) crc.getValue());
    return out;
  }

  /** A reason cut to at most {@link FrameDescriptor#MAX_ERROR_BYTES} of UTF-8, on a code point. */
  static String clipReason(String reason) {
    if (reason.getBytes(StandardCharsets.UTF_8).length <= FrameDescriptor.MAX_ERROR_BYTES) {
      return reason;
    }
    int end = Math.min(reason.length(), FrameDescriptor.MAX_ERROR_BYTES);
    while (end > 0
        && reason.substring(0, end).getBytes(StandardCharsets.UTF_8).length
            > FrameDescriptor.MAX_ERROR_BYTES - 3) {
      end = reason.offsetByCodePoints(end, -1);
    }
    return reason.substring(0, end) + "...";
  }

  private static long bodyLength(Frame frame) {
    return switch (frame) {
      case Frame.Hello h -> HELLO_BODY_BYTES;
      case Frame.Proof p -> FrameDescriptor.PROOF_BODY_BYTES;
      case Frame.Final f -> FrameDescriptor.FINAL_BODY_BYTES;
      case Frame.Report r -> reportBodyLength(r);
    };
  }

  private static long reportBodyLength(Frame.Report r) {
    if (r.failed()) {
      return REPORT_FIXED_BYTES + 2L + r.error().getBytes(StandardCharsets.UTF_8).length;
    }
    long n = REPORT_FIXED_BYTES + 4L + 4L;
    for (FrontendMessage m : r.frontend()) {
      n += FRONTEND_FIXED_BYTES + m.payloadLength();
    }
    for (StorageDone d : r.completions()) {
      n += COMPLETION_FIXED_BYTES + 3 * FrameDescriptor.maskBytes(d.outcomes().size());
    }
    if (!r.status().isEmpty()) {
      n += FrameDescriptor.SECTION_HEADER_BYTES + r.status().length();
    }
    if (!r.events().isEmpty()) {
      n += FrameDescriptor.SECTION_HEADER_BYTES + r.events().length();
    }
    return n;
  }

  private static void writeReport(ByteBuffer buf, Frame.Report r) {
    buf.putInt(r.rank()).putLong(r.round()).putLong(r.clockNs());
    buf.putInt(r.pressure().queuedJobs())
        .putLong(r.pressure().queuedPayloadBytes())
        .putLong(r.pressure().oldestAgeNs());
    buf.putLong(r.planDigest());
    if (r.failed()) {
      byte[] reason = r.error().getBytes(StandardCharsets.UTF_8);
      if (reason.length > FrameDescriptor.MAX_ERROR_BYTES) {
        throw new IllegalArgumentException(
            "error reason of "
                + reason.length
                + " bytes exceeds "
                + FrameDescriptor.MAX_ERROR_BYTES
                + "; clip it first");
      }
      buf.put((byte) FrameDescriptor.STATUS_ERROR).putShort((short) reason.length).put(reason);
      return;
    }
    buf.put((byte) FrameDescriptor.STATUS_OK);
    buf.putInt(r.frontend().size());
    for (FrontendMessage m : r.frontend()) {
      buf.put((byte) m.kind().ordinal()).putLong(m.requestId()).putInt(m.payloadLength());
      buf.put(m.payload());
    }
    buf.putInt(r.completions().size());
    for (StorageDone d : r.completions()) {
      writeCompletion(buf, d);
    }
    // The optional sections, in ascending tag order.
    if (!r.status().isEmpty()) {
      buf.put((byte) FrameDescriptor.SECTION_STATUS);
      buf.putShort((short) r.status().length()).put(r.status().bytes());
    }
    if (!r.events().isEmpty()) {
      buf.put((byte) FrameDescriptor.SECTION_EVENTS);
      buf.putShort((short) r.events().length()).put(r.events().bytes());
    }
  }

  private static void writeCompletion(ByteBuffer buf, StorageDone d) {
    List<KeyOutcome> outcomes = d.outcomes();
    int numKeys = outcomes.size();
    int flags = (d.retired() ? FLAG_RETIRED : 0) | (d.detached() ? FLAG_DETACHED : 0);
    buf.putLong(d.operationId())
        .put((byte) d.kind().ordinal())
        .put((byte) flags)
        .putLong(d.bytes())
        .putInt(numKeys);
    int maskBytes = (int) FrameDescriptor.maskBytes(numKeys);
    int ok = buf.position();
    int object = ok + maskBytes;
    int invalid = object + maskBytes;
    byte[] a = buf.array();
    // The buffer is fresh and zero-filled: only set bits are written.
    for (int i = 0; i < numKeys; i++) {
      int bit = 1 << (i & 7);
      int at = i >>> 3;
      switch (outcomes.get(i)) {
        case OK -> a[ok + at] |= (byte) bit;
        case MISSING -> a[object + at] |= (byte) bit;
        case INVALID -> {
          a[object + at] |= (byte) bit;
          a[invalid + at] |= (byte) bit;
        }
        case FAILED -> {}
      }
    }
    buf.position(invalid + maskBytes);
  }
}
