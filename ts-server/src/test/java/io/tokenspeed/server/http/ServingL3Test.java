package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.scheduler.StorageConfig;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * The server over an engine with L3 under stores that misbehave, driven over real HTTP: a store
 * that refuses every call for ever, and administration called while store calls hang. Every answer
 * must equal the storage-off server's (greedy, an untied model whose output depends on its
 * context), no request may wait on the store past its soft deadline, and nothing may stay held.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ServingL3Test {
  private static final int MAX_TOKENS = 8;
  @TempDir static Path dir;
  private final List<String> prompts = new ArrayList<>();
  private final List<String> want = new ArrayList<>();

  @BeforeAll
  void reference() {
    for (int i = 0; i < 4; i++) {
      prompts.add(HttpServerTest.prompt(100 + i, 120 + 17 * i));
    }
    try (TestServer off = TestServer.start(dir.resolve("off"), null)) {
      for (String p : prompts) {
        want.add(text(complete(off, p, false)));
      }
    }
  }

  /** Soft deadline 300 ms, extensions of one 16-token page, health cooldown 300 ms. */
  private static L3Settings settings(Store store) {
    L3ExecutorConfig d = L3ExecutorConfig.defaults();
    L3ExecutorConfig executor =
        new L3ExecutorConfig(
            d.queryWorkers(),
            d.getWorkers(),
            d.putWorkers(),
            d.queryQueueCapacity(),
            d.getQueueCapacity(),
            d.putQueueCapacity(),
            d.maxOutstandingOperations(),
            300,
            d.closeJoinDeadlineMs());
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(16).withSoftDeadlineMs(300);
    return new L3Settings(
        store, new StorageRuntimeConfig(scheduling, executor), L3Settings.CPU_ATTENTION_BACKEND);
  }

  @Test
  void shouldAnswerEveryRequestAsWithoutStorageWhileTheStoreRefusesForEver() throws Exception {
    AtomicInteger calls = new AtomicInteger();
    Store refusing =
        new ForwardingStore(new MemoryStore()) {
          @Override
          public StoreResult exists(List<String> keys) throws Exception {
            calls.incrementAndGet();
            throw new IOException("refused by the test");
          }

          @Override
          public StoreResult get(List<String> keys, List<MemorySegment> destinations)
              throws Exception {
            calls.incrementAndGet();
            throw new IOException("refused by the test");
          }

          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            calls.incrementAndGet();
            throw new IOException("refused by the test");
          }
        };
    SplittableRandom random = new SplittableRandom(61);
    try (TestServer s =
        TestServer.over(
            TestServer.load(dir.resolve("refusing")), settings(refusing), 1 << 20, true)) {
      for (int i = 0; i < 16; i++) {
        int k = random.nextInt(prompts.size());
        if (random.nextInt(3) == 0) {
          assertEquals(200, admin(s, "/admin/clear_cache", "").statusCode());
        }
        Thread.sleep(random.nextInt(400)); // idle gaps: past the soft deadline and the cooldown
        long start = System.nanoTime();
        JsonNode out = complete(s, prompts.get(k), random.nextBoolean());
        double seconds = (System.nanoTime() - start) / 1e9;
        assertEquals(want.get(k), text(out), "request " + i + " vs storage off");
        assertEquals(0, storageTokens(out), out::toString);
        assertTrue(seconds < 5, "request " + i + " took " + seconds + " s");
        assertEquals(200, s.get("/ready").statusCode(), "ready while the store refuses");
      }
      assertTrue(calls.get() > 0, "the store was called");
      Map<String, PrometheusText.Family> m = awaitIdle(s);
      assertTrue(PrometheusText.value(m, "tokenspeed:l3_health_epoch") > 0, "outages were seen");
      assertEquals(
          0, PrometheusText.value(m, "tokenspeed:l3_ok_keys_total", "kind", "put"), "no PUT is ok");
    }
  }

  @Test
  void shouldAnswerAdministrationPromptlyWhileStoreCallsHang() throws Exception {
    MemoryStore memory = new MemoryStore();
    CountDownLatch release = new CountDownLatch(1);
    AtomicInteger hanging = new AtomicInteger();
    Store gated =
        new ForwardingStore(memory) {
          @Override
          public StoreResult get(List<String> keys, List<MemorySegment> destinations)
              throws Exception {
            hold();
            return super.get(keys, destinations);
          }

          @Override
          public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
            hold();
            return super.put(keys, sources);
          }

          private void hold() throws InterruptedException {
            if (release.getCount() > 0) {
              hanging.incrementAndGet();
              release.await();
              hanging.decrementAndGet();
            }
          }
        };
    try (TestServer s =
        TestServer.over(TestServer.load(dir.resolve("gated")), settings(gated), 1 << 20, true)) {
      for (int k = 0; k < prompts.size(); k++) { // their write-through hangs in the store
        assertEquals(want.get(k), text(complete(s, prompts.get(k), k % 2 == 0)));
      }
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (hanging.get() == 0 && System.nanoTime() < deadline) {
        Thread.sleep(5);
      }
      assertTrue(hanging.get() > 0, "PUTs hang in the store");

      // streams run while every administration call is made, one after the other
      List<CompletableFuture<HttpResponse<String>>> streams = new ArrayList<>();
      for (int i = 0; i < 8; i++) {
        streams.add(
            s.client.sendAsync(
                post(
                    s,
                    HttpServerTest.completion(prompts.get(i % 4), MAX_TOKENS, ",\"stream\":true")),
                HttpResponse.BodyHandlers.ofString()));
      }
      String[][] calls = {
        {"/admin/clear_device_cache", ""},
        {"/admin/clear_cache", ""},
        {"/admin/rotate_namespace", "{\"weight_version\":\"v2\"}"},
        {"/admin/clear_cache", ""},
      };
      for (String[] call : calls) {
        long start = System.nanoTime();
        HttpResponse<String> res = admin(s, call[0], call[1]);
        double seconds = (System.nanoTime() - start) / 1e9;
        assertEquals(200, res.statusCode(), call[0] + ": " + res.body());
        assertTrue(seconds < 5, call[0] + " took " + seconds + " s with store calls hanging");
      }
      assertTrue(hanging.get() > 0, "store calls were still hanging after the administration");
      for (int i = 0; i < streams.size(); i++) {
        HttpResponse<String> res = streams.get(i).get(30, TimeUnit.SECONDS);
        assertEquals(200, res.statusCode(), res.body());
        assertEquals(want.get(i % 4), Sse.text(Sse.events(res.body()), 0), "stream " + i);
      }

      // a weight update waits for the calls inside the store before it deletes the old
      // namespace (a late write must not land after the deletion); requests go on meanwhile
      CompletableFuture<HttpResponse<String>> update =
          CompletableFuture.supplyAsync(
              () -> admin(s, "/admin/update_weights", "{\"weight_version\":\"v3\"}"));
      Thread.sleep(500);
      assertTrue(!update.isDone(), "the update waits while store calls hang");
      for (int k = 0; k < prompts.size(); k++) {
        assertEquals(want.get(k), text(complete(s, prompts.get(k), k % 2 == 1)), "during update");
      }
      assertTrue(!update.isDone(), "the update still waits");
      release.countDown(); // the hung calls return late: nothing they carry may be published
      HttpResponse<String> updated = update.get(10, TimeUnit.SECONDS);
      assertEquals(200, updated.statusCode(), updated.body());
      assertEquals("v3", TestServer.json(updated.body()).get("weight_version").asText());

      // storage still works under the new namespace: written, cleared locally, restored
      assertEquals(want.get(0), text(complete(s, prompts.get(0), false)));
      awaitIdle(s);
      assertEquals(200, admin(s, "/admin/clear_cache", "").statusCode());
      JsonNode restored = complete(s, prompts.get(0), true);
      assertEquals(want.get(0), text(restored), "restored from storage vs storage off");
      assertTrue(storageTokens(restored) > 0, restored::toString);
      Map<String, PrometheusText.Family> m = awaitIdle(s);
      assertEquals(0, PrometheusText.value(m, "tokenspeed:l3_ready_holds"));
      assertEquals(0, PrometheusText.value(m, "tokenspeed:l3_quarantined"));
    }
  }

  private static JsonNode complete(TestServer s, String prompt, boolean stream) {
    HttpResponse<String> res =
        s.send(
            post(
                s,
                HttpServerTest.completion(
                    prompt,
                    MAX_TOKENS,
                    stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "")));
    assertEquals(200, res.statusCode(), res.body());
    if (!stream) {
      return TestServer.json(res.body());
    }
    List<JsonNode> events = Sse.events(res.body());
    var out = TestServer.JSON.createObjectNode();
    out.putArray("choices").addObject().put("text", Sse.text(events, 0));
    out.set("usage", events.getLast().get("usage"));
    return out;
  }

  private static String text(JsonNode completion) {
    return completion.get("choices").get(0).get("text").asText();
  }

  private static int storageTokens(JsonNode completion) {
    return completion
        .get("usage")
        .get("prompt_tokens_details")
        .get("cached_tokens_by_source")
        .get("storage")
        .asInt();
  }

  private static HttpRequest post(TestServer s, String body) {
    return HttpRequest.newBuilder(s.uri("/v1/completions"))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body))
        .build();
  }

  private static HttpResponse<String> admin(TestServer s, String path, String body) {
    return s.send(
        HttpRequest.newBuilder(s.uri(path))
            .header("Authorization", "Bearer " + TestServer.ADMIN_TOKEN)
            .POST(
                body.isEmpty()
                    ? HttpRequest.BodyPublishers.noBody()
                    : HttpRequest.BodyPublishers.ofString(body))
            .build());
  }

  /**
   * Waits until the scrape shows no request, no storage work and no used KV parent, and returns it.
   */
  private static Map<String, PrometheusText.Family> awaitIdle(TestServer s) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (true) {
      Map<String, PrometheusText.Family> m = PrometheusText.parse(s.get("/metrics").body());
      boolean idle =
          PrometheusText.value(m, "tokenspeed:num_requests_running") == 0
              && PrometheusText.value(m, "tokenspeed:num_requests_waiting") == 0
              && PrometheusText.value(m, "tokenspeed:l3_storage_pending") == 0
              && PrometheusText.value(m, "tokenspeed:kv_parents", "tier", "device", "state", "used")
                  == 0
              && PrometheusText.value(m, "tokenspeed:kv_parents", "tier", "host", "state", "used")
                  == 0;
      if (idle) {
        return m;
      }
      assertTrue(System.nanoTime() < deadline, "not idle: " + s.get("/metrics").body());
      Thread.sleep(50);
    }
  }
}
