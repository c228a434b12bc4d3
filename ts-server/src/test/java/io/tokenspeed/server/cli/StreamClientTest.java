package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.server.cli.StreamClient.Completion;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.OutputStream;
import java.io.StringReader;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Test;

/**
 * A stream that never ends fails the request at the client's timeout instead of hanging; without
 * logprobs the tokens are the usage's and the events carrying text time them.
 */
class StreamClientTest {

  /**
   * A loopback server that accepts one connection, writes {@code reply} (possibly nothing) and then
   * holds the connection open until closed.
   */
  private static final class StuckServer implements AutoCloseable {
    final ServerSocket listener;
    final List<Socket> sockets = new ArrayList<>();
    final CountDownLatch closed = new CountDownLatch(1);

    StuckServer(String reply) throws IOException {
      listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
      Thread.ofPlatform()
          .daemon()
          .start(
              () -> {
                try (Socket s = listener.accept()) {
                  synchronized (sockets) {
                    sockets.add(s);
                  }
                  OutputStream out = s.getOutputStream();
                  out.write(reply.getBytes(StandardCharsets.US_ASCII));
                  out.flush();
                  closed.await();
                } catch (IOException | InterruptedException e) {
                  // closed
                }
              });
    }

    URI uri() {
      return URI.create("http://127.0.0.1:" + listener.getLocalPort() + "/v1/completions");
    }

    @Override
    public void close() throws IOException {
      closed.countDown();
      listener.close();
    }
  }

  @Test
  void shouldFailARequestWhoseStreamStopsMidwayAtTheTimeout() throws Exception {
    String headers =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    String event = "data: {\"choices\":[]}\n\n";
    String chunk = Integer.toHexString(event.length()) + "\r\n" + event + "\r\n";
    try (StuckServer server = new StuckServer(headers + chunk);
        StreamClient client = new StreamClient(Duration.ofMillis(500))) {
      long t0 = System.nanoTime();
      Completion c = client.complete(server.uri(), new int[] {1, 2, 3}, 4);
      double s = (System.nanoTime() - t0) / 1e9;
      assertFalse(c.ok(), "a stream that never ends fails");
      assertTrue(c.error().startsWith("timed out"), c.error());
      assertTrue(c.headersNs() > 0, "the headers had arrived");
      assertTrue(s < 10, "it failed at the timeout, not later: " + s + " s");
    }
  }

  @Test
  void shouldFailARequestThatGetsNoResponseAtTheTimeout() throws Exception {
    try (StuckServer server = new StuckServer("");
        StreamClient client = new StreamClient(Duration.ofMillis(500))) {
      long t0 = System.nanoTime();
      Completion c = client.complete(server.uri(), new int[] {1, 2, 3}, 4);
      double s = (System.nanoTime() - t0) / 1e9;
      assertFalse(c.ok(), "a request without a response fails");
      assertTrue(c.error().startsWith("timed out"), c.error());
      assertEquals(0, c.headersNs(), "no headers arrived");
      assertTrue(s < 10, "it failed at the timeout: " + s + " s");
    }
  }

  /** Events of a completion without logprobs: text, then the finish, the usage and the end. */
  private static BufferedReader withoutLogprobs(String... texts) {
    StringBuilder b = new StringBuilder();
    for (String t : texts) {
      b.append("data: {\"choices\":[{\"index\":0,\"text\":\"")
          .append(t)
          .append("\",\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    }
    b.append("data: {\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,")
        .append("\"finish_reason\":\"length\"}]}\n\n")
        .append(
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\n")
        .append("data: [DONE]\n\n");
    return new BufferedReader(new StringReader(b.toString()));
  }

  @Test
  void shouldCountTheUsagesTokensWithoutLogprobsAndTimeThemByTheEventsWithText() throws Exception {
    StreamClient.Reading r = new StreamClient.Reading();
    r.sentNs = System.nanoTime();
    // the second event carries the text of two tokens
    Completion c =
        StreamClient.read(withoutLogprobs(" ba", " ka ke"), r, 3, StreamClient.NO_LOGPROBS);
    assertTrue(c.ok(), c.error());
    assertEquals(3, c.tokens());
    assertEquals(5, c.promptTokens());
    assertTrue(c.firstTokenNs() >= c.sentNs() && c.lastTokenNs() >= c.firstTokenNs());

    StreamClient.Reading silent = new StreamClient.Reading();
    silent.sentNs = System.nanoTime();
    Completion s = StreamClient.read(withoutLogprobs(), silent, 3, StreamClient.NO_LOGPROBS);
    assertTrue(s.ok(), s.error());
    assertTrue(
        s.firstTokenNs() > 0 && s.firstTokenNs() == s.lastTokenNs(),
        "tokens without text show at the finish");

    StreamClient.Reading asked = new StreamClient.Reading();
    Completion a = StreamClient.read(withoutLogprobs(" ba", " ka ke"), asked, 3, 0);
    assertTrue(
        !a.ok() && a.error().startsWith("tokens=0 "), "logprobs asked, none sent: " + a.error());
  }

  @Test
  void shouldAskForLogprobsOnlyWhenTold() {
    String none = StreamClient.body(new int[] {1, 2}, 4, StreamClient.NO_LOGPROBS);
    assertTrue(!none.contains("logprobs") && none.contains("\"ignore_eos\":true"), none);
    String two = StreamClient.body(new int[] {1, 2}, 4, 2);
    assertTrue(two.contains("\"logprobs\":2,"), two);
  }
}
