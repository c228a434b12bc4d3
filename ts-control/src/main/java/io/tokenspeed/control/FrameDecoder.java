package io.tokenspeed.control;

import static io.tokenspeed.control.FrameDescriptor.COMPLETION_FIXED_BYTES;
import static io.tokenspeed.control.FrameDescriptor.FLAG_DETACHED;
import static io.tokenspeed.control.FrameDescriptor.FLAG_RETIRED;
import static io.tokenspeed.control.FrameDescriptor.FRAMING_BYTES;
import static io.tokenspeed.control.FrameDescriptor.FRONTEND_FIXED_BYTES;
import static io.tokenspeed.control.FrameDescriptor.HEADER_BYTES;
import static io.tokenspeed.control.FrameDescriptor.HELLO_BODY_BYTES;

import io.tokenspeed.control.Decoded.Malformed;
import io.tokenspeed.control.Decoded.Reason;
import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.zip.CRC32C;

/**
 * Reads frames written in the layout of {@link FrameDescriptor} and rejects everything else with a
 * {@link Malformed} value.
 *
 * <p>What it guarantees: for any bytes at all, {@link #decode} returns — it never throws, its
 * allocations stay proportional to the input's length (every count and length is checked against
 * the bytes that remain before anything is built), and it never hands out a frame that the record
 * constructors would refuse. Checks run from cheap to expensive: header fields, the declared length
 * against the limit and the bytes present, the checksum, then every body field (ranges, enum
 * ordinals, counts, per-key masks, trailing bytes). The transport reads a header first and calls
 * {@link #checkHeader} so that a hostile length is refused before a body buffer is allocated.
 *
 * <p>Instances hold only the limit and are safe to share.
 */
public final class FrameDecoder {

  private static final StorageKind[] KINDS = StorageKind.values();
  private static final FrontendMessage.Kind[] FRONTEND_KINDS = FrontendMessage.Kind.values();

  private final int maxFrameBytes;

  /** A decoder that refuses frames longer than {@code maxFrameBytes}. */
  public FrameDecoder(int maxFrameBytes) {
    if (maxFrameBytes < ControlConfig.MIN_MAX_FRAME_BYTES) {
      throw new IllegalArgumentException(
          "max_frame_bytes=" + maxFrameBytes + " must be >= " + ControlConfig.MIN_MAX_FRAME_BYTES);
    }
    this.maxFrameBytes = maxFrameBytes;
  }

  /**
   * Checks the {@link FrameDescriptor#HEADER_BYTES} header bytes at {@code offset}: magic, version,
   * type, flags and the declared length against the limit.
   *
   * @return null when the header is acceptable; then {@link #frameLength} gives the frame's length
   */
  public Malformed checkHeader(byte[] bytes, int offset, int length) {
    if (length < HEADER_BYTES) {
      return new Malformed(
          Reason.TRUNCATED, "frame of " + length + " bytes is shorter than its header");
    }
    ByteBuffer h = ByteBuffer.wrap(bytes, offset, HEADER_BYTES);
    int magic = h.getInt();
    if (magic != FrameDescriptor.MAGIC) {
      return new Malformed(Reason.BAD_MAGIC, "magic=0x" + Integer.toHexString(magic));
    }
    int version = Short.toUnsignedInt(h.getShort());
    if (version != FrameDescriptor.VERSION) {
      return new Malformed(
          Reason.UNSUPPORTED_VERSION,
          "version=" + version + ", this build speaks " + FrameDescriptor.VERSION);
    }
    int type = Byte.toUnsignedInt(h.get());
    int flags = Byte.toUnsignedInt(h.get());
    if (type < FrameDescriptor.TYPE_HELLO || type > FrameDescriptor.TYPE_FINAL) {
      return new Malformed(Reason.BAD_TYPE, "type=" + type);
    }
    if (flags != 0) {
      return new Malformed(Reason.BAD_TYPE, "flags=" + flags + " must be 0");
    }
    long body = Integer.toUnsignedLong(h.getInt());
    if (FRAMING_BYTES + body > maxFrameBytes) {
      return new Malformed(
          Reason.TOO_LARGE, "body_length=" + body + " exceeds max_frame_bytes=" + maxFrameBytes);
    }
    int fixed =
        switch (type) {
          case FrameDescriptor.TYPE_HELLO -> HELLO_BODY_BYTES;
          case FrameDescriptor.TYPE_PROOF -> FrameDescriptor.PROOF_BODY_BYTES;
          case FrameDescriptor.TYPE_FINAL -> FrameDescriptor.FINAL_BODY_BYTES;
          default -> -1;
        };
    if (fixed >= 0 && body != fixed) {
      return new Malformed(
          Reason.BAD_LENGTH, typeName(type) + " body_length=" + body + ", must be " + fixed);
    }
    return null;
  }

  /** The total length declared by a header that {@link #checkHeader} accepted. */
  public static int frameLength(byte[] bytes, int offset) {
    return FRAMING_BYTES + ByteBuffer.wrap(bytes, offset, HEADER_BYTES).getInt(8);
  }

  /** Decodes {@code bytes}, which must hold exactly one frame. */
  public Decoded decode(byte[] bytes) {
    return decode(bytes, 0, bytes.length);
  }

  /**
   * Decodes the {@code length} bytes at {@code offset}, which must hold exactly one frame.
   *
   * @throws IllegalArgumentException only when the slice itself lies outside {@code bytes}
   */
  public Decoded decode(byte[] bytes, int offset, int length) {
    if (bytes == null || offset < 0 || length < 0 || offset > bytes.length - length) {
      throw new IllegalArgumentException(
          "slice offset=" + offset + " length=" + length + " is outside the array");
    }
    Malformed header = checkHeader(bytes, offset, length);
    if (header != null) {
      return header;
    }
    int total = frameLength(bytes, offset);
    if (length < total) {
      return new Malformed(
          Reason.TRUNCATED, "frame declares " + total + " bytes, " + length + " present");
    }
    if (length > total) {
      return new Malformed(
          Reason.TRAILING_BYTES, "frame declares " + total + " bytes, " + length + " present");
    }
    CRC32C crc = new CRC32C();
    crc.update(bytes, offset, total - 4);
    int expected = ByteBuffer.wrap(bytes, offset + total - 4, 4).getInt();
    if ((int) crc.getValue() != expected) {
      return new Malformed(
          Reason.BAD_CHECKSUM,
          "crc32c=0x"
              + Integer.toHexString((int) crc.getValue())
              + ", frame says 0x"
              + Integer.toHexString(expected));
    }
    ByteBuffer body = ByteBuffer.wrap(bytes, offset + HEADER_BYTES, total - FRAMING_BYTES).slice();
    int type = Byte.toUnsignedInt(bytes[offset + 6]);
    return switch (type) {
      case FrameDescriptor.TYPE_HELLO -> hello(body);
      case FrameDescriptor.TYPE_PROOF -> new Decoded.Ok(new Frame.Proof(Bytes32.read(body)));
      case FrameDescriptor.TYPE_FINAL -> finalFrame(body);
      default -> report(body);
    };
  }

  /** The frame type declared by a header that {@link #checkHeader} accepted. */
  public static int frameType(byte[] bytes, int offset) {
    return Byte.toUnsignedInt(bytes[offset + 6]);
  }

  /** A frame type's name for messages. */
  static String typeName(int type) {
    return switch (type) {
      case FrameDescriptor.TYPE_HELLO -> "hello";
      case FrameDescriptor.TYPE_REPORT -> "report";
      case FrameDescriptor.TYPE_PROOF -> "proof";
      case FrameDescriptor.TYPE_FINAL -> "final";
      default -> "type " + type;
    };
  }

  private static Decoded finalFrame(ByteBuffer b) {
    int rank = b.getInt();
    long gathered = b.getLong();
    int blamed = b.getInt();
    if (rank < 0 || rank >= ControlConfig.MAX_WORLD_SIZE || gathered < 0 || blamed < -1) {
      return new Malformed(
          Reason.BAD_FIELD,
          "final rank=" + rank + " gathered_round=" + gathered + " blamed_rank=" + blamed);
    }
    return new Decoded.Ok(new Frame.Final(rank, gathered, blamed));
  }

  private static Decoded hello(ByteBuffer b) {
    long replicaId = b.getLong();
    int worldSize = b.getInt();
    int rank = b.getInt();
    int maxFrame = b.getInt();
    int maxOps = b.getInt();
    long maxKeys = b.getLong();
    Bytes32 nonce = Bytes32.read(b);
    if (replicaId < 0
        || worldSize < 1
        || worldSize > ControlConfig.MAX_WORLD_SIZE
        || rank < 0
        || rank >= worldSize
        || maxFrame < ControlConfig.MIN_MAX_FRAME_BYTES
        || maxOps < 1
        || maxKeys < 1) {
      return new Malformed(
          Reason.BAD_FIELD,
          "hello replica_id="
              + replicaId
              + " world_size="
              + worldSize
              + " rank="
              + rank
              + " max_frame_bytes="
              + maxFrame
              + " max_pending_operations="
              + maxOps
              + " max_pending_keys="
              + maxKeys);
    }
    return new Decoded.Ok(
        new Frame.Hello(replicaId, worldSize, rank, maxFrame, maxOps, maxKeys, nonce));
  }

  private static Decoded report(ByteBuffer b) {
    if (b.remaining() < FrameDescriptor.REPORT_FIXED_BYTES) {
      return new Malformed(
          Reason.BAD_LENGTH, "report body of " + b.remaining() + " bytes is too short");
    }
    int rank = b.getInt();
    long round = b.getLong();
    long clockNs = b.getLong();
    int queuedJobs = b.getInt();
    long queuedBytes = b.getLong();
    long oldestAgeNs = b.getLong();
    long planDigest = b.getLong();
    int status = Byte.toUnsignedInt(b.get());
    if (rank < 0 || rank >= ControlConfig.MAX_WORLD_SIZE || round < 1) {
      return bad("report rank=" + rank + " round=" + round);
    }
    if (queuedJobs < 0 || queuedBytes < 0 || oldestAgeNs < 0) {
      return bad(
          "pressure queued_jobs="
              + queuedJobs
              + " queued_payload_bytes="
              + queuedBytes
              + " oldest_age_ns="
              + oldestAgeNs);
    }
    PressureSnapshot pressure = new PressureSnapshot(queuedJobs, queuedBytes, oldestAgeNs);
    return switch (status) {
      case FrameDescriptor.STATUS_ERROR ->
          errorReport(b, rank, round, clockNs, pressure, planDigest);
      case FrameDescriptor.STATUS_OK -> okReport(b, rank, round, clockNs, pressure, planDigest);
      default -> bad("report status=" + status);
    };
  }

  private static Decoded errorReport(
      ByteBuffer b,
      int rank,
      long round,
      long clockNs,
      PressureSnapshot pressure,
      long planDigest) {
    if (b.remaining() < 2) {
      return new Malformed(Reason.BAD_LENGTH, "error report without a reason length");
    }
    int length = Short.toUnsignedInt(b.getShort());
    if (length < 1 || length > FrameDescriptor.MAX_ERROR_BYTES) {
      return bad("error reason length=" + length + " must be in [1, 4096]");
    }
    if (length > b.remaining()) {
      return new Malformed(
          Reason.BAD_LENGTH,
          "error reason length=" + length + ", " + b.remaining() + " bytes remain");
    }
    ByteBuffer text = b.slice(b.position(), length);
    b.position(b.position() + length);
    if (b.hasRemaining()) {
      return trailing(b);
    }
    String reason;
    try {
      reason = StandardCharsets.UTF_8.newDecoder().decode(text).toString();
    } catch (CharacterCodingException e) {
      return bad("error reason is not valid UTF-8");
    }
    return new Decoded.Ok(Frame.Report.ofError(rank, round, clockNs, pressure, planDigest, reason));
  }

  private static Decoded okReport(
      ByteBuffer b,
      int rank,
      long round,
      long clockNs,
      PressureSnapshot pressure,
      long planDigest) {
    if (b.remaining() < 4) {
      return new Malformed(Reason.BAD_LENGTH, "report without a frontend count");
    }
    int numFrontend = b.getInt();
    if (numFrontend < 0 || numFrontend > b.remaining() / FRONTEND_FIXED_BYTES) {
      return new Malformed(
          Reason.BAD_LENGTH,
          "frontend count=" + numFrontend + ", " + b.remaining() + " bytes remain");
    }
    List<FrontendMessage> frontend = new ArrayList<>(numFrontend);
    for (int i = 0; i < numFrontend; i++) {
      if (b.remaining() < FRONTEND_FIXED_BYTES) {
        return new Malformed(Reason.BAD_LENGTH, "frontend message " + i + " is cut short");
      }
      int kind = Byte.toUnsignedInt(b.get());
      long requestId = b.getLong();
      int payloadLength = b.getInt();
      if (kind >= FRONTEND_KINDS.length || requestId < 0) {
        return bad("frontend message " + i + " kind=" + kind + " request_id=" + requestId);
      }
      if (payloadLength < 0 || payloadLength > b.remaining()) {
        return new Malformed(
            Reason.BAD_LENGTH,
            "frontend message "
                + i
                + " payload_length="
                + payloadLength
                + ", "
                + b.remaining()
                + " bytes remain");
      }
      if (FRONTEND_KINDS[kind] == FrontendMessage.Kind.CANCEL && payloadLength != 0) {
        return bad("cancellation " + i + " carries payload_length=" + payloadLength);
      }
      byte[] payload = new byte[payloadLength];
      b.get(payload);
      frontend.add(new FrontendMessage(FRONTEND_KINDS[kind], requestId, payload));
    }
    if (b.remaining() < 4) {
      return new Malformed(Reason.BAD_LENGTH, "report without a completion count");
    }
    int numCompletions = b.getInt();
    int minRecord = COMPLETION_FIXED_BYTES + 3;
    if (numCompletions < 0 || numCompletions > b.remaining() / minRecord) {
      return new Malformed(
          Reason.BAD_LENGTH,
          "completion count=" + numCompletions + ", " + b.remaining() + " bytes remain");
    }
    List<StorageDone> completions = new ArrayList<>(numCompletions);
    for (int i = 0; i < numCompletions; i++) {
      Object record = completion(b, i);
      if (record instanceof Malformed m) {
        return m;
      }
      completions.add((StorageDone) record);
    }
    RankStatus status = RankStatus.EMPTY;
    RankEvents events = RankEvents.EMPTY;
    int lastTag = 0;
    while (b.hasRemaining()) {
      if (b.remaining() < FrameDescriptor.SECTION_HEADER_BYTES) {
        return trailing(b);
      }
      int tag = Byte.toUnsignedInt(b.get());
      int length = Short.toUnsignedInt(b.getShort());
      if (tag != FrameDescriptor.SECTION_STATUS && tag != FrameDescriptor.SECTION_EVENTS) {
        return bad(
            "report section tag="
                + tag
                + " must be "
                + FrameDescriptor.SECTION_STATUS
                + " (status) or "
                + FrameDescriptor.SECTION_EVENTS
                + " (events)");
      }
      if (tag <= lastTag) {
        return bad(
            "report section tag="
                + tag
                + " after tag="
                + lastTag
                + ": each section comes at most once, in ascending tag order");
      }
      lastTag = tag;
      String what = tag == FrameDescriptor.SECTION_STATUS ? "rank status" : "rank events";
      int max = tag == FrameDescriptor.SECTION_STATUS ? RankStatus.MAX_BYTES : RankEvents.MAX_BYTES;
      if (length < 1 || length > max) {
        return bad(what + " length=" + length + " must be in [1, " + max + "]");
      }
      if (length > b.remaining()) {
        return new Malformed(
            Reason.BAD_LENGTH, what + " length=" + length + ", " + b.remaining() + " bytes remain");
      }
      byte[] bytes = new byte[length];
      b.get(bytes);
      if (tag == FrameDescriptor.SECTION_STATUS) {
        status = new RankStatus(bytes);
      } else {
        events = new RankEvents(bytes);
      }
    }
    return new Decoded.Ok(
        new Frame.Report(
            rank,
            round,
            clockNs,
            pressure,
            planDigest,
            null,
            frontend,
            completions,
            status,
            events));
  }

  /** One completion record: a {@link StorageDone} or a {@link Malformed}. */
  private static Object completion(ByteBuffer b, int index) {
    if (b.remaining() < COMPLETION_FIXED_BYTES) {
      return new Malformed(Reason.BAD_LENGTH, "completion record " + index + " is cut short");
    }
    long operationId = b.getLong();
    int kindOrdinal = Byte.toUnsignedInt(b.get());
    int flags = Byte.toUnsignedInt(b.get());
    long bytes = b.getLong();
    int numKeys = b.getInt();
    if (operationId < 0 || kindOrdinal >= KINDS.length || bytes < 0) {
      return bad(
          "completion record "
              + index
              + " operation_id="
              + operationId
              + " kind="
              + kindOrdinal
              + " bytes="
              + bytes);
    }
    if ((flags & ~(FLAG_RETIRED | FLAG_DETACHED)) != 0) {
      return bad("completion record " + index + " flags=" + flags);
    }
    if (numKeys < 1) {
      return bad("operation " + operationId + " num_keys=" + numKeys + " must be >= 1");
    }
    int maskBytes = (int) FrameDescriptor.maskBytes(numKeys);
    if (3L * maskBytes > b.remaining()) {
      return new Malformed(
          Reason.BAD_LENGTH,
          "operation "
              + operationId
              + " num_keys="
              + numKeys
              + " needs "
              + 3L * maskBytes
              + " mask bytes, "
              + b.remaining()
              + " remain");
    }
    StorageKind kind = KINDS[kindOrdinal];
    byte[] a = b.array();
    int ok = b.arrayOffset() + b.position();
    int object = ok + maskBytes;
    int invalid = object + maskBytes;
    int usedBits = numKeys & 7;
    if (usedBits != 0) {
      int padding = 0xff & ~((1 << usedBits) - 1);
      int last = maskBytes - 1;
      if (((a[ok + last] | a[object + last] | a[invalid + last]) & padding) != 0) {
        return bad("operation " + operationId + " sets mask bits beyond num_keys=" + numKeys);
      }
    }
    KeyOutcome[] outcomes = new KeyOutcome[numKeys];
    for (int i = 0; i < numKeys; i++) {
      int at = i >>> 3;
      int bit = 1 << (i & 7);
      boolean isOk = (a[ok + at] & bit) != 0;
      boolean isObject = (a[object + at] & bit) != 0;
      boolean isInvalid = (a[invalid + at] & bit) != 0;
      if (isOk && isObject) {
        return bad(
            "operation " + operationId + " key " + i + " reports success and object failure");
      }
      if (isInvalid && !isObject) {
        return bad("operation " + operationId + " key " + i + " is invalid without object failure");
      }
      if (isObject && kind != StorageKind.GET) {
        return bad(
            "operation "
                + operationId
                + " "
                + kind
                + " key "
                + i
                + " reports an object failure: only GET reads objects");
      }
      outcomes[i] =
          isOk
              ? KeyOutcome.OK
              : isInvalid ? KeyOutcome.INVALID : isObject ? KeyOutcome.MISSING : KeyOutcome.FAILED;
    }
    b.position(b.position() + 3 * maskBytes);
    return new StorageDone(
        operationId,
        kind,
        Arrays.asList(outcomes),
        (flags & FLAG_RETIRED) != 0,
        bytes,
        (flags & FLAG_DETACHED) != 0);
  }

  private static Malformed bad(String detail) {
    return new Malformed(Reason.BAD_FIELD, detail);
  }

  private static Malformed trailing(ByteBuffer b) {
    return new Malformed(Reason.TRAILING_BYTES, b.remaining() + " bytes after the last field");
  }
}
