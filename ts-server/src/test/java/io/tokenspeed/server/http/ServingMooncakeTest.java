package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import io.tokenspeed.server.config.StorageExtraConfig;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.OptionalInt;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Servers over the Mooncake store bound to the C stand-in for Mooncake's C API ({@code
 * ts-l3/src/test/c/mooncake_stub.c}, compiled by the build into {@code target/native}), each with a
 * client of its own, as {@code serve} opens them. The stand-in keeps its objects in one table per
 * process, as a master keeps the metadata every client sees, so two servers in this process share
 * one store: the warm-up runs over it first (its store exercise through a registered Host
 * allocation), then a second server, a fresh engine with empty caches, restores the prefix the
 * first one computed. The stand-in speaks {@code rdma}, where, like the real client, it fails the
 * transfer of any buffer outside the registered allocation.
 */
class ServingMooncakeTest {
  @TempDir Path dir;

  private static StorageExtraConfig.Resolved mooncake() {
    Path library =
        Path.of(System.getProperty("mooncake.stub.lib", "target/native/libmooncake_stub.so"))
            .toAbsolutePath();
    assertTrue(Files.isRegularFile(library), () -> "no Mooncake stand-in at " + library);
    // The stand-in's lease clock only moves when a test moves it: the warm-up's deletion does not
    // wait for leases to end.
    return StorageExtraConfig.parse(
        "mooncake",
        "{\"library_path\": \""
            + library
            + "\", \"local_hostname\": \"127.0.0.1\", \"master_server_address\":"
            + " \"127.0.0.1:50051\", \"protocol\": \"rdma\", \"lease_ttl_ms\": 0,"
            + " \"namespace_delete_wait_ms\": 0, \"async\": {\"min_extension_tokens\": 64}}");
  }

  private static JsonNode complete(TestServer s, String prompt) {
    HttpResponse<String> res = s.post("/v1/completions", HttpServerTest.completion(prompt, 16, ""));
    assertEquals(200, res.statusCode(), res.body());
    return TestServer.json(res.body());
  }

  private static Map<String, PrometheusText.Family> metrics(TestServer s) {
    HttpResponse<String> res = s.get("/metrics");
    assertEquals(200, res.statusCode(), res.body());
    return PrometheusText.parse(res.body());
  }

  /** Waits until the server has no L3 work pending and has written objects. */
  private static void awaitBackups(TestServer s) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (System.nanoTime() < deadline) {
      Map<String, PrometheusText.Family> m = metrics(s);
      if (PrometheusText.value(m, "tokenspeed:l3_storage_pending") == 0
          && PrometheusText.value(m, "tokenspeed:l3_ok_keys_total", "kind", "put") > 0) {
        return;
      }
      Thread.sleep(50);
    }
    throw new AssertionError("the first server's backups did not finish");
  }

  @Test
  void shouldWarmUpAndRestoreOnASecondServerWhatTheFirstComputed() throws Exception {
    StorageExtraConfig.Resolved l3 = mooncake();
    Supplier<L3Settings> open =
        () -> {
          try {
            return L3Settings.open(l3.backend(), l3.runtime());
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
        };
    try (CausalLm model = TestServer.load(dir.resolve("warm-up"))) {
      EngineConfig config = EngineConfig.defaults(Engine.deviceParentsFor(model, 2048));
      var tokenizer = ByteTokenizer.plain();
      WarmUp.run(
          model, config, OptionalInt.empty(), tokenizer, TestServer.plainChat(tokenizer), open, 1);
    }

    String prompt = HttpServerTest.prompt(11, 200);
    try (TestServer first =
            TestServer.over(TestServer.load(dir.resolve("first")), open.get(), 1 << 20, true);
        TestServer second =
            TestServer.over(TestServer.load(dir.resolve("second")), open.get(), 1 << 20, true)) {
      JsonNode a = complete(first, prompt);
      awaitBackups(first);
      JsonNode b = complete(second, prompt);

      JsonNode details = b.get("usage").get("prompt_tokens_details");
      // every token but the last: the 12 full pages and the 7-token tail the first wrote through
      assertEquals(199, details.get("cached_tokens_by_source").get("storage").asInt(), b::toString);
      assertEquals(0, details.get("cached_tokens_by_source").get("device").asInt(), b::toString);
      assertEquals(
          a.get("choices").get(0).get("text").asText(),
          b.get("choices").get(0).get("text").asText(),
          "restored vs computed");
      assertEquals(
          0, a.get("usage").get("prompt_tokens_details").get("cached_tokens").asInt(), a::toString);
      assertEquals(0, PrometheusText.value(metrics(second), "tokenspeed:l3_quarantined"));
    }
  }
}
