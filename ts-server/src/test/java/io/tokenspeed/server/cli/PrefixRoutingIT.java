package io.tokenspeed.server.cli;

import static io.tokenspeed.server.cli.PdDeployment.json;
import static io.tokenspeed.server.cli.PdDeployment.startAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.cli.RouteWorkload.Prompt;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Data-parallel replicas as operators run them (docs/serving.md "Data-parallel replicas"): three
 * fused {@code serve} processes of the shaded jar, each with its {@code --dp-rank} and its KV
 * events on, sharing one real {@code redis-server}, behind {@code router --replicas} processes, one
 * routing by prefix and one round robin. A smaller {@code bench route} workload (groups of prompts
 * sharing a prefix, in random order, one at a time) through each: the share of prompt tokens the
 * replicas reused from their Device and Host tiers (the answers' {@code cached_tokens_by_source})
 * is at least twice round robin's under prefix routing, and every answer is the one replica 0 gives
 * the same request alone.
 *
 * <p>Each replica's Device and Host hold two of the six prefixes: routed by prefix, each replica
 * serves about two groups and keeps them; in turn, each sees all six and keeps about a third.
 * Latencies are printed, not asserted: on the tiny model recomputing 256 tokens costs about what
 * restoring them from Redis does, and the two cores are shared by five processes
 * (docs/benchmarks/2026-12-07-prefix-routing.md measures TTFT on a larger model).
 */
class PrefixRoutingIT {
  private static final String ADMIN = "0123456789abcdef";

  @TempDir Path workDir;

  @Test
  void shouldServeTwiceTheDeviceAndHostShareOfRoundRobinWithTheSameOutputs() throws Exception {
    PdDeployment pd = new PdDeployment(workDir);
    try (RedisServer redis = RedisServers.startStandalone(workDir.resolve("redis"))) {
      List<Callable<ServeProcess>> starts = new ArrayList<>();
      for (int i = 0; i < 3; i++) {
        starts.add(
            pd.fused(
                List.of(
                    "--dp-rank",
                    Integer.toString(i),
                    "--max-model-len",
                    "512",
                    "--device-tokens",
                    "640",
                    "--host-ratio",
                    "1",
                    "--admin-token",
                    ADMIN,
                    "--kvstore-storage-backend",
                    "redis",
                    "--kvstore-storage-backend-extra-config",
                    "{\"uri\": \"" + redis.uri() + "\"}",
                    "--kv-events-endpoint",
                    "tcp://127.0.0.1:0",
                    "--kv-events-replay-endpoint",
                    "tcp://127.0.0.1:0")));
      }
      @SuppressWarnings("unchecked")
      List<ServeProcess> replicas = startAll(starts.toArray(new Callable[0]));
      try (ServeProcess r0 = replicas.get(0);
          ServeProcess r1 = replicas.get(1);
          ServeProcess r2 = replicas.get(2);
          ServeProcess prefix = router(replicas, "prefix");
          ServeProcess turns = router(replicas, "round-robin")) {
        JsonNode events = json(r1.get("/kv-events").body());
        assertEquals(1, events.get("dp_rank").asInt(), events::toString);
        awaitFollowing(prefix, 3);

        RouteWorkload workload = new RouteWorkload(6, 6, 256, 32, 256, 5);
        double[] rr = serve(turns, workload.prompts(1), replicas, r0);
        double[] px = serve(prefix, workload.prompts(2), replicas, r0);
        System.out.printf(
            "Device+Host share: round robin %.3f, prefix %.3f; latency p50 %.1f / %.1f ms, p90"
                + " %.1f / %.1f ms%n",
            rr[0], px[0], rr[1], px[1], rr[2], px[2]);
        assertTrue(
            px[0] >= 2 * rr[0],
            "prefix routing's Device+Host share " + px[0] + " is not twice round robin's " + rr[0]);
        Map<String, PrometheusText.Family> m = prefix.metrics();
        // 36 requests, the first of each of the six groups routed with nothing known: of the 30
        // others, at least two thirds go to a replica whose own Device or Host holds the prefix
        // (which of the two depends on the evictions the replica's timing gave).
        assertTrue(
            decisions(m, "device_prefix") + decisions(m, "host_prefix") >= 20,
            () -> prefix.get("/metrics").body());
        for (ServeProcess r : replicas) {
          assertTrue(
              PrometheusText.value(
                      m, "tokenspeed:router_kv_event_batches_total", "backend", PdDeployment.url(r))
                  > 0,
              () -> prefix.get("/ready").body());
        }
      }
    }
  }

  private static double decisions(Map<String, PrometheusText.Family> m, String reason) {
    return PrometheusText.value(
        m, "tokenspeed:router_routing_decisions_total", "role", "fused", "reason", reason);
  }

  private ServeProcess router(List<ServeProcess> replicas, String routing) throws Exception {
    return ServeProcess.start(
        workDir,
        Map.of(),
        "router",
        List.of(
            "--replicas",
            String.join(",", replicas.stream().map(PdDeployment::url).toList()),
            "--routing",
            routing,
            "--poll-ms",
            "200"),
        60);
  }

  /** Waits until the router follows every replica's KV events. */
  private static void awaitFollowing(ServeProcess router, int n) throws InterruptedException {
    PdDeployment.await(
        () -> {
          int live = 0;
          for (JsonNode b : json(router.get("/ready").body()).path("fused")) {
            live += b.path("kv_events").has("endpoint") ? 1 : 0;
          }
          return live == n;
        },
        () -> router.get("/ready").body());
    Thread.sleep(500); // the subscriptions' first replays
  }

  /**
   * Clears every replica's caches, then sends {@code prompts} one at a time through {@code router};
   * each answer must be replica 0's alone. Returns the Device+Host share of the prompt tokens and
   * the latency p50 and p90 (ms, request to the stream's end).
   */
  private static double[] serve(
      ServeProcess router, List<Prompt> prompts, List<ServeProcess> replicas, ServeProcess alone)
      throws Exception {
    for (ServeProcess r : replicas) {
      HttpResponse<String> cleared =
          r.send(
              HttpRequest.newBuilder(r.uri("/admin/clear_cache"))
                  .header("Authorization", "Bearer " + ADMIN)
                  .POST(HttpRequest.BodyPublishers.noBody())
                  .build());
      assertEquals(200, cleared.statusCode(), cleared.body());
    }
    long promptTokens = 0;
    long local = 0;
    double[] ttft = new double[prompts.size()];
    List<String> texts = new ArrayList<>();
    for (int i = 0; i < prompts.size(); i++) {
      String body = body(prompts.get(i).ids());
      long sent = System.nanoTime();
      HttpResponse<String> res = router.post("/v1/completions", body);
      ttft[i] = (System.nanoTime() - sent) / 1e6;
      PdDeployment.Said said = PdDeployment.Said.of(res, true);
      JsonNode by = said.bySource();
      promptTokens += said.usage().get("prompt_tokens").asLong();
      local += by.get("device").asLong() + by.get("host").asLong();
      texts.add(said.text());
    }
    for (int i = 0; i < prompts.size(); i++) {
      PdDeployment.Said own =
          PdDeployment.Said.of(alone.post("/v1/completions", body(prompts.get(i).ids())), true);
      assertEquals(own.text(), texts.get(i), "request " + i + " through the router vs alone");
    }
    Arrays.sort(ttft);
    return new double[] {
      (double) local / promptTokens, ttft[ttft.length / 2], ttft[(int) (ttft.length * 0.9)]
    };
  }

  /** A greedy streamed completion of the token ids, four tokens, its usage at the end. */
  private static String body(int[] ids) {
    return "{\"model\":\"tiny\",\"prompt\":"
        + Arrays.toString(ids).replace(" ", "")
        + ",\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
        + "\"stream_options\":{\"include_usage\":true}}";
  }
}
