package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.ReactorRoot;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.Writer;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The KV events of a real {@code tokenspeed serve} process, read by an independent subscriber: the
 * Python script {@code examples/kv_events_subscriber.py}, written from vLLM's documented format
 * with Debian's {@code python3-zmq} and {@code python3-msgpack} (bin/test installs them), run as a
 * child process. It finds the sockets through {@code GET /kv-events}, decodes every batch strictly,
 * fills sequence gaps from the replay socket and recomputes every {@code BlockStored} hash from its
 * tokens and parent.
 *
 * <p>The workload (the tiny model, a Device of 512 tokens, a Host as large, L3 over the file store)
 * stores pages on the Device, the Host and L3 and evicts from the Device; the subscriber closes its
 * SUB socket for a while in the middle (the batches published meanwhile are a gap its next live
 * batch reveals, which the replay fills); a cache clear through {@code /admin/clear_cache} says
 * {@code AllBlocksCleared}. At the end the subscriber has decoded every batch the server published,
 * each once, in order, with no error.
 */
class KvEventsIT {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String TOKEN = "kv-events-admin";

  @TempDir Path workDir;

  /**
   * A Python 3 with the zmq and msgpack modules: {@code $TOKENSPEED_PYTHON}, else {@code python3}
   * on PATH, else Debian's {@code /usr/bin/python3} (where the apt packages install them).
   */
  static String python() throws Exception {
    List<String> candidates = new ArrayList<>();
    String given = System.getenv("TOKENSPEED_PYTHON");
    if (given != null && !given.isBlank()) {
      candidates.add(given);
    }
    candidates.add("python3");
    candidates.add("/usr/bin/python3");
    for (String c : new LinkedHashSet<>(candidates)) {
      try {
        Process p =
            new ProcessBuilder(c, "-c", "import zmq, msgpack").redirectErrorStream(true).start();
        p.getInputStream().readAllBytes();
        if (p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0) {
          return c;
        }
      } catch (IOException e) {
        // not installed there: the next candidate
      }
    }
    fail(
        "no Python 3 with the zmq and msgpack modules among "
            + candidates
            + ": install Debian's python3-zmq and python3-msgpack (bin/test does:"
            + " apt-get install -y python3-zmq python3-msgpack), or name one in"
            + " TOKENSPEED_PYTHON");
    return null;
  }

  /** The subscriber script as a child process, fed commands on stdin, read line by line. */
  private static final class Subscriber implements AutoCloseable {
    final Process process;
    final Writer commands;
    final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    final Path stderr;

    Subscriber(Path workDir, String python, String discovery) throws IOException {
      Path script = ReactorRoot.find().resolve("examples").resolve("kv_events_subscriber.py");
      assertTrue(Files.isRegularFile(script), script::toString);
      stderr = Files.createTempFile(workDir, "subscriber-err", ".txt");
      process =
          new ProcessBuilder(python, script.toString(), "--discovery", discovery, "--verify-hashes")
              .redirectError(stderr.toFile())
              .start();
      commands = new java.io.OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
      Thread.ofVirtual()
          .start(
              () -> {
                try (BufferedReader r =
                    new BufferedReader(
                        new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                  for (String line; (line = r.readLine()) != null; ) {
                    lines.add(line);
                  }
                } catch (IOException e) {
                  lines.add("(stdout failed: " + e + ")");
                }
              });
    }

    /** The next line of its stdout (at most 30 s). */
    String line() throws Exception {
      String l = lines.poll(30, TimeUnit.SECONDS);
      if (l == null) {
        fail(
            "the subscriber said nothing for 30 s (alive: "
                + process.isAlive()
                + "): "
                + Files.readString(stderr));
      }
      return l;
    }

    /** Sends {@code command} and returns its answer line, which must start with {@code answer}. */
    String ask(String command, String answer) throws Exception {
      commands.write(command + "\n");
      commands.flush();
      String l = line();
      assertTrue(l.startsWith(answer), () -> command + " answered " + l);
      return l;
    }

    @Override
    public void close() throws Exception {
      process.destroy();
      if (!process.waitFor(10, TimeUnit.SECONDS)) {
        process.destroyForcibly();
      }
    }
  }

  private List<String> serveArgs() throws IOException {
    Path config = workDir.resolve("tiny-untied.json");
    try (InputStream in = KvEventsIT.class.getResourceAsStream("/models/tiny-untied.json")) {
      Files.write(config, in.readAllBytes());
    }
    String store = workDir.resolve("store").toString().replace("\\", "\\\\");
    return List.of(
        "--model",
        "synthetic:" + config,
        "--seed",
        "7",
        "--threads",
        "1",
        "--warmup-rounds",
        "0",
        "--served-model-name",
        "tiny",
        "--max-model-len",
        "512",
        "--device-tokens",
        "512",
        "--host-ratio",
        "1.0",
        "--admin-token",
        TOKEN,
        "--kvstore-storage-backend",
        "file",
        "--kvstore-storage-backend-extra-config",
        "{\"path\": \"" + store + "\", \"async\": {\"min_extension_tokens\": 64}}",
        "--kv-events-endpoint",
        "tcp://127.0.0.1:0",
        "--kv-events-replay-endpoint",
        "tcp://127.0.0.1:0",
        "--kv-events-topic",
        "kv@it");
  }

  private static String text(SplittableRandom r, int n) {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < n; i++) {
      sb.append((char) ('a' + r.nextInt(26)));
    }
    return sb.toString();
  }

  private static void complete(ServeProcess s, String prompt) {
    HttpResponse<String> res =
        s.post(
            "/v1/completions",
            "{\"model\":\"tiny\",\"prompt\":\""
                + prompt
                + "\",\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}");
    assertEquals(200, res.statusCode(), res.body());
  }

  private static double published(ServeProcess s) {
    return PrometheusText.value(s.metrics(), "tokenspeed:kv_events_published_total");
  }

  /** Waits until L3 is idle and no batch was published for half a second. */
  private static void quiesce(ServeProcess s) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    double last = -1;
    while (System.nanoTime() < deadline) {
      Map<String, PrometheusText.Family> m = s.metrics();
      double now = PrometheusText.value(m, "tokenspeed:kv_events_published_total");
      if (now == last && PrometheusText.value(m, "tokenspeed:l3_storage_pending") == 0) {
        return;
      }
      last = now;
      Thread.sleep(500);
    }
    throw new AssertionError("the server kept publishing KV events for 20 s");
  }

  @Test
  void shouldBeDecodedByAnIndependentSubscriberWithChainedHashesAClearAndAReplayedGap()
      throws Exception {
    String python = python();
    SplittableRandom r = new SplittableRandom(42);
    List<String> roots = List.of(text(r, 200), text(r, 200), text(r, 200));
    try (ServeProcess s = ServeProcess.start(workDir, serveArgs(), 120)) {
      HttpResponse<String> d = s.get("/kv-events");
      assertEquals(200, d.statusCode(), d.body());
      JsonNode discovery = JSON.readTree(d.body());
      assertTrue(discovery.get("endpoint").asText().matches("tcp://127\\.0\\.0\\.1:\\d+"), d::body);
      assertTrue(
          discovery.get("replay_endpoint").asText().matches("tcp://127\\.0\\.0\\.1:\\d+"), d::body);
      assertEquals("kv@it", discovery.get("topic").asText());
      assertEquals(64, discovery.get("block_size").asInt());
      assertEquals(0, discovery.get("dp_rank").asInt());
      assertEquals("sha256-page-prefix-u64", discovery.get("hash").asText());

      try (Subscriber sub = new Subscriber(workDir, python, s.uri("/kv-events").toString())) {
        String hello = sub.line();
        assertTrue(hello.startsWith("subscribed"), hello);
        // the Device holds about two requests: distinct prompts evict, shared roots hit
        for (int i = 0; i < 8; i++) {
          complete(s, roots.get(i % 3) + text(r, 20));
        }
        String paused = sub.ask("pause", "paused at ");
        long pausedAt = Long.parseLong(paused.substring("paused at ".length()));
        double before = published(s);
        for (int i = 0; i < 4; i++) {
          complete(s, text(r, 150));
        }
        quiesce(s);
        assertTrue(published(s) > before, "nothing was published while the subscriber was away");
        sub.ask("resume", "resumed at ");
        for (int i = 0; i < 3; i++) {
          complete(s, roots.get(i) + text(r, 30));
        }
        HttpResponse<String> cleared =
            s.send(
                HttpRequest.newBuilder(s.uri("/admin/clear_cache"))
                    .header("Authorization", "Bearer " + TOKEN)
                    .POST(HttpRequest.BodyPublishers.noBody())
                    .build());
        assertEquals(200, cleared.statusCode(), cleared.body());
        for (int i = 0; i < 3; i++) {
          complete(s, roots.get(i) + text(r, 40));
        }
        quiesce(s);
        Map<String, PrometheusText.Family> metrics = s.metrics();
        long published =
            (long) PrometheusText.value(metrics, "tokenspeed:kv_events_published_total");
        long dropped = (long) PrometheusText.value(metrics, "tokenspeed:kv_events_dropped_total");

        JsonNode summary = JSON.readTree(sub.ask("finish", "{"));
        String all = summary.toPrettyString();
        assertEquals(0, dropped, all);
        assertEquals("[]", summary.get("errors").toString(), all);
        assertEquals(published, summary.get("next_seq").asLong(), "every batch, in order: " + all);
        assertEquals(published, summary.get("batches").asLong(), "each batch once: " + all);
        assertEquals("[]", summary.get("chain_breaks").toString(), all);
        assertEquals(0, summary.get("removed_unknown").asInt(), all);
        JsonNode hashes = summary.get("hash_checks");
        assertEquals(0, hashes.get("mismatched").asInt(), all);
        assertEquals(0, hashes.get("unverifiable").asInt(), all);
        assertTrue(hashes.get("verified").asInt() > 0, all);
        JsonNode stored = summary.get("events").get("BlockStored");
        for (String medium : List.of("GPU", "CPU", "EXTERNAL")) {
          assertNotNull(stored.get(medium), () -> "no BlockStored " + medium + ": " + all);
        }
        assertNotNull(
            summary.get("events").get("BlockRemoved").get("GPU"), "no Device eviction: " + all);
        assertTrue(summary.get("events").get("AllBlocksCleared").asInt() >= 1, all);
        boolean filled = false;
        for (JsonNode gap : summary.get("gaps")) {
          long from = gap.get("from").asLong();
          long to = gap.get("to").asLong();
          assertTrue(gap.get("filled").asLong() >= to - from + 1, "a gap not filled: " + all);
          filled |= from >= pausedAt;
        }
        assertTrue(filled, "no gap after the pause at " + pausedAt + " was replayed: " + all);
        assertTrue(summary.get("replayed_batches").asLong() > 0, all);
      }
    }
  }
}
