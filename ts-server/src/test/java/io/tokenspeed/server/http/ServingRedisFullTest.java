package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.redis.RedisStore;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The server over a real Redis that is full (issue 43): {@code maxmemory} a few pages above what
 * the empty server uses, {@code noeviction}, so every backup beyond the first few is refused with
 * {@code OOM}. Redis's own counters measure what reached it: the bytes it read from its clients
 * ({@code total_net_input_bytes}) and the commands it refused for memory ({@code errorstat_OOM}).
 * The server must send it the first prompt's pages and then one page per hold however many prompts
 * follow, say so in its metrics and {@code /ready} while its health stays healthy, and write the
 * held pages once Redis has room again.
 */
@Tag("live")
class ServingRedisFullTest {
  private static final int MAX_TOKENS = 4;
  private static final int PROMPTS = 24;

  /** Holds double from 100 ms to this: short, so the test sees the cap and the recovery soon. */
  private static final long MAX_BACKOFF_MS = 1_000;

  @TempDir Path dir;

  private static L3Settings settings(RedisStore store) {
    StorageConfig scheduling =
        StorageConfig.defaults()
            .withMinExtensionTokens(16)
            .withSoftDeadlineMs(300)
            .withMaxBackupBackoffMs(MAX_BACKOFF_MS);
    return new L3Settings(
        store,
        new StorageRuntimeConfig(scheduling, L3ExecutorConfig.defaults()),
        L3Settings.CPU_ATTENTION_BACKEND);
  }

  private static long info(RedisServer redis, String section, String field) {
    String text = (String) redis.command("INFO", section);
    return text.lines()
        .filter(l -> l.startsWith(field + ":"))
        .findFirst()
        .map(
            l -> {
              String v = l.substring(field.length() + 1).trim();
              int comma = v.indexOf(',');
              return Long.parseLong(
                  v.substring(v.indexOf('=') + 1, comma < 0 ? v.length() : comma));
            })
        .orElse(0L);
  }

  private static Map<String, PrometheusText.Family> metrics(TestServer s) {
    return PrometheusText.parse(s.get("/metrics").body());
  }

  private static double value(Map<String, PrometheusText.Family> m, String name, String... labels) {
    return PrometheusText.value(m, name, labels);
  }

  private static Map<String, PrometheusText.Family> awaitMetrics(
      TestServer s, long seconds, Predicate<Map<String, PrometheusText.Family>> test)
      throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    Map<String, PrometheusText.Family> m = metrics(s);
    while (!test.test(m) && System.nanoTime() < deadline) {
      Thread.sleep(50);
      m = metrics(s);
    }
    return m;
  }

  private static void complete(TestServer s, String prompt) {
    HttpResponse<String> res =
        s.send(
            HttpRequest.newBuilder(s.uri("/v1/completions"))
                .header("Content-Type", "application/json")
                .POST(
                    HttpRequest.BodyPublishers.ofString(
                        HttpServerTest.completion(prompt, MAX_TOKENS, "")))
                .build());
    assertEquals(200, res.statusCode(), res.body());
  }

  @Test
  void shouldSendAFullRedisOnePagePerHoldAndSaySo() throws Exception {
    try (RedisServer redis = RedisServers.startStandalone(dir.resolve("redis"))) {
      long used = info(redis, "memory", "used_memory");
      redis.command("CONFIG", "SET", "maxmemory-policy", "noeviction");
      redis.command("CONFIG", "SET", "maxmemory", Long.toString(used + 16 * 1024));
      RedisStore store = RedisStore.open(RedisStoreSettings.standalone(redis.uri()));
      try (TestServer s = TestServer.start(dir.resolve("server"), settings(store))) {
        long inputBefore = info(redis, "stats", "total_net_input_bytes");
        long startNs = System.nanoTime();
        complete(s, HttpServerTest.prompt(4300, 240));
        Map<String, PrometheusText.Family> m =
            awaitMetrics(s, 10, x -> value(x, "tokenspeed:l3_writes_refused") == 1);
        assertEquals(1, value(m, "tokenspeed:l3_writes_refused"), "Redis refuses: OOM");
        double burst = value(m, "tokenspeed:l3_keys_total", "kind", "put");
        for (int i = 1; i < PROMPTS; i++) {
          complete(s, HttpServerTest.prompt(4300 + i, 200 + 3 * i));
        }
        Thread.sleep(1_500); // a few more holds, at their cap
        long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
        m = metrics(s);
        long inputWhileFull = info(redis, "stats", "total_net_input_bytes") - inputBefore;
        long oomRefusals = info(redis, "errorstats", "errorstat_OOM");
        double putKeys = value(m, "tokenspeed:l3_keys_total", "kind", "put");
        double refusedKeys = value(m, "tokenspeed:l3_refused_put_keys_total");

        assertEquals(1, value(m, "tokenspeed:l3_writes_refused"));
        assertEquals(1, value(m, "tokenspeed:l3_health_state", "state", "healthy"), "no outage");
        assertEquals(0, value(m, "tokenspeed:l3_health_epoch"));
        assertTrue(refusedKeys > 0 && refusedKeys == oomRefusals, refusedKeys + " " + oomRefusals);
        assertEquals(
            MAX_BACKOFF_MS / 1000.0,
            value(m, "tokenspeed:l3_backup_backoff_seconds"),
            "the hold is at its cap");
        JsonNode ready = TestServer.json(s.get("/ready").body()).get("storage");
        assertEquals("HEALTHY", ready.get("health").asText(), ready::toString);
        assertTrue(ready.get("writes_refused").asBoolean(), ready::toString);
        assertTrue(ready.get("writes_refused_reason").asText().startsWith("OOM"), ready::toString);
        assertEquals(MAX_BACKOFF_MS, ready.get("backup_backoff_ms").asLong(), ready::toString);

        // after the first prompt's pages: one page per hold (100, 200, 400, 800 ms, then 1 s)
        long holds = 4 + elapsedMs / MAX_BACKOFF_MS + 1;
        assertTrue(
            putKeys <= burst + holds + 8,
            "pages sent while Redis was full: "
                + putKeys
                + " (the first prompt's "
                + burst
                + ", "
                + holds
                + " holds in "
                + elapsedMs
                + " ms; "
                + PROMPTS
                + " prompts)");

        // room again: the held pages go, and the state clears
        redis.command("CONFIG", "SET", "maxmemory", "0");
        m =
            awaitMetrics(
                s,
                20,
                x ->
                    value(x, "tokenspeed:l3_writes_refused") == 0
                        && value(x, "tokenspeed:l3_backup_candidates", "state", "queued")
                                + value(x, "tokenspeed:l3_backup_candidates", "state", "deferred")
                                + value(x, "tokenspeed:l3_backup_candidates", "state", "held")
                            == 0);
        assertEquals(0, value(m, "tokenspeed:l3_writes_refused"), "Redis takes writes again");
        assertEquals(0, value(m, "tokenspeed:l3_backup_backoff_seconds"));
        double written = value(m, "tokenspeed:l3_put_written_keys_total");
        double pageBytes = value(m, "tokenspeed:l3_payload_bytes_total", "kind", "put") / written;
        assertTrue(written > burst, "the held pages were written: " + written);
        assertEquals(0, value(m, "tokenspeed:l3_dropped_backup_keys_total", "reason", "refused"));
        assertFalse(
            TestServer.json(s.get("/ready").body())
                .get("storage")
                .get("writes_refused")
                .asBoolean());

        // the bytes Redis read while full: the pages sent (and the reads' small commands)
        double pagesSentWhileFull = putKeys;
        assertTrue(
            inputWhileFull <= pagesSentWhileFull * (pageBytes + 256) + 256 * 1024,
            "Redis read "
                + inputWhileFull
                + " bytes while full: more than "
                + pagesSentWhileFull
                + " pages of "
                + pageBytes
                + " bytes");
        System.out.printf(
            "ServingRedisFullTest: %d prompts in %d ms over a full Redis: %.0f PUT keys (%.0f"
                + " refused, %d OOM replies), %d bytes read by Redis; pages of %.0f bytes;"
                + " %.0f keys written once it had room%n",
            PROMPTS,
            elapsedMs,
            putKeys,
            refusedKeys,
            oomRefusals,
            inputWhileFull,
            pageBytes,
            written);
      }
    }
  }
}
