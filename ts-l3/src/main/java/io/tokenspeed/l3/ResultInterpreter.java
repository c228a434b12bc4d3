package io.tokenspeed.l3;

import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Turns what a store said about a job into the job's facts: per-key outcomes, retirement, bytes and
 * whether the call signals an outage. This is the whole retirement contract of architecture §8 in
 * one place:
 *
 * <pre>
 *   store says                         QUERY            GET                 PUT
 *   Ok(bytes)                          OK               OK if bytes = len;  OK (new or existed)
 *                                                       INVALID if bytes
 *                                                       &lt; len; malformed if
 *                                                       bytes &gt; len
 *   Missing                            FAILED (absent)  MISSING             malformed
 *   Invalid                            FAILED           INVALID             malformed
 *   Rejected                           FAILED           FAILED              FAILED (re-offer;
 *                                                                           a write refusal
 *                                                                           unless an outage)
 *                                      (all three retired; an outage only when the row says so)
 *   Unknown                            FAILED, outage   FAILED, unretired,  FAILED, unretired,
 *                                                       outage              outage
 *   malformed row                      -                FAILED, outage; retired only if the
 *                                                       store's failures retire
 *   throws StoreConfigurationException all FAILED, retired, no evidence, NOT an outage
 *                                      (a configuration failure: counted and logged instead)
 *   wrong row count / throws           all FAILED, outage; retired only if the store's failures
 *                                      retire (QUERY always retires: it touches no payload)
 *   throws an Error                    all FAILED, outage; never retired except QUERY (the
 *                                      executor quarantines: the worker dies mid-call)
 * </pre>
 *
 * <p>A GET answer longer than its destination cannot have landed in it: the store wrote past the
 * buffer or answered out of contract. It is malformed, not an object fact, so it proves no
 * retirement and names no invalid object.
 *
 * <p>Rows another rank owns are reported OK and retired with no bytes and no object evidence; they
 * never reach the store.
 */
final class ResultInterpreter {

  private ResultInterpreter() {}

  /**
   * The facts of one finished call. {@code refused} counts the PUT rows the store refused without
   * reporting an outage (a {@code Rejected} row: no space, a full server), the store's write
   * refusals; {@code refusal} is the first one's reason ({@link RowResult.Rejected#describe}),
   * empty when none was refused.
   */
  record Facts(
      List<KeyOutcome> outcomes,
      boolean retired,
      long bytes,
      boolean outage,
      int alreadyExisted,
      int newlyWritten,
      int refused,
      String refusal) {

    Facts(
        List<KeyOutcome> outcomes,
        boolean retired,
        long bytes,
        boolean outage,
        int alreadyExisted,
        int newlyWritten) {
      this(outcomes, retired, bytes, outage, alreadyExisted, newlyWritten, 0, "");
    }
  }

  /** Indexes of the rows this rank moves or asks about, in row order. */
  static int[] ownedRows(StorageJob job) {
    int[] idx = new int[job.rows().size()];
    int n = 0;
    for (int i = 0; i < job.rows().size(); i++) {
      if (job.rows().get(i).owned()) {
        idx[n++] = i;
      }
    }
    return Arrays.copyOf(idx, n);
  }

  /** Facts when the store answered. */
  static Facts interpret(
      StorageJob job, int[] owned, StoreResult result, boolean storeFailuresRetire) {
    if (result == null || result.rows().size() != owned.length) {
      return failed(job, owned, storeFailuresRetire);
    }
    KeyOutcome[] outcomes = initialOutcomes(job);
    boolean retired = result.retired() || job.kind() == StorageKind.QUERY;
    boolean outage = !result.retired() && job.kind() != StorageKind.QUERY;
    long bytes = 0;
    int existed = 0;
    int written = 0;
    int refused = 0;
    String refusal = "";
    for (int i = 0; i < owned.length; i++) {
      int row = owned[i];
      JobRow jobRow = job.rows().get(row);
      RowResult r = result.rows().get(i);
      KeyOutcome outcome;
      switch (job.kind()) {
        case QUERY -> {
          outcome = r instanceof RowResult.Ok ? KeyOutcome.OK : KeyOutcome.FAILED;
          outage |=
              r instanceof RowResult.Unknown
                  || r == null
                  || (r instanceof RowResult.Rejected rej && rej.outage());
        }
        case GET -> {
          switch (r) {
            case RowResult.Ok ok -> {
              long length = jobRow.range().lengthBytes();
              if (ok.bytes() == length) {
                outcome = KeyOutcome.OK;
                bytes += ok.bytes();
              } else if (ok.bytes() < length) {
                outcome = KeyOutcome.INVALID;
              } else {
                outcome = KeyOutcome.FAILED; // more than the destination holds: malformed
                retired &= storeFailuresRetire;
                outage = true;
              }
            }
            case RowResult.Missing m -> outcome = KeyOutcome.MISSING;
            case RowResult.Invalid inv -> outcome = KeyOutcome.INVALID;
            case RowResult.Rejected rej -> {
              outcome = KeyOutcome.FAILED;
              outage |= rej.outage();
            }
            case RowResult.Unknown u -> {
              outcome = KeyOutcome.FAILED;
              retired = false;
              outage = true;
            }
            case null -> {
              outcome = KeyOutcome.FAILED;
              retired &= storeFailuresRetire;
              outage = true;
            }
          }
        }
        case PUT -> {
          switch (r) {
            case RowResult.Ok ok -> {
              outcome = KeyOutcome.OK;
              bytes += jobRow.range().lengthBytes();
              if (ok.alreadyExisted()) {
                existed++;
              } else {
                written++;
              }
            }
            case RowResult.Rejected rej -> {
              outcome = KeyOutcome.FAILED;
              outage |= rej.outage();
              if (!rej.outage()) {
                refusal = refused++ == 0 ? rej.describe() : refusal;
              }
            }
            case RowResult.Unknown u -> {
              outcome = KeyOutcome.FAILED;
              retired = false;
              outage = true;
            }
            case RowResult.Missing m -> {
              outcome = KeyOutcome.FAILED; // a PUT cannot report a read failure: malformed
              retired &= storeFailuresRetire;
              outage = true;
            }
            case RowResult.Invalid inv -> {
              outcome = KeyOutcome.FAILED;
              retired &= storeFailuresRetire;
              outage = true;
            }
            case null -> {
              outcome = KeyOutcome.FAILED;
              retired &= storeFailuresRetire;
              outage = true;
            }
          }
        }
        default -> throw new IllegalStateException("unknown kind " + job.kind());
      }
      outcomes[row] = outcome;
    }
    if (!retired) {
      bytes = 0; // nothing is proven to have landed
    }
    return new Facts(List.of(outcomes), retired, bytes, outage, existed, written, refused, refusal);
  }

  /** Facts when the call threw or returned a malformed answer. */
  static Facts failed(StorageJob job, int[] owned, boolean storeFailuresRetire) {
    KeyOutcome[] outcomes = initialOutcomes(job);
    for (int row : owned) {
      outcomes[row] = KeyOutcome.FAILED;
    }
    boolean retired = job.kind() == StorageKind.QUERY || storeFailuresRetire || owned.length == 0;
    return new Facts(List.of(outcomes), retired, 0, true, 0, 0);
  }

  /**
   * Facts when the store refused the call for a configuration reason ({@link
   * io.tokenspeed.l3.spi.StoreConfigurationException}): owned rows FAILED, retired (the refusal
   * came before any transfer), no bytes, no object evidence, and no outage.
   */
  static Facts configurationFailure(StorageJob job, int[] owned) {
    KeyOutcome[] outcomes = initialOutcomes(job);
    for (int row : owned) {
      outcomes[row] = KeyOutcome.FAILED;
    }
    return new Facts(List.of(outcomes), true, 0, false, 0, 0);
  }

  /**
   * Facts when the store call threw an {@link Error}: the worker dies, so nothing proves that the
   * store stopped touching the buffers; only a QUERY, which hands it none, retires.
   */
  static Facts fatal(StorageJob job, int[] owned) {
    return failed(job, owned, false);
  }

  /** Facts of a job none of whose rows this rank owns: retired successes, no bytes, no call. */
  static Facts nothingOwned(StorageJob job) {
    return new Facts(List.of(initialOutcomes(job)), true, 0, false, 0, 0);
  }

  /** Facts of a job that never reached the store (rejected, or cancelled while queued). */
  static List<KeyOutcome> notRun(StorageJob job) {
    List<KeyOutcome> out = new ArrayList<>(job.rows().size());
    for (int i = 0; i < job.rows().size(); i++) {
      out.add(KeyOutcome.FAILED);
    }
    return out;
  }

  /** Every row starts as another rank's: OK with no evidence; owned rows are overwritten. */
  private static KeyOutcome[] initialOutcomes(StorageJob job) {
    KeyOutcome[] outcomes = new KeyOutcome[job.rows().size()];
    Arrays.fill(outcomes, KeyOutcome.OK);
    return outcomes;
  }
}
