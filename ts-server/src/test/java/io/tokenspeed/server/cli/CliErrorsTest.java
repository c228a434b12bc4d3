package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.concurrent.Callable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/** How a failing command reports: exit codes and the one-line messages. */
class CliErrorsTest {

  @Command(name = "failing")
  static final class Failing implements Callable<Integer> {
    Exception failure;

    @Override
    public Integer call() throws Exception {
      throw failure;
    }
  }

  private static String[] run(Exception failure) {
    Failing command = new Failing();
    command.failure = failure;
    CommandLine cli = new CommandLine(command);
    StringWriter err = new StringWriter();
    cli.setErr(new PrintWriter(err, true));
    CliErrors errors = new CliErrors();
    cli.setParameterExceptionHandler(errors);
    cli.setExecutionExceptionHandler(errors);
    return new String[] {String.valueOf(cli.execute()), err.toString()};
  }

  @ParameterizedTest(name = "worker exit {0} -> {1}")
  @CsvSource({"1, 1", "2, 2", "70, 70", "137, 70", "3, 70"})
  void shouldReportAFailedWorkerInOneLineWithItsStatus(int workerExit, int expected) {
    String[] r = run(new WorkerProcess.WorkerFailedException("file-writer", workerExit));
    assertEquals(String.valueOf(expected), r[0], r[1]);
    assertEquals(
        "error: the file-writer process failed with exit code "
            + workerExit
            + " (its errors are above, prefixed with its role)",
        r[1].strip());
  }

  @ParameterizedTest(name = "{0}")
  @CsvSource({"io", "argument"})
  void shouldReportAnIoFailureOrBadInputAsInvalidInputWithoutATrace(String kind) {
    Exception failure =
        kind.equals("io")
            ? new IOException("redis cannot connect to redis://127.0.0.1:1")
            : new IllegalArgumentException("bad\nvalue");
    String[] r = run(failure);
    assertEquals("1", r[0], r[1]);
    assertEquals(1, r[1].lines().count(), r[1]);
    assertFalse(r[1].contains("internal error"), r[1]);
  }

  @Test
  void shouldReportABugWithItsTrace() {
    String[] r = run(new IllegalStateException("a bug"));
    assertEquals("70", r[0], r[1]);
    assertEquals(
        "error: internal error, please report it: java.lang.IllegalStateException: a bug",
        r[1].lines().findFirst().orElseThrow());
    assertFalse(r[1].lines().count() < 2, "the stack trace follows: " + r[1]);
  }
}
