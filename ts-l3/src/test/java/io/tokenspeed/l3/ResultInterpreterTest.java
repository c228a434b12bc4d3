package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/** The retirement contract of architecture §8, row by row. */
class ResultInterpreterTest {

  private static StorageJob job(StorageKind kind) {
    JobRow row =
        kind == StorageKind.QUERY
            ? JobRow.query("ns_k")
            : JobRow.owned("ns_k", new HostRange(0, 100));
    return new StorageJob(1, kind, List.of(row));
  }

  static Stream<Arguments> table() {
    RowResult ok100 = new RowResult.Ok(100, false);
    return Stream.of(
        // kind, store row, store retired, failuresRetire, outcome, retired, outage, bytes
        Arguments.of(StorageKind.GET, ok100, true, false, KeyOutcome.OK, true, false, 100),
        Arguments.of(
            StorageKind.GET,
            new RowResult.Ok(99, false),
            true,
            false,
            KeyOutcome.INVALID,
            true,
            false,
            0),
        // more bytes than the destination holds is malformed, not an invalid object
        Arguments.of(
            StorageKind.GET,
            new RowResult.Ok(101, false),
            true,
            false,
            KeyOutcome.FAILED,
            false,
            true,
            0),
        Arguments.of(
            StorageKind.GET,
            new RowResult.Ok(101, false),
            true,
            true,
            KeyOutcome.FAILED,
            true,
            true,
            0),
        Arguments.of(
            StorageKind.GET, RowResult.MISSING, true, false, KeyOutcome.MISSING, true, false, 0),
        Arguments.of(
            StorageKind.GET,
            new RowResult.Invalid(40),
            true,
            false,
            KeyOutcome.INVALID,
            true,
            false,
            0),
        Arguments.of(
            StorageKind.GET,
            new RowResult.Rejected(-200),
            true,
            false,
            KeyOutcome.FAILED,
            true,
            false,
            0),
        // a retired failure from an unwell backend (an RPC timeout): retired, but an outage
        Arguments.of(
            StorageKind.GET,
            new RowResult.Rejected(-901, true),
            true,
            false,
            KeyOutcome.FAILED,
            true,
            true,
            0),
        Arguments.of(
            StorageKind.PUT,
            new RowResult.Rejected(-901, true),
            true,
            false,
            KeyOutcome.FAILED,
            true,
            true,
            0),
        Arguments.of(
            StorageKind.QUERY,
            new RowResult.Rejected(-901, true),
            true,
            false,
            KeyOutcome.FAILED,
            true,
            true,
            0),
        Arguments.of(
            StorageKind.GET,
            new RowResult.Unknown(-1),
            true,
            true,
            KeyOutcome.FAILED,
            false,
            true,
            0),
        Arguments.of(StorageKind.GET, ok100, false, true, KeyOutcome.OK, false, true, 0),
        Arguments.of(StorageKind.PUT, ok100, true, false, KeyOutcome.OK, true, false, 100),
        Arguments.of(
            StorageKind.PUT,
            new RowResult.Ok(100, true),
            true,
            false,
            KeyOutcome.OK,
            true,
            false,
            100),
        Arguments.of(
            StorageKind.PUT,
            new RowResult.Rejected(-200),
            true,
            false,
            KeyOutcome.FAILED,
            true,
            false,
            0),
        Arguments.of(
            StorageKind.PUT,
            new RowResult.Unknown(-800),
            true,
            true,
            KeyOutcome.FAILED,
            false,
            true,
            0),
        Arguments.of(
            StorageKind.PUT, RowResult.MISSING, true, false, KeyOutcome.FAILED, false, true, 0),
        Arguments.of(
            StorageKind.PUT, RowResult.MISSING, true, true, KeyOutcome.FAILED, true, true, 0),
        Arguments.of(
            StorageKind.QUERY,
            new RowResult.Ok(0, false),
            true,
            false,
            KeyOutcome.OK,
            true,
            false,
            0),
        Arguments.of(
            StorageKind.QUERY, RowResult.MISSING, true, false, KeyOutcome.FAILED, true, false, 0),
        Arguments.of(
            StorageKind.QUERY,
            new RowResult.Unknown(-1),
            false,
            false,
            KeyOutcome.FAILED,
            true,
            true,
            0));
  }

  @ParameterizedTest(name = "{0} {1} retired={2} failuresRetire={3}")
  @MethodSource("table")
  void shouldFollowTheRetirementContract(
      StorageKind kind,
      RowResult row,
      boolean storeRetired,
      boolean failuresRetire,
      KeyOutcome outcome,
      boolean retired,
      boolean outage,
      long bytes) {
    StorageJob job = job(kind);
    ResultInterpreter.Facts f =
        ResultInterpreter.interpret(
            job,
            ResultInterpreter.ownedRows(job),
            new StoreResult(List.of(row), storeRetired),
            failuresRetire);
    assertEquals(List.of(outcome), f.outcomes());
    assertEquals(retired, f.retired(), "retired");
    assertEquals(outage, f.outage(), "outage");
    assertEquals(bytes, f.bytes(), "bytes");
  }

  @ParameterizedTest(name = "{0} failuresRetire={1}")
  @MethodSource("malformed")
  void shouldTreatWrongRowCountsAsMalformed(
      StorageKind kind, boolean failuresRetire, boolean retired) {
    StorageJob job = job(kind);
    ResultInterpreter.Facts f =
        ResultInterpreter.interpret(
            job, ResultInterpreter.ownedRows(job), StoreResult.of(List.of()), failuresRetire);
    assertEquals(List.of(KeyOutcome.FAILED), f.outcomes());
    assertEquals(retired, f.retired());
    assertEquals(true, f.outage());
  }

  static Stream<Arguments> malformed() {
    return Stream.of(
        Arguments.of(StorageKind.GET, false, false),
        Arguments.of(StorageKind.GET, true, true),
        Arguments.of(StorageKind.PUT, false, false),
        Arguments.of(StorageKind.QUERY, false, true));
  }

  @ParameterizedTest(name = "{0}")
  @org.junit.jupiter.params.provider.EnumSource(StorageKind.class)
  void shouldFailAConfigurationRefusalRetiredWithoutEvidenceOrOutage(StorageKind kind) {
    StorageJob job = job(kind);
    ResultInterpreter.Facts f =
        ResultInterpreter.configurationFailure(job, ResultInterpreter.ownedRows(job));
    assertEquals(List.of(KeyOutcome.FAILED), f.outcomes(), "FAILED: no object evidence");
    assertEquals(true, f.retired(), "refused before any transfer");
    assertEquals(false, f.outage(), "a configuration failure is not an outage");
    assertEquals(0, f.bytes());
  }
}
