package io.tokenspeed.control;

import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;

/**
 * The control protocol's wire format, version {@value #VERSION}. Every integer is big-endian;
 * {@code u} types are unsigned, {@code i} types two's complement.
 *
 * <pre>
 * Frame
 *   0        4        6     7     8              12                 12+N       16+N
 *   +--------+--------+-----+-----+--------------+------------------+----------+
 *   | magic  |version |type |flags| body length  |       body       |  CRC32C  |
 *   | "TSCP" |  u16   | u8  | u8  |   u32  = N   |     N bytes      |   u32    |
 *   +--------+--------+-----+-----+--------------+------------------+----------+
 *   type: 1 HELLO, 2 REPORT, 3 PROOF, 4 FINAL. flags: 0 (reserved). CRC32C covers [0, 12+N).
 *   16+N must not exceed the receiver's max_frame_bytes; a larger length is rejected from the
 *   header alone, before anything is allocated.
 *
 * HELLO body (64 bytes)
 *   0 i64 replica_id   8 i32 world_size   12 i32 rank   16 i32 max_frame_bytes
 *  20 i32 max_pending_operations          24 i64 max_pending_keys
 *  32 32 bytes nonce (fresh per connection)
 *
 * PROOF body (32 bytes)
 *   0 32 bytes HMAC-SHA256(replica secret, label | dialer's HELLO frame | acceptor's HELLO frame)
 *     label: "TSCP2 dialer" or "TSCP2 acceptor" (ASCII)
 *
 * FINAL body (16 bytes)
 *   0 i32 rank          4 i64 gathered_round          12 i32 blamed_rank (-1: none)
 *
 * A connection carries HELLO and PROOF both ways (dialer first each time), then REPORTs, one per
 * round each way, and at most one FINAL each way after a failure; nothing else.
 *
 * REPORT body
 *   0 i32 rank            4 i64 round          12 i64 clock_ns
 *  20 i32 queued_jobs    24 i64 queued_payload_bytes                 32 i64 oldest_age_ns
 *  40 i64 plan_digest: digest of the plan the sender executed in its previous round
 *  48 u8  status: 0 OK, 1 ERROR
 *  status ERROR:
 *  49 u16 M, then M bytes of UTF-8: the reason (M <= 4096). The body ends there.
 *  status OK:
 *  49 i32 F = frontend message count, then F times:
 *       u8 kind (0 NEW_REQUEST, 1 CANCEL) | i64 request_id | i32 P | P payload bytes (P = 0 for CANCEL)
 *     i32 C = completion record count, then C times:
 *       +------------+------+-------+-----------+----------+---------+-------------+-------------+
 *       |operation_id| kind | flags |   bytes   | num_keys | ok mask | object mask |invalid mask |
 *       |    i64     |  u8  |  u8   |    i64    |  i32 = K | ceil(K/8) bytes each, bit i of key i|
 *       +------------+------+-------+-----------+----------+---------+-------------+-------------+
 *       kind: 0 QUERY, 1 GET, 2 PUT. flags: bit 0 retired, bit 1 detached, others 0.
 *       Key i is bit (i mod 8) of byte (i div 8). Per key: ok = OK; object = MISSING or INVALID,
 *       invalid = INVALID; none set = FAILED. ok and object never both set; invalid implies
 *       object; object only for GET; bits at and beyond K are 0.
 *     then the optional sections: none when the sender has neither a status nor events (an idle
 *     round's report ends after its completion count), else each present section once, in
 *     ascending tag order (status before events):
 *       +-----+---------+-------------------+
 *       | tag | length  |       bytes       |
 *       | u8  | u16 = L |  L opaque bytes   |
 *       +-----+---------+-------------------+
 *       tag 1 STATUS: the sender's status for every rank (RankStatus), 1 <= L <= 1024
 *       tag 2 EVENTS: the sender's events of this round (RankEvents), 1 <= L <= 16384
 *       Any other tag, a tag repeated or out of order, L = 0 or L above the tag's limit is
 *       rejected; so is a section cut short, and 1 or 2 bytes where a section header is due.
 *  The body ends exactly after the last record, or after the last section.
 * </pre>
 *
 * <p>A valid report's body is {@code 57 + sum(13 + P)} over its frontend messages {@code + sum(22 +
 * 3*ceil(K/8))} over its completion records {@code + (3 + S)} with a status {@code + (3 + E)} with
 * events, and framing adds 16 bytes (an idle round's frame is 73 bytes): its size follows the
 * completions, never the model's heads or the number of ranks; a status adds at most 1027 bytes and
 * events at most 16387, and only to the rounds that carry them. A report with no frontend messages
 * and no records is therefore at most {@value #MAX_BARE_REPORT_FRAME_BYTES} bytes, and an error
 * report at most {@value #MAX_ERROR_REPORT_FRAME_BYTES}; {@link ControlConfig#MIN_MAX_FRAME_BYTES}
 * holds both, so only completions and frontend messages can make a report too long for a frame.
 *
 * <p>Error reports carry the plan digest too (the fixed part is the same for both statuses); the
 * exchange compares only the digests of valid reports.
 */
public final class FrameDescriptor {

  /** "TSCP". */
  public static final int MAGIC = 0x54534350;

  /** The protocol version this build speaks; a frame with another version is rejected. */
  public static final int VERSION = 5;

  /** Frame type of the handshake. */
  public static final int TYPE_HELLO = 1;

  /** Frame type of a round's report. */
  public static final int TYPE_REPORT = 2;

  /** Frame type of the handshake's proof of the replica secret. */
  public static final int TYPE_PROOF = 3;

  /** Frame type of a failed rank's last word. */
  public static final int TYPE_FINAL = 4;

  /** Bytes before the body: magic, version, type, flags, body length. */
  public static final int HEADER_BYTES = 12;

  /** Bytes after the body: the checksum. */
  public static final int TRAILER_BYTES = 4;

  /** Header plus trailer. */
  public static final int FRAMING_BYTES = HEADER_BYTES + TRAILER_BYTES;

  /** The body of a HELLO frame. */
  public static final int HELLO_BODY_BYTES = 64;

  /** The body of a PROOF frame. */
  public static final int PROOF_BODY_BYTES = 32;

  /** The body of a FINAL frame. */
  public static final int FINAL_BODY_BYTES = 16;

  /** Report body bytes before the status-dependent part. */
  static final int REPORT_FIXED_BYTES = 49;

  /** The longest reason an error report carries, in UTF-8 bytes; longer reasons are cut. */
  public static final int MAX_ERROR_BYTES = 4096;

  /** Bytes of a frontend message before its payload. */
  static final int FRONTEND_FIXED_BYTES = 13;

  /** Bytes of a completion record before its masks. */
  static final int COMPLETION_FIXED_BYTES = 22;

  /** Bytes of an optional section before its bytes: tag and length. */
  static final int SECTION_HEADER_BYTES = 3;

  /** Tag of the optional section carrying the sender's {@code RankStatus}. */
  static final int SECTION_STATUS = 1;

  /** Tag of the optional section carrying the sender's {@code RankEvents}. */
  static final int SECTION_EVENTS = 2;

  /**
   * The longest frame of a valid report without frontend messages or completion records: the fixed
   * part, both counts, the largest status and the largest events, framing included.
   */
  public static final int MAX_BARE_REPORT_FRAME_BYTES =
      FRAMING_BYTES
          + REPORT_FIXED_BYTES
          + 4
          + 4
          + SECTION_HEADER_BYTES
          + RankStatus.MAX_BYTES
          + SECTION_HEADER_BYTES
          + RankEvents.MAX_BYTES;

  /**
   * The longest frame of an error report: the fixed part and the longest reason, framing included.
   */
  public static final int MAX_ERROR_REPORT_FRAME_BYTES =
      FRAMING_BYTES + REPORT_FIXED_BYTES + 2 + MAX_ERROR_BYTES;

  static final int STATUS_OK = 0;
  static final int STATUS_ERROR = 1;

  static final int FLAG_RETIRED = 1;
  static final int FLAG_DETACHED = 2;

  private FrameDescriptor() {}

  /** Bytes of one mask of {@code numKeys} keys. */
  static long maskBytes(long numKeys) {
    return (numKeys + 7) >>> 3;
  }
}
