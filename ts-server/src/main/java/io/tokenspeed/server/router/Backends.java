package io.tokenspeed.server.router;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.server.http.PdServing;
import java.io.IOException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The router's backends by role: which are ready, the round robin over them, and the poll that
 * keeps their readiness.
 *
 * <p><b>The poll.</b> One virtual thread per backend asks its {@code GET /ready} and {@code GET
 * /pd} together every poll period (the first at once); each answer may take the connect timeout. A
 * backend is ready when {@code /ready} answered 200 and {@code /pd} answered 200 with a JSON object
 * whose {@code role} is the role the backend is configured for, whose {@code tp} (1 when absent) is
 * an integer in [1, {@value #MAX_RANKS}], and, for a decode backend, whose {@code kv_endpoints}
 * lists {@code tp} {@code host:port} strings (or, without {@code kv_endpoints}, at {@code tp} 1,
 * whose {@code kv_endpoint} is one). A decode replica whose ranks have not all reported their KV
 * endpoints yet names none: it is not chosen until a later poll finds them. A backend that names
 * another role is never chosen, and says so in the log.
 *
 * <p><b>The choice.</b> Round robin over the ready backends of a role, in the order they were
 * configured: the role's counter picks among the ones ready at the moment of the choice.
 *
 * <p>Thread-safe.
 */
final class Backends implements AutoCloseable {
  /** The most ranks of a backend's replica ({@code /pd}'s {@code tp}). */
  static final int MAX_RANKS = PdServing.MAX_RANKS;

  /** The largest {@code /ready} or {@code /pd} answer read. */
  private static final long MAX_POLL_ANSWER_BYTES = 64 * 1024;

  private final Map<Role, List<Backend>> byRole = new EnumMap<>(Role.class);
  private final Map<Role, AtomicLong> cursors = new EnumMap<>(Role.class);
  private final HttpClient client;
  private final ObjectMapper json;
  private final long pollMs;
  private final Duration answerTimeout;
  private final List<Thread> pollers = new ArrayList<>();
  private volatile boolean closed;

  Backends(
      List<String> prefill,
      List<String> decode,
      HttpClient client,
      ObjectMapper json,
      long pollMs,
      long answerTimeoutMs) {
    this.client = client;
    this.json = json;
    this.pollMs = pollMs;
    this.answerTimeout = Duration.ofMillis(answerTimeoutMs);
    byRole.put(Role.PREFILL, prefill.stream().map(u -> new Backend(Role.PREFILL, u)).toList());
    byRole.put(Role.DECODE, decode.stream().map(u -> new Backend(Role.DECODE, u)).toList());
    for (Role role : Role.values()) {
      cursors.put(role, new AtomicLong());
    }
  }

  /** Starts polling every backend. */
  void start() {
    for (List<Backend> list : byRole.values()) {
      for (Backend b : list) {
        pollers.add(Thread.ofVirtual().name("ts-router-poll " + b.url).start(() -> pollLoop(b)));
      }
    }
  }

  /** Every backend of {@code role}, in the order configured. */
  List<Backend> of(Role role) {
    return byRole.get(role);
  }

  /** The backend of {@code role} and {@code url}, if configured. */
  Optional<Backend> find(Role role, String url) {
    return byRole.get(role).stream().filter(b -> b.url.equals(url)).findFirst();
  }

  /** A backend chosen, and its state when it was: the state a request to it goes by. */
  record Chosen(Backend backend, Backend.State state) {}

  /** The next ready backend of {@code role}, round robin; empty when none is ready. */
  Optional<Chosen> choose(Role role) {
    List<Chosen> ready = new ArrayList<>();
    for (Backend b : byRole.get(role)) {
      Backend.State state = b.state();
      if (state.ready()) {
        ready.add(new Chosen(b, state));
      }
    }
    if (ready.isEmpty()) {
      return Optional.empty();
    }
    long turn = cursors.get(role).getAndIncrement();
    return Optional.of(ready.get((int) Math.floorMod(turn, (long) ready.size())));
  }

  /** The roles without a ready backend now, in {@link Role} order. */
  List<Role> missing() {
    List<Role> out = new ArrayList<>();
    for (Role role : Role.values()) {
      if (byRole.get(role).stream().noneMatch(Backend::ready)) {
        out.add(role);
      }
    }
    return out;
  }

  private void pollLoop(Backend b) {
    while (!closed) {
      poll(b);
      try {
        Thread.sleep(pollMs);
      } catch (InterruptedException e) {
        return; // closing
      }
    }
  }

  /** Asks {@code b}'s {@code /ready} and {@code /pd} and takes what they say. */
  void poll(Backend b) {
    long epoch = b.failureEpoch();
    CompletableFuture<HttpResponse<byte[]>> ready = get(b, "/ready");
    CompletableFuture<HttpResponse<byte[]>> pd = get(b, "/pd");
    Backend.State found;
    try {
      found = judge(b, ready.get(), pd.get());
    } catch (ExecutionException e) {
      Throwable cause = e.getCause() == null ? e : e.getCause();
      found = Backend.State.down("its poll failed: " + Upstream.describe(cause));
    } catch (InterruptedException e) {
      ready.cancel(true);
      pd.cancel(true);
      Thread.currentThread().interrupt();
      return;
    }
    if (!closed) {
      b.onPolled(found, epoch);
    }
  }

  private CompletableFuture<HttpResponse<byte[]>> get(Backend b, String path) {
    HttpRequest request =
        HttpRequest.newBuilder(b.base.resolve(path)).timeout(answerTimeout).GET().build();
    return client.sendAsync(
        request,
        HttpResponse.BodyHandlers.limiting(
            HttpResponse.BodyHandlers.ofByteArray(), MAX_POLL_ANSWER_BYTES));
  }

  /** What a backend's {@code /ready} and {@code /pd} answers say of it. */
  private Backend.State judge(Backend b, HttpResponse<byte[]> ready, HttpResponse<byte[]> pd) {
    if (ready.statusCode() != 200) {
      return Backend.State.down("its /ready answered " + ready.statusCode());
    }
    if (pd.statusCode() != 200) {
      return Backend.State.down(
          "its /pd answered " + pd.statusCode() + " (not an engine with a PD role?)");
    }
    JsonNode info;
    try {
      info = json.readTree(pd.body());
    } catch (IOException e) {
      return Backend.State.down("its /pd answer is not JSON");
    }
    if (info == null || !info.isObject()) {
      return Backend.State.down("its /pd answer is not a JSON object");
    }
    String role = info.path("role").isTextual() ? info.get("role").asText() : null;
    if (!b.role.wireName().equals(role)) {
      return Backend.State.down(
          "MISCONFIGURED: it is configured as a "
              + b.role.wireName()
              + " backend but its /pd says role "
              + (role == null ? "(none)" : role)
              + "; it is not used until they agree");
    }
    String model = info.path("model").isTextual() ? info.get("model").asText() : null;
    JsonNode tpNode = info.get("tp");
    int tp = 1; // an engine that names no size serves one rank
    if (tpNode != null) {
      if (!tpNode.isIntegralNumber()
          || !tpNode.canConvertToInt()
          || tpNode.intValue() < 1
          || tpNode.intValue() > MAX_RANKS) {
        return Backend.State.down(
            "its /pd names tp " + shortly(tpNode) + ", not an integer in [1, " + MAX_RANKS + "]");
      }
      tp = tpNode.intValue();
    }
    List<String> kv = List.of();
    if (b.role == Role.DECODE) {
      JsonNode all = info.get("kv_endpoints");
      if (all != null) {
        if (!all.isArray() || all.size() != tp) {
          return Backend.State.down(
              "its /pd names kv_endpoints "
                  + shortly(all)
                  + ", not an array of its "
                  + tp
                  + " ranks' host:port");
        }
        List<String> list = new ArrayList<>();
        for (JsonNode e : all) {
          String text = e.isTextual() ? e.asText() : null;
          if (!isHostPort(text)) {
            return Backend.State.down(
                "its /pd names kv_endpoints with " + shortly(e) + ", not host:port");
          }
          list.add(text);
        }
        kv = list;
      } else if (tp > 1) {
        return Backend.State.down(
            "its /pd names no kv_endpoints yet: the "
                + tp
                + " ranks of the decode replica have not all reported their KV endpoints");
      } else {
        // an engine of one rank that names only its kv_endpoint (an older engine)
        String one = info.path("kv_endpoint").isTextual() ? info.get("kv_endpoint").asText() : null;
        if (!isHostPort(one)) {
          return Backend.State.down(
              "its /pd names no kv_endpoint host:port (got "
                  + shortly(info.path("kv_endpoint"))
                  + ")");
        }
        kv = List.of(one);
      }
    }
    return new Backend.State(true, null, tp, kv, model);
  }

  /** At most 80 characters of a JSON value, for a reason. */
  private static String shortly(JsonNode v) {
    String text = String.valueOf(v);
    return text.length() <= 80 ? text : text.substring(0, 80) + "...";
  }

  /** {@code host:port} with a port in 1..65535 (an IPv6 host in brackets). */
  static boolean isHostPort(String text) {
    if (text == null) {
      return false;
    }
    int colon = text.lastIndexOf(':');
    if (colon <= 0 || colon == text.length() - 1) {
      return false;
    }
    String host = text.substring(0, colon);
    if (host.isBlank() || host.chars().anyMatch(c -> c <= ' ' || c == '/' || c == '@')) {
      return false;
    }
    if (host.indexOf(':') >= 0 && !(host.startsWith("[") && host.endsWith("]"))) {
      return false;
    }
    try {
      int port = Integer.parseInt(text.substring(colon + 1));
      return port >= 1 && port <= 65535;
    } catch (NumberFormatException e) {
      return false;
    }
  }

  @Override
  public void close() {
    closed = true;
    for (Thread t : pollers) {
      t.interrupt();
    }
  }
}
