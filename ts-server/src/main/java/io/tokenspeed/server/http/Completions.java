package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.helidon.webserver.CloseConnectionException;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.IntakeFullException;
import io.tokenspeed.engine.PdTicket;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.engine.RequestMetrics;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.locks.ReentrantLock;
import java.util.logging.Logger;

/**
 * {@code POST /v1/completions} and {@code POST /v1/chat/completions}: submits every choice of a
 * checked request to the engine and answers with one JSON object, or with server-sent events
 * ({@code data: <json>\n\n} per chunk, ending in {@code data: [DONE]\n\n}). HTTP threads only
 * submit, stream and cancel: the engine's loop stays the only owner of engine state.
 *
 * <p>A client that goes away (a write fails, or {@link ClientWatch} sees its connection closed
 * while nothing is written) cancels every choice of its request; the engine frees what they held at
 * its next round, and the departure is logged as one line.
 *
 * <p>A request the server cuts before it finishes (a shutdown's deadline, the engine closing or
 * failing) never looks finished: a non-streamed one is answered 503 with the error; on a stream,
 * each cut choice's last chunk says {@code finish_reason} {@code abort} (or {@code error}), and an
 * error event {@code data: {"error": {...}}} follows the usage chunk, before {@code data: [DONE]}.
 */
final class Completions {
  private static final Logger LOG = Logger.getLogger(Completions.class.getName());
  static final ObjectMapper JSON = new ObjectMapper();
  private static final byte[] DONE = WebFront.doneEvent();

  private final Engine engine;
  private final Tokenizer tokenizer;
  private final RequestParser parser;
  private final ServingState state;
  private final RequestObserver observer;
  private final java.util.OptionalInt eos;

  Completions(
      Engine engine,
      Tokenizer tokenizer,
      RequestParser parser,
      ServingState state,
      RequestObserver observer) {
    this.engine = engine;
    this.tokenizer = tokenizer;
    this.parser = parser;
    this.state = state;
    this.observer = observer;
    this.eos = tokenizer.specialTokens().eosId();
  }

  /** Where an answer goes: one JSON body, or a stream of events. */
  interface Answer {
    void json(int status, byte[] body);

    /** Commits a 200 with the event-stream content type and returns its body. */
    OutputStream events();

    /** Runs {@code onGone} if the client closes its connection before the registration closes. */
    ClientWatch.Registration watchClient(Runnable onGone);
  }

  /** Serves one request whose body was read and found to be JSON. */
  void serve(JsonNode body, boolean chat, long arrivalNs, Answer answer)
      throws InterruptedException {
    state.requireServing();
    GenerationRequest req = parser.parse(body, chat);
    List<ChoiceRun> runs = submit(req);
    Call call = new Call(runs);
    String id = (chat ? "chatcmpl-" : "cmpl-") + UUID.randomUUID().toString().replace("-", "");
    try (ClientWatch.Registration watch = answer.watchClient(call::clientGone)) {
      long created = System.currentTimeMillis() / 1000;
      if (req.stream()) {
        stream(req, call, id, created, answer);
      } else {
        runAll(runs, (run, text, first, end) -> {});
        if (call.clientGone) {
          // nobody to answer: the connection ends here, quietly (the departure is logged below)
          throw new WebFront.ClientGoneException();
        }
        checkFailures(req, runs);
        checkCut(runs);
        ObjectNode out = JSON.createObjectNode();
        out.put("id", id);
        out.put("object", chat ? "chat.completion" : "text_completion");
        out.put("created", created);
        out.put("model", req.model());
        ArrayNode choices = out.putArray("choices");
        for (ChoiceRun r : runs) {
          ObjectNode c = choices.addObject();
          c.put("index", r.index);
          if (chat) {
            ObjectNode m = c.putObject("message");
            m.put("role", "assistant");
            m.put("content", r.text());
          } else {
            c.put("text", r.text());
          }
          c.set("logprobs", Logprobs.of(r, 0, r.completionTokens(), req, tokenizer, 0));
          c.put("finish_reason", r.finishReason());
        }
        out.set("usage", usage(req, runs));
        answer.json(200, bytes(out));
      }
    } finally {
      for (ChoiceRun r : runs) {
        r.handle.cancel();
      }
      observe(req, call, arrivalNs);
      for (ChoiceRun r : runs) {
        state.untrack(r.handle); // after the figures: a drain that sees none in flight sees them
      }
      if (call.clientGone) {
        int tokens = 0;
        for (ChoiceRun r : runs) {
          tokens += r.completionTokens();
        }
        LOG.info(
            "client went away: "
                + id
                + (req.stream() ? " (stream)" : " (not streamed)")
                + " cancelled after "
                + tokens
                + " generated tokens");
      }
    }
  }

  /**
   * Tells the observer of each prompt's end once, whatever {@code n} is: the tokens of all its
   * choices, the figures of the choice whose first token came first, and the most severe finish
   * reason among its choices (error, cancelled, length, stop).
   */
  private void observe(GenerationRequest req, Call call, long arrivalNs) {
    long e2eNs = System.nanoTime() - arrivalNs;
    List<ChoiceRun> runs = call.runs;
    for (int first = 0; first < runs.size(); first += req.n()) {
      RequestMetrics best = null;
      int tokens = 0;
      String reason = null;
      for (int i = first; i < Math.min(runs.size(), first + req.n()); i++) {
        ChoiceRun r = runs.get(i);
        tokens += r.completionTokens();
        reason = moreSevere(reason, observedReason(r));
        GenerationResult res = r.result();
        RequestMetrics m = res == null ? null : res.metrics();
        if (m != null
            && (best == null
                || (m.ttftNs() > 0 && (best.ttftNs() <= 0 || m.ttftNs() < best.ttftNs())))) {
          best = m;
        }
      }
      observer.onRequestFinished(best, tokens, e2eNs, reason);
    }
  }

  private static final List<String> SEVERITY = List.of("stop", "length", "cancelled", "error");

  private static String moreSevere(String a, String b) {
    return a == null || SEVERITY.indexOf(b) > SEVERITY.indexOf(a) ? b : a;
  }

  /** A choice's finish reason as the metrics count it. */
  private static String observedReason(ChoiceRun r) {
    GenerationResult res = r.result();
    if (res == null) {
      return "cancelled";
    }
    if ("error".equals(res.finishReason())) {
      return "error";
    }
    String reason = r.finishReason();
    return reason == null ? "cancelled" : reason;
  }

  /**
   * A choice the server cut (a shutdown's cancellation, the engine closing) while its client was
   * still there fails the whole non-streamed request with a 503: its text is not the completion.
   */
  private void checkCut(List<ChoiceRun> runs) {
    for (ChoiceRun r : runs) {
      if (r.finishReason() == null) {
        throw ApiException.unavailable(cutMessage(r));
      }
    }
  }

  /** Why a choice ended without {@code stop} or {@code length}. */
  private String cutMessage(ChoiceRun r) {
    GenerationResult res = r.result();
    if (res != null && "error".equals(res.finishReason()) && res.error() != null) {
      return "the request failed before it finished: " + res.error();
    }
    String why = state.cutReason();
    if (why != null) {
      return why;
    }
    return res != null && res.error() != null
        ? "the request was cancelled before it finished: " + res.error()
        : "the request was cancelled before it finished";
  }

  /** One HTTP request's choices, and whether its client is still there. */
  private static final class Call {
    final List<ChoiceRun> runs;
    final ReentrantLock lock = new ReentrantLock();
    volatile boolean clientGone;

    Call(List<ChoiceRun> runs) {
      this.runs = runs;
    }

    /** The client closed its connection: every choice is cancelled. */
    void clientGone() {
      clientGone = true;
      for (ChoiceRun r : runs) {
        r.handle.cancel();
      }
    }
  }

  private List<ChoiceRun> submit(GenerationRequest req) {
    List<ChoiceRun> runs = new ArrayList<>();
    StopStrings stop = new StopStrings(req.stop());
    java.util.Set<Integer> stopIds = req.params().stopTokenIds();
    boolean eosStops = !req.params().ignoreEos() && eos.isPresent();
    int eosId = eos.orElse(-1);
    java.util.function.IntPredicate stopToken =
        id -> stopIds.contains(id) || (eosStops && id == eosId);
    try {
      int index = 0;
      for (int[] prompt : req.prompts()) {
        for (int i = 0; i < req.n(); i++) {
          RequestHandle h = engine.submit(prompt, req.paramsOf(index), req.topLogprobs(), req.pd());
          state.track(h);
          runs.add(new ChoiceRun(index, h, tokenizer, stop, stopToken));
          index++;
        }
      }
    } catch (IllegalStateException e) {
      for (ChoiceRun r : runs) {
        r.handle.cancel();
        state.untrack(r.handle);
      }
      String message = e.getMessage() == null ? e.toString() : e.getMessage();
      if (engine.failure().isPresent()) {
        state.fail(String.valueOf(engine.failure().get()));
        throw ApiException.unavailable("the engine has failed: " + engine.failure().get());
      }
      if (e instanceof IntakeFullException) {
        throw new ApiException(429, "rate_limit_error", null, null, message);
      }
      throw ApiException.unavailable(message);
    }
    return runs;
  }

  /** Runs every choice: the first on this thread, the others on virtual threads. */
  private static void runAll(List<ChoiceRun> runs, ChoiceRun.Listener listener)
      throws InterruptedException {
    List<Thread> threads = new ArrayList<>();
    for (int i = 1; i < runs.size(); i++) {
      ChoiceRun r = runs.get(i);
      threads.add(
          Thread.ofVirtual()
              .name("ts-http-choice")
              .start(
                  () -> {
                    try {
                      r.run(listener);
                    } catch (InterruptedException e) {
                      r.handle.cancel();
                    }
                  }));
    }
    try {
      runs.getFirst().run(listener);
    } finally {
      for (Thread t : threads) {
        t.join();
      }
    }
  }

  /**
   * A request the engine refused (bad input it found) or that failed is answered as an error. The
   * half of a disaggregated request whose KV transfer failed (the other engine refused the room or
   * went away) is answered 502, or 504 when its prefill engine never came within the bootstrap
   * deadline, and the server serves on: the failure is the request's, not the engine's.
   */
  private void checkFailures(GenerationRequest req, List<ChoiceRun> runs) {
    for (ChoiceRun r : runs) {
      GenerationResult res = r.result();
      if ("error".equals(res.finishReason())) {
        String message = res.error();
        if (res.metrics() == null) {
          throw ApiException.invalid(null, message);
        }
        ApiException transfer = transferFailure(req, res);
        if (transfer != null) {
          throw transfer;
        }
        state.fail(message);
        throw ApiException.unavailable(message);
      }
    }
  }

  /**
   * The answer to a disaggregated request whose KV transfer failed ({@code res} an error result
   * with figures, while the engine runs on): 504 when its prefill half never came within the
   * bootstrap deadline, else 502; null for any other request or failure.
   */
  private ApiException transferFailure(GenerationRequest req, GenerationResult res) {
    if (req.pd() == null || engine.failure().isPresent() || res.metrics() == null) {
      return null;
    }
    String message = res.error();
    return message != null && message.startsWith(PdTicket.PREFILL_NEVER_CAME)
        ? new ApiException(504, "upstream_error", null, "gateway_timeout", message)
        : new ApiException(502, "upstream_error", null, "bad_gateway", message);
  }

  private void stream(GenerationRequest req, Call call, String id, long created, Answer answer)
      throws InterruptedException {
    List<ChoiceRun> runs = call.runs;
    // A refusal at intake ends a handle at once: answer it as an error before committing a 200.
    for (ChoiceRun r : runs) {
      if (r.handle.result().isDone() && r.handle.result().join().metrics() == null) {
        r.run((run, text, first, end) -> {});
        checkFailures(req, List.of(r));
      }
    }
    OutputStream out = answer.events();
    String object = req.chat() ? "chat.completion.chunk" : "text_completion";
    ChoiceRun.Listener writer =
        (run, text, first, end) -> {
          if (text.isEmpty() && req.topLogprobs() < 0) {
            return; // steps whose text is held back for a stop string: nothing to say yet
          }
          ObjectNode chunk = chunk(id, object, created, req.model());
          ObjectNode c = chunk.putArray("choices").addObject();
          c.put("index", run.index);
          if (req.chat()) {
            c.putObject("delta").put("content", text);
          } else {
            c.put("text", text);
          }
          c.set("logprobs", Logprobs.of(run, first, end, req, tokenizer, 0));
          c.putNull("finish_reason");
          send(out, call, chunk);
        };
    if (req.chat()) {
      for (ChoiceRun r : runs) {
        ObjectNode chunk = chunk(id, object, created, req.model());
        ObjectNode c = chunk.putArray("choices").addObject();
        c.put("index", r.index);
        ObjectNode delta = c.putObject("delta");
        delta.put("role", "assistant");
        delta.put("content", "");
        c.putNull("logprobs");
        c.putNull("finish_reason");
        send(out, call, chunk);
      }
    }
    runAll(runs, writer);
    if (call.clientGone) {
      return; // nobody reads the rest
    }
    String cut = null;
    ApiException transfer = null;
    for (ChoiceRun r : runs) {
      ObjectNode chunk = chunk(id, object, created, req.model());
      ObjectNode c = chunk.putArray("choices").addObject();
      c.put("index", r.index);
      if (req.chat()) {
        c.putObject("delta");
      } else {
        c.put("text", "");
      }
      c.putNull("logprobs");
      String reason = r.finishReason();
      if (reason == null) {
        // cut by the server or failed: never a null reason on a choice's last chunk
        boolean failed = r.result() != null && "error".equals(r.result().finishReason());
        reason = failed ? "error" : "abort";
        if (cut == null) {
          cut = cutMessage(r);
          transfer = failed ? transferFailure(req, r.result()) : null;
        }
      }
      c.put("finish_reason", reason);
      send(out, call, chunk);
    }
    if (req.includeUsage()) {
      ObjectNode chunk = chunk(id, object, created, req.model());
      chunk.putArray("choices");
      chunk.set("usage", usage(req, runs));
      send(out, call, chunk);
    }
    if (transfer != null) {
      write(out, call, WebFront.errorEvent(cut, transfer.type(), transfer.status()));
    } else if (cut != null) {
      write(out, call, WebFront.errorEvent(cut, "service_unavailable", 503));
    }
    write(out, call, DONE);
    if (!call.clientGone) {
      try {
        out.close();
      } catch (IOException | UncheckedIOException | CloseConnectionException e) {
        call.clientGone();
      }
    }
  }

  private static ObjectNode chunk(String id, String object, long created, String model) {
    ObjectNode chunk = JSON.createObjectNode();
    chunk.put("id", id);
    chunk.put("object", object);
    chunk.put("created", created);
    chunk.put("model", model);
    return chunk;
  }

  private static void send(OutputStream out, Call call, ObjectNode e) {
    write(out, call, WebFront.event(bytes(e)));
  }

  /** Writes one event; a failed write means the client went away: every choice is cancelled. */
  private static void write(OutputStream out, Call call, byte[] frame) {
    call.lock.lock();
    try {
      if (call.clientGone) {
        return;
      }
      out.write(frame);
      out.flush();
    } catch (IOException | UncheckedIOException | CloseConnectionException e) {
      call.clientGone();
    } finally {
      call.lock.unlock();
    }
  }

  /**
   * The usage object: prompt tokens (each distinct prompt once), completion tokens of every choice,
   * and the prompt tokens whose KV the engine reused, in all ({@code cached_tokens}) and by where
   * it came from: {@code device}, {@code host} (the Host tier's own) and {@code storage} (restored
   * from L3 into the Host tier), which add up to {@code cached_tokens}.
   */
  static ObjectNode usage(GenerationRequest req, List<ChoiceRun> runs) {
    long prompt = 0;
    long completion = 0;
    long device = 0;
    long host = 0;
    long storage = 0;
    for (ChoiceRun r : runs) {
      completion += r.completionTokens();
      if (r.index % req.n() == 0) {
        prompt += req.prompts().get(r.index / req.n()).length;
        RequestMetrics m = r.result() == null ? null : r.result().metrics();
        if (m != null) {
          device += m.reusedDeviceTokens();
          host += m.reusedHostTokens() - m.reusedStorageTokens();
          storage += m.reusedStorageTokens();
        }
      }
    }
    ObjectNode u = JSON.createObjectNode();
    u.put("prompt_tokens", prompt);
    u.put("completion_tokens", completion);
    u.put("total_tokens", prompt + completion);
    ObjectNode details = u.putObject("prompt_tokens_details");
    details.put("cached_tokens", device + host + storage);
    ObjectNode by = details.putObject("cached_tokens_by_source");
    by.put("device", device);
    by.put("host", host);
    by.put("storage", storage);
    return u;
  }

  static byte[] bytes(JsonNode node) {
    try {
      return JSON.writeValueAsBytes(node);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
