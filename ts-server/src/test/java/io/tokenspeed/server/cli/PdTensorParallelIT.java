package io.tokenspeed.server.cli;

import static io.tokenspeed.server.cli.PdDeployment.await;
import static io.tokenspeed.server.cli.PdDeployment.chat;
import static io.tokenspeed.server.cli.PdDeployment.completion;
import static io.tokenspeed.server.cli.PdDeployment.json;
import static io.tokenspeed.server.cli.PdDeployment.prompt;
import static io.tokenspeed.server.cli.PdDeployment.startAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.cli.PdDeployment.Said;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Disaggregated serving across tensor-parallel replicas, as operators run it (docs/pd.md "Tensor
 * parallelism"): processes of the shaded jar on loopback, sharing one PD secret through the
 * environment (the launchers pass it to their ranks). A {@code serve --tp 2 --engine-role prefill}
 * replica feeds a {@code serve --engine-role decode} engine of one rank behind one router, and a
 * prefill engine of one rank feeds a {@code serve --tp 2 --engine-role decode} replica behind
 * another. Greedy completions and chats, streamed and not, one at a time and four at once, answer
 * through each router with the text a fused {@code serve} answers; {@code /pd} names each replica's
 * size and the decode replica's every KV endpoint, which its ready line lists too; each transfer
 * endpoint's counters show the rooms each pair of ranks opened (a prefill replica of two ranks
 * sends each request from both ranks to the one decode rank, a prefill engine of one rank sends
 * each to both decode ranks), and afterwards every backend holds no request, no open room and no
 * waiting registration. A decode replica whose rank 1's KV port ({@code --pd-port} + 1) is taken
 * fails to start, naming the option and the port.
 */
class PdTensorParallelIT {
  @TempDir Path workDir;

  private PdDeployment pd;

  @BeforeEach
  void deployment() {
    pd = new PdDeployment(workDir);
  }

  @Test
  void shouldAnswerAsAFusedServerDoesFromATwoRankPrefillAndToATwoRankDecodeReplica()
      throws Exception {
    List<ServeProcess> engines =
        startAll(
            pd.fused(List.of()),
            pd.serve("prefill", List.of("--tp", "2")),
            pd.serve("decode", List.of()),
            pd.serve("prefill", List.of()),
            pd.serve("decode", List.of("--tp", "2")));
    try (ServeProcess fused = engines.get(0);
        ServeProcess prefill2 = engines.get(1);
        ServeProcess decode1 = engines.get(2);
        ServeProcess prefill1 = engines.get(3);
        ServeProcess decode2 = engines.get(4);
        ServeProcess twoToOne = pd.router(List.of(prefill2), List.of(decode1));
        ServeProcess oneToTwo = pd.router(List.of(prefill1), List.of(decode2))) {
      assertEquals(2, prefill2.process.descendants().count(), "two ranks under the launcher");
      assertEquals(2, decode2.process.descendants().count(), "two ranks under the launcher");

      // /pd: each replica's size; the decode replica's every rank's KV endpoint, rank 0's first
      assertEquals(
          "{\"role\":\"prefill\",\"tp\":2,\"model\":\"tiny\"}", prefill2.get("/pd").body());
      assertEquals(
          "{\"role\":\"prefill\",\"tp\":1,\"model\":\"tiny\"}", prefill1.get("/pd").body());
      JsonNode one = json(decode1.get("/pd").body());
      assertEquals(1, one.get("tp").asInt(), one::toString);
      assertEquals("[" + one.get("kv_endpoint") + "]", one.get("kv_endpoints").toString());
      JsonNode two = json(decode2.get("/pd").body());
      assertEquals("decode", two.get("role").asText(), two::toString);
      assertEquals(2, two.get("tp").asInt(), two::toString);
      JsonNode kv = two.get("kv_endpoints");
      assertEquals(2, kv.size(), two::toString);
      for (JsonNode e : kv) {
        assertTrue(e.asText().matches("127\\.0\\.0\\.1:[1-9][0-9]*"), two::toString);
      }
      assertNotEquals(kv.get(0).asText(), kv.get(1).asText(), two::toString);
      assertEquals(kv.get(0).asText(), two.get("kv_endpoint").asText(), two::toString);
      assertTrue(
          decode2
              .stderr()
              .contains(
                  "KV transfer on "
                      + kv.get(0).asText()
                      + " (rank 0), "
                      + kv.get(1).asText()
                      + " (rank 1)"),
          decode2::stderr);
      JsonNode ready = json(oneToTwo.get("/ready").body());
      assertEquals(kv.toString(), ready.at("/decode/0/kv_endpoints").toString(), ready::toString);
      assertEquals(1, ready.at("/prefill/0/tp").asInt(), ready::toString);
      assertEquals(
          2,
          json(twoToOne.get("/ready").body()).at("/prefill/0/tp").asInt(),
          "the router reads tp");

      String long1 = prompt(21, 150);
      List<String[]> requests =
          List.of(
              new String[] {"/v1/completions", completion(long1, 16, false)},
              new String[] {"/v1/completions", completion(prompt(22, 90), 12, true)},
              new String[] {"/v1/chat/completions", chat(prompt(23, 70), 10, false)},
              new String[] {"/v1/chat/completions", chat(prompt(24, 40), 8, true)},
              // the first prompt again: the prefill side's Device reuses it, the usage says so
              new String[] {"/v1/completions", completion(long1, 16, false)});
      for (String[] r : requests) {
        boolean stream = r[1].contains("\"stream\":true");
        Said want = Said.of(fused.post(r[0], r[1]), stream);
        for (ServeProcess router : List.of(twoToOne, oneToTwo)) {
          Said got = Said.of(router.post(r[0], r[1]), stream);
          assertEquals(want.text(), got.text(), r[1]);
          assertEquals(want.finishReason(), got.finishReason(), r[1]);
          assertEquals(want.counts(), got.counts(), r[1]);
          JsonNode by = got.bySource();
          assertTrue(
              by.has("device") && by.has("host") && by.has("storage"), got.usage()::toString);
          if (r == requests.getLast()) {
            assertTrue(by.get("device").asInt() >= 128, got.usage()::toString);
          }
        }
      }

      // four at once through each router: several rooms in flight on every pair of ranks
      List<String> prompts = new ArrayList<>();
      List<String> want = new ArrayList<>();
      for (int i = 0; i < 4; i++) {
        prompts.add(prompt(30 + i, 30 + 25 * i));
        want.add(
            Said.of(
                    fused.post("/v1/completions", completion(prompts.get(i), 12, i % 2 == 1)),
                    i % 2 == 1)
                .text());
      }
      for (ServeProcess router : List.of(twoToOne, oneToTwo)) {
        List<CompletableFuture<HttpResponse<String>>> together = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
          together.add(
              router.client.sendAsync(
                  HttpRequest.newBuilder(router.uri("/v1/completions"))
                      .header("Content-Type", "application/json")
                      .POST(
                          HttpRequest.BodyPublishers.ofString(
                              completion(prompts.get(i), 12, i % 2 == 1)))
                      .build(),
                  HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8)));
        }
        for (int i = 0; i < 4; i++) {
          HttpResponse<String> r = together.get(i).get(120, TimeUnit.SECONDS);
          assertEquals(want.get(i), Said.of(r, i % 2 == 1).text(), "request " + i + " at once");
        }
      }

      // every request moved over every pair of ranks whose KV heads meet, and landed
      int n = requests.size() + 4; // through each router
      assertRooms(prefill2, n, 1); // rank 0's sender: its pair with the one decode rank
      assertRooms(decode1, 2 * n, 2); // one room per prefill rank, one connection from each
      assertRooms(prefill1, 2 * n, 2); // one room per decode rank, one connection to each
      assertRooms(decode2, n, 1); // rank 0's receiver: its pair with the one prefill rank
      for (ServeProcess side : List.of(prefill2, decode1, prefill1, decode2)) {
        assertIdle(side);
      }
    }
  }

  /**
   * Waits until the transfer endpoint of {@code side} (its rank 0's) has landed {@code rooms}
   * rooms, each it opened, on {@code connections} connections.
   */
  private static void assertRooms(ServeProcess side, int rooms, int connections)
      throws InterruptedException {
    await(
        () ->
            PrometheusText.value(
                    side.metrics(), "tokenspeed:pd_rooms_ended_total", "outcome", "landed")
                == rooms,
        () -> "landed rooms: " + side.get("/metrics").body());
    Map<String, PrometheusText.Family> m = side.metrics();
    assertEquals(rooms, PrometheusText.value(m, "tokenspeed:pd_rooms_opened_total"));
    assertEquals(connections, PrometheusText.value(m, "tokenspeed:pd_connections_opened_total"));
  }

  /**
   * Waits until {@code side} holds nothing: no request running or waiting, no room open, no
   * registration waiting, every room it opened ended.
   */
  private static void assertIdle(ServeProcess side) throws InterruptedException {
    await(
        () -> {
          Map<String, PrometheusText.Family> m = side.metrics();
          double ended = 0;
          for (PrometheusText.Sample s :
              PrometheusText.samples(m, "tokenspeed:pd_rooms_ended_total")) {
            ended += s.value();
          }
          return PrometheusText.value(m, "tokenspeed:num_requests_running") == 0
              && PrometheusText.value(m, "tokenspeed:num_requests_waiting") == 0
              && PrometheusText.value(m, "tokenspeed:pd_rooms_open") == 0
              && PrometheusText.value(m, "tokenspeed:pd_registrations_waiting") == 0
              && PrometheusText.value(m, "tokenspeed:pd_rooms_opened_total") == ended;
        },
        () -> "not idle: " + side.get("/metrics").body());
  }

  @Test
  void shouldRefuseADecodeReplicaWhoseRankOnesKvPortIsTakenNamingPdPort() throws Exception {
    try (ServerSocket taken = takenAfterAFreePort()) {
      int base = taken.getLocalPort() - 1;
      List<String> args = new ArrayList<>(List.of("serve", "--port", "0"));
      args.addAll(pd.model());
      args.addAll(
          List.of("--engine-role", "decode", "--tp", "2", "--pd-port", Integer.toString(base)));
      JarProcess.Result r =
          JarProcess.run(
              workDir, List.of("--add-modules", "jdk.incubator.vector"), pd.env, args, 120);
      assertNotEquals(0, r.exitCode(), r.err());
      assertTrue(
          r.err()
              .contains(
                  "[rank 1] error: --pd-port="
                      + base
                      + ": the KV transfer of rank 1 (port --pd-port + 1) cannot listen on"
                      + " 127.0.0.1:"
                      + (base + 1)),
          r::err);
      assertTrue(r.err().contains("rank 1 exited with status"), r::err);
    }
  }

  /** A loopback socket bound to a port whose predecessor was free a moment ago. */
  private static ServerSocket takenAfterAFreePort() throws Exception {
    InetAddress loopback = InetAddress.getLoopbackAddress();
    for (int attempt = 0; attempt < 50; attempt++) {
      ServerSocket s = new ServerSocket(0, 1, loopback);
      int before = s.getLocalPort() - 1;
      if (before >= 1024) {
        try (ServerSocket probe = new ServerSocket(before, 1, loopback)) {
          return s;
        } catch (java.io.IOException busy) {
          // taken: try another
        }
      }
      s.close();
    }
    throw new AssertionError("no free port below a free port in 50 attempts");
  }
}
