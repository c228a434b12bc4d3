package io.tokenspeed.server.cli;

import io.tokenspeed.server.config.SettingsSources;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import picocli.CommandLine;
import picocli.CommandLine.IExecutionExceptionHandler;
import picocli.CommandLine.IParameterExceptionHandler;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.ParseResult;

/**
 * How the CLI reports failure: one line, {@code error: <message>}, on stderr.
 *
 * <ul>
 *   <li>Usage errors (picocli's {@link ParameterException}, also thrown by commands for a bad flag
 *       value) exit with {@value #EXIT_USAGE} and point at the command's {@code --help}. When the
 *       value came from a command's environment variable or configuration file, the message starts
 *       with that source ({@link SettingsSources#attributed}).
 *   <li>Invalid input ({@link IllegalArgumentException}, which includes configuration errors, and
 *       I/O failures) exits with {@value #EXIT_INVALID_INPUT}. These messages already name the
 *       field and the value; a stack trace would only hide them.
 *   <li>A worker process of a multi-process command that failed has relayed its own error lines:
 *       one more line names it, and the command exits with the worker's status (a usage error or
 *       invalid input as such, anything else as {@value #EXIT_INTERNAL}).
 *   <li>Anything else is a bug: it exits with {@value #EXIT_INTERNAL} and prints the stack trace,
 *       which is then worth having.
 * </ul>
 */
final class CliErrors implements IParameterExceptionHandler, IExecutionExceptionHandler {

  static final int EXIT_INVALID_INPUT = 1;
  static final int EXIT_USAGE = CommandLine.ExitCode.USAGE;
  static final int EXIT_INTERNAL = 70;

  /** A rank of a tensor-parallel replica failed (died, froze, or stopped on an error). */
  static final int EXIT_REPLICA = 69;

  /** The replica this rank belongs to stopped because a rank failed; the message names it. */
  static final class ReplicaFailedException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    ReplicaFailedException(String message, Throwable cause) {
      super(message, cause);
    }
  }

  @Override
  public int handleParseException(ParameterException ex, String[] args) {
    ParameterException shown = SettingsSources.attributed(ex);
    CommandLine cmd = shown.getCommandLine();
    cmd.getErr()
        .println(
            "error: "
                + oneLine(shown.getMessage())
                + " (see '"
                + cmd.getCommandSpec().qualifiedName()
                + " --help')");
    cmd.getErr().flush();
    return EXIT_USAGE;
  }

  @Override
  public int handleExecutionException(Exception ex, CommandLine cmd, ParseResult parseResult) {
    PrintWriter err = cmd.getErr();
    if (ex instanceof WorkerProcess.WorkerFailedException failed) {
      err.println("error: " + oneLine(failed.getMessage()));
      err.flush();
      int code = failed.exitCode();
      return code == EXIT_INVALID_INPUT || code == EXIT_USAGE ? code : EXIT_INTERNAL;
    }
    if (ex instanceof ReplicaFailedException) {
      err.println("error: " + oneLine(ex.getMessage()));
      err.flush();
      return EXIT_REPLICA;
    }
    if (ex instanceof IllegalArgumentException
        || ex instanceof UncheckedIOException
        || ex instanceof IOException) {
      err.println("error: " + oneLine(ex.getMessage()));
      err.flush();
      return EXIT_INVALID_INPUT;
    }
    err.println("error: internal error, please report it: " + oneLine(String.valueOf(ex)));
    ex.printStackTrace(err);
    err.flush();
    return EXIT_INTERNAL;
  }

  /** Messages may quote user input; keep the report on one line whatever it contains. */
  static String oneLine(String message) {
    return message == null ? "(no message)" : message.replaceAll("\\s*[\\r\\n]+\\s*", " ");
  }
}
