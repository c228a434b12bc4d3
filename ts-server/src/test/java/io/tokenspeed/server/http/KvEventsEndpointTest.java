package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.server.kvevents.ZmqEndpoint;
import java.net.InetAddress;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code GET /kv-events}: 404 in the server's error shape while KV events are off; an endpoint
 * bound to every interface named by the local address a request reached (the served answer is the
 * IT's, {@code KvEventsIT}).
 */
class KvEventsEndpointTest {

  @Test
  void shouldAnswer404InTheErrorShapeWhileKvEventsAreOff(@TempDir Path dir) {
    try (TestServer s = TestServer.start(dir, null)) {
      HttpResponse<String> r = s.get("/kv-events");
      assertEquals(404, r.statusCode(), r.body());
      JsonNode error = TestServer.json(r.body()).get("error");
      assertEquals("not_found", error.get("code").asText());
      assertEquals("invalid_request_error", error.get("type").asText());
      assertEquals(
          "KV events are off: serve publishes them with --kv-events-endpoint tcp://HOST:PORT",
          error.get("message").asText());
      HttpResponse<String> post = s.post("/kv-events", "{}");
      assertEquals(405, post.statusCode(), post.body());
    }
  }

  @Test
  void shouldNameAWildcardBindByTheAddressTheRequestReached() throws Exception {
    InetAddress reached = InetAddress.getByName("10.1.2.3");
    assertEquals(
        "tcp://10.1.2.3:5557", HttpFrontend.reachable(ZmqEndpoint.parse("tcp://*:5557"), reached));
    assertEquals(
        "tcp://10.1.2.3:5557",
        HttpFrontend.reachable(ZmqEndpoint.parse("tcp://0.0.0.0:5557"), reached));
    assertEquals(
        "tcp://[0:0:0:0:0:0:0:1]:5557",
        HttpFrontend.reachable(ZmqEndpoint.parse("tcp://[::]:5557"), InetAddress.getByName("::1")));
    assertEquals(
        "tcp://127.0.0.1:5557",
        HttpFrontend.reachable(ZmqEndpoint.parse("tcp://127.0.0.1:5557"), reached));
  }
}
