package io.tokenspeed.server.router;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A stand-in engine for the router's tests: a real HTTP/1.1 server on a loopback port, written on
 * raw sockets so that it controls every byte and sees its peer close. It serves {@code GET /ready}
 * and {@code GET /pd} (keep-alive), and answers completions as its {@link Script} says, recording
 * each request's body. A completion's connection is watched from the moment its request is read:
 * when the router closes it before the stub finished its answer, the stub counts a cancellation.
 */
final class StubBackend implements AutoCloseable {
  static final ObjectMapper JSON = new ObjectMapper();

  /** What the stub does with a completion. */
  sealed interface Script {}

  /** Answers {@code status} with {@code body} as JSON (with a Content-Length). */
  record Answer(int status, String body) implements Script {}

  /**
   * Streams {@code events} as {@code text/event-stream}, chunked, each event's bytes in one chunk
   * (or two, split in the middle, when {@code split}), waiting {@code delayMs} before each one;
   * after {@code breakAfter} events (-1: never) the connection closes without the stream's last
   * chunk. Before event {@code gateAt} (-1: none) it waits for {@link #gate} to be released.
   */
  record Stream(List<String> events, long delayMs, boolean split, int breakAfter, int gateAt)
      implements Script {}

  /** Never answers: waits until the router closes the connection. */
  record Hold() implements Script {}

  /** Closes the connection without an answer, at once. */
  record Drop() implements Script {}

  /** One completion request as the stub read it. */
  record Received(String path, JsonNode body) {}

  final String role;
  final String kvEndpoint;
  final String model;
  private final ServerSocket listener;
  private final Thread acceptor;
  private final Set<Socket> open = ConcurrentHashMap.newKeySet();

  volatile int readyStatus = 200;
  volatile String pdRole;

  /** When set, what {@code GET /pd} answers, verbatim (else the role, KV endpoint and model). */
  volatile String pdAnswer;

  /** When set, what {@code GET /kv-events} answers (200); else 404: events off. */
  volatile String kvEventsAnswer;

  /** When set, what {@code GET /metrics} answers (200); else 404. */
  volatile String metricsAnswer;

  volatile Script script = new Answer(200, "{\"ok\":true}");

  /** When set, every connection is closed as soon as it is accepted: the backend is down. */
  private volatile boolean down;

  /** Takes the backend down (closing every connection it holds) or brings it back up. */
  void down(boolean isDown) {
    down = isDown;
    if (isDown) {
      for (Socket s : open) {
        closeQuietly(s);
      }
    }
  }

  final List<Received> received = new CopyOnWriteArrayList<>();
  final AtomicInteger cancellations = new AtomicInteger();
  private final Semaphore cancelled = new Semaphore(0);

  /** Released by the tests: what {@link Stream#gateAt} waits for. */
  final CountDownLatch gate = new CountDownLatch(1);

  /** When set, a completion's script runs only once this is released (after the request). */
  volatile CountDownLatch before;

  /** Released once the stub has read a completion request (a test may set a fresh one). */
  volatile CountDownLatch receivedOne = new CountDownLatch(1);

  /** Released once the stub has written its first stream event. */
  final CountDownLatch firstEventSent = new CountDownLatch(1);

  StubBackend(String role, String kvEndpoint, String model) {
    this.role = role;
    this.pdRole = role;
    this.kvEndpoint = kvEndpoint;
    this.model = model;
    try {
      listener = new ServerSocket();
      listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    acceptor = Thread.ofVirtual().name("stub-" + role + "-accept").start(this::accept);
  }

  static StubBackend prefill() {
    return new StubBackend("prefill", null, "stub-model");
  }

  static StubBackend decode(String kvEndpoint) {
    return new StubBackend("decode", kvEndpoint, "stub-model");
  }

  static StubBackend fused() {
    return new StubBackend("fused", null, "stub-model");
  }

  String url() {
    return "http://127.0.0.1:" + listener.getLocalPort();
  }

  /** The bodies of the completions received so far. */
  List<JsonNode> bodies() {
    return received.stream().map(Received::body).toList();
  }

  /** Waits until {@code n} completions have arrived (the router does not wait for prefill's). */
  List<Received> awaitReceived(int n, long timeoutMs) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
    while (received.size() < n) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError(
            role + " stub: " + received.size() + " completions arrived, " + n + " expected");
      }
      Thread.sleep(2);
    }
    return List.copyOf(received);
  }

  /** Waits until the router has closed {@code n} completion connections before their end. */
  boolean awaitCancellations(int n, long timeoutMs) throws InterruptedException {
    if (!cancelled.tryAcquire(n, timeoutMs, TimeUnit.MILLISECONDS)) {
      return false;
    }
    cancelled.release(n);
    return true;
  }

  private void accept() {
    while (!listener.isClosed()) {
      Socket s;
      try {
        s = listener.accept();
      } catch (IOException e) {
        return;
      }
      if (down) {
        closeQuietly(s);
        continue;
      }
      open.add(s);
      Thread.ofVirtual().name("stub-" + role + "-conn").start(() -> serve(s));
    }
  }

  /** A request's head and body. */
  private record Request(String method, String path, byte[] body) {}

  private void serve(Socket socket) {
    try (socket) {
      InputStream in = new BufferedInputStream(socket.getInputStream());
      OutputStream out = socket.getOutputStream();
      while (true) {
        Request r = read(in);
        if (r == null) {
          return;
        }
        switch (r.path()) {
          case "/ready" -> respond(out, readyStatus, "{\"status\":\"x\"}", false);
          case "/pd" -> respond(out, 200, pd(), false);
          case "/kv-events" -> {
            String a = kvEventsAnswer;
            respond(out, a == null ? 404 : 200, a == null ? "{}" : a, false);
          }
          case "/metrics" -> {
            String a = metricsAnswer;
            respond(out, a == null ? 404 : 200, a == null ? "{}" : a, false);
          }
          case "/v1/models" ->
              respond(
                  out,
                  200,
                  "{\"object\":\"list\",\"data\":[{\"id\":\""
                      + model
                      + "\",\"from\":\""
                      + url()
                      + "\"}]}",
                  false);
          default -> {
            received.add(new Received(r.path(), JSON.readTree(r.body())));
            receivedOne.countDown();
            complete(socket, in, out);
            return;
          }
        }
      }
    } catch (IOException e) {
      // the peer went away between requests
    } finally {
      open.remove(socket);
    }
  }

  private String pd() {
    String verbatim = pdAnswer;
    if (verbatim != null) {
      return verbatim;
    }
    StringBuilder sb = new StringBuilder("{\"role\":\"").append(pdRole).append('"');
    if (kvEndpoint != null) {
      sb.append(",\"kv_endpoint\":\"").append(kvEndpoint).append('"');
    }
    return sb.append(",\"model\":\"").append(model).append("\"}").toString();
  }

  /**
   * Serves one completion as the script says, watching for the router closing the connection: a
   * close before the stub began its answer's last write, or a write that fails, is a cancellation.
   */
  private void complete(Socket socket, InputStream in, OutputStream out) throws IOException {
    AtomicBoolean finishing = new AtomicBoolean();
    CountDownLatch peerClosed = new CountDownLatch(1);
    Thread watcher =
        Thread.ofVirtual()
            .start(
                () -> {
                  try {
                    while (in.read() >= 0) {
                      // HTTP/1.1 without pipelining: the router sends nothing more on it
                    }
                  } catch (IOException e) {
                    // closed by either side
                  }
                  if (!finishing.get()) {
                    peerClosed.countDown();
                  }
                });
    boolean cut = false;
    CountDownLatch first = before;
    if (first != null) {
      await(first);
    }
    try {
      switch (script) {
        case Answer a -> {
          finishing.set(true);
          respond(out, a.status(), a.body(), true);
        }
        case Stream st -> cut = stream(out, st, peerClosed, finishing);
        case Hold h -> await(peerClosed);
        case Drop d -> finishing.set(true);
      }
    } catch (IOException e) {
      cut = true; // a write failed: the router closed the connection
    }
    if (cut || (!finishing.get() && peerClosed.getCount() == 0)) {
      cancellations.incrementAndGet();
      cancelled.release();
    }
    finishing.set(true);
    socket.close();
    watcher.interrupt();
  }

  private static void await(CountDownLatch latch) {
    try {
      latch.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** Streams the events; true when the router closed the connection first. */
  private boolean stream(
      OutputStream out, Stream st, CountDownLatch peerClosed, AtomicBoolean finishing)
      throws IOException {
    out.write(
        ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            .getBytes(StandardCharsets.US_ASCII));
    out.flush();
    for (int i = 0; i < st.events().size(); i++) {
      if (i == st.breakAfter()) {
        finishing.set(true);
        return false; // the connection closes without the last chunk: a broken stream
      }
      if (i == st.gateAt()) {
        try {
          gate.await();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return false;
        }
      }
      try {
        if (peerClosed.await(st.delayMs(), TimeUnit.MILLISECONDS)) {
          return true;
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      }
      byte[] event = st.events().get(i).getBytes(StandardCharsets.UTF_8);
      if (st.split() && event.length > 1) {
        int half = event.length / 2;
        chunk(out, event, 0, half);
        try {
          if (peerClosed.await(Math.max(1, st.delayMs() / 2), TimeUnit.MILLISECONDS)) {
            return true;
          }
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return false;
        }
        chunk(out, event, half, event.length - half);
      } else {
        chunk(out, event, 0, event.length);
      }
      firstEventSent.countDown();
    }
    if (peerClosed.getCount() == 0) {
      return true;
    }
    finishing.set(true);
    out.write("0\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
    out.flush();
    return false;
  }

  private static void chunk(OutputStream out, byte[] bytes, int from, int length)
      throws IOException {
    out.write((Integer.toHexString(length) + "\r\n").getBytes(StandardCharsets.US_ASCII));
    out.write(bytes, from, length);
    out.write("\r\n".getBytes(StandardCharsets.US_ASCII));
    out.flush();
  }

  private static void respond(OutputStream out, int status, String body, boolean close)
      throws IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    out.write(
        ("HTTP/1.1 "
                + status
                + " X\r\nContent-Type: application/json\r\nContent-Length: "
                + bytes.length
                + (close ? "\r\nConnection: close" : "")
                + "\r\n\r\n")
            .getBytes(StandardCharsets.US_ASCII));
    out.write(bytes);
    out.flush();
  }

  /** Reads one request; null at the end of the connection. */
  private static Request read(InputStream in) throws IOException {
    ByteArrayOutputStream head = new ByteArrayOutputStream();
    int matched = 0;
    while (matched < 4) {
      int c = in.read();
      if (c < 0) {
        return null;
      }
      head.write(c);
      matched = (c == (matched % 2 == 0 ? '\r' : '\n')) ? matched + 1 : (c == '\r' ? 1 : 0);
    }
    String[] lines = head.toString(StandardCharsets.US_ASCII).split("\r\n");
    String[] first = lines[0].split(" ");
    int length = 0;
    for (int i = 1; i < lines.length; i++) {
      String line = lines[i];
      int colon = line.indexOf(':');
      if (colon > 0
          && line.substring(0, colon).trim().toLowerCase(Locale.ROOT).equals("content-length")) {
        length = Integer.parseInt(line.substring(colon + 1).trim());
      }
    }
    byte[] body = in.readNBytes(length);
    if (body.length < length) {
      return null;
    }
    return new Request(first[0], first[1], body);
  }

  private static void closeQuietly(Socket s) {
    try {
      s.close();
    } catch (IOException e) {
      // already closed
    }
  }

  @Override
  public void close() {
    try {
      listener.close();
    } catch (IOException e) {
      // already closed
    }
    for (Socket s : open) {
      closeQuietly(s);
    }
    acceptor.interrupt();
  }
}
