package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@code tokenspeed bench serve} at a tiny scale, in this JVM, on the tiny untied Llama: each mode
 * writes a report of the documented shape whose figures are sane — positive, ordered percentiles,
 * every request accounted for, prefill reused, with two servers behind one store a share of it
 * restored from the store, and in throughput mode every generated token received and a forward time
 * beside it. Timings themselves are not checked.
 */
class BenchServeCommandTest {
  @TempDir Path dir;

  /** The tiny untied Llama of the test resources as a {@code --model} value. */
  private String model() throws IOException {
    return tinyUntied(dir);
  }

  /** The tiny untied Llama of the test resources, written into {@code dir}, as a --model value. */
  static String tinyUntied(Path dir) throws IOException {
    Path config = dir.resolve("tiny-untied.json");
    try (InputStream in =
        BenchServeCommandTest.class.getResourceAsStream("/models/tiny-untied.json")) {
      Files.write(config, in.readAllBytes());
    }
    return "synthetic:" + config;
  }

  /**
   * The report names the commit given as {@code tokenspeed.commit} (what bin/test-gpu passes on a
   * machine without a git checkout), and without it the checkout's own, never an empty string.
   */
  @Test
  void shouldNameTheCommitGivenByTheBundle() {
    String before = System.getProperty("tokenspeed.commit");
    try {
      System.setProperty("tokenspeed.commit", " 83b3e03 (with uncommitted changes)\n");
      assertEquals("83b3e03 (with uncommitted changes)", BenchServeCommand.commit());
      System.clearProperty("tokenspeed.commit");
      String own = BenchServeCommand.commit();
      assertFalse(own.isBlank(), "the checkout's commit or unknown");
      assertNotEquals("83b3e03 (with uncommitted changes)", own);
    } finally {
      if (before == null) {
        System.clearProperty("tokenspeed.commit");
      } else {
        System.setProperty("tokenspeed.commit", before);
      }
    }
  }

  @Test
  void shouldReportOverheadPairsWithOrderedPositiveTimesAndTheTargetsVerdict() throws Exception {
    Path out = dir.resolve("reports").resolve("overhead.md");
    CliRun run =
        CliRun.of(
            "bench",
            "serve",
            "--mode",
            "overhead",
            "--model",
            model(),
            "--pairs",
            "4",
            "--prompt-tokens",
            "20",
            "--max-tokens",
            "3",
            "--warmup-rounds",
            "1",
            "--device-tokens",
            "1024",
            "--threads",
            "1",
            "--out",
            out.toString());
    assertEquals(0, run.exitCode(), run::toString);
    String report = run.out();
    assertEquals(report, Files.readString(out, StandardCharsets.UTF_8), "--out holds the report");
    assertTrue(
        report.startsWith("# Serving overhead: HTTP streaming vs Engine.submit (synthetic:"),
        report);
    assertTrue(
        report.contains("Command: `tokenspeed bench serve --mode overhead --model "), report);
    assertTrue(report.contains(" cores ("), "the machine: " + report);
    for (String figure :
        List.of(
            "direct TTFT: Engine.submit",
            "HTTP TTFT: request sent to the first data event",
            "HTTP: request sent to the response headers",
            "the same through java.net.http's HttpClient",
            "engine's own TTFT of the direct requests",
            "engine's own TTFT of the HTTP requests",
            "GET /health round trip")) {
      double[] v = numbers(row(report, figure), 1);
      assertEquals(4, v[1], figure + ": one per round");
      assertTrue(
          0 < v[4] && v[4] <= v[2] && v[2] <= v[3] && v[3] <= v[5],
          figure + ": 0 < min <= p50 <= p90 <= max: " + String.join(" | ", row(report, figure)));
    }
    double[] outside = numbers(row(report, "HTTP TTFT − its engine's own TTFT"), 1);
    assertTrue(outside[2] > 0, "HTTP adds time outside the engine: " + report);
    double ratio = number(row(report, "HTTP / direct TTFT, ratio of the medians")[1]);
    assertTrue(ratio > 0, report);
    double adds = number(row(report, "what HTTP adds: time outside the engine")[1]);
    double directP50 = numbers(row(report, "direct TTFT: Engine.submit"), 1)[2];
    String verdict = row(report, "target: HTTP ≤ 1.05 × direct + 1 ms")[1];
    boolean met = adds <= 0.05 * directP50 + 1 + 0.01; // the report rounds to 0.01 ms
    assertTrue(
        verdict.startsWith(met ? "by what HTTP adds: met (" : "by what HTTP adds: **not met** ("),
        adds + " ms added vs direct p50 " + directP50 + " ms: " + verdict);
  }

  @Test
  void shouldReportEveryLoadConfigurationPerDeadlineWithSaneFiguresAndStorageReuse()
      throws Exception {
    CliRun run =
        CliRun.of(
            "bench",
            "serve",
            "--mode",
            "load",
            "--model",
            model(),
            "--clients",
            "2",
            "--requests",
            "8",
            "--system-prompts",
            "3",
            "--system-tokens",
            "64",
            "--user-tokens",
            "8",
            "--max-tokens",
            "8",
            "--warmup-rounds",
            "1",
            "--device-tokens",
            "1024",
            // a Host as large as the Device: the 2-parent Host of the default ratio leaves the
            // backups one Host credit, and the pages a filler writes through are evicted before
            // their turn
            "--host-ratio",
            "1",
            "--threads",
            "1",
            "--soft-deadline-ms",
            "30000,60000");
    assertEquals(0, run.exitCode(), run::toString);
    String report = run.out();
    assertTrue(report.startsWith("# Serving under load: shared prefixes, L3"), report);
    assertTrue(report.contains("Command: `tokenspeed bench serve --mode load --model "), report);
    assertTrue(report.contains(", cpu)\n"), "the device in the title: " + report);
    for (BenchServeCommand.Setup setup : BenchServeCommand.SETUPS) {
      for (String deadline : setup.l3() ? List.of("30000", "60000") : List.of("–")) {
        String[] cells =
            row(report, setup.name() + " | 2 | " + deadline + " |", c -> c.length == 14);
        String what = setup.name() + ": " + String.join(" | ", cells);
        assertEquals("16", cells[3], what + ": two clients, eight requests each");
        assertEquals("0", cells[4], what + ": no errors");
        double[] v = numbers(cells, 5);
        assertTrue(v[5] > 0, what + ": requests/s");
        assertTrue(v[6] > 0 && v[7] >= v[6], what + ": 0 < TTFT p50 <= p99");
        // A tiny model's steps take microseconds: when the client falls behind, a request's
        // events arrive in one read and its TPOT is 0 (the report rounds to 0.01 ms). Every
        // request had two tokens or more (otherwise the cell reads NaN and fails), and the
        // percentiles are ordered.
        assertTrue(v[8] >= 0 && v[9] >= v[8], what + ": 0 <= TPOT p50 <= p99");
        assertTrue(v[10] > 0, what + ": the system prompts were reused");
        if (setup.servers() == 2 || setup.filled()) {
          assertTrue(v[11] > 0, what + ": a server restored prefixes from the store");
        }
        if (!setup.l3()) {
          assertEquals(0, v[11], what + ": nothing from a store without L3");
        }
      }
    }
    for (String deadline : List.of("30000", "60000")) {
      // every request of the filled store's server asked it or found its prefix locally; with a
      // deadline of half a minute none waited in vain
      String[] restores = row(report, "2 | " + deadline + " |", c -> c.length == 14);
      String what = "restores at " + deadline + " ms: " + String.join(" | ", restores);
      assertEquals("16", restores[2], what);
      double[] v = numbers(restores, 3);
      assertTrue(v[3] >= 1 && v[4] >= 1 && v[4] <= v[3], what + ": 1 <= restored <= asked");
      assertEquals(100 * v[4] / v[3], v[5], 0.5, what + ": the restore rate");
      assertEquals(0, v[6], what + ": no soft timeout");
      assertTrue(numbers(restores[8].split(" / "), 0)[0] > 0, what + ": restored TTFT p50");
      String[] misses = row(report, "2 | " + deadline + " |", c -> c.length == 8);
      what = "misses at " + deadline + " ms: " + String.join(" | ", misses);
      assertTrue(number(misses[2]) >= 1, what + ": the first request of a prompt missed");
      assertEquals(0, number(misses[3]), what + ": a miss is answered, not timed out");
      assertTrue(number(misses[4]) > 0 && number(misses[5]) > 0, what + ": TTFT, both sides");
    }
    assertTrue(
        report.contains("The first server wrote ") && !report.contains("wrote 0 PUT rows"),
        "the store was filled: " + report);
    for (String setup :
        List.of("one server, L3 on", "two servers, one store, L3 on", "second server,")) {
      double[] ratios = numbers(row(report, setup, c -> c[3].endsWith("×")), 3);
      for (int i = 3; i < ratios.length; i++) {
        // the TPOT ratio (last column) divides by a p50 that may be 0 (see above): NaN or ∞
        boolean tpot = i == ratios.length - 1;
        assertTrue(
            tpot ? !(ratios[i] < 0) : ratios[i] > 0,
            setup + ": ratios against the baseline: " + report);
      }
    }
    String perServer = "1 | two servers, one store, L3 on | 2 | 30000 | 1 |";
    String[] a = row(report, perServer, c -> c[6].equals("A"));
    String[] b = row(report, perServer, c -> c[6].equals("B"));
    assertEquals(16, Integer.parseInt(a[7]) + Integer.parseInt(b[7]), "every request on a server");
    // Which server restores from the other depends on whose write-through lands first: the first
    // wave goes to A, but B's first request can arrive before A's PUTs are done, and then A later
    // restores what B wrote. Either way the tokens came through the store, from the other server.
    assertTrue(
        Long.parseLong(a[11]) + Long.parseLong(b[11]) > 0,
        "a server restored the other's prefixes from the store: " + report);
  }

  @Test
  void shouldReportASoaksPhasesRecoveryMemoryAndThreads() throws Exception {
    CliRun run =
        CliRun.of(
            "bench",
            "serve",
            "--mode",
            "soak",
            "--model",
            model(),
            "--clients",
            "2",
            "--system-prompts",
            "2",
            "--system-tokens",
            "64",
            "--user-tokens",
            "8",
            "--max-tokens",
            "4",
            "--warmup-rounds",
            "1",
            "--device-tokens",
            "1024",
            "--threads",
            "1",
            "--calibrate-s",
            "2",
            "--duration-s",
            "3",
            "--overload",
            "4",
            "--recovery-s",
            "3");
    assertEquals(0, run.exitCode(), run::toString);
    String report = run.out();
    assertTrue(report.startsWith("# Soak: overload and recovery with L3 on"), report);
    double sustainable =
        number(report.substring(report.indexOf("**") + 2, report.indexOf(" requests/s**")));
    assertTrue(sustainable > 0, report);
    for (String phase : List.of("calibrate", "before", "overload", "recovery")) {
      String[] cells = row(report, phase + " |", c -> c.length == 8);
      double[] v = numbers(cells, 1);
      assertTrue(v[1] > 0, phase + ": requests sent: " + String.join(" | ", cells));
      assertEquals(
          v[1], v[2] + v[3] + v[4], phase + ": every request completed or refused or failed");
      assertEquals(0, v[4], phase + ": no request failed: " + report);
    }
    assertTrue(report.contains("## Memory and threads, per minute"), report);
    String[] minute = row(report, "0 |", c -> c.length == 8);
    assertTrue(number(minute[2]) > 0, "the heap after GC was measured: " + report);
    assertTrue(number(minute[4]) > 0, "the resident set was measured: " + report);
    assertTrue(number(minute[6]) > 0, "threads were counted: " + report);
    assertTrue(
        report.contains(
            "Threads that died of an uncaught exception: 0. Engine failed or stopped:" + " no."),
        report);
  }

  @Test
  void shouldReportOneThroughputRowPerLevelWithEveryTokenAndTheForwardPassBesideIt()
      throws Exception {
    String report = throughput("--concurrency", "1,2");
    assertTrue(report.startsWith("# Serving throughput: served vs the forward pass"), report);
    assertTrue(
        report.contains("Command: `tokenspeed bench serve --mode throughput --model "), report);
    assertTrue(report.contains("one shared prefix of 64 seeded random tokens"), report);
    assertTrue(report.contains("no logprobs"), report);
    for (int clients : new int[] {1, 2}) {
      String[] cells = row(report, clients + " |", c -> c.length == 20);
      String what = clients + " clients: " + String.join(" | ", cells);
      assertEquals(Integer.toString(clients), cells[1], what + ": one request per client");
      assertEquals("0", cells[2], what + ": no errors");
      // greedy with ignore_eos: every request generates exactly --max-tokens tokens
      assertEquals(Integer.toString(clients * 4), cells[3], what + ": every token received");
      double[] v = numbers(java.util.Arrays.copyOf(cells, 19), 4); // the last cell is text
      assertTrue(v[5] > 0, what + ": output tokens/s");
      assertTrue(v[6] > 0, what + ": the shared prefix was cached");
      assertTrue(v[7] > 0 && v[8] >= v[7], what + ": 0 < TTFT p50 <= p90");
      assertTrue(v[11] >= 1, what + ": rounds");
      assertTrue(v[12] > 0 && v[13] >= v[12], what + ": 0 < forward <= round, per round");
      assertTrue(v[14] >= 0 && v[14] <= v[13] - v[12], what + ": copy waits, outside the forward");
      assertTrue(v[15] > 0 && v[16] > 0 && v[17] > 0, what + ": mean batch, raw, served/raw");
      // the process's CPU clock may tick in 10 ms, longer than a level of the tiny model
      assertTrue(v[18] >= 0, what + ": host CPU");
      assertEquals("n/a", cells[19], what + ": no GPU sampled on the CPU");
    }
    assertTrue(report.contains("Raw tokens/s is what the forward pass alone would deliver"));
  }

  @Test
  void shouldServeEveryThroughputRequestWithLogprobs() throws Exception {
    String report = throughput("--concurrency", "2", "--logprobs", "2");
    assertTrue(report.contains("logprobs 2 (alternatives per token)"), report);
    String[] cells = row(report, "2 |", c -> c.length == 20);
    assertEquals("0", cells[2], "no errors: " + report);
    assertEquals("8", cells[3], "every token received: " + report);
  }

  /** The report of a small throughput run on the tiny Llama with {@code flags} added. */
  private String throughput(String... flags) throws IOException {
    List<String> args =
        new java.util.ArrayList<>(
            List.of(
                "bench",
                "serve",
                "--mode",
                "throughput",
                "--model",
                model(),
                "--prefix-tokens",
                "64",
                "--suffix-tokens",
                "4",
                "--max-tokens",
                "4",
                "--requests-per-client",
                "1",
                "--warmup-rounds",
                "1",
                "--threads",
                "1"));
    args.addAll(List.of(flags));
    CliRun run = CliRun.of(args.toArray(String[]::new));
    assertEquals(0, run.exitCode(), run::toString);
    return run.out();
  }

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = ';',
      value = {
        "--mode both; --mode=both is not one of: overhead, load, soak, throughput",
        "--mode soak --overload 0.5; --overload=0.5 must be a finite number >= 1",
        "--mode overhead --prompt-tokens 64; --prompt-tokens=64 must be in [1, 63]",
        "--mode load --system-tokens 100; --system-tokens=100 must be a positive multiple of the"
            + " page (64)",
        "--mode load --clients 16,0; --clients=[16, 0] must list numbers of at least 1",
        "--mode load --requests 0; --requests=0 must be at least 1",
        "--mode load --host-ratio 0; --host-ratio=0.0 must be a finite number > 0",
        "--mode load --device-tokens 200; --device-tokens=200 must hold one request: at least 304",
        "--mode load --redis-uri redis://u:p@h:1; --redis-uri=redis://u:p@h:1: uri=h:1 carries"
            + " credentials",
        "--mode load --soft-deadline-ms 200,0; --soft-deadline-ms=[200, 0] must list numbers of at"
            + " least 1",
        "--mode load --setups on,x; --setups=on,x must list distinct ones of: off, on, two, filled",
        "--mode load --setups on,on; --setups=on,on must list distinct ones of: off, on, two,"
            + " filled",
        "--mode load --dtype f16; --dtype=f16 is not supported; allowed: f32, bf16",
        "--mode load --device tpu; --device=tpu is not supported; allowed: cpu, cuda, cuda:N (N >="
            + " 0)",
        "--mode throughput --concurrency 1,0; --concurrency=[1, 0] must list numbers of at least"
            + " 1",
        "--mode throughput --prefix-tokens -1; --prefix-tokens=-1 must be at least 0",
        "--mode throughput --suffix-tokens 0; --suffix-tokens=0 must be at least 1",
        "--mode throughput --max-tokens 0; --max-tokens=0 must be at least 1",
        "--mode throughput --requests-per-client 0; --requests-per-client=0 must be at least 1",
        "--mode throughput --logprobs 21; --logprobs=21 must be in [-1, 20]",
        "--mode throughput --logprobs -2; --logprobs=-2 must be in [-1, 20]",
        "--mode throughput --concurrency 8,64 --max-running 32; --max-running=32 must be at least"
            + " the largest --concurrency (64)",
        "--mode throughput --device-tokens 2000; --device-tokens=2000 must hold one request: at"
            + " least 2128",
      })
  void shouldRejectABadFlagWithAUsageError(String flags, String message) {
    CliRun run = CliRun.of(("bench serve " + flags).split(" "));
    assertEquals(2, run.exitCode(), run::toString);
    assertEquals("", run.out(), run::toString);
    assertTrue(run.err().startsWith("error: " + message), run::toString);
  }

  /** The cells of the first table row that starts with {@code first}. */
  private static String[] row(String report, String first) {
    return row(report, first, c -> true);
  }

  /** The cells of the first table row that starts with {@code first} and passes {@code which}. */
  private static String[] row(
      String report, String first, java.util.function.Predicate<String[]> which) {
    String prefix = "| " + first;
    return report
        .lines()
        .filter(l -> l.startsWith(prefix))
        .map(BenchServeCommandTest::cells)
        .filter(which)
        .findFirst()
        .orElseThrow(() -> new AssertionError("no row " + prefix + " in:\n" + report));
  }

  private static String[] cells(String line) {
    String[] raw = line.split("\\|");
    String[] out = new String[raw.length - 1];
    for (int i = 1; i < raw.length; i++) {
      out[i - 1] = raw[i].trim();
    }
    return out;
  }

  /** The numbers of {@code cells} from index {@code from} on (NaN before it). */
  private static double[] numbers(String[] cells, int from) {
    double[] v = new double[cells.length];
    java.util.Arrays.fill(v, Double.NaN);
    for (int i = from; i < cells.length; i++) {
      v[i] = number(cells[i]);
    }
    return v;
  }

  /** The leading number of a cell such as {@code 12.5}, {@code 74.1 %} or {@code 1.020×}. */
  private static double number(String cell) {
    String s = cell.replace("×", "").replace("%", "").replace("ms", "").trim();
    int end = s.indexOf(' ');
    return Double.parseDouble(end < 0 ? s : s.substring(0, end));
  }
}
