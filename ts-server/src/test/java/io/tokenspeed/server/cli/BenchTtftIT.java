package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.server.cli.JarProcess.Result;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code tokenspeed bench ttft} at a small scale, as users run it: the shaded jar starts the writer
 * and reader processes over the memory and file stores (warm and cold page cache) and writes its
 * report. Every cohort must be in the report with what it reused, and every L3 output must equal
 * the recomputation; the same with every writer and reader a TP=2 replica.
 */
class BenchTtftIT {
  @TempDir Path workDir;

  @Test
  void shouldWriteAReportWhereEveryStoreRestoresThePrefixAndMatchesRecomputation()
      throws Exception {
    Path out = workDir.resolve("report");
    Result r =
        benchTtft(
            List.of(
                "--stores",
                "memory,file",
                "--prompts",
                "1",
                "--prefix-tokens",
                "192",
                "--suffix-tokens",
                "16",
                "--max-tokens",
                "2",
                "--decode-tokens",
                "4",
                "--pairs",
                "2",
                "--decode-pairs",
                "2",
                "--threads",
                "1",
                "--device",
                "cpu",
                "--out",
                out.toString(),
                "--name",
                "small"),
            600);
    assertEquals(0, r.exitCode(), r::toString);
    String report = Files.readString(out.resolve("small.md"));
    assertTrue(Files.readString(out.resolve("small.svg")).startsWith("<svg"), "the chart");
    // written after each reader, then replaced by the whole run's report
    assertFalse(report.contains("Partial report"), report);
    assertFalse(r.err().contains("the partial report could not be written"), r::err);
    assertTrue(r.out().contains("wrote " + out.resolve("small.md")), r::out);
    for (String store : List.of("memory", "file-warm", "file-cold")) {
      String[] l3 = JarProcess.row(report, store, "l3");
      assertEquals("1", l3[2], store + ": requests");
      assertEquals("192", l3[5], store + ": every full page of the prefix came from L3");
      assertEquals("16", l3[6], store + ": only the suffix is left to compute");
      assertEquals("0", l3[7], store + ": no fallback");
      String[] partial = JarProcess.row(report, store, "partial");
      assertEquals("64", partial[5], store + ": half the prefix, rounded down to a page");
      String[] recompute = JarProcess.row(report, store, "recompute");
      assertEquals("0", recompute[5], store + ": nothing reused without L3");
      assertEquals("208", recompute[6]);
      for (String miss : List.of("miss-l3", "miss-off")) {
        String[] m = JarProcess.row(report, store, miss);
        assertEquals("2", m[2], store + " " + miss + ": one request per pair");
        assertEquals("0", m[5], store + " " + miss + ": nothing to restore");
      }
      String[] summary = summary(report, store);
      assertEquals("yes", summary[summary.length - 1], store + ": L3 outputs = recompute");
      assertTrue(
          summary[2].contains("raw") && summary[3].contains("GETs"), String.join("|", summary));
      assertTrue(summary[4].contains("L3's own time"), String.join("|", summary));
    }
    assertTrue(report.contains("on the CPU, TP=1"), report);
    for (String writer : List.of("memory", "file-writer")) {
      // the writers' table: every PUT row issued was written, and the engine dropped no backup
      var w =
          java.util.regex.Pattern.compile(
                  "\\| "
                      + writer
                      + " \\| ([0-9]+) / ([0-9]+) \\| [0-9]+\\.[0-9]{2} \\| [0-9]+\\.[0-9] \\|"
                      + " (.*) \\|\n")
              .matcher(report);
      assertTrue(w.find(), writer + ": a writer row in " + report);
      assertTrue(Long.parseLong(w.group(2)) > 0, writer + ": PUT rows issued");
      assertEquals(w.group(2), w.group(1), writer + ": every PUT row written");
      assertEquals("none", w.group(3), writer + ": no backup key dropped");
    }
    for (String store : List.of("memory", "file-warm", "file-cold")) {
      // the Host->Device table: the restored blocks' bytes (192 tokens' KV) and their copy time
      var h2d =
          java.util.regex.Pattern.compile(
                  "\\| " + store + " \\| ([0-9]+\\.[0-9]) \\| ([0-9]+\\.[0-9]{2}) \\| ")
              .matcher(report);
      assertTrue(h2d.find(), store + ": a Host->Device row in " + report);
      assertTrue(Double.parseDouble(h2d.group(1)) > 0, store + ": restored bytes went up");
    }
    assertTrue(
        java.util.regex.Pattern.compile(
                "tokens reused from L3: memory [1-9][0-9]*; file-warm [1-9][0-9]*;"
                    + " file-cold [1-9][0-9]*\\)")
            .matcher(report)
            .find(),
        "every reader's warm-up restored from L3: " + report);
  }

  @Test
  void shouldRunEveryWriterAndReaderAsATp2ReplicaAndReportItsSize() throws Exception {
    Path out = workDir.resolve("report-tp");
    Result r =
        benchTtft(
            List.of(
                "--stores",
                "memory,file",
                "--prompts",
                "2",
                "--prefix-tokens",
                "192",
                "--suffix-tokens",
                "16",
                "--max-tokens",
                "2",
                "--decode-tokens",
                "4",
                "--pairs",
                "1",
                "--decode-pairs",
                "2",
                "--threads",
                "1",
                "--tp",
                "2",
                "--out",
                out.toString()),
            600);
    assertEquals(0, r.exitCode(), r::toString);
    List<Path> reports;
    try (var files = Files.list(out)) {
      reports = files.filter(f -> f.toString().endsWith(".md")).toList();
    }
    assertEquals(1, reports.size(), reports::toString);
    assertTrue(
        reports.getFirst().getFileName().toString().endsWith("-l3-ttft-tp2.md"),
        "the default name says the TP size: " + reports);
    String report = Files.readString(reports.getFirst());
    assertTrue(report.lines().findFirst().orElseThrow().endsWith(", TP=2)"), report);
    assertTrue(
        report.contains("TP=2 (each writer and reader a tensor-parallel replica of 2 rank"),
        report);
    for (String store : List.of("memory", "file-warm", "file-cold")) {
      String[] l3 = JarProcess.row(report, store, "l3");
      assertEquals("2", l3[2], store + ": requests");
      assertEquals("192", l3[5], store + ": every full page of both prefixes came from L3");
      assertEquals("16", l3[6], store + ": only the suffix is left to compute");
      assertEquals("0", l3[7], store + ": no fallback");
      String[] partial = JarProcess.row(report, store, "partial");
      assertEquals("64", partial[5], store + ": half the prefix, rounded down to a page");
      assertEquals("0", partial[7], store + ": no partial fallback");
      String[] recompute = JarProcess.row(report, store, "recompute");
      assertEquals("0", recompute[5], store + ": nothing reused without L3");
      assertEquals("208", recompute[6]);
      for (String miss : List.of("miss-l3", "miss-off")) {
        String[] m = JarProcess.row(report, store, miss);
        assertEquals("1", m[2], store + " " + miss + ": one request per pair");
        assertEquals("0", m[5], store + " " + miss + ": nothing to restore");
      }
      String[] summary = summary(report, store);
      assertEquals("yes", summary[summary.length - 1], store + ": L3 outputs = recompute");
      assertTrue(
          summary[5].matches("[0-9.]+× \\([0-9.]+–[0-9.]+\\)"),
          store + ": two decode pairs measured: " + String.join("|", summary));
      // rank 1 read its own objects: its line of the l3 cohort's engine counts GETs
      assertTrue(
          r.err()
              .lines()
              .anyMatch(
                  l -> l.matches("  " + store + ": \\[rank 1\\] rank 1: L3 GET ok keys [1-9].*")),
          store + ": " + r.err());
      String role = store.equals("memory") ? "memory" : "reader";
      assertTrue(
          r.err()
              .contains("[" + store + "] " + role + " process (a TP=2 replica: 2 rank processes)"),
          r::err);
    }
    assertTrue(
        r.err().contains("[file-writer] writer process (a TP=2 replica"), "the writer too: " + r);
    assertFalse(
        r.err().contains("WARNING: Using incubator modules"),
        "the ranks' JVM notices are left out: " + r.err());
  }

  @Test
  void shouldStopInOneLineWithTheWorkersStatusWhenItsStoreCannotBeReached() throws Exception {
    int port;
    try (java.net.ServerSocket s =
        new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      port = s.getLocalPort(); // closed again: nothing listens there
    }
    Result r =
        benchTtft(
            List.of(
                "--stores",
                "redis",
                "--redis-uri",
                "redis://127.0.0.1:" + port,
                "--prefix-tokens",
                "256",
                "--threads",
                "1",
                "--out",
                workDir.resolve("report").toString()),
            300);
    assertEquals(1, r.exitCode(), r::toString);
    List<String> err = r.err().lines().toList();
    assertEquals(
        "error: the redis-writer process failed with exit code 1 (its errors are above, prefixed"
            + " with its role)",
        err.getLast(),
        r::toString);
    assertTrue(
        err.stream().anyMatch(l -> l.matches("  redis-writer: error: redis cannot connect to .*")),
        r::toString);
    assertTrue(
        err.stream().noneMatch(l -> l.contains("internal error") || l.contains("SLF4J")),
        "no stack trace, no logging-binding warning: " + r);
    assertTrue(Files.notExists(workDir.resolve("report")), "no report");
  }

  /** Runs {@code tokenspeed bench ttft --model TINY-LLAMA ARGS} from the jar. */
  private Result benchTtft(List<String> args, int timeoutSeconds) throws Exception {
    List<String> command = new java.util.ArrayList<>();
    command.addAll(List.of("bench", "ttft", "--model", TinyLlama.model(workDir.resolve("model"))));
    command.addAll(args);
    return JarProcess.run(workDir, command, timeoutSeconds);
  }

  /** The cells of {@code store}'s row in the summary table (its second cell is a ratio). */
  private static String[] summary(String report, String store) {
    String rows =
        String.join(
            "\n",
            report.lines().filter(l -> l.matches("\\| " + store + " \\| [0-9.]+× \\|.*")).toList());
    return JarProcess.row(rows, store);
  }
}
