package io.tokenspeed.server.cli;

import io.tokenspeed.server.config.FileNames;
import io.tokenspeed.server.config.SettingsSources;
import java.io.PrintWriter;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;
import picocli.CommandLine.TypeConversionException;

/**
 * The {@code tokenspeed} command: the entry point of the executable jar and of {@code
 * bin/tokenspeed}.
 *
 * <p>Exit codes: 0 success, 1 invalid input (a bad identity file, an impossible layout), 2 a usage
 * error (an unknown option, a malformed flag value), 70 an internal error. Errors print one line,
 * {@code error: <message>}, on stderr and never a stack trace unless the error is a bug ({@link
 * CliErrors}).
 */
@Command(
    name = "tokenspeed",
    mixinStandardHelpOptions = true,
    versionProvider = VersionProvider.class,
    description = "LLM inference engine with an asynchronous global L3 KV cache.",
    subcommands = {
      DemoCommand.class,
      BenchCommand.class,
      KeysCommand.class,
      ScoreCommand.class,
      GenerateCommand.class,
      ServeCommand.class,
      RouterCommand.class,
      DemoWorkerCommand.class,
      BenchWorkerCommand.class
    },
    footer = {
      "",
      "Exit codes: 0 success, 1 invalid input, 2 usage error, 70 internal error.",
      "Run 'tokenspeed COMMAND --help' for a command's options."
    })
public final class TokenSpeedCli implements Callable<Integer> {
  /** The prefix of {@code serve}'s environment variables. */
  public static final String SERVE_PREFIX = "TOKENSPEED_SERVE_";

  @Spec private CommandSpec spec;

  /** Builds the command line with the house error handling; {@code out}/{@code err} may be null. */
  public static CommandLine commandLine(PrintWriter out, PrintWriter err) {
    return commandLine(out, err, System.getenv());
  }

  /**
   * {@link #commandLine(PrintWriter, PrintWriter)} reading {@code serve}'s settings from {@code
   * environment} ({@value #SERVE_PREFIX}*) as well as from its flags and its {@code --config} file.
   */
  public static CommandLine commandLine(
      PrintWriter out, PrintWriter err, Map<String, String> environment) {
    CommandLine cli = new CommandLine(new TokenSpeedCli());
    if (out != null) {
      cli.setOut(out);
    }
    if (err != null) {
      cli.setErr(err);
    }
    cli.registerConverter(Path.class, TokenSpeedCli::path);
    SettingsSources.install(cli.getSubcommands().get("serve"), SERVE_PREFIX, environment);
    CliErrors errors = new CliErrors();
    cli.setParameterExceptionHandler(errors);
    cli.setExecutionExceptionHandler(errors);
    return cli;
  }

  /**
   * A path option's value; one that the JVM cannot use as a file name is a usage error saying why.
   */
  static Path path(String text) {
    try {
      return Path.of(text);
    } catch (InvalidPathException e) {
      throw new TypeConversionException(
          FileNames.quote(text) + " " + FileNames.whyInvalid(text, e));
    }
  }

  public static void main(String[] args) {
    System.exit(commandLine(null, null).execute(args));
  }

  @Override
  public Integer call() {
    throw new ParameterException(
        spec.commandLine(),
        "a command is required: one of " + String.join(", ", spec.subcommands().keySet()));
  }
}
