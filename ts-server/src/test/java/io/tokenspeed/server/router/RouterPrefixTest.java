package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.router.EventPublisherStub.Stored;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The router choosing by prefix, against stub engines that publish KV events over real ZeroMQ
 * sockets ({@link EventPublisherStub}, announced by their {@code GET /kv-events}): fused replicas
 * ({@code --replicas}) and the prefill side of a disaggregated deployment; each choice's reason and
 * tokens in the router's metrics.
 */
class RouterPrefixTest {
  private static final int P = 4;

  private final List<AutoCloseable> open = new ArrayList<>();
  private final HttpClient client =
      HttpClient.newBuilder()
          .version(HttpClient.Version.HTTP_1_1)
          .connectTimeout(Duration.ofSeconds(10))
          .build();
  private Router router;

  @AfterEach
  void stop() throws Exception {
    if (router != null) {
      router.close();
    }
    for (AutoCloseable c : open.reversed()) {
      c.close();
    }
    client.shutdownNow();
  }

  /** {@code n} stubs of {@code role}, each publishing its events (block size {@link #P}). */
  private List<StubBackend> stubs(String role, int n, List<EventPublisherStub> publishers) {
    List<StubBackend> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      StubBackend b =
          role.equals("fused") ? StubBackend.fused() : new StubBackend(role, "10.0.0.9:1", "m");
      EventPublisherStub pub = new EventPublisherStub("kv", i);
      open.add(b);
      open.add(pub);
      b.kvEventsAnswer = pub.discovery(P, true);
      out.add(b);
      publishers.add(pub);
    }
    return out;
  }

  private Router start(
      List<String> prefill, List<String> decode, List<String> replicas, Routing routing) {
    router =
        Router.start(
            new RouterSettings(
                prefill,
                decode,
                replicas,
                "127.0.0.1",
                0,
                3_600_000,
                2000,
                20_000,
                1 << 20,
                2000,
                routing,
                1 << 16,
                256),
            () -> 42,
            PromptReader.tokenIdsOnly());
    router.pollNow();
    return router;
  }

  private HttpResponse<String> post(String body) {
    try {
      return client.send(
          HttpRequest.newBuilder(
                  URI.create("http://127.0.0.1:" + router.port() + "/v1/completions"))
              .header("Content-Type", "application/json")
              .POST(HttpRequest.BodyPublishers.ofString(body))
              .build(),
          HttpResponse.BodyHandlers.ofString());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  private String get(String path) {
    try {
      return client
          .send(
              HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + path))
                  .GET()
                  .build(),
              HttpResponse.BodyHandlers.ofString())
          .body();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  private Map<String, PrometheusText.Family> metrics() {
    return PrometheusText.parse(get("/metrics"));
  }

  private static void await(BooleanSupplier condition, Supplier<String> what)
      throws InterruptedException {
    long deadline = System.nanoTime() + 20_000_000_000L;
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("not within 20 s: " + what.get());
      }
      Thread.sleep(10);
    }
  }

  /** Waits until the router's index holds {@code n} blocks of {@code tier} for {@code b}. */
  private void awaitIndexed(StubBackend b, String tier, int n) throws InterruptedException {
    await(
        () ->
            PrometheusText.value(
                    metrics(),
                    "tokenspeed:router_kv_index_blocks",
                    "backend",
                    b.url(),
                    "tier",
                    tier)
                == n,
        () -> get("/metrics"));
  }

  /** Waits until the router follows every stub's events (the subscriptions' sockets are live). */
  private void awaitLive(List<StubBackend> stubs, List<EventPublisherStub> pubs)
      throws InterruptedException {
    for (int i = 0; i < stubs.size(); i++) {
      // a marker block on the Device: once indexed the events flow; then it goes again
      pubs.get(i).publish(List.of(new Stored(new long[] {-7 - i}, "GPU")), false);
      StubBackend b = stubs.get(i);
      EventPublisherStub pub = pubs.get(i);
      await(
          () -> {
            if (PrometheusText.value(
                    metrics(),
                    "tokenspeed:router_kv_index_blocks",
                    "backend",
                    b.url(),
                    "tier",
                    "device")
                >= 1) {
              return true;
            }
            pub.publish(List.of(new Stored(new long[] {-7}, "GPU")), false);
            return false;
          },
          () -> get("/ready"));
      pub.publish(
          List.of(new EventPublisherStub.Removed(new long[] {-7 - stubs.indexOf(b), -7}, "GPU")),
          false);
      awaitIndexed(b, "device", 0);
    }
  }

  private static int[] tokens(long seed, int n) {
    SplittableRandom r = new SplittableRandom(seed);
    int[] t = new int[n];
    for (int i = 0; i < n; i++) {
      t[i] = r.nextInt(1000);
    }
    return t;
  }

  private static String body(int[] prompt) {
    return "{\"prompt\":" + Arrays.toString(prompt).replace(" ", "") + ",\"max_tokens\":1}";
  }

  private static double decisions(Map<String, PrometheusText.Family> m, String role, String why) {
    return PrometheusText.value(
        m, "tokenspeed:router_routing_decisions_total", "role", role, "reason", why);
  }

  private static int receivedBy(List<StubBackend> stubs, int[] prompt) {
    int found = -1;
    for (int i = 0; i < stubs.size(); i++) {
      for (JsonNode b : stubs.get(i).bodies()) {
        if (b.get("prompt").toString().equals(Arrays.toString(prompt).replace(" ", ""))) {
          assertEquals(-1, found, "one backend received it");
          found = i;
        }
      }
    }
    return found;
  }

  @Test
  void shouldSendEachPromptWhereItsLongestPrefixIsHeldAndCountWhy() throws Exception {
    List<EventPublisherStub> pubs = new ArrayList<>();
    List<StubBackend> replicas = stubs("fused", 3, pubs);
    start(List.of(), List.of(), replicas.stream().map(StubBackend::url).toList(), Routing.PREFIX);
    awaitLive(replicas, pubs);

    // backend 2 holds 8 pages of T on its Device: T goes there
    int[] t = tokens(1, 40);
    long[] th = PageHashes.of(t, P);
    assertEquals(9, th.length, "the pages within the first 39 tokens");
    pubs.get(2).publish(List.of(new Stored(Arrays.copyOf(th, 8), "GPU")), false);
    awaitIndexed(replicas.get(2), "device", 8);
    assertEquals(200, post(body(t)).statusCode());
    assertEquals(2, receivedBy(replicas, t));
    // backend 0 holds U's pages on its Host tier only
    int[] u = tokens(2, 30);
    pubs.get(0).publish(List.of(new Stored(PageHashes.of(u, P), "CPU")), false);
    awaitIndexed(replicas.get(0), "host", PageHashes.of(u, P).length);
    assertEquals(200, post(body(u)).statusCode());
    assertEquals(0, receivedBy(replicas, u));
    // the store holds V's pages (backend 1 wrote them): every backend may restore them
    int[] v = tokens(3, 30);
    pubs.get(1).publish(List.of(new Stored(PageHashes.of(v, P), "L3")), false);
    awaitIndexed(replicas.get(1), "l3", 7);
    assertEquals(200, post(body(v)).statusCode());
    // nothing anywhere: a tie, round robin
    int[] w = tokens(4, 30);
    assertEquals(200, post(body(w)).statusCode());
    int first = receivedBy(replicas, w);
    // the same prompt at once again: its pages are pending where it went, before any event
    assertEquals(200, post(body(w)).statusCode());
    assertEquals(
        2,
        replicas.get(first).bodies().stream()
            .filter(b -> b.get("prompt").toString().equals(Arrays.toString(w).replace(" ", "")))
            .count(),
        "the second went where the first did");

    Map<String, PrometheusText.Family> m = metrics();
    assertEquals(2, decisions(m, "fused", "device_prefix"), "T, and W's second");
    assertEquals(1, decisions(m, "fused", "host_prefix"));
    assertEquals(1, decisions(m, "fused", "l3_prefix"));
    assertEquals(1, decisions(m, "fused", "round_robin"));
    assertEquals(0, decisions(m, "fused", "load"));
    assertEquals(
        40 + 30 + 30 + 30 + 30,
        PrometheusText.value(m, "tokenspeed:router_routed_prompt_tokens_total", "role", "fused"));
    assertEquals(
        32 + 28,
        PrometheusText.value(
            m, "tokenspeed:router_prefix_tokens_total", "role", "fused", "tier", "device"));
    assertEquals(
        28,
        PrometheusText.value(
            m, "tokenspeed:router_prefix_tokens_total", "role", "fused", "tier", "host"));
    assertEquals(
        28,
        PrometheusText.value(
            m, "tokenspeed:router_prefix_tokens_total", "role", "fused", "tier", "l3"));
    for (StubBackend b : replicas) {
      assertEquals(
          1, PrometheusText.value(m, "tokenspeed:router_kv_events_live", "backend", b.url()));
      assertTrue(
          PrometheusText.value(m, "tokenspeed:router_kv_event_batches_total", "backend", b.url())
              >= 1);
    }
    // a text prompt: the router has no tokenizer, so by load alone
    assertEquals(200, post("{\"prompt\":\"hello\"}").statusCode());
    assertEquals(
        1,
        PrometheusText.value(
            metrics(), "tokenspeed:router_unknown_prompts_total", "role", "fused"));
    JsonNode ready = RouterRig.json(get("/ready"));
    assertEquals("ready", ready.get("status").asText(), ready::toString);
    JsonNode e = ready.get("fused").get(2).get("kv_events");
    assertEquals(pubs.get(2).endpoint(), e.get("endpoint").asText(), ready::toString);
    assertEquals(8, e.get("device_blocks").asInt(), ready::toString);
  }

  @Test
  void shouldLetLoadOutweighAPrefixAndRouteABackendWithoutEventsByLoad() throws Exception {
    List<EventPublisherStub> pubs = new ArrayList<>();
    List<StubBackend> replicas = stubs("fused", 3, pubs);
    replicas.get(1).kvEventsAnswer = null; // its events are off: 404
    replicas.get(1).metricsAnswer = "tokenspeed:num_requests_running{a=\"b\"} 1\n";
    replicas.get(2).metricsAnswer =
        "tokenspeed:num_requests_running 30\ntokenspeed:num_requests_waiting 20\n";
    start(List.of(), List.of(), replicas.stream().map(StubBackend::url).toList(), Routing.PREFIX);
    awaitLive(List.of(replicas.get(0), replicas.get(2)), List.of(pubs.get(0), pubs.get(2)));
    JsonNode ready = RouterRig.json(get("/ready"));
    assertTrue(
        ready.get("fused").get(1).get("kv_events").get("off").asText().contains("404"),
        ready::toString);
    assertEquals(50.0, ready.get("fused").get(2).get("load").asDouble(), ready::toString);

    // backend 2 holds all of T, but 50 requests wait there: T goes to the idle backend 0
    int[] t = tokens(5, 100);
    pubs.get(2).publish(List.of(new Stored(PageHashes.of(t, P), "GPU")), false);
    awaitIndexed(replicas.get(2), "device", PageHashes.of(t, P).length);
    assertEquals(200, post(body(t)).statusCode());
    assertEquals(0, receivedBy(replicas, t));
    assertEquals(1, decisions(metrics(), "fused", "load"));
    // the busy backend's load drops: T goes where its prefix is
    replicas.get(2).metricsAnswer = "tokenspeed:num_requests_running 0\n";
    router.pollNow();
    int[] t2 = Arrays.copyOf(t, 100);
    t2[99] = t[99] + 1; // the same prefix, another last token
    assertEquals(200, post(body(t2)).statusCode());
    assertEquals(2, receivedBy(replicas, t2));
    assertEquals(
        1,
        PrometheusText.value(
            metrics(), "tokenspeed:router_kv_events_live", "backend", replicas.get(2).url()));
    assertEquals(
        0,
        PrometheusText.value(
            metrics(), "tokenspeed:router_kv_events_live", "backend", replicas.get(1).url()));
  }

  @Test
  void shouldChooseThePrefillBackendByPrefixAndTheDecodeBackendInTurn() throws Exception {
    List<EventPublisherStub> pubs = new ArrayList<>();
    List<StubBackend> prefill = stubs("prefill", 2, pubs);
    List<StubBackend> decode =
        List.of(StubBackend.decode("10.0.0.1:7000"), StubBackend.decode("10.0.0.2:7001"));
    decode.forEach(open::add);
    start(
        prefill.stream().map(StubBackend::url).toList(),
        decode.stream().map(StubBackend::url).toList(),
        List.of(),
        Routing.PREFIX);
    awaitLive(prefill, pubs);
    int[] t = tokens(6, 600); // its prefix outweighs the previous prefill half still in flight
    pubs.get(1).publish(List.of(new Stored(PageHashes.of(t, P), "GPU")), false);
    awaitIndexed(prefill.get(1), "device", PageHashes.of(t, P).length);
    for (int i = 0; i < 4; i++) {
      assertEquals(200, post(body(t)).statusCode());
      assertEquals(i / 2 + 1, decode.get(i % 2).received.size(), "decode in turn");
    }
    prefill.get(1).awaitReceived(4, 10_000);
    assertEquals(0, prefill.get(0).received.size(), "every prefill half where the prefix is");
    assertEquals(4, decisions(metrics(), "prefill", "device_prefix"));
  }

  @Test
  void shouldIgnorePrefixesUnderRoundRobin() throws Exception {
    List<EventPublisherStub> pubs = new ArrayList<>();
    List<StubBackend> replicas = stubs("fused", 3, pubs);
    start(
        List.of(),
        List.of(),
        replicas.stream().map(StubBackend::url).toList(),
        Routing.ROUND_ROBIN);
    int[] t = tokens(7, 40);
    for (int i = 0; i < 6; i++) {
      assertEquals(200, post(body(t)).statusCode());
      assertEquals(i / 3 + 1, replicas.get(i % 3).received.size());
    }
    Map<String, PrometheusText.Family> m = metrics();
    assertEquals(6, decisions(m, "fused", "round_robin"));
    assertEquals(
        0,
        PrometheusText.value(m, "tokenspeed:router_routed_prompt_tokens_total", "role", "fused"));
    assertEquals("round-robin", RouterRig.json(get("/ready")).get("routing").asText());
  }
}
