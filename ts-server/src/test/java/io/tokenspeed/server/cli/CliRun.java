package io.tokenspeed.server.cli;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.List;

/** One in-process run of the CLI with its exit code and captured streams. */
record CliRun(int exitCode, String out, String err) {

  static CliRun of(String... args) {
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    int code =
        TokenSpeedCli.commandLine(new PrintWriter(out, true), new PrintWriter(err, true))
            .execute(args);
    return new CliRun(code, out.toString(), err.toString());
  }

  List<String> outLines() {
    return out.lines().toList();
  }

  /** The first line of the keys output. */
  String namespaceLine() {
    return outLines().getFirst();
  }

  @Override
  public String toString() {
    return "exit=" + exitCode + "\nout:\n" + out + "\nerr:\n" + err;
  }
}
