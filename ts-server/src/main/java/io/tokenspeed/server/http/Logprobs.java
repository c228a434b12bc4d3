package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.model.sampling.TokenLogprobs;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.nio.charset.StandardCharsets;

/**
 * The {@code logprobs} object of a choice, for the generated steps {@code [first, end)}: for
 * completions the legacy shape ({@code tokens}, {@code token_logprobs}, {@code top_logprobs} as
 * token-to-logprob maps, {@code text_offset}), for chat the {@code content} list of {@code {token,
 * logprob, bytes, top_logprobs}}. A token's text is its own decode, which may be part of a
 * character (then U+FFFD); {@code bytes} are that text's UTF-8 bytes. In the legacy map, tokens of
 * equal text share one key, which holds the most likely one's value.
 */
final class Logprobs {
  private Logprobs() {}

  static JsonNode of(
      ChoiceRun run, int first, int end, GenerationRequest req, Tokenizer tokenizer, int offset) {
    if (req.topLogprobs() < 0) {
      return NullNode.getInstance();
    }
    ObjectNode out = Completions.JSON.createObjectNode();
    if (req.chat()) {
      ArrayNode content = out.putArray("content");
      for (int step = first; step < end; step++) {
        TokenLogprobs lp = run.handle.logprobs(step);
        ObjectNode e = content.addObject();
        token(e, lp.token(), lp.logprob(), tokenizer);
        ArrayNode top = e.putArray("top_logprobs");
        for (int k = 0; k < lp.topTokens().length; k++) {
          token(top.addObject(), lp.topTokens()[k], lp.topLogprobs()[k], tokenizer);
        }
      }
      return out;
    }
    ArrayNode tokens = out.putArray("tokens");
    ArrayNode values = out.putArray("token_logprobs");
    ArrayNode tops = out.putArray("top_logprobs");
    ArrayNode offsets = out.putArray("text_offset");
    int at = offset;
    for (int step = first; step < end; step++) {
      TokenLogprobs lp = run.handle.logprobs(step);
      String text = text(lp.token(), tokenizer);
      tokens.add(text);
      values.add(lp.logprob());
      ObjectNode top = tops.addObject();
      for (int k = 0; k < lp.topTokens().length; k++) {
        String alternative = text(lp.topTokens()[k], tokenizer);
        if (!top.has(alternative)) {
          top.put(alternative, lp.topLogprobs()[k]); // equal texts: the most likely one's value
        }
      }
      offsets.add(at);
      at += text.length();
    }
    return out;
  }

  private static void token(ObjectNode e, int id, float logprob, Tokenizer tokenizer) {
    String text = text(id, tokenizer);
    e.put("token", text);
    e.put("logprob", logprob);
    ArrayNode bytes = e.putArray("bytes");
    for (byte b : text.getBytes(StandardCharsets.UTF_8)) {
      bytes.add(b & 0xFF);
    }
  }

  private static String text(int id, Tokenizer tokenizer) {
    return tokenizer.decode(new int[] {id}, false);
  }
}
