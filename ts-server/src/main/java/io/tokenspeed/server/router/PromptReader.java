package io.tokenspeed.server.router;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * The token ids a request's prompt gives, as its backend will compute them, for the prefix lookup:
 * or null when the router cannot tell (the request is then routed by load alone). The router never
 * changes the body it forwards; a wrong guess here costs a routing choice, never an answer.
 *
 * <ul>
 *   <li>{@code /v1/completions} with {@code prompt} an array of token ids: those ids, with no
 *       tokenizer. A batch of prompts: its first.
 *   <li>{@code prompt} a string: the tokenizer's ids, when the router has the backends' tokenizer
 *       ({@code router --tokenizer}).
 *   <li>{@code /v1/chat/completions}: the messages rendered by the backends' chat template and
 *       tokenized, when the router has both.
 * </ul>
 */
@FunctionalInterface
public interface PromptReader {

  /** The prompt's token ids, or null when unknown. */
  int[] tokens(String path, JsonNode body);

  /** Reads token-id prompts only. */
  static PromptReader tokenIdsOnly() {
    return of(null, null);
  }

  /**
   * Reads token-id prompts, text with {@code tokenizer} (null: not read) and chats with {@code
   * chat} (the backends' template and tokenizer; null: not read).
   */
  static PromptReader of(Tokenizer tokenizer, Function<List<Map<String, Object>>, int[]> chat) {
    ObjectMapper json = new ObjectMapper();
    TypeReference<List<Map<String, Object>>> messagesType = new TypeReference<>() {};
    return (path, body) -> {
      try {
        if (path.equals("/v1/chat/completions")) {
          JsonNode messages = body.get("messages");
          if (chat == null || messages == null || !messages.isArray()) {
            return null;
          }
          return chat.apply(json.convertValue(messages, messagesType));
        }
        JsonNode prompt = body.get("prompt");
        if (prompt == null) {
          return null;
        }
        if (prompt.isArray() && !prompt.isEmpty() && !prompt.get(0).isNumber()) {
          prompt = prompt.get(0); // a batch: its first prompt
        }
        if (prompt.isTextual()) {
          return tokenizer == null ? null : tokenizer.encode(prompt.asText());
        }
        if (!prompt.isArray() || prompt.isEmpty()) {
          return null;
        }
        int[] ids = new int[prompt.size()];
        for (int i = 0; i < ids.length; i++) {
          JsonNode t = prompt.get(i);
          if (!t.isIntegralNumber() || !t.canConvertToInt()) {
            return null; // the backend refuses it
          }
          ids[i] = t.intValue();
        }
        return ids;
      } catch (RuntimeException e) {
        return null; // the backend answers the request's own error
      }
    };
  }
}
