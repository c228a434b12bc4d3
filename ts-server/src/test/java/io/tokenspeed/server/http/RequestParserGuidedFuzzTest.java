package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import io.tokenspeed.engine.EngineRole;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatTemplate;
import io.tokenspeed.testkit.DecoderContract;
import io.tokenspeed.testkit.DecoderContract.Outcome;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.Set;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;

/**
 * Coverage-guided fuzz targets (Jazzer) of the request bodies of {@code /v1/completions} and {@code
 * /v1/chat/completions}: the bytes go through what the server does with a body it has read ({@link
 * WebFront#parseBody}: strict UTF-8, one JSON value) and then through {@link RequestParser}, the
 * chat target with the plain chat template and the byte tokenizer. Without {@code JAZZER_FUZZ} each
 * replays its seeds under {@code RequestParserGuidedFuzzTestInputs/<method>} as a regression test;
 * with it, it fuzzes (docs/reliability/fuzzing.md has the commands and figures).
 *
 * <p>Every body must give a request or an {@link ApiException} that the server answers as a client
 * error (400, or 404 for another model) with a one-line message; never another exception or error
 * (which the server would answer 500), never a hang, and never an allocation out of proportion to
 * the body. A request it accepts is one the engine can run: prompts that are not empty and hold
 * only ids of the vocabulary, at most {@value RequestParser#MAX_CHOICES} choices, and a token
 * budget within the server's limit.
 */
class RequestParserGuidedFuzzTest {

  private static final String MODEL = "tiny";
  private static final int MAX_REQUEST_TOKENS = 4096;

  /** Jackson's per-parser buffers, the template's rendering, the tokenizer's output. */
  private static final long BASE_BYTES = 8L << 20;

  private static final long PER_INPUT_BYTE = 1024;

  private static final Tokenizer TOKENIZER = ByteTokenizer.plain();
  private static final RequestParser PARSER =
      new RequestParser(
          MODEL,
          TOKENIZER,
          TOKENIZER.vocabSize(),
          MAX_REQUEST_TOKENS,
          Serving.chatPrompt(ChatTemplate.plain(), TOKENIZER),
          EngineRole.FUSED);

  @FuzzTest(maxDuration = "3m")
  void completions(byte[] body) {
    check(body, false);
  }

  @FuzzTest(maxDuration = "3m")
  void chatCompletions(byte[] body) {
    check(body, true);
  }

  @Test
  void shouldKeepTheMessageOnOneLineWhenTheBodyHoldsTwoJsonValues() {
    // Found by this target's seeds: a second value after the first was refused with Jackson's
    // getMessage(), whose second line gives the source's location.
    ApiException e =
        assertThrows(
            ApiException.class,
            () -> WebFront.parseBody("{\"prompt\":\"a\"} {\"prompt\":\"b\"}".getBytes()));
    assertEquals(400, e.status());
    assertTrue(
        e.getMessage().startsWith("the request body is not valid JSON (line 1, column "),
        e.getMessage());
    assertTrue(e.getMessage().contains("Trailing token"), e.getMessage());
    assertFalse(e.getMessage().contains("\n"), e.getMessage());
  }

  @Test
  void shouldKeepTheMessageOnOneLineWhenTheModelNameHoldsALineBreak() {
    // Found by this target: the 404 for another model quoted the name as is, line breaks included.
    ApiException e =
        assertThrows(
            ApiException.class,
            () ->
                PARSER.parse(
                    WebFront.parseBody("{\"model\":\"a\\nb\",\"prompt\":\"x\"}".getBytes()),
                    false));
    assertEquals(404, e.status());
    assertEquals(
        "The model `a\\u000ab` does not exist; this server serves `" + MODEL + "`", e.getMessage());
  }

  private static void check(byte[] body, boolean chat) {
    Supplier<String> input =
        () ->
            new String(body, StandardCharsets.UTF_8)
                + " (hex "
                + HexFormat.of().formatHex(body)
                + ")";
    Outcome<GenerationRequest> o =
        DecoderContract.decode(
            ApiException.class,
            BASE_BYTES,
            PER_INPUT_BYTE,
            body.length,
            input,
            () -> PARSER.parse(WebFront.parseBody(body), chat));
    if (o.refused()) {
      ApiException e = (ApiException) o.refusal();
      assertTrue(
          Set.of(400, 404).contains(e.status()),
          () -> "status " + e.status() + " for " + input.get());
      assertNotNull(e.type(), input);
      assertFalse(e.getMessage().isBlank(), input);
      return;
    }
    GenerationRequest r = o.value();
    assertEquals(chat, r.chat(), input);
    assertEquals(MODEL, r.model(), input);
    assertFalse(r.prompts().isEmpty(), input);
    assertTrue(chat ? r.prompts().size() == 1 : !r.messages().isEmpty() == chat, input);
    assertTrue(r.n() >= 1 && r.choices() <= RequestParser.MAX_CHOICES, input);
    SamplingParams p = r.params();
    for (int[] prompt : r.prompts()) {
      assertTrue(prompt.length >= 1, input);
      for (int id : prompt) {
        assertTrue(id >= 0 && id < TOKENIZER.vocabSize(), input);
      }
      assertTrue(p.maxTokens() >= 1, input);
      assertTrue((long) prompt.length + p.maxTokens() <= MAX_REQUEST_TOKENS, input);
    }
    assertTrue(r.stop().size() <= RequestParser.MAX_STOP_STRINGS, input);
    assertTrue(r.topLogprobs() >= -1 && r.topLogprobs() <= RequestParser.MAX_TOP_LOGPROBS, input);
    assertTrue(!r.includeUsage() || r.stream(), input);
  }
}
