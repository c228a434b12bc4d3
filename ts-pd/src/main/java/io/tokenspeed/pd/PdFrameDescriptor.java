package io.tokenspeed.pd;

/**
 * The KV-transfer wire format, version {@value #VERSION}. Every integer is big-endian; {@code u}
 * types are unsigned, {@code i} types two's complement. Offsets are from the start of the payload.
 *
 * <pre>
 * Frame
 *   0             4      5
 *   +-------------+------+------------------------+
 *   | length = N  | type |  payload (N - 1 bytes) |
 *   |     u32     |  u8  |                        |
 *   +-------------+------+------------------------+
 *   N counts the type byte and the payload. A reader checks N against the type's bounds (below)
 *   from the header alone, before it allocates or reads anything of the payload.
 *
 * type  name       N                         payload                               direction
 *  1    HELLO      40                        0 "TSPD"  4 u16 version  6 u8 role     both, first
 *                                            7 32 bytes nonce (fresh per connection)
 *                                            role: 1 prefill (dialer), 2 decode (acceptor)
 *  2    PROOF      33                        0 32 bytes HMAC-SHA256(secret, label |  dialer first
 *                                              dialer's HELLO frame | acceptor's HELLO frame)
 *                                            label: "TSPD1 dialer" / "TSPD1 acceptor" (ASCII)
 *  3    BOOTSTRAP  47 + 4T + 4G              0 i64 room   8 u32 T   12 T x i32 token     P -> D
 *                                            12+4T 32 bytes identity digest
 *                                            44+4T u16 G   46+4T G x u32 bytes per block
 *  4    ACK        11 + 4G                   0 i64 room   8 u16 G   10 G x u32 blocks    D -> P
 *  5    REFUSE     9 + R, R &lt;= 1024         0 i64 room   8 R bytes of UTF-8: reason  D -> P
 *  6    DATA       15 + B                    0 i64 room   8 u16 group  10 u32 block    P -> D
 *                                            14 B bytes: the block (B = the group's bytes per block)
 *  7    DONE       41, or 46 + 8K, K &lt;= 20  0 i64 room   8 i32 first token            P -> D
 *                                            12 i64 cached device  20 i64 cached host
 *                                            28 i64 cached storage 36 u32 CRC32C
 *                                            with the first token's log probabilities:
 *                                            40 f32 its logprob  44 u8 K
 *                                            45 K x (i32 token, f32 logprob): the top K
 *  8    RECEIVED   9                         0 i64 room                                D -> P
 *  9    CANCEL     9 + R, R &lt;= 1024         0 i64 room   8 R bytes of UTF-8: reason  both
 * 10    PING       1                         (none)                                    both
 * </pre>
 *
 * <p>DONE's CRC32C covers the block bytes (not the 14-byte room/group/block prefix) of every DATA
 * frame of the room, in the order they were written, which TCP makes the order they are read.
 *
 * <p><b>A room on one connection.</b> The prefill side opens it with BOOTSTRAP. The decode side
 * answers ACK (blocks reserved per cache group) or REFUSE; after ACK the prefill side writes one
 * DATA frame for every reserved block, each exactly once, then DONE; the decode side answers
 * RECEIVED once DONE's checksum matched and the engine acknowledged the landing. Either side may
 * write CANCEL at any point, at most once per room; a side that reads CANCEL for a room whose
 * CANCEL it has not written answers with its own. A side writes nothing more for a room after its
 * CANCEL, after REFUSE and after RECEIVED, so a room is closed on a side once that side has read
 * the other's last frame for it: REFUSE, RECEIVED, or (on both sides) CANCEL written and read.
 * CANCEL for a room the decode side no longer knows (it crossed a REFUSE or a RECEIVED) is ignored;
 * every other frame naming a room the reader does not hold open closes the connection.
 *
 * <p><b>Reasons.</b> REFUSE's and CANCEL's reason is free text for a log, except for one code: a
 * reason that is {@value #CLIENT_CANCELLED}, or begins with it and {@code ": "}, says that the
 * writer ended the room because its own half of the request was cancelled by its client, not
 * because anything failed ({@link #isClientCancelled}; the reader's half ends as cancelled, not
 * with an error). Any other reason is a failure. The code needs no new version: a reader that does
 * not know it reads it as any reason, and a writer that does not know it never writes it.
 */
public final class PdFrameDescriptor {

  private PdFrameDescriptor() {}

  /** "TSPD". */
  public static final int MAGIC = 0x54535044;

  /** The protocol version this build speaks; a HELLO of another version is refused. */
  public static final int VERSION = 1;

  /** HELLO's role of the prefill side, which dials. */
  public static final int ROLE_PREFILL = 1;

  /** HELLO's role of the decode side, which accepts. */
  public static final int ROLE_DECODE = 2;

  /** The label of the dialer's proof. */
  public static final String DIALER_LABEL = "TSPD1 dialer";

  /** The label of the acceptor's proof. */
  public static final String ACCEPTOR_LABEL = "TSPD1 acceptor";

  /** Bytes of the length field and the type. */
  public static final int HEADER_BYTES = 5;

  /** Bytes of a nonce, a MAC and an identity digest. */
  public static final int DIGEST_BYTES = 32;

  /** The longest reason a REFUSE or CANCEL carries, in UTF-8 bytes (longer ones are cut). */
  public static final int MAX_REASON_BYTES = 1024;

  /**
   * The reason code of a REFUSE or CANCEL written because the writer's half of the request was
   * cancelled by its client (see the class comment).
   */
  public static final String CLIENT_CANCELLED = "client cancelled";

  /**
   * The reason of a REFUSE or CANCEL written because the writer's half of the request was cancelled
   * by its client: {@value #CLIENT_CANCELLED}, then {@code ": "} and {@code detail} when there is
   * one.
   */
  public static String clientCancelled(String detail) {
    return detail == null || detail.isEmpty() ? CLIENT_CANCELLED : CLIENT_CANCELLED + ": " + detail;
  }

  /**
   * Whether a REFUSE's or CANCEL's reason says that its writer's half of the request was cancelled
   * by its client ({@link #clientCancelled}), rather than that something failed.
   */
  public static boolean isClientCancelled(String reason) {
    return reason != null
        && reason.startsWith(CLIENT_CANCELLED)
        && (reason.length() == CLIENT_CANCELLED.length()
            || reason.startsWith(": ", CLIENT_CANCELLED.length()));
  }

  public static final int TYPE_HELLO = 1;
  public static final int TYPE_PROOF = 2;
  public static final int TYPE_BOOTSTRAP = 3;
  public static final int TYPE_ACK = 4;
  public static final int TYPE_REFUSE = 5;
  public static final int TYPE_DATA = 6;
  public static final int TYPE_DONE = 7;
  public static final int TYPE_RECEIVED = 8;
  public static final int TYPE_CANCEL = 9;
  public static final int TYPE_PING = 10;

  /** HELLO's N. */
  public static final int HELLO_LENGTH = 40;

  /** PROOF's N. */
  public static final int PROOF_LENGTH = 1 + DIGEST_BYTES;

  /** BOOTSTRAP's N without tokens and groups. */
  public static final int BOOTSTRAP_FIXED_LENGTH = 47;

  /** ACK's N without groups. */
  public static final int ACK_FIXED_LENGTH = 11;

  /** REFUSE's and CANCEL's N without the reason. */
  public static final int REASON_FIXED_LENGTH = 9;

  /** DATA's N without the block: type, room, group, block index. */
  public static final int DATA_FIXED_LENGTH = 15;

  /** The bytes of a DATA frame before the block: header, room, group, block index. */
  public static final int DATA_PREFIX_BYTES = HEADER_BYTES + DATA_FIXED_LENGTH - 1;

  /** DONE's N without log probabilities. */
  public static final int DONE_LENGTH = 41;

  /** DONE's N with the first token's log probabilities and K alternatives: this plus 8K. */
  public static final int DONE_LOGPROBS_LENGTH = 46;

  /** RECEIVED's N. */
  public static final int RECEIVED_LENGTH = 9;

  /** PING's N. */
  public static final int PING_LENGTH = 1;

  /** The frame name of {@code type}, or {@code type=N} for an unknown one. */
  public static String typeName(int type) {
    return switch (type) {
      case TYPE_HELLO -> "HELLO";
      case TYPE_PROOF -> "PROOF";
      case TYPE_BOOTSTRAP -> "BOOTSTRAP";
      case TYPE_ACK -> "ACK";
      case TYPE_REFUSE -> "REFUSE";
      case TYPE_DATA -> "DATA";
      case TYPE_DONE -> "DONE";
      case TYPE_RECEIVED -> "RECEIVED";
      case TYPE_CANCEL -> "CANCEL";
      case TYPE_PING -> "PING";
      default -> "type=" + type;
    };
  }
}
