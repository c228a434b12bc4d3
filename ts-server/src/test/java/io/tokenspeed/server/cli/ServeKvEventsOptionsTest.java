package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve}'s KV events settings (docs/kv-events.md): each of the others needs {@code
 * --kv-events-endpoint}, an endpoint must be {@code tcp://HOST:PORT}, the sizes have ranges, all
 * found before the model loads; an endpoint that cannot be bound stops the server naming its
 * option.
 */
class ServeKvEventsOptionsTest {
  @TempDir Path tmp;

  private static ServeSettingsTest.Run serve(String... args) {
    String[] all = new String[args.length + 2];
    all[0] = "--model";
    all[1] = "synthetic:llama-100m";
    System.arraycopy(args, 0, all, 2, args.length);
    return ServeSettingsTest.serve(Map.of(), all);
  }

  private static void assertUsage(ServeSettingsTest.Run run, String... fragments) {
    assertEquals(2, run.exitCode(), run.toString());
    for (String f : fragments) {
      assertTrue(run.err().contains(f), () -> f + " in " + run.err());
    }
    assertFalse(run.err().contains("\tat "), run.err());
  }

  @Test
  void shouldRefuseTheOtherSettingsWithoutTheEndpoint() {
    assertUsage(
        serve("--kv-events-replay-endpoint", "tcp://127.0.0.1:5558"),
        "--kv-events-replay-endpoint=tcp://127.0.0.1:5558 is for KV events, which are off",
        "--kv-events-endpoint");
    assertUsage(serve("--kv-events-topic", "kv@x"), "--kv-events-topic=kv@x is for KV events");
    assertUsage(serve("--kv-events-queue-size", "5"), "--kv-events-queue-size=5 is for KV events");
    assertUsage(
        serve("--kv-events-buffer-steps", "5"), "--kv-events-buffer-steps=5 is for KV events");
  }

  @Test
  void shouldRefuseWhatIsNotATcpEndpointAndSizesOutOfRange() {
    assertUsage(
        serve("--kv-events-endpoint", "127.0.0.1:5557"),
        "--kv-events-endpoint='127.0.0.1:5557' is not tcp://HOST:PORT");
    assertUsage(
        serve(
            "--kv-events-endpoint",
            "tcp://127.0.0.1:5557",
            "--kv-events-replay-endpoint",
            "tcp://127.0.0.1:70000"),
        "--kv-events-replay-endpoint=",
        "the port must be in [0, 65535]");
    assertUsage(
        serve("--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-events-queue-size", "0"),
        "--kv-events-queue-size=0 must be in [1, 1048576]");
    assertUsage(
        serve("--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-events-buffer-steps", "0"),
        "--kv-events-buffer-steps=0 must be in [1, 1048576]");
  }

  @Test
  void shouldNameTheOptionWhoseEndpointIsTaken() throws Exception {
    Path config = tmp.resolve("tiny-untied.json");
    try (InputStream in = getClass().getResourceAsStream("/models/tiny-untied.json")) {
      Files.write(config, in.readAllBytes());
    }
    try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      String endpoint = "tcp://127.0.0.1:" + taken.getLocalPort();
      ServeSettingsTest.Run run =
          ServeSettingsTest.serve(
              Map.of(),
              "--model",
              "synthetic:" + config,
              "--threads",
              "1",
              "--warmup-rounds",
              "0",
              "--port",
              "0",
              "--kv-events-endpoint",
              endpoint);
      assertTrue(run.exitCode() != 0, run::toString);
      assertTrue(
          run.err().contains("--kv-events-endpoint=" + endpoint + ": cannot bind"), run::err);
    }
  }
}
