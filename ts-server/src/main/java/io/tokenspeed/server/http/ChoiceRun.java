package io.tokenspeed.server.http;

import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.model.tokenizer.StreamingDecoder;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.util.OptionalInt;
import java.util.concurrent.ExecutionException;
import java.util.function.IntPredicate;

/**
 * One choice of a request, from its engine handle to text: decodes tokens as they come, applies the
 * stop strings (cancelling the engine request at the first match), and hands each piece of text
 * that is safe to send to a listener.
 */
final class ChoiceRun {

  /** Receives the pieces of one choice, on the thread that runs it. */
  interface Listener {
    /**
     * Text that may be sent now, and the steps (generated-token indices, from {@code firstStep} to
     * {@code endStep} exclusive) consumed since the previous piece.
     */
    void onPiece(ChoiceRun run, String text, int firstStep, int endStep);
  }

  final int index;
  final RequestHandle handle;
  private final StreamingDecoder decoder;
  private final StopStrings stop;
  private final StringBuilder text = new StringBuilder();
  private int sent;
  private int steps;
  private int reportedSteps;
  private boolean stoppedByString;
  private GenerationResult result;

  private final IntPredicate stopToken;

  /**
   * @param stopToken whether an id ends the sequence (a stop token id, or the end-of-sequence id
   *     unless ignored): its text is not part of the output, as with a stop string
   */
  ChoiceRun(
      int index,
      RequestHandle handle,
      Tokenizer tokenizer,
      StopStrings stop,
      IntPredicate stopToken) {
    this.index = index;
    this.handle = handle;
    this.decoder = tokenizer.newStreamingDecoder(true);
    this.stop = stop;
    this.stopToken = stopToken;
  }

  /** Runs the choice to its end, calling {@code listener} for each piece. */
  void run(Listener listener) throws InterruptedException {
    while (true) {
      OptionalInt next = handle.nextToken();
      if (next.isEmpty()) {
        break;
      }
      steps++;
      if (stopToken.test(next.getAsInt())) {
        continue; // the sequence ends here; the stop token's text is not output
      }
      int before = text.length();
      text.append(decoder.onToken(next.getAsInt()));
      if (!stop.isEmpty()) {
        int at = stop.find(text, before);
        if (at >= 0) {
          text.setLength(at);
          stoppedByString = true;
          handle.cancel();
          emit(listener, text.length());
          break;
        }
        emit(listener, stop.safeLength(text));
      } else {
        emit(listener, text.length());
      }
    }
    if (!stoppedByString) {
      int before = text.length();
      text.append(decoder.flush());
      if (!stop.isEmpty()) {
        int at = stop.find(text, before);
        if (at >= 0) {
          text.setLength(at);
          stoppedByString = true;
        }
      }
    }
    emit(listener, text.length());
    try {
      result = handle.result().get();
    } catch (ExecutionException e) {
      throw new IllegalStateException("a request handle never completes exceptionally", e);
    }
  }

  private void emit(Listener listener, int upTo) {
    if (upTo > sent || steps > reportedSteps) {
      String piece = text.substring(sent, Math.max(sent, upTo));
      sent = Math.max(sent, upTo);
      int first = reportedSteps;
      reportedSteps = steps;
      listener.onPiece(this, piece, first, steps);
    }
  }

  /** The text of the choice (after {@link #run}). */
  String text() {
    return text.toString();
  }

  /** Generated tokens the text was made of (a stop string's later tokens excluded). */
  int completionTokens() {
    return steps;
  }

  /** The engine's result (after {@link #run}). */
  GenerationResult result() {
    return result;
  }

  /**
   * The OpenAI finish reason: {@code stop} (a stop token or string), {@code length} ({@code
   * max_tokens} reached), or null when the request was cancelled or failed.
   */
  String finishReason() {
    if (stoppedByString) {
      return "stop";
    }
    return switch (result.finishReason()) {
      case "stop" -> "stop";
      case "length" -> "length";
      default -> null;
    };
  }
}
