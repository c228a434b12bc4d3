package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** The shaded jar run as users run it ({@code java -jar}), in its own process. */
final class JarProcess {
  record Result(int exitCode, String out, String err) {}

  private JarProcess() {}

  /** Runs {@code java -jar tokenspeed.jar ARGS} in {@code workDir}; fails past the timeout. */
  static Result run(Path workDir, List<String> args, long timeoutSeconds)
      throws IOException, InterruptedException {
    return run(workDir, List.of(), Map.of(), args, timeoutSeconds);
  }

  /**
   * Runs {@code java JVM_OPTIONS -jar tokenspeed.jar ARGS} in {@code workDir} with {@code env}
   * added to this process's environment; fails past the timeout.
   */
  static Result run(
      Path workDir,
      List<String> jvmOptions,
      Map<String, String> env,
      List<String> args,
      long timeoutSeconds)
      throws IOException, InterruptedException {
    Path jar = Path.of(System.getProperty("tokenspeed.jar", "target/tokenspeed.jar"));
    assertTrue(Files.isRegularFile(jar), () -> "no executable jar at " + jar.toAbsolutePath());
    List<String> command =
        new ArrayList<>(
            List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
    command.addAll(jvmOptions);
    command.addAll(List.of("-jar", jar.toAbsolutePath().toString()));
    command.addAll(args);
    Path out = Files.createTempFile(workDir, "stdout", ".txt");
    Path err = Files.createTempFile(workDir, "stderr", ".txt");
    ProcessBuilder builder =
        new ProcessBuilder(command)
            .directory(workDir.toFile())
            .redirectOutput(out.toFile())
            .redirectError(err.toFile());
    builder.environment().putAll(env);
    Process p = builder.start();
    if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new AssertionError("timed out: " + command);
    }
    return new Result(
        p.exitValue(),
        Files.readString(out, StandardCharsets.UTF_8),
        Files.readString(err, StandardCharsets.UTF_8));
  }

  /**
   * The trimmed cells of the first Markdown table row of {@code text} that starts with {@code
   * first}.
   */
  static String[] row(String text, String... first) {
    String prefix = "| " + String.join(" | ", first) + " |";
    String line =
        text.lines()
            .filter(l -> l.startsWith(prefix))
            .findFirst()
            .orElseThrow(() -> new AssertionError("no row " + prefix + " in:\n" + text));
    String[] cells = line.split("\\|");
    String[] trimmed = new String[cells.length - 1];
    for (int i = 1; i < cells.length; i++) {
      trimmed[i - 1] = cells[i].trim();
    }
    return trimmed;
  }
}
