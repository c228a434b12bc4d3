package io.tokenspeed.l3.store.mooncake;

/**
 * The integers Mooncake's C API ({@code store_c.h}) answers with, and how {@link MooncakeStore}
 * reads them. The values are Mooncake's {@code ErrorCode} enum ({@code mooncake-store/include/
 * types.h}); the C API passes them through unchanged as {@code int} or {@code int64_t}.
 *
 * <p>An answer proves retirement in one of two ways: it reports a finished transfer (a GET byte
 * count, a PUT {@code 0}), or it is one of three codes Mooncake decides before any payload transfer
 * is submitted ({@code -704}, {@code -705}, {@code -200}; specification, "Retirement and
 * maintenance"):
 *
 * <pre>
 *   code                          where        read as                           retired?
 *   n &gt;= 0, n == length          GET row      Ok(n)                             yes
 *   0 &lt;= n &lt; length              GET row      Invalid(n) (short read)           yes
 *   n &gt; length                   GET row      Unknown(MALFORMED_RESULT)         NO
 *   OBJECT_NOT_FOUND       -704   GET row      Missing (metadata miss)           yes
 *   OK                        0   PUT row      Ok(length, alreadyExisted=false)  yes
 *   OBJECT_ALREADY_EXISTS  -705   PUT row      Ok(length, alreadyExisted=true)   yes
 *   NO_AVAILABLE_HANDLE    -200   PUT row      Rejected(-200): re-offer later    yes
 *   any other negative            GET/PUT row  Unknown(code)                     NO
 *   MALFORMED_RESULT (adapter)    GET/PUT row  Unknown: the SDK's answer broke   NO
 *                                              its own contract
 *   1 / 0                         QUERY row    Ok(0) / Missing                   (no payload)
 *   negative or malformed         QUERY row    Unknown(code)                     (no payload)
 * </pre>
 *
 * <p>Everything else, including {@link #INTERNAL_ERROR} ({@code -1}, which the C layer also returns
 * when it catches a C++ exception, possibly after transfers were submitted), {@link #TRANSFER_FAIL}
 * and {@link #RPC_FAIL}, proves nothing about the payload buffers. The other named constants exist
 * for logs and tests; the adapter never branches on them.
 */
public final class MooncakeCodes {

  /** Success: a PUT row created the object, a call's top-level status was fine. */
  public static final int OK = 0;

  /**
   * The C layer's generic failure: a NULL argument, or a C++ exception it caught. An exception may
   * be thrown after a transfer was submitted, so this code never proves retirement.
   */
  public static final int INTERNAL_ERROR = -1;

  /**
   * PUT: the master found no space for the object and allocated nothing. Decided before any source
   * transfer, so the row is a retired per-page refusal, re-offered later, never a quarantine.
   */
  public static final int NO_AVAILABLE_HANDLE = -200;

  /** Invalid parameters (for example a buffer smaller than the object). Not a retirement proof. */
  public static final int INVALID_PARAMS = -600;

  /** GET: the master has no metadata for the key. Decided before any destination transfer. */
  public static final int OBJECT_NOT_FOUND = -704;

  /**
   * PUT: the object already exists; the create-only PUT wrote nothing. Decided before any source
   * transfer and read as idempotent success.
   */
  public static final int OBJECT_ALREADY_EXISTS = -705;

  /** A transfer failed. It may have moved some bytes and may still be in progress: unknown. */
  public static final int TRANSFER_FAIL = -800;

  /** An RPC to the master failed. Unknown. */
  public static final int RPC_FAIL = -900;

  /**
   * Not a Mooncake code: the code {@link io.tokenspeed.l3.spi.RowResult.Unknown} rows carry when
   * the SDK's answer broke its own contract (a row it did not write, a row written past the count,
   * a value outside the documented set). It equals the sentinel every result row is prefilled with,
   * so "left unwritten" and "written as this value" read the same.
   */
  public static final int MALFORMED_RESULT = Integer.MIN_VALUE;

  private MooncakeCodes() {}

  /** A short name for logs: the enum name for the codes above, else {@code code=<n>}. */
  public static String describe(long code) {
    if (code == OK) {
      return "OK";
    } else if (code == INTERNAL_ERROR) {
      return "INTERNAL_ERROR";
    } else if (code == NO_AVAILABLE_HANDLE) {
      return "NO_AVAILABLE_HANDLE";
    } else if (code == INVALID_PARAMS) {
      return "INVALID_PARAMS";
    } else if (code == OBJECT_NOT_FOUND) {
      return "OBJECT_NOT_FOUND";
    } else if (code == OBJECT_ALREADY_EXISTS) {
      return "OBJECT_ALREADY_EXISTS";
    } else if (code == TRANSFER_FAIL) {
      return "TRANSFER_FAIL";
    } else if (code == RPC_FAIL) {
      return "RPC_FAIL";
    } else if (code == MALFORMED_RESULT) {
      return "MALFORMED_RESULT";
    }
    return "code=" + code;
  }
}
