package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeType;
import io.tokenspeed.engine.EngineRole;
import io.tokenspeed.engine.PdTicket;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import java.util.function.Function;

/**
 * Checks the JSON body of a completion or chat request, field by field, into a {@link
 * GenerationRequest}. Every refusal is a 400 naming the field; fields the OpenAI API defines but
 * this server does not implement are refused unless they hold their neutral value, so a request is
 * never silently served differently from what it asked. Fields nobody defines are ignored, as the
 * OpenAI API does.
 */
final class RequestParser {
  /** The most choices one request may ask for ({@code n} times the prompts of a batch). */
  static final int MAX_CHOICES = 16;

  /** The most stop strings one request may give. */
  static final int MAX_STOP_STRINGS = 16;

  /** The most alternatives a token's logprobs may list. */
  static final int MAX_TOP_LOGPROBS = 20;

  private final String servedModel;
  private final Tokenizer tokenizer;
  private final int vocabSize;
  private final int maxRequestTokens;
  private final Function<List<Map<String, Object>>, int[]> chatPrompt;
  private final EngineRole role;

  /**
   * @param chatPrompt renders chat messages with the chat template and tokenizes them (throws
   *     {@link ApiException} for messages the template refuses)
   * @param role the engine's role, which decides what the {@code pd} field may hold ({@link
   *     PdServing#ticket})
   */
  RequestParser(
      String servedModel,
      Tokenizer tokenizer,
      int vocabSize,
      int maxRequestTokens,
      Function<List<Map<String, Object>>, int[]> chatPrompt,
      EngineRole role) {
    this.servedModel = servedModel;
    this.tokenizer = tokenizer;
    this.vocabSize = vocabSize;
    this.maxRequestTokens = maxRequestTokens;
    this.chatPrompt = chatPrompt;
    this.role = role;
  }

  GenerationRequest parse(JsonNode body, boolean chat) {
    if (body == null || !body.isObject()) {
      throw ApiException.invalid(null, "the request body must be a JSON object");
    }
    String model = optionalText(body, "model");
    if (model != null && !model.equals(servedModel)) {
      throw ApiException.unknownModel(model, servedModel);
    }
    unsupported(body, chat);
    List<Map<String, Object>> messages = List.of();
    List<int[]> prompts;
    if (chat) {
      messages = messages(body);
      prompts = List.of(chatPrompt.apply(messages));
    } else {
      prompts = prompts(body);
    }
    for (int[] p : prompts) {
      if (p.length == 0) {
        throw ApiException.invalid(chat ? "messages" : "prompt", "the prompt gives no tokens");
      }
      for (int i = 0; i < p.length; i++) {
        if (p[i] < 0 || p[i] >= vocabSize) {
          throw ApiException.invalid(
              "prompt",
              (chat ? "the rendered messages' " : "prompt: ")
                  + "token id "
                  + p[i]
                  + " at position "
                  + i
                  + " is out of range [0, "
                  + vocabSize
                  + ")");
        }
      }
    }
    int n = intField(body, "n", 1, 1, MAX_CHOICES);
    if (n * prompts.size() > MAX_CHOICES) {
      throw ApiException.invalid(
          "n",
          "n="
              + n
              + " times "
              + prompts.size()
              + " prompts is "
              + n * prompts.size()
              + " choices; at most "
              + MAX_CHOICES
              + " per request");
    }
    int longest = 0;
    for (int[] p : prompts) {
      longest = Math.max(longest, p.length);
    }
    String maxField = body.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (body.hasNonNull("max_completion_tokens") && body.hasNonNull("max_tokens")) {
      throw ApiException.invalid(
          "max_completion_tokens", "give max_tokens or max_completion_tokens, not both");
    }
    int room = maxRequestTokens - longest;
    if (room < 1) {
      throw ApiException.invalid(
          chat ? "messages" : "prompt",
          "the prompt has "
              + longest
              + " tokens; this server's limit is "
              + maxRequestTokens
              + " tokens for prompt and completion together");
    }
    int defaultMax = chat ? room : Math.min(room, SamplingParams.DEFAULT_MAX_TOKENS);
    int maxTokens = intField(body, maxField, defaultMax, 1, Integer.MAX_VALUE);
    if ((long) longest + maxTokens > maxRequestTokens) {
      throw ApiException.invalid(
          maxField,
          "the prompt ("
              + longest
              + " tokens) plus "
              + maxField
              + "="
              + maxTokens
              + " exceeds this server's limit of "
              + maxRequestTokens
              + " tokens for one request");
    }
    double temperature = number(body, "temperature", SamplingParams.DEFAULT_TEMPERATURE);
    if (!(temperature >= 0) || !Double.isFinite(temperature)) {
      throw ApiException.invalid("temperature", "temperature must be a finite number >= 0");
    }
    double topP = number(body, "top_p", SamplingParams.DEFAULT_TOP_P);
    if (!(topP > 0 && topP <= 1)) {
      throw ApiException.invalid("top_p", "top_p must be in (0, 1]");
    }
    int topK = intField(body, "top_k", SamplingParams.DEFAULT_TOP_K, -1, Integer.MAX_VALUE);
    double minP = number(body, "min_p", SamplingParams.DEFAULT_MIN_P);
    if (!(minP >= 0 && minP <= 1)) {
      throw ApiException.invalid("min_p", "min_p must be in [0, 1]");
    }
    double presencePenalty =
        number(body, "presence_penalty", SamplingParams.DEFAULT_PRESENCE_PENALTY);
    if (!(Math.abs(presencePenalty) <= SamplingParams.MAX_ABS_PRESENCE_FREQUENCY_PENALTY)) {
      throw ApiException.invalid("presence_penalty", "presence_penalty must be in [-2, 2]");
    }
    double frequencyPenalty =
        number(body, "frequency_penalty", SamplingParams.DEFAULT_FREQUENCY_PENALTY);
    if (!(Math.abs(frequencyPenalty) <= SamplingParams.MAX_ABS_PRESENCE_FREQUENCY_PENALTY)) {
      throw ApiException.invalid("frequency_penalty", "frequency_penalty must be in [-2, 2]");
    }
    double repetitionPenalty =
        number(body, "repetition_penalty", SamplingParams.DEFAULT_REPETITION_PENALTY);
    if (!(repetitionPenalty > 0 && repetitionPenalty <= SamplingParams.MAX_REPETITION_PENALTY)) {
      throw ApiException.invalid("repetition_penalty", "repetition_penalty must be in (0, 10]");
    }
    OptionalLong seed = OptionalLong.empty();
    JsonNode seedNode = body.get("seed");
    if (seedNode != null && !seedNode.isNull()) {
      if (!seedNode.canConvertToExactIntegral() || !seedNode.canConvertToLong()) {
        throw ApiException.invalid("seed", "seed must be an integer");
      }
      seed = OptionalLong.of(seedNode.asLong());
    }
    boolean ignoreEos = bool(body, "ignore_eos", false);
    Set<Integer> stopIds = stopTokenIds(body);
    List<String> stop = stopStrings(body);
    int topLogprobs = logprobs(body, chat);
    PdTicket pd = PdServing.ticket(body, role, n * prompts.size());
    boolean stream = bool(body, "stream", false);
    boolean includeUsage = false;
    JsonNode options = body.get("stream_options");
    if (options != null && !options.isNull()) {
      if (!stream) {
        throw ApiException.invalid("stream_options", "stream_options needs stream: true");
      }
      if (!options.isObject()) {
        throw ApiException.invalid("stream_options", "stream_options must be an object");
      }
      includeUsage = bool(options, "include_usage", false, "stream_options.include_usage");
    }
    SamplingParams params =
        new SamplingParams(
            temperature,
            topK,
            topP,
            minP,
            seed,
            maxTokens,
            stopIds,
            ignoreEos,
            presencePenalty,
            frequencyPenalty,
            repetitionPenalty);
    return new GenerationRequest(
        chat,
        servedModel,
        prompts,
        params,
        n,
        stop,
        topLogprobs,
        stream,
        includeUsage,
        messages,
        pd);
  }

  /** Refuses fields of the OpenAI API that this server does not implement, unless neutral. */
  private static void unsupported(JsonNode body, boolean chat) {
    JsonNode bias = body.get("logit_bias");
    if (bias != null && !bias.isNull() && !(bias.isObject() && bias.isEmpty())) {
      throw ApiException.invalid("logit_bias", "logit_bias is not supported");
    }
    if (!chat) {
      if (bool(body, "echo", false)) {
        throw ApiException.invalid("echo", "echo is not supported");
      }
      if (body.hasNonNull("suffix")) {
        throw ApiException.invalid("suffix", "suffix is not supported");
      }
      if (body.hasNonNull("best_of")) {
        int n = intField(body, "n", 1, 1, MAX_CHOICES);
        if (intField(body, "best_of", n, 1, MAX_CHOICES) != n) {
          throw ApiException.invalid("best_of", "best_of is not supported (only equal to n)");
        }
      }
    } else if (body.hasNonNull("tools")
        && !(body.get("tools").isArray() && body.get("tools").isEmpty())) {
      throw ApiException.invalid("tools", "tools are not supported");
    }
  }

  private List<int[]> prompts(JsonNode body) {
    JsonNode p = body.get("prompt");
    if (p == null || p.isNull()) {
      throw ApiException.invalid("prompt", "prompt is required");
    }
    if (p.isTextual()) {
      return List.of(tokenizer.encode(p.asText()));
    }
    if (!p.isArray() || p.isEmpty()) {
      throw ApiException.invalid(
          "prompt",
          "prompt must be a string, an array of token ids, or a non-empty array of either");
    }
    if (p.get(0).isNumber()) {
      return List.of(tokenIds(p, "prompt"));
    }
    List<int[]> out = new ArrayList<>();
    for (int i = 0; i < p.size(); i++) {
      JsonNode e = p.get(i);
      if (e.isTextual()) {
        out.add(tokenizer.encode(e.asText()));
      } else if (e.isArray()) {
        out.add(tokenIds(e, "prompt[" + i + "]"));
      } else {
        throw ApiException.invalid(
            "prompt", "prompt[" + i + "] must be a string or an array of token ids");
      }
      if (out.size() > MAX_CHOICES) {
        throw ApiException.invalid(
            "prompt", "a batch of more than " + MAX_CHOICES + " prompts is not served");
      }
    }
    return out;
  }

  private static int[] tokenIds(JsonNode array, String where) {
    int[] ids = new int[array.size()];
    for (int i = 0; i < ids.length; i++) {
      JsonNode t = array.get(i);
      if (!t.isIntegralNumber() || !t.canConvertToInt()) {
        throw ApiException.invalid("prompt", where + "[" + i + "] must be an integer token id");
      }
      ids[i] = t.asInt();
    }
    return ids;
  }

  private static List<Map<String, Object>> messages(JsonNode body) {
    JsonNode m = body.get("messages");
    if (m == null || m.isNull()) {
      throw ApiException.invalid("messages", "messages is required");
    }
    if (!m.isArray() || m.isEmpty()) {
      throw ApiException.invalid("messages", "messages must be a non-empty array");
    }
    List<Map<String, Object>> out = new ArrayList<>();
    for (int i = 0; i < m.size(); i++) {
      JsonNode msg = m.get(i);
      String where = "messages[" + i + "]";
      if (!msg.isObject()) {
        throw ApiException.invalid("messages", where + " must be an object");
      }
      JsonNode role = msg.get("role");
      if (role == null || !role.isTextual() || role.asText().isEmpty()) {
        throw ApiException.invalid("messages", where + ".role must be a non-empty string");
      }
      Map<String, Object> entry = new LinkedHashMap<>();
      entry.put("role", role.asText());
      JsonNode content = msg.get("content");
      if (content == null || content.isNull()) {
        entry.put("content", null);
      } else if (content.isTextual()) {
        entry.put("content", content.asText());
      } else if (content.isArray()) {
        List<Map<String, Object>> parts = new ArrayList<>();
        for (int j = 0; j < content.size(); j++) {
          JsonNode part = content.get(j);
          String pw = where + ".content[" + j + "]";
          if (!part.isObject() || !part.path("type").isTextual()) {
            throw ApiException.invalid("messages", pw + " must be an object with a type");
          }
          if (!part.path("type").asText().equals("text") || !part.path("text").isTextual()) {
            throw ApiException.invalid(
                "messages",
                pw + " has type " + part.path("type").asText() + "; only text parts are supported");
          }
          parts.add(Map.of("type", "text", "text", part.get("text").asText()));
        }
        entry.put("content", parts);
      } else {
        throw ApiException.invalid(
            "messages", where + ".content must be a string or an array of text parts");
      }
      JsonNode name = msg.get("name");
      if (name != null && !name.isNull()) {
        if (!name.isTextual()) {
          throw ApiException.invalid("messages", where + ".name must be a string");
        }
        entry.put("name", name.asText());
      }
      out.add(entry);
    }
    return out;
  }

  private Set<Integer> stopTokenIds(JsonNode body) {
    JsonNode ids = body.get("stop_token_ids");
    Set<Integer> out = new HashSet<>();
    if (ids == null || ids.isNull()) {
      return out;
    }
    if (!ids.isArray()) {
      throw ApiException.invalid("stop_token_ids", "stop_token_ids must be an array of token ids");
    }
    for (JsonNode id : ids) {
      if (!id.isIntegralNumber()
          || !id.canConvertToInt()
          || id.asInt() < 0
          || id.asInt() >= vocabSize) {
        throw ApiException.invalid(
            "stop_token_ids",
            "stop_token_ids must hold token ids in [0, " + vocabSize + "); got " + id);
      }
      out.add(id.asInt());
    }
    return out;
  }

  private static List<String> stopStrings(JsonNode body) {
    JsonNode s = body.get("stop");
    if (s == null || s.isNull()) {
      return List.of();
    }
    List<String> out = new ArrayList<>();
    if (s.isTextual()) {
      out.add(s.asText());
    } else if (s.isArray()) {
      for (JsonNode e : s) {
        if (!e.isTextual()) {
          throw ApiException.invalid("stop", "stop must be a string or an array of strings");
        }
        out.add(e.asText());
      }
    } else {
      throw ApiException.invalid("stop", "stop must be a string or an array of strings");
    }
    if (out.size() > MAX_STOP_STRINGS) {
      throw ApiException.invalid("stop", "at most " + MAX_STOP_STRINGS + " stop strings");
    }
    for (String x : out) {
      if (x.isEmpty()) {
        throw ApiException.invalid("stop", "a stop string must not be empty");
      }
    }
    return out;
  }

  /** -1 without logprobs, else the alternatives per token. */
  private static int logprobs(JsonNode body, boolean chat) {
    if (!chat) {
      JsonNode l = body.get("logprobs");
      if (l == null || l.isNull()) {
        return -1;
      }
      return intField(body, "logprobs", -1, 0, MAX_TOP_LOGPROBS);
    }
    boolean on = bool(body, "logprobs", false);
    JsonNode top = body.get("top_logprobs");
    if (top == null || top.isNull()) {
      return on ? 0 : -1;
    }
    int k = intField(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS);
    if (!on) {
      throw ApiException.invalid("top_logprobs", "top_logprobs needs logprobs: true");
    }
    return k;
  }

  private static String optionalText(JsonNode body, String field) {
    JsonNode v = body.get(field);
    if (v == null || v.isNull()) {
      return null;
    }
    if (!v.isTextual()) {
      throw ApiException.invalid(field, field + " must be a string");
    }
    return v.asText();
  }

  static int intField(JsonNode body, String field, int absent, int min, int max) {
    JsonNode v = body.get(field);
    if (v == null || v.isNull()) {
      return absent;
    }
    if (!v.isNumber() || !v.canConvertToExactIntegral()) {
      throw ApiException.invalid(field, field + " must be an integer; got " + describe(v));
    }
    if (!v.canConvertToLong() || v.asLong() < min || v.asLong() > max) {
      throw ApiException.invalid(
          field,
          field
              + "="
              + v.asText()
              + " is out of range ["
              + min
              + ", "
              + (max == Integer.MAX_VALUE ? "2^31-1" : String.valueOf(max))
              + "]");
    }
    return v.asInt();
  }

  private static double number(JsonNode body, String field, double absent) {
    JsonNode v = body.get(field);
    if (v == null || v.isNull()) {
      return absent;
    }
    if (!v.isNumber()) {
      throw ApiException.invalid(field, field + " must be a number; got " + describe(v));
    }
    return v.asDouble();
  }

  private static boolean bool(JsonNode body, String field, boolean absent) {
    return bool(body, field, absent, field);
  }

  private static boolean bool(JsonNode body, String field, boolean absent, String name) {
    JsonNode v = body.get(field);
    if (v == null || v.isNull()) {
      return absent;
    }
    if (!v.isBoolean()) {
      throw ApiException.invalid(name, name + " must be true or false; got " + describe(v));
    }
    return v.asBoolean();
  }

  private static String describe(JsonNode v) {
    JsonNodeType t = v.getNodeType();
    return switch (t) {
      case STRING -> "a string";
      case NUMBER -> "the number " + v.asText();
      case BOOLEAN -> v.asText();
      case ARRAY -> "an array";
      case OBJECT -> "an object";
      default -> t.name().toLowerCase(java.util.Locale.ROOT);
    };
  }
}
