package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatTemplate;
import io.tokenspeed.server.config.StorageExtraConfig;
import io.tokenspeed.server.http.HttpFrontend;
import io.tokenspeed.server.http.Serving;
import io.tokenspeed.server.http.ServingState;
import io.tokenspeed.server.trace.CacheBound;
import io.tokenspeed.server.trace.TraceRequest;
import io.tokenspeed.server.trace.TraceTestData;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
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
  private static final ObjectMapper JSON = new ObjectMapper();

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

  /**
   * The first {@code limit} of {@code requests} generated conversation requests (seed {@code seed})
   * that fit the tiny model's 4,096 positions with their two output tokens.
   */
  private static List<TraceRequest> fitting(long seed, int requests, int limit) {
    return TraceTestData.conversations(seed, requests).stream()
        .filter(r -> r.inputLength() + 2 <= 4096)
        .limit(limit)
        .toList();
  }

  @Test
  void shouldReuseWhatTheTraceAllowsToWithinAPage() throws Exception {
    // the tiny model takes 4,096 positions: the conversations that fit
    List<TraceRequest> requests = fitting(17, 40, 16);
    assertTrue(requests.size() >= 12, "a trace of " + requests.size());
    Path file = trace(requests);
    Path out = dir.resolve("report.md");
    CliRun run = serveRun(file, 1, 2, out, List.of());
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
    JsonNode l3 = json.get("runs").get(0).get("l3");
    assertEquals(
        l3.get("soft_timeouts").asLong()
            + l3.get("ready_expirations").asLong()
            + l3.get("pressure_bypasses").asLong(),
        l3.get("fallbacks").asLong(),
        l3::toString);
    assertTrue(json.get("runs").get(1).get("l3") == null, "no L3 figures without L3");
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
    assertTrue(report.contains(" pressure bypasses | fallbacks |\n"), report);
    assertTrue(report.contains("From the replicas' own metrics"), report);
  }

  /**
   * {@code --baseline-first} replays without L3 first, then with it: both runs, in that order (over
   * a file store whose settings {@code --store-config} adds to).
   */
  @Test
  void shouldReplayTheBaselineFirstWhenAsked() throws Exception {
    List<TraceRequest> requests = fitting(5, 40, 6);
    Path file = trace(requests);
    CliRun run =
        serveRun(
            file,
            1,
            1,
            dir.resolve("first.md"),
            List.of("--baseline-first", "--store-config", "{\"fsync\": false}"));
    assertEquals(0, run.exitCode(), run::toString);
    JsonNode first = new ObjectMapper().readTree(dir.resolve("first.json").toFile());
    assertEquals("file", first.get("store").asText(), "the default store");
    assertEquals(1, first.get("replicas").asInt());
    assertTrue(first.get("memory_store_bytes") == null, first::toString);
    assertTrue(
        Files.readString(dir.resolve("first.md"))
            .contains("over one shared store, **file** (a file store in a temporary folder)"),
        "the report names the store");
    JsonNode runs = first.get("runs");
    assertEquals(2, runs.size(), runs::toString);
    assertEquals("off", runs.get(0).get("label").asText());
    assertEquals("l3", runs.get(1).get("label").asText());
    assertTrue(runs.get(0).get("l3") == null, "no L3 figures without L3");
    assertTrue(runs.get(1).get("l3") != null, "the L3 run's figures");
    for (JsonNode r : runs) {
      assertEquals(0, r.get("failed").asInt(), r::toString);
      assertEquals((long) requests.size(), r.get("output_tokens").asLong(), r::toString);
    }
    String err = run.err();
    assertTrue(err.indexOf("L3 off:") < err.indexOf("with L3:"), err);
  }

  /**
   * Two replicas over a real Redis server, round robin: with L3 a request reuses at least what it
   * reuses without (its replica's own history, and the store's), never more than the bound; the
   * run's objects, written under a namespace of its own, are deleted at its end.
   */
  @Test
  void shouldReplayOverRedisAndLeaveNothingBehind() throws Exception {
    List<TraceRequest> requests = fitting(23, 40, 12);
    Path file = trace(requests);
    try (io.tokenspeed.testkit.RedisServer redis =
        io.tokenspeed.testkit.RedisServers.startStandalone(dir.resolve("redis"))) {
      CliRun run =
          serveRun(file, 2, 2, dir.resolve("redis.md"), List.of("--redis-uri", redis.uri()));
      assertEquals(0, run.exitCode(), run::toString);
      JsonNode json = new ObjectMapper().readTree(dir.resolve("redis.json").toFile());
      assertEquals("redis", json.get("store").asText(), "--redis-uri alone selects redis");
      assertTrue(
          Files.readString(dir.resolve("redis.md")).contains("over one shared store, **redis** ("),
          "the report names the store");
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

  /**
   * Two replicas over one memory store of the command's process, round robin, one request after
   * another: each prefix is computed by one replica, and two requests later its extension goes to
   * the other, which has never seen it, so whatever the extension reuses came from the shared store
   * (without L3 nothing is reused at all); the store is closed once the run's replicas are.
   */
  @Test
  void shouldShareOneMemoryStoreBetweenTwoReplicas() throws Exception {
    List<TraceRequest> requests = new ArrayList<>();
    long t = 0;
    for (int group = 0; group < 2; group++) {
      int[][] prefixes = new int[3][];
      for (int j = 0; j < 3; j++) {
        int id = 100 * (3 * group + j);
        prefixes[j] = new int[] {id, id + 1};
        requests.add(new TraceRequest(t++ * 1000, 1024, 2, prefixes[j]));
      }
      for (int j = 0; j < 3; j++) {
        int[] longer = {prefixes[j][0], prefixes[j][1], prefixes[j][0] + 2};
        requests.add(new TraceRequest(t++ * 1000, 1024 + 300, 2, longer));
      }
    }
    // request i goes to replica i % 2: an extension (i + 3) to the other one than its prefix (i)
    long[] bound = CacheBound.hitTokens(requests);
    for (int i = 0; i < requests.size(); i++) {
      assertEquals(i % 6 < 3 ? 0 : 1024, bound[i], "request " + i);
    }
    Path file = trace(requests);
    CliRun run =
        serveRun(
            file,
            2,
            2,
            dir.resolve("memory.md"),
            List.of("--store", "memory", "--memory-store-bytes", "1073741824"));
    assertEquals(0, run.exitCode(), run::toString);
    JsonNode json = JSON.readTree(dir.resolve("memory.json").toFile());
    assertEquals("memory", json.get("store").asText());
    assertEquals(2, json.get("replicas").asInt());
    assertEquals(1L << 30, json.get("memory_store_bytes").asLong());
    JsonNode l3Run = json.get("runs").get(0);
    JsonNode offRun = json.get("runs").get(1);
    assertEquals("l3", l3Run.get("label").asText());
    assertEquals("off", offRun.get("label").asText());
    int page = EngineConfig.defaults(2).prefixGranularity();
    long reused = 0;
    for (int i = 0; i < requests.size(); i++) {
      long got = l3Run.get("per_request").get(i).get("reused_tokens").asLong();
      assertTrue(got <= bound[i], "request " + i + ": " + got + " > " + bound[i]);
      assertTrue(
          bound[i] - got <= page,
          "request " + i + ": reused " + got + " of the bound " + bound[i] + "\n" + run);
      assertEquals(
          0,
          offRun.get("per_request").get(i).get("reused_tokens").asLong(),
          "request " + i + " without L3: its prefix lives on the other replica only");
      reused += got;
    }
    assertEquals(0, l3Run.get("failed").asInt(), l3Run::toString);
    assertEquals(0, offRun.get("failed").asInt(), offRun::toString);
    assertTrue(reused > 0, "reused with L3: " + reused);
    assertEquals(reused, l3Run.get("reused_storage_tokens").asLong(), "all of it from L3");
    JsonNode figures = l3Run.get("l3");
    assertTrue(
        figures.get("get_bytes").asLong() > 0 && figures.get("put_bytes").asLong() > 0,
        "the replicas read what the other wrote: " + figures);
    assertEquals(0, figures.get("fallbacks").asLong(), figures::toString);
    assertTrue(offRun.get("l3") == null, "no L3 figures without L3");
    java.util.regex.Matcher closed =
        java.util.regex.Pattern.compile(
                "with L3: the shared memory store, closed, held ([0-9.]+) MB")
            .matcher(run.err());
    assertTrue(closed.find(), run::toString);
    assertTrue(Double.parseDouble(closed.group(1)) > 0, run::toString);
    assertTrue(
        run.err().indexOf("with L3: the shared memory store, closed")
            < run.err().indexOf("L3 off:"),
        "closed before the run without L3: " + run.err());
    String report = Files.readString(dir.resolve("memory.md"));
    assertTrue(
        report.contains(
            "2 replica(s) started here, with L3 over one shared store, **memory** (one in-process"
                + " memory store that the replicas use, capacity 1073741824 bytes)"),
        report);
  }

  /**
   * A replica's store for the shared memory store: every call reaches the shared one, closing it
   * leaves the shared one open for the other replicas, and closing the shared one ends it for all.
   */
  @Test
  void shouldLeaveTheSharedStoreOpenWhenAReplicaClosesItsOwn() throws Exception {
    io.tokenspeed.l3.store.memory.MemoryStore shared =
        new io.tokenspeed.l3.store.memory.MemoryStore();
    try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
      java.lang.foreign.MemorySegment bytes = arena.allocate(8);
      bytes.fill((byte) 7);
      BenchTraceCommand.SharedStore first = new BenchTraceCommand.SharedStore(shared);
      BenchTraceCommand.SharedStore second = new BenchTraceCommand.SharedStore(shared);
      assertEquals("memory", first.name());
      assertEquals(shared.maxKeyBytes(), first.maxKeyBytes());
      first.put(List.of("a_1"), List.of(bytes));
      first.close();
      assertEquals(8, shared.usedBytes(), "the object stays after a replica's store closes");
      java.lang.foreign.MemorySegment into = arena.allocate(8);
      assertTrue(
          second.get(List.of("a_1"), List.of(into)).rows().getFirst()
              instanceof io.tokenspeed.l3.spi.RowResult.Ok,
          "the other replica reads it");
      assertEquals((byte) 7, into.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 7));
      assertEquals(1, second.deleteNamespace("a"));
      shared.close();
      IllegalStateException e =
          org.junit.jupiter.api.Assertions.assertThrows(
              IllegalStateException.class, () -> second.exists(List.of("a_1")));
      assertTrue(e.getMessage().contains("closed"), e::toString);
    }
  }

  /**
   * Two replicas of the tiny model behind the real HTTP server on loopback ports, over one file
   * store, each with a Device that holds little more than the longest request and a Host of the
   * same size: {@code bench trace --targets} reports as L3 figures exactly the differences of the
   * servers' own {@code /metrics} counters, which the test scrapes (with the testkit's strict
   * parser) before and after, summed over both; the conversations' later turns restore what the
   * Device (and the other replica) lost, so they are not zero.
   */
  @Test
  void shouldReportTheTargetsL3FiguresAsTheirMetricsCountThem() throws Exception {
    List<TraceRequest> requests = fitting(29, 60, 24);
    Path file = trace(requests);
    String model = model();
    Path folder =
        SyntheticCheckpoints.materialize(model, SyntheticCheckpoints.DEFAULT_SEED, DType.F32);
    Tokenizer tokenizer = ModelOptions.tokenizerOf(folder);
    var chatPrompt = Serving.chatPrompt(ChatTemplate.load(folder), tokenizer);
    int longest = requests.stream().mapToInt(r -> r.inputLength() + 2).max().orElseThrow();
    ObjectNode store = JSON.createObjectNode().put("path", dir.resolve("store").toString());
    store.putObject("async").put("min_extension_tokens", 64);
    List<Engine> engines = new ArrayList<>();
    List<Serving> servers = new ArrayList<>();
    try (EngineModel lm = EngineModel.onCpu(new TensorParallelOptions().load(folder, model), null);
        HttpClient http = HttpClient.newHttpClient()) {
      EngineConfig base = EngineConfig.defaults(lm.deviceParentsFor(longest + 64));
      EngineConfig config =
          new EngineConfig(
              base.prefixGranularity(),
              base.blockGranularity(),
              base.deviceParents(),
              1.0, // a Host no larger than the Device
              base.tokenBudget(),
              base.maxRunning(),
              base.demoteBelowFreeParents(),
              base.computeThreads(),
              base.maxQueued());
      for (int i = 0; i < 2; i++) {
        Engine e =
            StorageOptions.startEngine(
                lm,
                config,
                tokenizer.specialTokens().eosId(),
                Optional.of(StorageExtraConfig.parse("file", store.toString())));
        engines.add(e);
        ServingState state = new ServingState();
        servers.add(
            Serving.start(
                new Serving.Options(
                    e,
                    lm.vocabSize(),
                    tokenizer,
                    chatPrompt,
                    "tiny",
                    e.maxRequestTokens(),
                    "127.0.0.1",
                    0,
                    64L << 20,
                    null,
                    0,
                    state,
                    HttpFrontend.DEFAULT_HEADER_TIMEOUT_S * 1000L)));
        state.ready();
      }
      List<URI> metrics =
          servers.stream()
              .map(s -> URI.create("http://127.0.0.1:" + s.port() + "/metrics"))
              .toList();
      List<Map<String, PrometheusText.Family>> before = scrape(http, metrics);
      CliRun run =
          CliRun.of(
              "bench",
              "trace",
              "--trace",
              file.toString(),
              "--targets",
              servers.stream()
                  .map(s -> "http://127.0.0.1:" + s.port())
                  .collect(java.util.stream.Collectors.joining(",")),
              "--vocab-size",
              Integer.toString(lm.vocabSize()),
              "--sequential",
              "--max-output",
              "2",
              "--out",
              dir.resolve("targets.md").toString());
      assertEquals(0, run.exitCode(), run::toString);
      assertFalse(run.err().contains("still busy"), run::toString);
      List<Map<String, PrometheusText.Family>> after = scrape(http, metrics);

      JsonNode r = JSON.readTree(dir.resolve("targets.json").toFile()).get("runs").get(0);
      assertEquals("targets", r.get("label").asText());
      assertEquals(0, r.get("failed").asInt(), r::toString);
      JsonNode l3 = r.get("l3");
      assertTrue(l3 != null, "the targets' L3 figures: " + r);
      long getBytes = delta(before, after, "tokenspeed:l3_payload_bytes_total", "kind", "get");
      long putBytes = delta(before, after, "tokenspeed:l3_payload_bytes_total", "kind", "put");
      long gets = delta(before, after, "tokenspeed:l3_operations_issued_total", "kind", "get");
      long soft = delta(before, after, "tokenspeed:l3_soft_timeouts_total");
      long expired = delta(before, after, "tokenspeed:l3_ready_expirations_total");
      long bypassed =
          delta(before, after, "tokenspeed:l3_pressure_bypasses_total", "reason", "pressure");
      assertEquals(getBytes, l3.get("get_bytes").asLong(), l3::toString);
      assertEquals(putBytes, l3.get("put_bytes").asLong(), l3::toString);
      assertEquals(gets, l3.get("gets_issued").asLong(), l3::toString);
      assertEquals(soft, l3.get("soft_timeouts").asLong(), l3::toString);
      assertEquals(expired, l3.get("ready_expirations").asLong(), l3::toString);
      assertEquals(bypassed, l3.get("pressure_bypasses").asLong(), l3::toString);
      assertEquals(soft + expired + bypassed, l3.get("fallbacks").asLong(), l3::toString);
      assertTrue(putBytes > 0 && getBytes > 0 && gets > 0, "L3 was used: " + l3);
      // the responses' counts add up with the servers' too
      assertEquals(
          requests.size(),
          delta(before, after, "tokenspeed:requests_finished_total"),
          "requests finished");
      assertEquals(
          r.get("reused_storage_tokens").asLong(),
          delta(before, after, "tokenspeed:cached_prompt_tokens_total", "source", "storage"));
      assertTrue(r.get("reused_storage_tokens").asLong() > 0, "restored from L3: " + r);
      String report = Files.readString(dir.resolve("targets.md"));
      String row =
          String.format(
              java.util.Locale.ROOT,
              "| targets | %.1f | %.1f | %d | %d | %d | %d | %d |",
              getBytes / 1e6,
              putBytes / 1e6,
              gets,
              soft,
              expired,
              bypassed,
              soft + expired + bypassed);
      assertTrue(report.contains(row), row + " in\n" + report);
      assertTrue(report.contains("From the targets' `/metrics`"), report);
    } finally {
      servers.forEach(Serving::close);
      engines.forEach(Engine::close);
    }
  }

  @Test
  void shouldNameATargetWhoseMetricsCannotBeReadBeforeSendingAnything() throws IOException {
    Path file = trace(TraceTestData.conversations(3, 4));
    String target = "http://127.0.0.1:" + TargetMetricsTest.closedPort();
    CliRun run =
        CliRun.of(
            "bench",
            "trace",
            "--trace",
            file.toString(),
            "--targets",
            target,
            "--vocab-size",
            "256");
    assertEquals(1, run.exitCode(), run::toString);
    assertTrue(
        run.err().contains("error: --targets: GET " + target + "/metrics failed: "), run::toString);
  }

  /** One scrape of each server, read by the testkit's strict parser. */
  private static List<Map<String, PrometheusText.Family>> scrape(HttpClient http, List<URI> uris)
      throws Exception {
    List<Map<String, PrometheusText.Family>> out = new ArrayList<>();
    for (URI u : uris) {
      HttpResponse<String> res =
          http.send(
              HttpRequest.newBuilder(u).timeout(Duration.ofSeconds(10)).GET().build(),
              HttpResponse.BodyHandlers.ofString());
      assertEquals(200, res.statusCode(), u::toString);
      out.add(PrometheusText.parse(res.body()));
    }
    return out;
  }

  /** A counter's growth between two scrapes, summed over its series with {@code labels}. */
  private static long delta(
      List<Map<String, PrometheusText.Family>> before,
      List<Map<String, PrometheusText.Family>> after,
      String sampleName,
      String... labels) {
    double d = 0;
    for (int i = 0; i < before.size(); i++) {
      for (PrometheusText.Sample s : PrometheusText.samples(after.get(i), sampleName, labels)) {
        d += s.value();
      }
      for (PrometheusText.Sample s : PrometheusText.samples(before.get(i), sampleName, labels)) {
        d -= s.value();
      }
    }
    return Math.round(d);
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
        "--serve=0 | --serve=0 must be at least 1",
        "--serve=1 --dtype=fp16 | --dtype=fp16 is not supported; allowed: f32, bf16",
        "--targets=http://127.0.0.1:1 --vocab-size=256 --store-config={} | --store-config is for"
            + " the replicas --serve starts",
        "--serve=1 --store-config=nope | --store-config: not JSON",
        "--serve=1 --store-config=[1] | --store-config: a JSON object is needed",
        "--serve=1 --store-config={\"path\":\"x\"} | --store-config: path is set by the command",
        "--serve=1 --store-config={\"fsync\":\"no\"} | fsync",
        "--serve=1 --store=memory --redis-uri=redis://127.0.0.1:1 | --store=memory and"
            + " --redis-uri exclude each other",
        "--serve=1 --store=file --redis-uri=redis://127.0.0.1:1 | --store=file and --redis-uri"
            + " exclude each other",
        "--serve=1 --store=redis | --store=redis needs --redis-uri",
        "--serve=1 --store=disk | --store=disk is not a store; allowed: file, redis, memory",
        "--targets=http://127.0.0.1:1 --vocab-size=256 --store=memory | --store is for the"
            + " replicas --serve starts",
        "--serve=1 --store=memory --memory-store-bytes=0 | --memory-store-bytes=0 must be"
            + " positive",
        "--serve=1 --store=memory --memory-store-bytes=-1 | --memory-store-bytes=-1 must be"
            + " positive",
        "--serve=1 --memory-store-bytes=1024 | --memory-store-bytes is for --serve with --store"
            + " memory",
        "--serve=1 --store=file --memory-store-bytes=1024 | --memory-store-bytes is for --serve"
            + " with --store memory",
        "--targets=http://127.0.0.1:1 --vocab-size=256 --memory-store-bytes=1024 |"
            + " --memory-store-bytes is for --serve with --store memory",
        "--serve=1 --store=memory --memory-store-bytes=1024 --store-config={\"capacity_bytes\":2048}"
            + " | --store-config: capacity_bytes and --memory-store-bytes exclude each other",
        "--serve=1 --store=memory --store-config={\"fsync\":false} | --store-config: unknown"
            + " field fsync for the memory backend",
        "--serve=1 --store=memory --store-config={\"capacity_bytes\":0} | --store-config:"
            + " capacity_bytes=0 must be"
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

  /** A request of {@code n} input tokens (its hash ids as many blocks as it needs). */
  private static TraceRequest ofLength(int n) {
    int[] ids = new int[Math.ceilDiv(n, 512)];
    for (int k = 0; k < ids.length; k++) {
      ids[k] = 1000 * n + k;
    }
    return new TraceRequest(0, n, 4, ids);
  }

  private static BenchTraceCommand.Slice sliceOf(int... lengths) {
    List<TraceRequest> rs = new ArrayList<>();
    for (int n : lengths) {
      rs.add(ofLength(n));
    }
    return new BenchTraceCommand.Slice(rs, new long[lengths.length]);
  }

  @Test
  void shouldWarmUpOnThePromptLengthOfTheSliceMedianWithinTheCapAndTheRequestLimit() {
    // the median (the upper one of an even count), in any order
    assertEquals(3000, BenchTraceCommand.warmUpLongTokens(sliceOf(9000, 100, 3000, 2000), 1 << 20));
    assertEquals(2000, BenchTraceCommand.warmUpLongTokens(sliceOf(2000, 100, 9000), 1 << 20));
    // capped
    assertEquals(
        BenchTraceCommand.WARM_UP_LONG_CAP,
        BenchTraceCommand.warmUpLongTokens(sliceOf(30000, 40000, 50000), 1 << 20));
    // what a request may hold, less the 2 tokens the warm-up asks for
    assertEquals(998, BenchTraceCommand.warmUpLongTokens(sliceOf(30000), 1000));
    // none when not longer than the short warm-up, or no request at all
    assertEquals(
        0,
        BenchTraceCommand.warmUpLongTokens(
            sliceOf(BenchTraceCommand.WARM_UP_TOKENS, 10, 5000), 1 << 20));
    assertEquals(0, BenchTraceCommand.warmUpLongTokens(sliceOf(5000), 200));
    assertEquals(0, BenchTraceCommand.warmUpLongTokens(sliceOf(), 1 << 20));
  }

  /**
   * {@code bench trace --serve REPLICAS} of {@code file} on the test's model, requests one after
   * another, {@code maxOutput} tokens at most, the report to {@code out}, with {@code extra}
   * options.
   */
  private CliRun serveRun(Path file, int replicas, int maxOutput, Path out, List<String> extra)
      throws IOException {
    List<String> args =
        new ArrayList<>(
            List.of(
                "bench",
                "trace",
                "--trace",
                file.toString(),
                "--serve",
                Integer.toString(replicas),
                "--model",
                model(),
                "--sequential",
                "--max-output",
                Integer.toString(maxOutput),
                "--out",
                out.toString()));
    args.addAll(extra);
    return CliRun.of(args.toArray(String[]::new));
  }
}
