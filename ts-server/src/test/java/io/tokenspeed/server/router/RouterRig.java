package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.core.metrics.PrometheusText;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * A router on a free loopback port in front of stub prefill and decode backends ({@link
 * StubBackend}), and a client for it. The router polls its backends only when a test says so
 * ({@link #poll}): the poll period is an hour, after the first poll at start.
 */
final class RouterRig implements AutoCloseable {
  final List<StubBackend> prefill = new ArrayList<>();
  final List<StubBackend> decode = new ArrayList<>();
  final Router router;
  final HttpClient client =
      HttpClient.newBuilder()
          .version(HttpClient.Version.HTTP_1_1)
          .connectTimeout(Duration.ofSeconds(10))
          .build();

  /** {@code p} prefill and {@code d} decode stubs; rooms drawn from {@code seed}. */
  RouterRig(int p, int d, long seed) {
    this(p, d, seed, 20_000, 2000, 1L << 20);
  }

  RouterRig(
      int p, int d, long seed, long upstreamTimeoutMs, long headerTimeoutMs, long maxBodyBytes) {
    for (int i = 0; i < p; i++) {
      prefill.add(StubBackend.prefill());
    }
    for (int i = 0; i < d; i++) {
      decode.add(StubBackend.decode("10.0.0." + (i + 1) + ":" + (7000 + i)));
    }
    SplittableRandom random = new SplittableRandom(seed);
    router =
        Router.start(
            new RouterSettings(
                prefill.stream().map(StubBackend::url).toList(),
                decode.stream().map(StubBackend::url).toList(),
                "127.0.0.1",
                0,
                3_600_000,
                2000,
                upstreamTimeoutMs,
                maxBodyBytes,
                headerTimeoutMs),
            () -> {
              long room;
              do {
                room = random.nextLong();
              } while (room == 0);
              return room;
            });
    poll();
  }

  /** Polls every backend now. */
  void poll() {
    router.pollNow();
  }

  int port() {
    return router.port();
  }

  URI uri(String path) {
    return URI.create("http://127.0.0.1:" + port() + path);
  }

  HttpResponse<String> post(String path, String body) {
    return send(
        HttpRequest.newBuilder(uri(path))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(body))
            .build());
  }

  /** POSTs {@code body} (no content type) and hands back the answer's body as it arrives. */
  HttpResponse<InputStream> postStreaming(String path, String body)
      throws IOException, InterruptedException {
    return client.send(
        HttpRequest.newBuilder(uri(path)).POST(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofInputStream());
  }

  HttpResponse<String> get(String path) {
    return send(HttpRequest.newBuilder(uri(path)).GET().build());
  }

  private HttpResponse<String> send(HttpRequest request) {
    try {
      return client.send(request, HttpResponse.BodyHandlers.ofString());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  /** The router's metrics now. */
  Map<String, PrometheusText.Family> metrics() {
    HttpResponse<String> res = get("/metrics");
    assertEquals(200, res.statusCode(), res.body());
    return PrometheusText.parse(res.body());
  }

  static JsonNode json(String text) {
    try {
      return StubBackend.JSON.readTree(text);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void close() {
    router.close();
    client.shutdownNow();
    prefill.forEach(StubBackend::close);
    decode.forEach(StubBackend::close);
  }
}
