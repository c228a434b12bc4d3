package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.model.CausalLm;
import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A server whose engine fails: a checkpoint whose final norm is NaN makes every logit NaN, the
 * sampler refuses them and the engine's loop stops. The request in flight and every later one are
 * answered 503, {@code /ready} says the engine failed, {@code /health} stays up.
 */
class EngineFailureTest {
  @TempDir Path dir;

  /** A copy of the tiny checkpoint whose {@code model.norm.weight} is NaN everywhere. */
  private Path brokenCheckpoint() throws IOException {
    Path source = TestServer.checkpoint(dir);
    Path broken = Files.createDirectories(dir.resolve("broken"));
    try (var files = Files.list(source)) {
      for (Path f : (Iterable<Path>) files::iterator) {
        Files.copy(f, broken.resolve(f.getFileName()), StandardCopyOption.REPLACE_EXISTING);
      }
    }
    Path weights = broken.resolve("model.safetensors");
    try (FileChannel ch =
        FileChannel.open(weights, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
      ByteBuffer len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
      ch.read(len, 0);
      int headerBytes = (int) len.flip().getLong();
      ByteBuffer header = ByteBuffer.allocate(headerBytes);
      ch.read(header, 8);
      JsonNode tensor =
          TestServer.JSON.readTree(header.array()).get("model.norm.weight").get("data_offsets");
      long begin = 8 + headerBytes + tensor.get(0).asLong();
      int count = (int) (tensor.get(1).asLong() - tensor.get(0).asLong()) / 4;
      ByteBuffer nan = ByteBuffer.allocate(count * 4).order(ByteOrder.LITTLE_ENDIAN);
      for (int i = 0; i < count; i++) {
        nan.putFloat(Float.NaN);
      }
      ch.write(nan.flip(), begin);
    }
    return broken;
  }

  @Test
  void shouldAnswer503AndReportTheFailureOnceTheEngineFailed() throws Exception {
    try (TestServer server =
        TestServer.over(CausalLm.load(brokenCheckpoint()), null, 1 << 20, true)) {
      HttpResponse<String> first =
          server.post("/v1/completions", "{\"prompt\":\"hello\",\"max_tokens\":4}");
      assertEquals(503, first.statusCode(), first.body());
      assertTrue(first.body().contains("engine loop failed"), first.body());
      HttpResponse<String> later =
          server.post("/v1/completions", "{\"prompt\":\"again\",\"max_tokens\":4}");
      assertEquals(503, later.statusCode(), later.body());
      assertEquals(
          "service_unavailable", TestServer.json(later.body()).get("error").get("type").asText());
      HttpResponse<String> ready = server.get("/ready");
      assertEquals(503, ready.statusCode());
      JsonNode body = TestServer.json(ready.body());
      assertEquals("failed", body.get("status").asText());
      assertTrue(body.get("failure").asText().contains("NaN"), ready.body());
      assertEquals(200, server.get("/health").statusCode(), "the process is up");
      assertEquals(ServingState.Phase.FAILED, server.state.phase());
    }
  }
}
