package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.core.metrics.PrometheusText;
import java.io.IOException;
import java.io.InputStream;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code tokenspeed serve --kvstore-storage-backend mooncake} as a process of the shaded jar, over
 * the C stand-in for Mooncake's C API ({@code ts-l3/src/test/c/mooncake_stub.c}, which the build
 * compiles into {@code target/native}), with the default warm-up: the server starts, its warm-up
 * exercising the store through the registered Host allocation as requests do, serves a completion,
 * writes the prompt's pages through, and restores them from the store once its caches are cleared.
 *
 * <p>The stand-in speaks the transfer protocol {@code rdma}: like the real client over RDMA, it
 * then fails the transfer of any buffer outside the registered allocation, beside the binding's own
 * check before the native call.
 *
 * <p>The stand-in keeps its objects in one table per process, so a second {@code serve} process
 * would not see what the first wrote. What a second server does is what this one does after {@code
 * /admin/clear_cache}: with empty Device and Host caches, the prompt's prefix can only come from
 * the store, through the same QUERY, GET and H2D path. Restores across processes are checked by
 * {@link ServeIT} (a Redis server, the file store) and, against a real master, by ts-l3's live
 * test.
 */
class ServeMooncakeIT {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String ADMIN_TOKEN = "t";

  @TempDir Path workDir;

  private List<String> args() throws IOException {
    Path config = workDir.resolve("tiny-untied.json");
    try (InputStream in = ServeMooncakeIT.class.getResourceAsStream("/models/tiny-untied.json")) {
      Files.write(config, in.readAllBytes());
    }
    Path library =
        Path.of(System.getProperty("mooncake.stub.lib", "target/native/libmooncake_stub.so"))
            .toAbsolutePath();
    assertTrue(Files.isRegularFile(library), () -> "no Mooncake stand-in at " + library);
    // The stand-in's lease clock only moves when a test moves it: no wait for leases to end.
    String mooncake =
        "{\"library_path\": \""
            + library
            + "\", \"local_hostname\": \"127.0.0.1\", \"master_server_address\":"
            + " \"127.0.0.1:50051\", \"protocol\": \"rdma\", \"lease_ttl_ms\": 0,"
            + " \"namespace_delete_wait_ms\": 0, \"async\": {\"min_extension_tokens\": 64}}";
    return List.of(
        "--model",
        "synthetic:" + config,
        "--seed",
        "7",
        "--threads",
        "1",
        "--served-model-name",
        "tiny",
        "--admin-token",
        ADMIN_TOKEN,
        "--kvstore-storage-backend",
        "mooncake",
        "--kvstore-storage-backend-extra-config",
        mooncake);
  }

  private static String prompt(long seed, int n) {
    SplittableRandom r = new SplittableRandom(seed);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < n; i++) {
      sb.append((char) ('a' + r.nextInt(26)));
    }
    return sb.toString();
  }

  private static JsonNode complete(ServeProcess s, String prompt) throws IOException {
    HttpResponse<String> res =
        s.post(
            "/v1/completions",
            "{\"model\":\"tiny\",\"prompt\":\""
                + prompt
                + "\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}");
    assertEquals(200, res.statusCode(), res.body());
    return JSON.readTree(res.body());
  }

  /** Waits until the server has no L3 work pending and has written objects. */
  private static void awaitStorageIdle(ServeProcess s) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (System.nanoTime() < deadline) {
      Map<String, PrometheusText.Family> m = s.metrics();
      if (PrometheusText.value(m, "tokenspeed:l3_storage_pending") == 0
          && PrometheusText.value(m, "tokenspeed:l3_ok_keys_total", "kind", "put") > 0) {
        return;
      }
      Thread.sleep(100);
    }
    throw new AssertionError("the server's backups did not finish: " + s.stderr());
  }

  @Test
  void shouldStartWithTheDefaultWarmUpServeAndRestoreThroughTheMooncakeStandIn() throws Exception {
    String prompt = prompt(5, 200);
    try (ServeProcess s = ServeProcess.start(workDir, args(), 300)) {
      String log = s.stderr();
      assertTrue(log.contains("; L3 mooncake"), log);

      JsonNode first = complete(s, prompt);
      assertEquals(
          0,
          first.get("usage").get("prompt_tokens_details").get("cached_tokens").asInt(),
          first::toString);
      awaitStorageIdle(s);

      HttpResponse<String> cleared =
          s.send(
              HttpRequest.newBuilder(s.uri("/admin/clear_cache"))
                  .header("Authorization", "Bearer " + ADMIN_TOKEN)
                  .POST(HttpRequest.BodyPublishers.noBody())
                  .build());
      assertEquals(200, cleared.statusCode(), cleared.body());

      JsonNode restored = complete(s, prompt);
      JsonNode details = restored.get("usage").get("prompt_tokens_details");
      assertEquals(
          199, details.get("cached_tokens_by_source").get("storage").asInt(), restored::toString);
      assertEquals(
          0, details.get("cached_tokens_by_source").get("device").asInt(), restored::toString);
      assertEquals(
          0, details.get("cached_tokens_by_source").get("host").asInt(), restored::toString);
      assertEquals(
          first.get("choices").get(0).get("text").asText(),
          restored.get("choices").get(0).get("text").asText(),
          "restored vs computed");

      Map<String, PrometheusText.Family> m = s.metrics();
      assertEquals(0, PrometheusText.value(m, "tokenspeed:l3_quarantined"), "nothing quarantined");
      assertTrue(PrometheusText.value(m, "tokenspeed:l3_ok_keys_total", "kind", "get") > 0);
    }
  }
}
