package io.tokenspeed.l3.store.mooncake;

/**
 * The integers Mooncake's C API ({@code store_c.h}) answers with, and how {@link MooncakeStore}
 * reads them. The values are Mooncake's {@code ErrorCode} enum ({@code mooncake-store/include/
 * types.h}); the C API passes them through unchanged as {@code int} or {@code int64_t}.
 *
 * <p>An answer proves retirement in one of two ways: it reports a finished transfer (a GET byte
 * count, a PUT {@code 0}), or the real client produces that code only before it submits the row's
 * transfer or only after it has waited for every transfer of the call to finish. Which codes those
 * are was decided by reading where the client ({@code mooncake-store/src/real_client.cpp}, {@code
 * client_service.cpp}) and the master ({@code master_service.cpp}) produce them; docs/mooncake.md
 * names the producing function of each.
 *
 * <pre>
 *   code                          where        read as                        retired?  outage?
 *   n &gt;= 0, n == length          GET row      Ok(n)                          yes       no
 *   0 &lt;= n &lt; length              GET row      Invalid(n): the object is      yes       no
 *                                              shorter than the block
 *   n &gt; length                   GET row      Unknown(MALFORMED_RESULT)      NO        yes
 *   OBJECT_NOT_FOUND       -704   GET row      Missing (metadata miss)        yes       no
 *   REPLICA_IS_NOT_READY   -703   GET row      Rejected: a PUT is under way   yes       no
 *   INVALID_REPLICA        -702   GET row      Rejected                       yes       no
 *   INVALID_PARAMS         -600   GET row      Rejected: the object is larger yes       no
 *                                              than the block
 *   NO_AVAILABLE_HANDLE    -200   GET row      Rejected                       yes       no
 *   LEASE_EXPIRED          -707   GET row      Rejected: bytes untrusted      yes       no
 *   CHECKSUM_MISMATCH      -801   GET row      Rejected: bytes untrusted      yes       yes
 *   RPC_FAIL / RPC_TIMEOUT -900/-901 GET row   Rejected                       yes       yes
 *   OK                        0   PUT row      Ok(length, alreadyExisted=false) yes     no
 *                                              (created, or already present)
 *   OBJECT_ALREADY_EXISTS  -705   PUT row      Ok(length, alreadyExisted=true)  yes     no
 *   NO_AVAILABLE_HANDLE    -200   PUT row      Rejected(-200): re-offer later yes       no
 *   RPC_FAIL / RPC_TIMEOUT -900/-901 PUT row   Rejected                       yes       yes
 *   any other negative            GET/PUT row  Unknown(code)                  NO        yes
 *   MALFORMED_RESULT (adapter)    GET/PUT row  Unknown: the SDK's answer      NO        yes
 *                                              broke its own contract
 *   1 / 0                         QUERY row    Ok(0) / Missing                (no payload)
 *   negative or malformed         QUERY row    Unknown(code)                  (no payload) yes
 * </pre>
 *
 * <p>None of the Rejected GET codes is object evidence: only {@code -704} (missing) and a short
 * read (invalid) are. {@code -703} in particular says the object's PUT has not finished, so the
 * same key may be readable a moment later.
 *
 * <p>Everything else, including {@link #INTERNAL_ERROR} ({@code -1}, which the C layer also returns
 * when it catches a C++ exception, possibly after transfers were submitted), {@link #TRANSFER_FAIL}
 * (a transfer that failed or could not be waited for) and every code the client does not produce on
 * these paths, proves nothing about the payload buffers.
 */
public final class MooncakeCodes {

  /**
   * Success: a PUT row whose object now exists (created by this call or, with the real client,
   * already present), a call's top-level status was fine.
   */
  public static final int OK = 0;

  /**
   * The C layer's generic failure: a NULL argument, or a C++ exception it caught. An exception may
   * be thrown after a transfer was submitted, so this code never proves retirement.
   */
  public static final int INTERNAL_ERROR = -1;

  /**
   * PUT: the master found no space for the object and allocated nothing. Decided before any source
   * transfer, so the row is a retired per-page refusal, re-offered later, never a quarantine. GET:
   * the client could not allocate a staging buffer for a disk replica, before any transfer into the
   * destination.
   */
  public static final int NO_AVAILABLE_HANDLE = -200;

  /**
   * Invalid parameters. On a GET row the client decided it before any transfer: above all, a
   * destination smaller than the object. On a PUT row it is not read as a retirement proof.
   */
  public static final int INVALID_PARAMS = -600;

  /** GET: the master's metadata lists no usable replica. Decided before any transfer. */
  public static final int INVALID_REPLICA = -702;

  /**
   * GET: the object's PUT has not finished (no complete replica yet). Decided by the master before
   * any transfer; not object evidence, the object may become readable.
   */
  public static final int REPLICA_IS_NOT_READY = -703;

  /** GET: the master has no metadata for the key. Decided before any destination transfer. */
  public static final int OBJECT_NOT_FOUND = -704;

  /**
   * PUT: the object already exists; the create-only PUT wrote nothing. Decided before any source
   * transfer and read as idempotent success. The real client never lets it through (it reports the
   * row as {@link #OK}); the adapter accepts it because the specification names it.
   */
  public static final int OBJECT_ALREADY_EXISTS = -705;

  /** Remove: the object is under a read lease and {@code force} was 0. */
  public static final int OBJECT_HAS_LEASE = -706;

  /**
   * GET: the read lease granted with the metadata ended before the transfer finished. The client
   * checks it only after the transfer completed, so the destination is no longer touched, but its
   * bytes may have been overwritten at the source meanwhile: a retired failure, no object evidence.
   */
  public static final int LEASE_EXPIRED = -707;

  /** A transfer failed. It may have moved some bytes and may still be in progress: unknown. */
  public static final int TRANSFER_FAIL = -800;

  /**
   * GET: the bytes that landed do not match the checksum recorded at PUT (only with object
   * checksums enabled). Computed after the transfer completed: retired, the bytes are not used.
   */
  public static final int CHECKSUM_MISMATCH = -801;

  /**
   * An RPC to the master failed. The client calls the master before a row's transfer is submitted
   * or after every transfer of the call was waited for, so the row is retired; an outage signal.
   */
  public static final int RPC_FAIL = -900;

  /** An RPC to the master passed its client-side deadline. Retired, like {@link #RPC_FAIL}. */
  public static final int RPC_TIMEOUT = -901;

  /**
   * Not a Mooncake code: the code {@link io.tokenspeed.l3.spi.RowResult.Unknown} rows carry when
   * the SDK's answer broke its own contract (a row it did not write, a row written past the count,
   * a value outside the documented set). It equals the sentinel every result row is prefilled with,
   * so "left unwritten" and "written as this value" read the same.
   */
  public static final int MALFORMED_RESULT = Integer.MIN_VALUE;

  private MooncakeCodes() {}

  /**
   * Whether a negative GET row code is one the client produces only before the row's transfer is
   * submitted or after every transfer of the call finished: the row is then a retired failure.
   * {@link #OBJECT_NOT_FOUND} is retired too, but is a miss and answered apart.
   */
  static boolean retiredGetFailure(long code) {
    return code == REPLICA_IS_NOT_READY
        || code == INVALID_REPLICA
        || code == INVALID_PARAMS
        || code == NO_AVAILABLE_HANDLE
        || code == LEASE_EXPIRED
        || code == CHECKSUM_MISMATCH
        || code == RPC_FAIL
        || code == RPC_TIMEOUT;
  }

  /**
   * Whether a negative PUT row code is a retired failure other than {@link #NO_AVAILABLE_HANDLE}:
   * the master's RPCs, made before the source transfer or after it was waited for.
   */
  static boolean retiredPutFailure(long code) {
    return code == RPC_FAIL || code == RPC_TIMEOUT;
  }

  /** Whether a retired failure also signals an outage (the master or the data path is unwell). */
  static boolean outage(long code) {
    return code == RPC_FAIL || code == RPC_TIMEOUT || code == CHECKSUM_MISMATCH;
  }

  /** A short name for logs: the enum name for the codes above, else {@code code=<n>}. */
  public static String describe(long code) {
    if (code == MALFORMED_RESULT) {
      return "MALFORMED_RESULT";
    }
    if (code < Integer.MIN_VALUE || code > Integer.MAX_VALUE) {
      return "code=" + code;
    }
    return switch ((int) code) {
      case OK -> "OK";
      case INTERNAL_ERROR -> "INTERNAL_ERROR";
      case NO_AVAILABLE_HANDLE -> "NO_AVAILABLE_HANDLE";
      case INVALID_PARAMS -> "INVALID_PARAMS";
      case INVALID_REPLICA -> "INVALID_REPLICA";
      case REPLICA_IS_NOT_READY -> "REPLICA_IS_NOT_READY";
      case OBJECT_NOT_FOUND -> "OBJECT_NOT_FOUND";
      case OBJECT_ALREADY_EXISTS -> "OBJECT_ALREADY_EXISTS";
      case OBJECT_HAS_LEASE -> "OBJECT_HAS_LEASE";
      case LEASE_EXPIRED -> "LEASE_EXPIRED";
      case TRANSFER_FAIL -> "TRANSFER_FAIL";
      case CHECKSUM_MISMATCH -> "CHECKSUM_MISMATCH";
      case RPC_FAIL -> "RPC_FAIL";
      case RPC_TIMEOUT -> "RPC_TIMEOUT";
      default -> "code=" + code;
    };
  }
}
