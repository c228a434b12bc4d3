package io.tokenspeed.server.cli;

import static io.tokenspeed.server.cli.PdDeployment.await;
import static io.tokenspeed.server.cli.PdDeployment.json;
import static io.tokenspeed.server.cli.PdDeployment.prompt;
import static io.tokenspeed.server.cli.PdDeployment.startAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.cli.PdDeployment.Said;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Disaggregated serving as operators run it (docs/pd.md): {@code serve --engine-role decode} and
 * {@code serve --engine-role prefill} processes of the shaded jar sharing a PD secret through the
 * environment, behind a {@code router} process, all on loopback. Greedy completions and chats,
 * streamed and not, answer through the router as a fused {@code serve} answers them; the usage
 * carries the prefill engine's reuse by source; each process's {@code /metrics} carries its {@code
 * engine_role}. Two prefill engines sharing a file store: the second restores from L3 the prefix
 * the first computed, the decode engine's usage says so, and the text is unchanged.
 */
class PdRouterIT {
  @TempDir Path workDir;

  private PdDeployment pd;

  @BeforeEach
  void deployment() {
    pd = new PdDeployment(workDir);
  }

  @Test
  void shouldAnswerThroughTheRouterAsAFusedServerDoes() throws Exception {
    List<ServeProcess> engines =
        startAll(
            pd.serve("decode", List.of("--pd-port", "0")),
            pd.serve("prefill", List.of()),
            pd.fused(List.of()));
    try (ServeProcess decode = engines.get(0);
        ServeProcess prefill = engines.get(1);
        ServeProcess fused = engines.get(2);
        ServeProcess router = pd.router(List.of(prefill), List.of(decode))) {
      JsonNode info = json(decode.get("/pd").body());
      assertEquals("decode", info.get("role").asText(), info::toString);
      assertEquals("tiny", info.get("model").asText(), info::toString);
      assertTrue(
          info.get("kv_endpoint").asText().matches("127\\.0\\.0\\.1:[1-9][0-9]*"), info::toString);
      assertTrue(
          decode.stderr().contains("KV transfer on " + info.get("kv_endpoint").asText()),
          decode::stderr);
      assertEquals(1, info.get("tp").asInt(), info::toString);
      assertEquals("[" + info.get("kv_endpoint") + "]", info.get("kv_endpoints").toString());
      assertEquals("{\"role\":\"prefill\",\"tp\":1,\"model\":\"tiny\"}", prefill.get("/pd").body());
      JsonNode ready = json(router.get("/ready").body());
      assertEquals(
          info.get("kv_endpoint").asText(),
          ready.get("decode").get(0).get("kv_endpoint").asText(),
          ready::toString);

      String long1 = prompt(11, 150);
      List<String[]> requests =
          List.of(
              new String[] {
                "/v1/completions",
                "{\"model\":\"tiny\",\"prompt\":\""
                    + long1
                    + "\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}"
              },
              new String[] {
                "/v1/completions",
                "{\"model\":\"tiny\",\"prompt\":\""
                    + prompt(12, 90)
                    + "\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                    + "\"stream_options\":{\"include_usage\":true}}"
              },
              new String[] {
                "/v1/chat/completions",
                "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\""
                    + prompt(13, 70)
                    + "\"}],\"max_tokens\":10,\"temperature\":0,\"ignore_eos\":true}"
              },
              new String[] {
                "/v1/chat/completions",
                "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\""
                    + prompt(14, 40)
                    + "\"}],\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                    + "\"stream_options\":{\"include_usage\":true}}"
              },
              // the first prompt again: the prefill engine's Device reuses it, the usage says so
              new String[] {
                "/v1/completions",
                "{\"model\":\"tiny\",\"prompt\":\""
                    + long1
                    + "\",\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}"
              });
      Said last = null;
      for (String[] r : requests) {
        boolean stream = r[1].contains("\"stream\":true");
        Said want = Said.of(fused.post(r[0], r[1]), stream);
        Said got = Said.of(router.post(r[0], r[1]), stream);
        assertEquals(want.text(), got.text(), r[1]);
        assertEquals(want.finishReason(), got.finishReason(), r[1]);
        assertEquals(want.counts(), got.counts(), r[1]);
        JsonNode by = got.bySource();
        assertTrue(by.has("device") && by.has("host") && by.has("storage"), got.usage()::toString);
        last = got;
      }
      assertTrue(last.bySource().get("device").asInt() >= 128, last.usage()::toString);

      // each process labels its series with its role; the engines' transfers both landed them all
      for (var e : Map.of("decode", decode, "prefill", prefill, "fused", fused).entrySet()) {
        Map<String, PrometheusText.Family> m = e.getValue().metrics();
        for (PrometheusText.Family f : m.values()) {
          for (PrometheusText.Sample s : f.samples()) {
            assertEquals(e.getKey(), s.labels().get("engine_role"), s::toString);
          }
        }
      }
      for (ServeProcess side : List.of(decode, prefill)) {
        await(
            () ->
                PrometheusText.value(
                        side.metrics(), "tokenspeed:pd_rooms_ended_total", "outcome", "landed")
                    == requests.size(),
            () -> side.get("/metrics").body());
        Map<String, PrometheusText.Family> m = side.metrics();
        assertEquals(requests.size(), PrometheusText.value(m, "tokenspeed:pd_rooms_opened_total"));
        assertEquals(0, PrometheusText.value(m, "tokenspeed:pd_rooms_open"));
        assertEquals(1, PrometheusText.value(m, "tokenspeed:pd_connections_opened_total"));
      }
      assertTrue(
          PrometheusText.value(decode.metrics(), "tokenspeed:pd_block_bytes_received_total") > 0);
      assertEquals(
          PrometheusText.value(decode.metrics(), "tokenspeed:pd_block_bytes_received_total"),
          PrometheusText.value(prefill.metrics(), "tokenspeed:pd_block_bytes_sent_total"));
      assertTrue(
          router.get("/metrics").body().contains("tokenspeed:router_requests_total"),
          "router metrics");
    }
  }

  @Test
  void shouldRestoreOnTheSecondPrefillEngineWhatTheFirstWroteToTheSharedStore() throws Exception {
    List<String> l3 =
        List.of(
            "--kvstore-storage-backend",
            "file",
            "--kvstore-storage-backend-extra-config",
            "{\"path\": \""
                + workDir.resolve("store").toString().replace("\\", "\\\\")
                + "\", "
                + PdDeployment.EXTENSION
                + "}");
    pd.assertTheSecondPrefillEngineRestores(l3, () -> {});
  }
}
