package io.tokenspeed.server.cli;

import static io.tokenspeed.server.cli.PdDeployment.await;
import static io.tokenspeed.server.cli.PdDeployment.chat;
import static io.tokenspeed.server.cli.PdDeployment.completion;
import static io.tokenspeed.server.cli.PdDeployment.json;
import static io.tokenspeed.server.cli.PdDeployment.prompt;
import static io.tokenspeed.server.cli.PdDeployment.startAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.cli.PdDeployment.Said;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.CleanupMode;
import org.junit.jupiter.api.io.TempDir;

/**
 * Cancellation and death across the processes of a disaggregated deployment (docs/pd.md,
 * "Cancellation" and "Failure"): a decode engine, a prefill engine and a router, separate processes
 * of the shaded jar on loopback. The engines' own handling is tested in one JVM (ts-engine {@code
 * EnginePdTest}); here the router's HTTP connections, the KV transfer's TCP connection and the
 * kernel's cleanup of a killed process carry the news.
 *
 * <p>Each case checks two things:
 *
 * <ol>
 *   <li><b>The client gets its answer in bounded time</b>, in the shape the router and {@code
 *       serve} document: a non-streamed request, or a stream whose status line had not gone out
 *       yet, a 502, 503 or 504 with an OpenAI error body; a stream that started an error event
 *       ({@code upstream_error}, code 502) and then {@code data: [DONE]}. (A client that left gets
 *       nothing: the case checks that the engines end its request.)
 *   <li><b>Nothing is leaked on the survivors.</b> Within a bound, each surviving engine's {@code
 *       /metrics} says: no request running or waiting, no more used Device or Host parents than the
 *       idle baseline measured before the case, no KV transfer room open and no registration
 *       waiting for its BOOTSTRAP, and every room it opened ended exactly once.
 * </ol>
 *
 * <p>Prompts and the moments of the faults come from fixed seeds. Long prompts (thousands of
 * tokens) make a prefill take a measurable time on the tiny model; long completions (thousands of
 * tokens) make a stream last seconds.
 */
class PdFailureIT {
  /** How long a client may wait for its error once the fault happened. */
  private static final Duration ANSWER_BOUND = Duration.ofSeconds(20);

  /** How long a survivor may take to let go of everything once the clients have their answers. */
  private static final Duration IDLE_BOUND = Duration.ofSeconds(30);

  /** Every read of a test's own connections; a server that never answers fails the test. */
  private static final Duration READ_TIMEOUT = Duration.ofSeconds(30);

  private static final String COMPLETIONS = "/v1/completions";

  private static final String CHATS = "/v1/chat/completions";

  /** Kept when a case fails: the processes' logs are in it. */
  @TempDir(cleanup = CleanupMode.ON_SUCCESS)
  Path workDir;

  private PdDeployment pd;
  private final ExecutorService readers = Executors.newVirtualThreadPerTaskExecutor();

  @BeforeEach
  void deployment() {
    pd = new PdDeployment(workDir);
  }

  @AfterEach
  void stopReaders() {
    readers.shutdownNow();
  }

  // ---------------------------------------------------------------- a. the client leaves midway

  /**
   * Three clients stream long completions through the router at once, each reads a seeded 1 to 5
   * events and closes its connection. The router counts them gone and cancels both halves: the
   * decode engine ends each request as cancelled (none runs to its 3,500 tokens), the prefill
   * engine's halves had landed; nothing stays held on either engine, and the deployment serves the
   * next request.
   */
  @Test
  void shouldEndBothHalvesWhenTheClientLeavesMidStream() throws Exception {
    List<ServeProcess> engines =
        startAll(pd.serve("decode", List.of()), pd.serve("prefill", List.of()));
    try (ServeProcess decode = engines.get(0);
        ServeProcess prefill = engines.get(1);
        ServeProcess router = pd.router(List.of(prefill), List.of(decode))) {
      Idle decodeIdle = Idle.of(decode);
      Idle prefillIdle = Idle.of(prefill);
      Counts decodeBefore = Counts.of(decode);
      Counts prefillBefore = Counts.of(prefill);
      double goneBefore = clientGone(router);

      SplittableRandom random = new SplittableRandom(101);
      List<RawHttp> clients = new ArrayList<>();
      try {
        for (int i = 0; i < 3; i++) {
          clients.add(
              RawHttp.post(
                  router.port,
                  COMPLETIONS,
                  completion(prompt(110 + i, 100 + random.nextInt(300)), 3500, true),
                  READ_TIMEOUT));
        }
        for (RawHttp c : clients) {
          assertEquals(200, c.status());
          String type = c.contentType();
          assertTrue(type != null && type.startsWith("text/event-stream"), type);
          int read = 1 + random.nextInt(5);
          for (int e = 0; e < read; e++) {
            String data = c.nextEvent();
            assertNotNull(data, "the stream ended after " + e + " events");
            JsonNode event = json(data);
            assertTrue(event.path("choices").get(0).has("text"), data);
            assertTrue(event.path("choices").get(0).get("finish_reason").isNull(), data);
          }
          c.close(); // mid-stream: thousands of tokens to go
        }
      } finally {
        for (RawHttp c : clients) {
          c.close();
        }
      }

      await(
          IDLE_BOUND,
          () -> clientGone(router) == goneBefore + 3,
          () -> "the router counts 3 clients gone: " + router.get("/metrics").body());
      assertNothingLeaked("decode", decode, decodeIdle);
      assertNothingLeaked("prefill", prefill, prefillIdle);
      Counts decodeAfter = Counts.of(decode).minus(decodeBefore);
      assertEquals(3, decodeAfter.cancelled(), decodeAfter::toString);
      assertEquals(0, decodeAfter.completed() + decodeAfter.errors(), decodeAfter::toString);
      assertEquals(3, decodeAfter.landed(), decodeAfter::toString);
      Counts prefillAfter = Counts.of(prefill).minus(prefillBefore);
      assertEquals(3, prefillAfter.landed(), prefillAfter::toString);
      assertEquals(3, prefillAfter.roomsOpened(), prefillAfter::toString);

      // the deployment serves on
      Said next = Said.of(router.post(COMPLETIONS, completion(prompt(120, 40), 8, false)), false);
      assertEquals("length", next.finishReason());
      assertEquals(8, next.usage().get("completion_tokens").asInt(), next.usage()::toString);
    }
  }

  // ---------------------------------------------------------------- b. the client leaves at once

  /**
   * Four clients (two streamed, two not) send a completion with a long prompt and close their
   * connection right after the request, before any token. The router notices (its client watch, or
   * the next write) and cancels both halves. How far each half got before that is a race the case
   * leaves open (the router may notice before a half reached its engine); what it checks is that
   * whatever reached an engine ended there as cancelled (a half that heard of the other half's
   * cancellation from its peer first ends cancelled too, never failed), none ran to its 1,000
   * tokens, every room opened ended, and nothing stays held.
   */
  @Test
  void shouldEndBothHalvesWhenTheClientLeavesBeforeTheFirstToken() throws Exception {
    List<ServeProcess> engines =
        startAll(pd.serve("decode", List.of()), pd.serve("prefill", List.of()));
    try (ServeProcess decode = engines.get(0);
        ServeProcess prefill = engines.get(1);
        ServeProcess router = pd.router(List.of(prefill), List.of(decode))) {
      Idle decodeIdle = Idle.of(decode);
      Idle prefillIdle = Idle.of(prefill);
      Counts decodeBefore = Counts.of(decode);
      Counts prefillBefore = Counts.of(prefill);
      double goneBefore = clientGone(router);

      SplittableRandom random = new SplittableRandom(202);
      for (int i = 0; i < 4; i++) {
        String body = completion(prompt(210 + i, 2500 + random.nextInt(500)), 1000, i % 2 == 0);
        RawHttp.post(router.port, COMPLETIONS, body, READ_TIMEOUT).close();
      }

      await(
          IDLE_BOUND,
          () -> clientGone(router) == goneBefore + 4,
          () -> "the router counts 4 clients gone: " + router.get("/metrics").body());
      assertNothingLeaked("decode", decode, decodeIdle);
      assertNothingLeaked("prefill", prefill, prefillIdle);
      Counts decodeAfter = Counts.of(decode).minus(decodeBefore);
      Counts prefillAfter = Counts.of(prefill).minus(prefillBefore);
      assertEquals(0, decodeAfter.completed(), decodeAfter::toString);
      assertEquals(0, decodeAfter.errors(), decodeAfter::toString);
      assertEquals(0, prefillAfter.errors(), prefillAfter::toString);
      assertTrue(decodeAfter.finished() <= 4, decodeAfter::toString);
      assertTrue(prefillAfter.finished() <= 4, prefillAfter::toString);
      assertEquals(decodeAfter.roomsOpened(), decodeAfter.roomsEnded(), decodeAfter::toString);
      assertEquals(prefillAfter.roomsOpened(), prefillAfter.roomsEnded(), prefillAfter::toString);
      System.out.printf(
          "left before the first token: the decode engine ended %s; the prefill engine %s%n",
          decodeAfter, prefillAfter);

      Said next = Said.of(router.post(COMPLETIONS, completion(prompt(220, 40), 8, false)), false);
      assertEquals(8, next.usage().get("completion_tokens").asInt(), next.usage()::toString);
    }
  }

  // ---------------------------------------------------------------- c. the decode engine dies

  /**
   * The decode engine is killed (SIGKILL) while three long streams run through the router and two
   * non-streamed requests with long prompts are in flight. Each stream ends with the router's error
   * event and {@code data: [DONE]}, each non-streamed request gets a 502 error body, all in bounded
   * time; the prefill engine lets go of everything. The router takes the dead backend out at once:
   * its {@code /ready} answers 503 naming the decode role, its metrics say the backend is not
   * ready, and a new request gets a 503 at once rather than hanging. A new decode engine on the
   * same port is chosen again once it answers {@code /ready}: the same request then gets the answer
   * it got before the death.
   */
  @Test
  void shouldFailTheRequestsInBoundedTimeWhenTheDecodeEngineDies() throws Exception {
    List<ServeProcess> engines =
        startAll(pd.serve("decode", List.of()), pd.serve("prefill", List.of()));
    ServeProcess restarted = null;
    try (ServeProcess decode = engines.get(0);
        ServeProcess prefill = engines.get(1);
        ServeProcess router = pd.router(List.of(prefill), List.of(decode))) {
      String probe = completion(prompt(301, 64), 16, false);
      Said before = Said.of(router.post(COMPLETIONS, probe), false);
      Idle prefillIdle = Idle.of(prefill);
      Counts prefillBefore = Counts.of(prefill);

      SplittableRandom random = new SplittableRandom(303);
      List<RawHttp> streams = new ArrayList<>();
      List<RawHttp> whole = new ArrayList<>();
      try {
        for (int i = 0; i < 3; i++) {
          RawHttp s =
              RawHttp.post(
                  router.port,
                  COMPLETIONS,
                  completion(prompt(310 + i, 100 + random.nextInt(300)), 3500, true),
                  READ_TIMEOUT);
          streams.add(s);
          assertEquals(200, s.status());
          for (int e = 0; e < 2; e++) {
            assertNotNull(s.nextEvent(), "the stream ended before the kill");
          }
        }
        for (int i = 0; i < 2; i++) {
          whole.add(
              RawHttp.post(
                  router.port,
                  COMPLETIONS,
                  completion(prompt(320 + i, 2800 + random.nextInt(200)), 1000, false),
                  READ_TIMEOUT));
        }
        // both reached the prefill engine and opened their rooms: their KV is on its way
        await(
            () -> Counts.of(prefill).minus(prefillBefore).roomsOpened() == 5,
            () -> prefill.get("/metrics").body());
        Thread.sleep(random.nextInt(200));
        decode.crash();
        long killed = System.nanoTime();

        List<CompletableFuture<Ending>> endings = new ArrayList<>();
        for (RawHttp s : streams) {
          endings.add(CompletableFuture.supplyAsync(() -> readToEnd(s), readers));
        }
        for (CompletableFuture<Ending> f : endings) {
          Ending e = within(f, killed);
          assertNotNull(e.error(), () -> "no error event ended the stream: " + e);
          assertEquals("upstream_error", e.error().get("type").asText(), e.error()::toString);
          assertEquals(502, e.error().get("code").asInt(), e.error()::toString);
          assertTrue(
              e.error().get("message").asText().contains("decode backend"), e.error()::toString);
        }
        for (RawHttp w : whole) {
          RawHttp.Answer a =
              within(CompletableFuture.supplyAsync(() -> readWhole(w), readers), killed);
          // the router's 502 for the decode backend's broken connection, or for the prefill
          // backend's own 502 (its transfer failed with the decode engine), whichever came first
          assertErrorBody(a, Set.of(502));
          JsonNode error = json(a.body()).get("error");
          assertEquals("upstream_error", error.get("type").asText(), a::toString);
          assertEquals("bad_gateway", error.get("code").asText(), a::toString);
          assertTrue(error.get("message").asText().contains(" backend http://"), a::toString);
        }
        System.out.printf(
            "decode engine killed: 5 clients answered with an error within %d ms%n",
            TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killed));
      } finally {
        for (RawHttp c : streams) {
          c.close();
        }
        for (RawHttp c : whole) {
          c.close();
        }
      }
      assertNothingLeaked("prefill", prefill, prefillIdle);
      Counts prefillAfter = Counts.of(prefill).minus(prefillBefore);
      assertEquals(5, prefillAfter.finished(), prefillAfter::toString);

      // the router stops choosing the dead backend: /ready, the metrics, and a new request say so
      String decodeUrl = PdDeployment.url(decode);
      await(
          () -> router.get("/ready").statusCode() == 503,
          () -> "the router stays ready: " + router.get("/ready").body());
      JsonNode ready = json(router.get("/ready").body());
      assertEquals("decode", ready.get("missing").get(0).asText(), ready::toString);
      assertEquals(false, ready.get("decode").get(0).get("ready").asBoolean(), ready::toString);
      assertEquals(
          0,
          PrometheusText.value(
              router.metrics(),
              "tokenspeed:router_backend_ready",
              "role",
              "decode",
              "backend",
              decodeUrl));
      long asked = System.nanoTime();
      try (RawHttp late = RawHttp.post(router.port, COMPLETIONS, probe, READ_TIMEOUT)) {
        RawHttp.Answer a = readWhole(late);
        assertErrorBody(a, Set.of(503));
        assertTrue(a.body().contains("no ready decode backend"), a::toString);
      }
      assertTrue(
          System.nanoTime() - asked < TimeUnit.SECONDS.toNanos(5),
          "the 503 took " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - asked) + " ms");

      // a decode engine on the same port is chosen again once it answers /ready
      restarted = pd.serveOn(decode.port, "decode", List.of()).call();
      Idle restartedIdle = Idle.of(restarted);
      await(
          () -> router.get("/ready").statusCode() == 200,
          () ->
              "the router did not take the restarted decode engine: "
                  + router.get("/ready").body());
      double routed = routed(router, decodeUrl);
      Said after = Said.of(router.post(COMPLETIONS, probe), false);
      assertEquals(before.text(), after.text(), "the same request after the restart");
      assertEquals(before.counts(), after.counts());
      assertEquals(routed + 1, routed(router, decodeUrl), "routed to the restarted engine");
      assertNothingLeaked("restarted decode", restarted, restartedIdle);
      assertNothingLeaked("prefill", prefill, prefillIdle);
    } finally {
      if (restarted != null) {
        restarted.close();
      }
    }
  }

  // ---------------------------------------------------------------- d. the prefill engine dies

  /**
   * The prefill engine is killed (SIGKILL) while the KV of acknowledged rooms is still to come:
   * eight streams with long prompts, killed once the decode engine opened all eight rooms and
   * landed at least one (the prefill engine computes the others one after the other). Each stream
   * either finished (its KV had landed) or gets an error in bounded time, one for each room the
   * kill ended on the decode engine: the router's 502 naming the prefill backend, since the decode
   * engine's status line leaves with the first token, which needs the KV (or, had the stream
   * started, an error event and {@code data: [DONE]}). The decode engine lets go of everything and
   * the router stops choosing the dead prefill backend: a new request gets a 503 naming the role.
   */
  @Test
  void shouldFailTheRequestsInBoundedTimeWhenThePrefillEngineDies() throws Exception {
    // room for the landing reservations of all twelve (prompt and completion) at once
    List<ServeProcess> engines =
        startAll(
            pd.serve("decode", List.of("--device-tokens", "49152")),
            pd.serve("prefill", List.of()));
    try (ServeProcess decode = engines.get(0);
        ServeProcess prefill = engines.get(1);
        ServeProcess router = pd.router(List.of(prefill), List.of(decode))) {
      Idle decodeIdle = Idle.of(decode);
      Counts decodeBefore = Counts.of(decode);

      SplittableRandom random = new SplittableRandom(404);
      int n = 12;
      List<RawHttp> streams = new ArrayList<>();
      try {
        for (int i = 0; i < n; i++) {
          // completions, whose stream starts with the first token, and chats, whose stream starts
          // at once with the assistant's role
          String prompt = prompt(410 + i, 3000 + random.nextInt(400));
          streams.add(
              i % 2 == 0
                  ? RawHttp.post(
                      router.port, COMPLETIONS, completion(prompt, 64, true), READ_TIMEOUT)
                  : RawHttp.post(router.port, CHATS, chat(prompt, 64, true), READ_TIMEOUT));
        }
        // every room opened, and (in the same scrape) the decode engine holds staging Host blocks
        // for the rooms still open: it handed them to the transport, then sent their ACKs. The
        // engine's gauges are a snapshot at most a second old, so this waits for one that shows it
        AtomicReference<Map<String, PrometheusText.Family>> atKill = new AtomicReference<>();
        await(
            () -> {
              Map<String, PrometheusText.Family> m = decode.metrics();
              Counts c = Counts.of(m).minus(decodeBefore);
              atKill.set(m);
              return c.roomsOpened() == n
                  && c.roomsOpen() >= 2
                  && used(m, "host") > decodeIdle.host();
            },
            () ->
                "no moment with rooms open and staging blocks held: "
                    + decode.get("/metrics").body());
        prefill.crash();
        long killed = System.nanoTime();
        Counts open = Counts.of(atKill.get()).minus(decodeBefore);

        List<CompletableFuture<Reply>> replies = new ArrayList<>();
        for (RawHttp s : streams) {
          replies.add(CompletableFuture.supplyAsync(() -> reply(s), readers));
        }
        int errors = 0;
        for (CompletableFuture<Reply> f : replies) {
          Reply r = within(f, killed);
          if (r.answer() != null) {
            // not started: the decode engine's status line leaves with its first token, which
            // needs the KV, so the router answers for the prefill backend it lost
            errors++;
            assertErrorBody(r.answer(), Set.of(502));
            assertTrue(r.answer().body().contains("prefill backend"), r::toString);
          } else if (r.ending().error() != null) {
            errors++;
            JsonNode error = r.ending().error();
            assertEquals("upstream_error", error.get("type").asText(), error::toString);
            assertEquals(502, error.get("code").asInt(), error::toString);
          } else {
            assertEquals("length", r.ending().finishReason(), r::toString);
            assertEquals(64, r.ending().tokens(), r::toString);
          }
        }
        long answered = System.nanoTime() - killed;
        assertNothingLeaked("decode", decode, decodeIdle);
        Counts after = Counts.of(decode).minus(decodeBefore);
        assertEquals(n - after.landed(), errors, after::toString);
        assertTrue(errors >= 1, "the kill hit no room in flight: " + after);
        assertEquals(n, after.roomsEnded(), after::toString);
        // the router counts the streams the kill cut as failed, whichever said so
        double ok = outcome(router, COMPLETIONS, "ok") + outcome(router, CHATS, "ok");
        double failed =
            outcome(router, COMPLETIONS, "upstream_failed")
                + outcome(router, CHATS, "upstream_failed");
        assertEquals(n - errors, ok, () -> "router outcomes: " + router.get("/metrics").body());
        assertEquals(errors, failed, () -> "router outcomes: " + router.get("/metrics").body());
        System.out.printf(
            "prefill engine killed with %d rooms open: %d clients answered with an error within"
                + " %d ms; the decode engine: %s%n",
            (int) open.roomsOpen(), errors, TimeUnit.NANOSECONDS.toMillis(answered), after);
      } finally {
        for (RawHttp c : streams) {
          c.close();
        }
      }

      await(
          () -> router.get("/ready").statusCode() == 503,
          () -> "the router stays ready: " + router.get("/ready").body());
      try (RawHttp late =
          RawHttp.post(
              router.port, COMPLETIONS, completion(prompt(420, 40), 8, false), READ_TIMEOUT)) {
        RawHttp.Answer a = readWhole(late);
        assertErrorBody(a, Set.of(503));
        assertTrue(a.body().contains("no ready prefill backend"), a::toString);
      }
    }
  }

  // ---------------------------------------------------------------- what the survivors say

  /** An engine's used parents when idle, before the case. */
  private record Idle(double device, double host) {
    static Idle of(ServeProcess s) {
      Map<String, PrometheusText.Family> m = s.metrics();
      assertEquals(0, PrometheusText.value(m, "tokenspeed:num_requests_running"), "not idle");
      assertEquals(0, PrometheusText.value(m, "tokenspeed:num_requests_waiting"), "not idle");
      return new Idle(used(m, "device"), used(m, "host"));
    }
  }

  private static double used(Map<String, PrometheusText.Family> m, String tier) {
    return PrometheusText.value(m, "tokenspeed:kv_parents", "tier", tier, "state", "used");
  }

  /**
   * Waits until {@code s} holds nothing of the case: no request running or waiting, no more used
   * Device or Host parents than when idle before it, no room open, no registration waiting, every
   * room opened ended.
   */
  private static void assertNothingLeaked(String name, ServeProcess s, Idle idle)
      throws InterruptedException {
    await(
        IDLE_BOUND,
        () -> {
          Map<String, PrometheusText.Family> m = s.metrics();
          Counts c = Counts.of(m);
          return PrometheusText.value(m, "tokenspeed:num_requests_running") == 0
              && PrometheusText.value(m, "tokenspeed:num_requests_waiting") == 0
              && used(m, "device") <= idle.device()
              && used(m, "host") <= idle.host()
              && c.roomsOpen() == 0
              && PrometheusText.value(m, "tokenspeed:pd_registrations_waiting") == 0
              && c.roomsOpened() == c.roomsEnded();
        },
        () -> {
          Map<String, PrometheusText.Family> m = s.metrics();
          return "the "
              + name
              + " engine still holds something: running "
              + PrometheusText.value(m, "tokenspeed:num_requests_running")
              + ", waiting "
              + PrometheusText.value(m, "tokenspeed:num_requests_waiting")
              + ", device used "
              + used(m, "device")
              + " (idle "
              + idle.device()
              + "), host used "
              + used(m, "host")
              + " (idle "
              + idle.host()
              + "), registrations waiting "
              + PrometheusText.value(m, "tokenspeed:pd_registrations_waiting")
              + ", "
              + Counts.of(m);
        });
  }

  /** An engine's counters of requests and KV transfer rooms. */
  private record Counts(
      double completed,
      double cancelled,
      double errors,
      double roomsOpened,
      double landed,
      double roomsEnded,
      double roomsOpen) {

    static Counts of(ServeProcess s) {
      return of(s.metrics());
    }

    static Counts of(Map<String, PrometheusText.Family> m) {
      double ended = 0;
      for (PrometheusText.Sample x : PrometheusText.samples(m, "tokenspeed:pd_rooms_ended_total")) {
        ended += x.value();
      }
      return new Counts(
          finished(m, "length") + finished(m, "stop"),
          finished(m, "cancelled"),
          finished(m, "error"),
          PrometheusText.value(m, "tokenspeed:pd_rooms_opened_total"),
          PrometheusText.value(m, "tokenspeed:pd_rooms_ended_total", "outcome", "landed"),
          ended,
          PrometheusText.value(m, "tokenspeed:pd_rooms_open"));
    }

    private static double finished(Map<String, PrometheusText.Family> m, String reason) {
      return PrometheusText.value(m, "tokenspeed:requests_finished_total", "finish_reason", reason);
    }

    /** The counters' growth since {@code before} (the gauge as it is now). */
    Counts minus(Counts before) {
      return new Counts(
          completed - before.completed,
          cancelled - before.cancelled,
          errors - before.errors,
          roomsOpened - before.roomsOpened,
          landed - before.landed,
          roomsEnded - before.roomsEnded,
          roomsOpen);
    }

    double finished() {
      return completed + cancelled + errors;
    }
  }

  private static double clientGone(ServeProcess router) {
    return outcome(router, COMPLETIONS, "client_gone");
  }

  private static double outcome(ServeProcess router, String endpoint, String outcome) {
    return PrometheusText.value(
        router.metrics(),
        "tokenspeed:router_requests_total",
        "endpoint",
        endpoint,
        "outcome",
        outcome);
  }

  private static double routed(ServeProcess router, String backend) {
    return PrometheusText.value(
        router.metrics(),
        "tokenspeed:router_routed_requests_total",
        "role",
        "decode",
        "backend",
        backend);
  }

  // ---------------------------------------------------------------- what the clients get

  /**
   * How a stream ended: its usage's completion tokens (-1 without a usage event), its last finish
   * reason, and the error event that ended it, if one did.
   */
  private record Ending(int tokens, String finishReason, JsonNode error) {}

  /** A streamed request's reply: a stream that started and ended, or a whole (error) answer. */
  private record Reply(Ending ending, RawHttp.Answer answer) {}

  /** Reads the reply to a streamed request: the stream to its end, or the whole answer. */
  private static Reply reply(RawHttp h) {
    try {
      if (h.status() == 200) {
        return new Reply(readToEnd(h), null);
      }
      return new Reply(null, readWhole(h));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Reads a stream that started (200) to its end, which must be {@code data: [DONE]}. */
  private static Ending readToEnd(RawHttp h) {
    try {
      if (h.status() != 200) {
        fail("the stream did not start: " + readWhole(h));
      }
      int tokens = -1;
      String reason = null;
      JsonNode error = null;
      boolean done = false;
      List<String> seen = new ArrayList<>();
      for (String data = h.nextEvent(); data != null; data = h.nextEvent()) {
        seen.add(data);
        if (done) {
          fail("an event after data: [DONE]: " + data);
        }
        if (data.equals("[DONE]")) {
          done = true;
          continue;
        }
        JsonNode e = json(data);
        if (error != null) {
          fail("an event after the error event: " + data);
        }
        if (e.has("error")) {
          error = e.get("error");
          continue;
        }
        if (e.hasNonNull("usage")) {
          tokens = e.get("usage").get("completion_tokens").asInt();
        }
        for (JsonNode c : e.path("choices")) {
          if (c.hasNonNull("finish_reason")) {
            reason = c.get("finish_reason").asText();
          }
        }
      }
      if (!done) {
        fail(
            "the stream ended without data: [DONE] after "
                + seen.size()
                + " events; the last ones: "
                + seen.subList(Math.max(0, seen.size() - 3), seen.size()));
      }
      return new Ending(tokens, reason, error);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static RawHttp.Answer readWhole(RawHttp h) {
    try {
      return new RawHttp.Answer(h.status(), h.contentType(), h.body());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** An OpenAI error body with one of {@code statuses}. */
  private static void assertErrorBody(RawHttp.Answer a, Set<Integer> statuses) {
    assertTrue(statuses.contains(a.status()), a::toString);
    assertTrue(
        a.contentType() != null && a.contentType().startsWith("application/json"), a::toString);
    JsonNode error = json(a.body()).get("error");
    assertNotNull(error, a::toString);
    assertTrue(error.get("message").isTextual(), a::toString);
    assertTrue(error.get("type").isTextual(), a::toString);
  }

  /** {@code f}'s value, which must come within {@link #ANSWER_BOUND} of {@code since}. */
  private static <T> T within(CompletableFuture<T> f, long since)
      throws InterruptedException, ExecutionException {
    long left = since + ANSWER_BOUND.toNanos() - System.nanoTime();
    try {
      return f.get(Math.max(left, 0), TimeUnit.NANOSECONDS);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof Error error) {
        throw error; // the reader's assertion
      }
      throw e;
    } catch (TimeoutException e) {
      throw new AssertionError("no answer within " + ANSWER_BOUND.toSeconds() + " s of the fault");
    }
  }
}
