package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.server.trace.CacheBound;
import io.tokenspeed.server.trace.TraceRequest;
import io.tokenspeed.server.trace.TraceTestData;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@code tokenspeed bench trace} on the tiny untied Llama, in this JVM: a generated conversation
 * trace replayed one request after another against a replica it starts reuses, request by request,
 * what the trace's infinite-cache bound says to within a page (the engine reuses whole pages and
 * computes each prompt's last token), with L3 and without; its report's counts add up.
 */
class BenchTraceCommandTest {
  @TempDir Path dir;

  private String model() throws IOException {
    return BenchServeCommandTest.tinyUntied(dir);
  }

  private Path trace(List<TraceRequest> requests) throws IOException {
    StringBuilder b = new StringBuilder();
    for (TraceRequest r : requests) {
      b.append("{\"timestamp\": ")
          .append(r.timestampMs())
          .append(", \"input_length\": ")
          .append(r.inputLength())
          .append(", \"output_length\": ")
          .append(r.outputLength())
          .append(", \"hash_ids\": ")
          .append(java.util.Arrays.toString(r.hashIds()))
          .append("}\n");
    }
    Path file = dir.resolve("trace.jsonl");
    Files.writeString(file, b);
    return file;
  }

  @Test
  void shouldReuseWhatTheTraceAllowsToWithinAPage() throws Exception {
    // the tiny model takes 4,096 positions: the conversations that fit
    List<TraceRequest> requests =
        TraceTestData.conversations(17, 40).stream()
            .filter(r -> r.inputLength() + 2 <= 4096)
            .limit(16)
            .toList();
    assertTrue(requests.size() >= 12, "a trace of " + requests.size());
    Path file = trace(requests);
    Path out = dir.resolve("report.md");
    CliRun run =
        CliRun.of(
            "bench",
            "trace",
            "--trace",
            file.toString(),
            "--serve",
            "1",
            "--model",
            model(),
            "--sequential",
            "--max-output",
            "2",
            "--out",
            out.toString());
    assertEquals(0, run.exitCode(), run::toString);
    JsonNode json = new ObjectMapper().readTree(dir.resolve("report.json").toFile());
    assertEquals(requests.size(), json.get("requests").asInt());
    assertEquals(CacheBound.hitRate(requests), json.get("infinite_cache_hit_rate").asDouble());
    long[] bound = CacheBound.hitTokens(requests);
    int page = EngineConfig.defaults(2).prefixGranularity();
    assertEquals(2, json.get("runs").size(), "with L3, then the baseline without");
    for (JsonNode r : json.get("runs")) {
      String label = r.get("label").asText();
      assertEquals(0, r.get("failed").asInt(), label);
      long input = 0;
      long reused = 0;
      JsonNode per = r.get("per_request");
      for (int i = 0; i < requests.size(); i++) {
        JsonNode n = per.get(i);
        long got = n.get("reused_tokens").asLong();
        assertEquals(bound[i], n.get("bound_tokens").asLong());
        assertTrue(got <= bound[i], label + " request " + i + ": " + got + " > " + bound[i]);
        assertTrue(
            bound[i] - got <= page,
            label + " request " + i + ": reused " + got + " of the bound " + bound[i]);
        input += n.get("input_tokens").asLong();
        reused += got;
      }
      assertEquals(input, r.get("input_tokens").asLong(), label);
      assertEquals(
          reused,
          r.get("reused_device_tokens").asLong()
              + r.get("reused_host_tokens").asLong()
              + r.get("reused_storage_tokens").asLong(),
          label + ": the sources add up");
      assertEquals(2L * requests.size(), r.get("output_tokens").asLong(), label);
    }
    String svg = Files.readString(dir.resolve("report.svg"));
    for (String label : List.of("infinite-cache bound", "l3 reused", "off reused", "l3 TTFT p50")) {
      assertTrue(svg.contains(">" + label + "<"), label + " in the chart");
    }
    assertTrue(svg.startsWith("<svg ") && svg.strip().endsWith("</svg>"), svg);
    String report = Files.readString(out);
    assertTrue(report.contains("infinite-cache hit rate"), report);
    assertTrue(report.contains("](report.svg)"), "the report shows its chart");
    assertTrue(report.contains("| l3 | " + requests.size() + " | 0 |"), report);
    assertTrue(report.contains("| off | " + requests.size() + " | 0 |"), report);
  }

  /**
   * Two replicas over a real Redis server, round robin: with L3 a request reuses at least what it
   * reuses without (its replica's own history, and the store's), never more than the bound; the
   * run's objects, written under a namespace of its own, are deleted at its end.
   */
  @Test
  void shouldReplayOverRedisAndLeaveNothingBehind() throws Exception {
    List<TraceRequest> requests =
        TraceTestData.conversations(23, 40).stream()
            .filter(r -> r.inputLength() + 2 <= 4096)
            .limit(12)
            .toList();
    Path file = trace(requests);
    try (io.tokenspeed.testkit.RedisServer redis =
        io.tokenspeed.testkit.RedisServers.startStandalone(dir.resolve("redis"))) {
      CliRun run =
          CliRun.of(
              "bench",
              "trace",
              "--trace",
              file.toString(),
              "--serve",
              "2",
              "--redis-uri",
              redis.uri(),
              "--model",
              model(),
              "--sequential",
              "--max-output",
              "2",
              "--out",
              dir.resolve("redis.md").toString());
      assertEquals(0, run.exitCode(), run::toString);
      JsonNode json = new ObjectMapper().readTree(dir.resolve("redis.json").toFile());
      long[] bound = CacheBound.hitTokens(requests);
      JsonNode l3 = json.get("runs").get(0).get("per_request");
      JsonNode off = json.get("runs").get(1).get("per_request");
      long withL3 = 0;
      long without = 0;
      for (int i = 0; i < requests.size(); i++) {
        long a = l3.get(i).get("reused_tokens").asLong();
        assertTrue(a <= bound[i], "request " + i + ": " + a + " > " + bound[i]);
        withL3 += a;
        without += off.get(i).get("reused_tokens").asLong();
      }
      assertTrue(withL3 >= without, "L3 took reuse away: " + withL3 + " < " + without);
      JsonNode figures = json.get("runs").get(0).get("l3");
      assertTrue(figures.get("put_bytes").asLong() > 0, "the replicas wrote through: " + figures);
      assertTrue(json.get("runs").get(1).get("l3") == null, "no L3 figures without L3");
      assertEquals(0L, ((Number) redis.command("DBSIZE")).longValue(), "the run's objects");
    }
  }

  @ParameterizedTest(name = "{1}")
  @CsvSource(
      delimiter = '|',
      value = {
        "--max-output=2 | give either --targets or --serve",
        "--serve=1 --targets=http://127.0.0.1:1 --vocab-size=256 | give either --targets or"
            + " --serve",
        "--targets=http://127.0.0.1:1 | --targets needs at least one URL and --vocab-size",
        "--serve=1 --window=5:2 | --window=5:2 is empty",
        "--serve=1 --window=abc | --window=abc must be START:END in seconds",
        "--serve=1 --rate=2 --sequential | --rate and --sequential exclude each other",
        "--serve=1 --speed=0 | --speed=0.0 must be a positive number",
        "--serve=0 | --serve=0 must be at least 1"
      })
  void shouldRefuseOptionsThatDoNotFit(String options, String message) throws IOException {
    Path file = trace(TraceTestData.conversations(3, 4));
    List<String> args =
        new java.util.ArrayList<>(List.of("bench", "trace", "--trace", file.toString()));
    args.addAll(List.of(options.strip().split(" ")));
    CliRun run = CliRun.of(args.toArray(String[]::new));
    assertEquals(2, run.exitCode(), run::toString);
    assertTrue(run.err().contains(message.strip()), run::toString);
  }

  @Test
  void shouldNameATraceThatIsNotThereOrNotATrace() throws IOException {
    CliRun missing =
        CliRun.of(
            "bench", "trace", "--trace", dir.resolve("none.jsonl").toString(), "--serve", "1");
    assertEquals(1, missing.exitCode(), missing::toString);
    assertTrue(missing.err().contains("does not exist"), missing::toString);
    Path bad = dir.resolve("bad.jsonl");
    Files.writeString(bad, "{\"timestamp\": 0}\n");
    CliRun broken = CliRun.of("bench", "trace", "--trace", bad.toString(), "--serve", "1");
    assertEquals(1, broken.exitCode(), broken::toString);
    assertTrue(broken.err().contains("bad.jsonl:1: hash_ids must be an array"), broken::toString);
  }
}
