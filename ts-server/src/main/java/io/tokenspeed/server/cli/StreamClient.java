package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The client of {@code tokenspeed bench serve}: streamed completions over {@code java.net.http}
 * (HTTP/1.1, its work on virtual threads), timed per request as a user of the API sees them.
 *
 * <p>A request asks for {@code logprobs: 0} unless told otherwise, so that every generated token
 * yields its own event (the server holds back steps whose text is empty unless logprobs were asked
 * for, and with the byte tokenizer of a small synthetic model most ids decode to nothing): a token
 * is counted per entry of an event's {@code logprobs.tokens}, never per character of text. Without
 * logprobs an event carrying text stands for a token, which is exact when every token has text of
 * its own (the words of a synthetic preset's vocabulary); the count is then the usage's {@code
 * completion_tokens}, and a request none of whose events carried text shows its tokens at the event
 * that finished it. The clock is read when an event's line has arrived, before it is parsed.
 *
 * <pre>
 *   sent ──── headers ──── data: token 1 ── data: token 2 ── ... ── data: token n ── usage ── [DONE]
 *   |<-------- TTFT ------------------->|
 *                                       |<----------- TPOT × (n − 1) ------------->|
 * </pre>
 *
 * <p>A request that has not reached the end of its stream within the client's timeout ({@link
 * #DEFAULT_TIMEOUT} unless given) fails, so that one stuck stream cannot hold up a run: the request
 * timeout covers the wait for the response's headers, and a deadline closes the body's stream at
 * the same instant after them.
 */
final class StreamClient implements AutoCloseable {
  private static final ObjectMapper JSON = new ObjectMapper();

  /**
   * One streamed completion as the client saw it. Times are {@link System#nanoTime} readings; a
   * failed request has {@code error} set and its other figures as far as it got.
   *
   * @param error why the request failed (a status other than 200, a broken stream, a missing usage
   *     chunk, fewer tokens than asked for), or null
   * @param sentNs just before the request was handed to the client
   * @param headersNs when the response's status and headers had arrived
   * @param firstTokenNs when the first event carrying a token had arrived (0: none)
   * @param lastTokenNs when the last event carrying a token had arrived (0: none)
   * @param tokens generated tokens received (without logprobs, the usage's {@code
   *     completion_tokens})
   * @param promptTokens the usage's {@code prompt_tokens}
   * @param deviceTokens the usage's {@code cached_tokens_by_source.device}
   * @param hostTokens the usage's {@code cached_tokens_by_source.host}
   * @param storageTokens the usage's {@code cached_tokens_by_source.storage}
   */
  record Completion(
      String error,
      long sentNs,
      long headersNs,
      long firstTokenNs,
      long lastTokenNs,
      int tokens,
      long promptTokens,
      long deviceTokens,
      long hostTokens,
      long storageTokens) {

    boolean ok() {
      return error == null;
    }

    /** Request sent to the first event carrying a token, in milliseconds. */
    double ttftMs() {
      return (firstTokenNs - sentNs) / 1e6;
    }

    /** Request sent to the response's headers, in milliseconds. */
    double headersMs() {
      return (headersNs - sentNs) / 1e6;
    }

    /** (last token − first token) / (tokens − 1), in milliseconds; NaN below two tokens. */
    double tpotMs() {
      return tokens < 2 ? Double.NaN : (lastTokenNs - firstTokenNs) / 1e6 / (tokens - 1);
    }

    /** The prompt tokens whose KV the server reused: device, host and storage together. */
    long cachedTokens() {
      return deviceTokens + hostTokens + storageTokens;
    }
  }

  /**
   * The longest one request may take, from sending it to the end of its stream: generous, since a
   * request accepted into a full queue waits its turn (1,024 queued at 3 requests/s is about five
   * minutes).
   */
  static final Duration DEFAULT_TIMEOUT = Duration.ofMinutes(10);

  /** A request's {@code logprobs} that asks for none. */
  static final int NO_LOGPROBS = -1;

  private final Duration timeout;
  private final ExecutorService executor = Executors.newVirtualThreadPerTaskExecutor();
  private final ScheduledExecutorService deadlines =
      Executors.newSingleThreadScheduledExecutor(
          Thread.ofPlatform().daemon().name("ts-bench-deadlines").factory());

  /**
   * Requests in flight at once: a quarter of the process's descriptor limit. The server in the same
   * process ({@code bench serve}) holds at most half of it in connections ({@link
   * io.tokenspeed.server.http.HttpFrontend}), so an open-loop burst waits here, its wait counted in
   * its latency, instead of exhausting the descriptors both sides share.
   */
  private final Semaphore inFlight = new Semaphore(maxInFlight());

  private final HttpClient http =
      HttpClient.newBuilder()
          .version(HttpClient.Version.HTTP_1_1)
          .connectTimeout(Duration.ofSeconds(10))
          .executor(executor)
          .build();

  StreamClient() {
    this(DEFAULT_TIMEOUT);
  }

  /** A client whose requests fail when they have not ended within {@code timeout}. */
  StreamClient(Duration timeout) {
    this.timeout = timeout;
  }

  /**
   * The body of a greedy streamed completion of {@code prompt} (token ids) that generates {@code
   * maxTokens} tokens whatever they are ({@code ignore_eos}); {@code logprobs}: the alternatives
   * per token the completions API's {@code logprobs} asks for, or {@value #NO_LOGPROBS} for none.
   */
  static String body(int[] prompt, int maxTokens, int logprobs) {
    StringBuilder b = new StringBuilder(prompt.length * 6 + 160).append("{\"prompt\":[");
    for (int i = 0; i < prompt.length; i++) {
      b.append(i == 0 ? "" : ",").append(prompt[i]);
    }
    b.append("],\"max_tokens\":")
        .append(maxTokens)
        .append(",\"temperature\":0,\"ignore_eos\":true,");
    if (logprobs != NO_LOGPROBS) {
      b.append("\"logprobs\":").append(logprobs).append(',');
    }
    return b.append("\"stream\":true,\"stream_options\":{\"include_usage\":true}}").toString();
  }

  /**
   * Sends one streamed completion of {@code prompt} to {@code endpoint} ({@code
   * .../v1/completions}) with {@code logprobs: 0} (every token its own event) and reads it to its
   * end; fails it when that takes longer than the client's timeout.
   */
  Completion complete(URI endpoint, int[] prompt, int maxTokens) throws InterruptedException {
    return complete(endpoint, prompt, maxTokens, 0);
  }

  /**
   * {@link #complete(URI, int[], int)} asking for {@code logprobs} alternatives per token, or for
   * no logprobs with {@value #NO_LOGPROBS}.
   */
  Completion complete(URI endpoint, int[] prompt, int maxTokens, int logprobs)
      throws InterruptedException {
    HttpRequest request =
        HttpRequest.newBuilder(endpoint)
            .header("Content-Type", "application/json")
            .timeout(timeout)
            .POST(HttpRequest.BodyPublishers.ofString(body(prompt, maxTokens, logprobs)))
            .build();
    Reading r = new Reading();
    r.sentNs = System.nanoTime();
    inFlight.acquire();
    try {
      return send(request, r, maxTokens, logprobs);
    } finally {
      inFlight.release();
    }
  }

  /** The most requests in flight: a quarter of the descriptor limit, at least 64. */
  private static int maxInFlight() {
    long limit =
        java.lang.management.ManagementFactory.getOperatingSystemMXBean()
                instanceof com.sun.management.UnixOperatingSystemMXBean unix
            ? unix.getMaxFileDescriptorCount()
            : -1;
    return limit <= 0 ? Integer.MAX_VALUE : (int) Math.clamp(limit / 4, 64, Integer.MAX_VALUE);
  }

  private Completion send(HttpRequest request, Reading r, int maxTokens, int logprobs)
      throws InterruptedException {
    AtomicBoolean expired = new AtomicBoolean();
    try {
      HttpResponse<InputStream> response =
          http.send(request, HttpResponse.BodyHandlers.ofInputStream());
      r.headersNs = System.nanoTime();
      InputStream stream = response.body();
      // closing the stream ends a read blocked on it with an IOException
      ScheduledFuture<?> deadline =
          deadlines.schedule(
              () -> {
                expired.set(true);
                try {
                  stream.close();
                } catch (IOException ignored) {
                  // closed already
                }
              },
              timeout.toNanos() - (r.headersNs - r.sentNs),
              TimeUnit.NANOSECONDS);
      try (BufferedReader in =
          new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
        Completion c;
        if (response.statusCode() != 200) {
          StringBuilder body = new StringBuilder();
          for (String line; (line = in.readLine()) != null && body.length() < 400; ) {
            body.append(line);
          }
          c = r.failed("status " + response.statusCode() + ": " + body);
        } else {
          c = read(in, r, maxTokens, logprobs);
        }
        return expired.get() && !c.ok() ? r.failed(timedOut()) : c;
      } finally {
        deadline.cancel(false);
      }
    } catch (HttpTimeoutException e) {
      return r.failed(timedOut());
    } catch (IOException e) {
      return r.failed(expired.get() ? timedOut() : "I/O: " + e);
    }
  }

  private String timedOut() {
    return "timed out: the stream had not ended " + timeout.toMillis() + " ms after it was sent";
  }

  /**
   * Reads a streamed completion to its end: its token events (per entry of {@code logprobs.tokens},
   * or without logprobs, {@value #NO_LOGPROBS}, per event carrying text) and its usage; fails it
   * unless it generated exactly {@code maxTokens}.
   */
  static Completion read(BufferedReader in, Reading r, int maxTokens, int logprobs)
      throws IOException {
    boolean done = false;
    JsonNode usage = null;
    long finishNs = 0;
    for (String line; (line = in.readLine()) != null; ) {
      if (!line.startsWith("data: ")) {
        if (!line.isEmpty()) {
          return r.failed("not an event line: " + line);
        }
        continue;
      }
      long nowNs = System.nanoTime();
      String data = line.substring(6);
      if (data.equals("[DONE]")) {
        done = true;
        continue;
      }
      JsonNode event = JSON.readTree(data);
      if (event.has("error")) {
        return r.failed("error event: " + event.get("error"));
      }
      if (event.hasNonNull("usage")) {
        usage = event.get("usage");
      }
      for (JsonNode choice : event.path("choices")) {
        int n =
            logprobs != NO_LOGPROBS
                ? choice.path("logprobs").path("tokens").size()
                : choice.path("text").asText().isEmpty() ? 0 : 1;
        if (n > 0) {
          if (r.tokens == 0) {
            r.firstTokenNs = nowNs;
          }
          r.lastTokenNs = nowNs;
          r.tokens += n;
        }
        if (choice.hasNonNull("finish_reason")) {
          finishNs = nowNs;
        }
      }
    }
    if (!done) {
      return r.failed("the stream ended without data: [DONE]");
    }
    if (usage == null) {
      return r.failed("no usage chunk");
    }
    JsonNode by = usage.path("prompt_tokens_details").path("cached_tokens_by_source");
    r.promptTokens = usage.path("prompt_tokens").asLong();
    r.deviceTokens = by.path("device").asLong();
    r.hostTokens = by.path("host").asLong();
    r.storageTokens = by.path("storage").asLong();
    if (logprobs == NO_LOGPROBS) {
      if (r.tokens == 0) {
        r.firstTokenNs = finishNs;
        r.lastTokenNs = finishNs;
      }
      r.tokens = usage.path("completion_tokens").asInt();
    }
    if (r.tokens != maxTokens || usage.path("completion_tokens").asInt() != maxTokens) {
      return r.failed(
          "tokens="
              + r.tokens
              + " completion_tokens="
              + usage.path("completion_tokens")
              + " where max_tokens="
              + maxTokens);
    }
    return r.completion(null);
  }

  /**
   * The round trip of a {@code GET} of {@code uri} through this client, to the end of its body, in
   * milliseconds: the HTTP path's floor on this machine, without the engine.
   *
   * @throws IOException when the request fails or is not answered 200
   */
  double roundTripMs(URI uri) throws IOException, InterruptedException {
    HttpRequest request = HttpRequest.newBuilder(uri).GET().build();
    long t0 = System.nanoTime();
    HttpResponse<byte[]> r = http.send(request, HttpResponse.BodyHandlers.ofByteArray());
    long t1 = System.nanoTime();
    if (r.statusCode() != 200) {
      throw new IOException("GET " + uri + " answered " + r.statusCode());
    }
    return (t1 - t0) / 1e6;
  }

  /** A completion being read. */
  static final class Reading {
    long sentNs;
    long headersNs;
    long firstTokenNs;
    long lastTokenNs;
    int tokens;
    long promptTokens;
    long deviceTokens;
    long hostTokens;
    long storageTokens;

    Completion failed(String error) {
      return completion(error);
    }

    Completion completion(String error) {
      return new Completion(
          error,
          sentNs,
          headersNs,
          firstTokenNs,
          lastTokenNs,
          tokens,
          promptTokens,
          deviceTokens,
          hostTokens,
          storageTokens);
    }
  }

  @Override
  public void close() {
    http.close();
    executor.close();
    deadlines.shutdownNow();
  }
}
