package io.tokenspeed.server.chat;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.hubspot.jinjava.objects.date.CurrentDateTimeProvider;
import com.hubspot.jinjava.objects.date.DateTimeProvider;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatTemplateException.Reason;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.ZoneId;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * Turns a conversation into the prompt text a checkpoint was trained on, with the checkpoint's own
 * Jinja chat template, rendered as Hugging Face {@code transformers}' {@code apply_chat_template}
 * renders it ({@link JinjaEnvironment} says how and what differs).
 *
 * <h2>Where the template comes from</h2>
 *
 * {@link #load} reads a model folder as {@code transformers} does: {@value #CHAT_TEMPLATE_JINJA}
 * when present, else the {@code chat_template} field of {@value #TOKENIZER_CONFIG_JSON} (a string,
 * or a list of {@code {"name", "template"}} of which the one named {@code default} is used). The
 * special tokens a template may print ({@code bos_token}, {@code eos_token}, {@code unk_token},
 * {@code sep_token}, {@code pad_token}, {@code cls_token}, {@code mask_token}) come from {@value
 * #TOKENIZER_CONFIG_JSON}, each a string or an added-token object with a {@code content}. A folder
 * with no template gets the {@link #plain()} template, with its special tokens, and {@link
 * #fromCheckpoint()} false. A template that does not parse, or fails on a small conversation (a
 * user message; a system and a user message; a multi-turn chat; each with and without the
 * generation prompt), fails the load with a message naming the file; a template that answers those
 * with {@code raise_exception} is accepted.
 *
 * <h2>What the template sees</h2>
 *
 * <pre>
 *   messages               [{role, content}, ...]   content always a string ({@link ChatMessage})
 *   add_generation_prompt  true | false
 *   tools, documents       none
 *   bos_token, eos_token, ...   strings, where the checkpoint names them
 *   extra variables        as given to {@link #render(List, boolean, Map)} (enable_thinking, ...)
 * </pre>
 *
 * <h2>Tokenizing the result</h2>
 *
 * {@link #encode} gives the prompt's ids: special tokens written by the template, such as {@code
 * <|im_start|>}, become their ids (as {@code apply_chat_template} with {@code
 * add_special_tokens=False} makes them), special-token text written by the client stays plain text,
 * and nothing is added. For a conversation without special-token text it equals {@code
 * Tokenizer.encode} of {@link #render}'s text. A template that wants a beginning-of-sequence token
 * writes it ({@code {{ bos_token }}}); Qwen's writes none. A caller with a rule of its own for BOS
 * checks {@link #startsWithBos} so as not to add a second.
 *
 * <p>Immutable and thread-safe.
 */
public final class ChatTemplate {

  /** The tokenizer's configuration, holding {@code chat_template} and the special tokens. */
  public static final String TOKENIZER_CONFIG_JSON = "tokenizer_config.json";

  /** A template on its own, written by newer {@code transformers}; preferred when present. */
  public static final String CHAT_TEMPLATE_JINJA = "chat_template.jinja";

  /**
   * The template of a checkpoint without one: the beginning-of-sequence token when the checkpoint
   * names one, each message as {@code <|role|>}, a newline, its content and a newline, and with a
   * generation prompt {@code <|assistant|>} and a newline. A system and a user message render as
   *
   * <pre>
   * &lt;|system|&gt;
   * You are helpful.
   * &lt;|user|&gt;
   * Hi
   * &lt;|assistant|&gt;
   * </pre>
   *
   * (with a final newline). The markers are plain text to a tokenizer that lacks them.
   */
  public static final String PLAIN_TEMPLATE =
      "{{ bos_token if bos_token is defined else '' }}"
          + "{% for message in messages %}"
          + "<|{{ message.role }}|>\n{{ message.content }}\n"
          + "{% endfor %}"
          + "{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

  /** The special-token names {@code transformers} hands a template, in its order. */
  static final List<String> SPECIAL_TOKEN_FIELDS =
      List.of(
          "bos_token",
          "eos_token",
          "unk_token",
          "sep_token",
          "pad_token",
          "cls_token",
          "mask_token");

  /** Variables the renderer sets itself; {@link #render(List, boolean, Map)} refuses them. */
  static final List<String> RESERVED_VARIABLES = List.of("messages", "add_generation_prompt");

  private static final ObjectMapper JSON = new ObjectMapper();

  private final String source;
  private final String prepared;
  private final String origin;
  private final boolean fromCheckpoint;
  private final Map<String, String> specialTokens;
  private final JinjaEnvironment environment;

  private ChatTemplate(
      String source,
      String origin,
      boolean fromCheckpoint,
      Map<String, String> specialTokens,
      JinjaEnvironment environment) {
    this.source = source;
    this.prepared = TemplateText.prepare(source);
    this.origin = origin;
    this.fromCheckpoint = fromCheckpoint;
    this.specialTokens = Collections.unmodifiableMap(new LinkedHashMap<>(specialTokens));
    this.environment = environment;
  }

  /** {@link #load(Path, ChatTemplateLimits)} with {@link ChatTemplateLimits#DEFAULTS}. */
  public static ChatTemplate load(Path modelDir) throws IOException {
    return load(modelDir, ChatTemplateLimits.DEFAULTS);
  }

  /**
   * The chat template of a model folder, or the {@link #plain()} template with the folder's special
   * tokens when it has none.
   *
   * @throws ChatTemplateException ({@link Reason#INVALID}) if a file is malformed or the template
   *     does not parse or render, naming the file
   * @throws IOException if a file exists but cannot be read
   */
  public static ChatTemplate load(Path modelDir, ChatTemplateLimits limits) throws IOException {
    JinjaEnvironment environment = defaultEnvironment(limits);
    Path configFile = modelDir.resolve(TOKENIZER_CONFIG_JSON);
    JsonNode config = null;
    if (Files.exists(configFile)) {
      try {
        config = JSON.readTree(Files.readString(configFile));
      } catch (JsonProcessingException e) {
        throw new ChatTemplateException(
            Reason.INVALID,
            configFile + " is not valid JSON: " + e.getOriginalMessage().replace('\n', ' '));
      }
      if (!config.isObject()) {
        throw new ChatTemplateException(
            Reason.INVALID, configFile + " must hold a JSON object, found " + kind(config));
      }
    }
    Map<String, String> specialTokens =
        config == null ? Map.of() : specialTokens(config, configFile);
    Path jinjaFile = modelDir.resolve(CHAT_TEMPLATE_JINJA);
    if (Files.exists(jinjaFile)) {
      return compile(
          Files.readString(jinjaFile), jinjaFile.toString(), true, specialTokens, environment);
    }
    if (config != null) {
      String template = templateField(config, configFile);
      if (template != null) {
        return compile(template, configFile + " chat_template", true, specialTokens, environment);
      }
    }
    return compile(PLAIN_TEMPLATE, "plain template", false, specialTokens, environment);
  }

  /** The {@linkplain #PLAIN_TEMPLATE plain template}, with no special tokens. */
  public static ChatTemplate plain() {
    return compile(
        PLAIN_TEMPLATE,
        "plain template",
        false,
        Map.of(),
        defaultEnvironment(ChatTemplateLimits.DEFAULTS));
  }

  private static JinjaEnvironment defaultEnvironment(ChatTemplateLimits limits) {
    return new JinjaEnvironment(limits, new CurrentDateTimeProvider(), ZoneId.systemDefault());
  }

  /**
   * A template from its text, checked by rendering small conversations.
   *
   * @param origin where the text comes from, for messages ({@code "…/tokenizer_config.json
   *     chat_template"})
   * @throws ChatTemplateException ({@link Reason#INVALID}) if the template does not parse or render
   */
  static ChatTemplate compile(
      String text,
      String origin,
      boolean fromCheckpoint,
      Map<String, String> specialTokens,
      JinjaEnvironment environment) {
    if (text.isBlank()) {
      throw new ChatTemplateException(Reason.INVALID, origin + " is empty");
    }
    ChatTemplate template =
        new ChatTemplate(text, origin, fromCheckpoint, specialTokens, environment);
    template.check();
    return template;
  }

  /** Renders conversations every chat template handles; a failure other than a raise is fatal. */
  private void check() {
    List<List<ChatMessage>> samples =
        List.of(
            List.of(ChatMessage.user("Hello")),
            List.of(ChatMessage.system("You are helpful."), ChatMessage.user("Hello")),
            List.of(
                ChatMessage.user("Hello"),
                ChatMessage.assistant("Hi! How can I help?"),
                ChatMessage.user("Tell me a joke.")));
    for (List<ChatMessage> sample : samples) {
      for (boolean generationPrompt : new boolean[] {true, false}) {
        try {
          render(sample, generationPrompt);
        } catch (ChatTemplateException e) {
          if (e.reason() != Reason.RAISED) {
            String why = e.getMessage();
            if (why.startsWith(origin + ": ")) {
              why = why.substring(origin.length() + 2);
            }
            throw new ChatTemplateException(
                Reason.INVALID,
                origin
                    + " does not render a "
                    + sample.size()
                    + "-message conversation (add_generation_prompt="
                    + generationPrompt
                    + "): "
                    + why,
                e);
          }
        }
      }
    }
  }

  /** {@link #render(List, boolean, Map)} with no extra variables. */
  public String render(List<ChatMessage> messages, boolean addGenerationPrompt) {
    return render(messages, addGenerationPrompt, Map.of());
  }

  /**
   * Renders a conversation.
   *
   * @param addGenerationPrompt whether to end with the start of an assistant turn, for the model to
   *     write
   * @param variables more variables for the template, such as {@code enable_thinking=false} (OpenAI
   *     servers take them as {@code chat_template_kwargs}); values are JSON values (null, booleans,
   *     numbers, strings, lists, maps with string keys); they may replace a special token but not
   *     {@code messages} or {@code add_generation_prompt}
   * @return the prompt text, as {@code apply_chat_template} writes it; {@link #encode} gives its
   *     token ids
   * @throws ChatTemplateException if the template raises, fails, or passes a limit, or {@code
   *     messages} is empty or a variable is not allowed ({@link Reason#MESSAGES})
   */
  public String render(
      List<ChatMessage> messages, boolean addGenerationPrompt, Map<String, ?> variables) {
    if (messages.isEmpty()) {
      throw new ChatTemplateException(
          Reason.MESSAGES, "messages is empty: a chat needs at least one message");
    }
    Map<String, Object> bindings = new LinkedHashMap<>();
    List<Map<String, Object>> list = new ArrayList<>(messages.size());
    for (ChatMessage m : messages) {
      Map<String, Object> message = new LinkedHashMap<>();
      message.put("role", m.role());
      message.put("content", m.content());
      list.add(message);
    }
    bindings.put("messages", list);
    bindings.put("add_generation_prompt", addGenerationPrompt);
    bindings.put("tools", null);
    bindings.put("documents", null);
    bindings.putAll(specialTokens);
    for (Map.Entry<String, ?> e : variables.entrySet()) {
      String name = e.getKey();
      if (RESERVED_VARIABLES.contains(name)) {
        throw new ChatTemplateException(
            Reason.MESSAGES,
            "variable "
                + name
                + " is set by the renderer and cannot be passed as an extra variable");
      }
      checkJsonValue(name, e.getValue(), 0);
      bindings.put(name, e.getValue());
    }
    return environment.render(prepared, bindings, origin);
  }

  /** {@link #encode(Tokenizer, List, boolean, Map)} with no extra variables. */
  public int[] encode(
      Tokenizer tokenizer, List<ChatMessage> messages, boolean addGenerationPrompt) {
    return encode(tokenizer, messages, addGenerationPrompt, Map.of());
  }

  /**
   * The prompt of a conversation as token ids: the rendering of {@link #render(List, boolean,
   * Map)}, encoded so that special tokens written by the template become their ids and
   * special-token text written by the client does not ({@link SpecialTextGuard}). Nothing is added:
   * a template that wants a beginning-of-sequence token writes it.
   *
   * <p>When no message or variable holds a special token's text, this is {@code
   * tokenizer.encode(render(...))}, the ids {@code apply_chat_template(tokenize=True)} gives.
   *
   * @throws ChatTemplateException as {@link #render(List, boolean, Map)} does
   */
  public int[] encode(
      Tokenizer tokenizer,
      List<ChatMessage> messages,
      boolean addGenerationPrompt,
      Map<String, ?> variables) {
    SpecialTextGuard guard =
        new SpecialTextGuard(tokenizer.specialTokens().idsByContent().keySet());
    List<ChatMessage> guarded = new ArrayList<>(messages.size());
    for (ChatMessage m : messages) {
      guarded.add(new ChatMessage(m.role(), guard.guard(m.content())));
    }
    Map<String, Object> guardedVariables = new LinkedHashMap<>();
    variables.forEach((name, value) -> guardedVariables.put(name, guard.guardValue(value)));
    String rendered = render(guarded, addGenerationPrompt, guardedVariables);
    return SpecialTextGuard.encode(tokenizer, rendered);
  }

  /** Whether the template text came from the checkpoint (false: the plain template). */
  public boolean fromCheckpoint() {
    return fromCheckpoint;
  }

  /** Where the template comes from: a file, a file's field, or {@code "plain template"}. */
  public String origin() {
    return origin;
  }

  /** The template text, as the checkpoint has it. */
  public String source() {
    return source;
  }

  /** The checkpoint's {@code bos_token}, if it names one. */
  public Optional<String> bosToken() {
    return Optional.ofNullable(specialTokens.get("bos_token"));
  }

  /** The checkpoint's {@code eos_token}, if it names one. */
  public Optional<String> eosToken() {
    return Optional.ofNullable(specialTokens.get("eos_token"));
  }

  /**
   * Whether {@code rendered} begins with the checkpoint's {@code bos_token} (false without one).
   */
  public boolean startsWithBos(String rendered) {
    String bos = specialTokens.get("bos_token");
    return bos != null && rendered.startsWith(bos);
  }

  @Override
  public String toString() {
    return "ChatTemplate[" + origin + "]";
  }

  // ---------------------------------------------------------------- tokenizer_config.json

  private static String templateField(JsonNode config, Path file) {
    JsonNode field = config.get("chat_template");
    if (field == null || field.isNull()) {
      return null;
    }
    if (field.isTextual()) {
      return field.asText();
    }
    if (!field.isArray()) {
      throw new ChatTemplateException(
          Reason.INVALID,
          file
              + " chat_template must be a string or a list of {\"name\", \"template\"}, found "
              + kind(field));
    }
    List<String> names = new ArrayList<>();
    for (int i = 0; i < field.size(); i++) {
      JsonNode entry = field.get(i);
      JsonNode name = entry.get("name");
      JsonNode template = entry.get("template");
      if (!entry.isObject()
          || name == null
          || !name.isTextual()
          || template == null
          || !template.isTextual()) {
        throw new ChatTemplateException(
            Reason.INVALID,
            file
                + " chat_template["
                + i
                + "] must be an object with string fields name and template, found "
                + abbreviate(entry.toString()));
      }
      if (name.asText().equals("default")) {
        return template.asText();
      }
      names.add(name.asText());
    }
    throw new ChatTemplateException(
        Reason.INVALID,
        file + " chat_template has no template named \"default\" (names: " + names + ")");
  }

  private static Map<String, String> specialTokens(JsonNode config, Path file) {
    Map<String, String> tokens = new LinkedHashMap<>();
    for (String field : SPECIAL_TOKEN_FIELDS) {
      JsonNode value = config.get(field);
      if (value == null || value.isNull()) {
        continue;
      }
      if (value.isObject()) {
        JsonNode content = value.get("content");
        if (content == null || !content.isTextual()) {
          throw new ChatTemplateException(
              Reason.INVALID,
              file
                  + " "
                  + field
                  + ".content must be a string, found "
                  + abbreviate(value.toString()));
        }
        value = content;
      }
      if (!value.isTextual()) {
        throw new ChatTemplateException(
            Reason.INVALID,
            file
                + " "
                + field
                + " must be a string or an object with a string content, found "
                + kind(value));
      }
      tokens.put(field, value.asText());
    }
    return tokens;
  }

  private static String kind(JsonNode node) {
    return node.getNodeType().name().toLowerCase(java.util.Locale.ROOT);
  }

  private static String abbreviate(String s) {
    return s.length() > 80 ? s.substring(0, 80) + "..." : s;
  }

  private static void checkJsonValue(String path, Object value, int depth) {
    if (depth > PyValues.MAX_NESTING) {
      throw new ChatTemplateException(
          Reason.MESSAGES, "variable " + path + " is nested deeper than " + PyValues.MAX_NESTING);
    }
    if (value == null
        || value instanceof String
        || value instanceof Boolean
        || value instanceof Number) {
      return;
    }
    if (value instanceof Map<?, ?> map) {
      for (Map.Entry<?, ?> e : map.entrySet()) {
        if (!(e.getKey() instanceof String key)) {
          throw new ChatTemplateException(
              Reason.MESSAGES,
              "variable " + path + " has a key that is not a string: " + e.getKey());
        }
        checkJsonValue(path + "." + key, e.getValue(), depth + 1);
      }
      return;
    }
    if (value instanceof Collection<?> items) {
      int i = 0;
      for (Object item : items) {
        checkJsonValue(path + "[" + i++ + "]", item, depth + 1);
      }
      return;
    }
    throw new ChatTemplateException(
        Reason.MESSAGES,
        "variable "
            + path
            + " is a "
            + value.getClass().getSimpleName()
            + ": only JSON values (null, boolean, number, string, list, map) are allowed");
  }

  /** For tests: a template rendered with a fixed clock and zone. */
  static ChatTemplate compile(
      String text,
      Map<String, String> specialTokens,
      ChatTemplateLimits limits,
      DateTimeProvider clock,
      ZoneId zone) {
    return compile(
        text, "test template", true, specialTokens, new JinjaEnvironment(limits, clock, zone));
  }
}
