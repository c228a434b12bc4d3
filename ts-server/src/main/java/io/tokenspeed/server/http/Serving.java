package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.engine.EngineRole;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatMessage;
import io.tokenspeed.server.chat.ChatTemplate;
import io.tokenspeed.server.chat.ChatTemplateException;
import io.tokenspeed.server.kvevents.KvEventPublisher;
import io.tokenspeed.server.metrics.ServerMetrics;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * The serving path of one engine: the Prometheus metrics and the HTTP server over it. {@code
 * tokenspeed serve} and the tests build it the same way.
 */
public final class Serving implements AutoCloseable {

  /**
   * What a server needs.
   *
   * @param engine the engine (the caller closes it after {@link #close})
   * @param vocabSize the model's vocabulary size
   * @param tokenizer the model's tokenizer
   * @param chatPrompt renders and tokenizes chat messages ({@link #chatPrompt})
   * @param servedModelName the model's name in the API and in the metrics' {@code model_name}
   * @param maxRequestTokens the most tokens of one request, prompt and completion together
   * @param host the address to listen on
   * @param port the port (0: any free one)
   * @param maxBodyBytes the largest request body taken
   * @param adminToken the admin token, or null for administration off
   * @param dpRank the metrics' {@code dp_rank}
   * @param state the server's phase (turned ready by the caller after warm-up)
   * @param headerTimeoutMs how long a request's head may take, and an idle connection stay open
   */
  public record Options(
      Engine engine,
      int vocabSize,
      Tokenizer tokenizer,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      String servedModelName,
      int maxRequestTokens,
      String host,
      int port,
      long maxBodyBytes,
      String adminToken,
      int dpRank,
      ServingState state,
      long headerTimeoutMs) {}

  private final ServerMetrics metrics;
  private final HttpFrontend frontend;

  private Serving(ServerMetrics metrics, HttpFrontend frontend) {
    this.metrics = metrics;
    this.frontend = frontend;
  }

  /** The guard of the server's connections (for tests). */
  ConnectionGuard frontendGuard() {
    return frontend.guard();
  }

  /** Starts listening (503 until the state turns ready). */
  public static Serving start(Options o) {
    return start(o, null);
  }

  /**
   * {@link #start(Options)} for an engine whose KV events {@code kvEvents} publishes: {@code GET
   * /kv-events} describes it and the metrics count its batches (null: KV events off).
   */
  public static Serving start(Options o, KvEventPublisher kvEvents) {
    Engine engine = o.engine();
    // the engine's role is the metrics' engine_role; a PD role adds the KV transfer's series
    EngineRole role = engine.role();
    ServerMetrics metrics =
        new ServerMetrics(
            o.servedModelName(),
            role.wireName(),
            o.dpRank(),
            0,
            engine::metrics,
            role == EngineRole.FUSED ? null : engine::pdMetrics);
    if (kvEvents != null) {
      metrics.kvEvents(kvEvents::published, kvEvents::dropped);
    }
    HttpFrontend frontend =
        HttpFrontend.start(
            new HttpFrontend.Settings(
                engine,
                o.tokenizer(),
                o.vocabSize(),
                o.servedModelName(),
                o.maxRequestTokens(),
                o.chatPrompt(),
                o.host(),
                o.port(),
                o.maxBodyBytes(),
                o.adminToken(),
                o.state(),
                metrics::onRequestFinished,
                new HttpFrontend.MetricsText() {
                  @Override
                  public String contentType() {
                    return metrics.contentType();
                  }

                  @Override
                  public byte[] scrape() {
                    return metrics.scrape().getBytes(java.nio.charset.StandardCharsets.UTF_8);
                  }
                },
                engine.storageNamespace().isPresent() ? () -> storageHealth(engine) : null,
                o.headerTimeoutMs(),
                kvEvents));
    return new Serving(metrics, frontend);
  }

  /**
   * What {@code /ready} says of L3, from the snapshot: the executor's health state and epoch (its
   * outages), and apart from them whether the store refuses writes for capacity ({@code
   * writes_refused}: on any rank of the replica, with the store's reason) and how long backups are
   * held back after its refusals ({@code backup_backoff_ms}, 0 while it takes them).
   */
  static JsonNode storageHealth(Engine engine) {
    ObjectNode out = Completions.JSON.createObjectNode();
    EngineMetrics m = engine.metrics();
    out.put("namespace", engine.storageNamespace().map(Object::toString).orElse(null));
    if (m.storage().isPresent()) {
      EngineMetrics.Storage storage = m.storage().get();
      var executor = storage.executor();
      out.put("health", executor.healthState());
      out.put("health_epoch", executor.healthEpoch());
      out.put("quarantined", executor.quarantined());
      String reason = executor.writesRefused() ? executor.writesRefusedReason() : null;
      for (var other : storage.otherRanks().values()) {
        if (reason == null && other.writesRefused()) {
          reason = other.writesRefusedReason();
        }
      }
      out.put("writes_refused", reason != null);
      if (reason != null) {
        out.put("writes_refused_reason", reason);
      }
      out.put("backup_backoff_ms", storage.transfers().backupBackoffMs());
    } else {
      out.put("health", "unknown");
    }
    return out;
  }

  /**
   * Renders chat messages with {@code template} (with the generation prompt) and tokenizes the text
   * with {@code tokenizer}: the template's special tokens become their ids, while special-token
   * text a client wrote in a message stays plain text ({@link ChatTemplate#encode}); a message or
   * template refusal is a 400 naming {@code messages}.
   */
  public static Function<List<Map<String, Object>>, int[]> chatPrompt(
      ChatTemplate template, Tokenizer tokenizer) {
    return messages -> {
      try {
        List<ChatMessage> list = new ArrayList<>();
        for (int i = 0; i < messages.size(); i++) {
          Map<String, Object> m = messages.get(i);
          Object content = m.get("content");
          try {
            list.add(ChatMessage.of((String) m.get("role"), content == null ? "" : content));
          } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("messages[" + i + "]." + e.getMessage(), e);
          }
        }
        return template.encode(tokenizer, list, true);
      } catch (ChatTemplateException | IllegalArgumentException e) {
        throw ApiException.invalid("messages", e.getMessage());
      }
    };
  }

  public int port() {
    return frontend.port();
  }

  /** Whether the server's connections send each write at once (Nagle's algorithm off). */
  boolean tcpNoDelay() {
    return frontend.tcpNoDelay();
  }

  /** The bound on the listener's connections at once (-1: none). */
  int maxTcpConnections() {
    return frontend.maxTcpConnections();
  }

  public ServerMetrics metrics() {
    return metrics;
  }

  /** Stops listening. */
  @Override
  public void close() {
    frontend.close();
  }
}
