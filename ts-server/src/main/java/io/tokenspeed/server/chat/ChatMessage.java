package io.tokenspeed.server.chat;

import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * One message of a chat: who speaks and what they say, as a chat template sees it ({@code
 * message.role}, {@code message.content}).
 *
 * <p>The OpenAI API allows content as a string or as a list of parts; a text-only model reads only
 * text, so {@link #of} accepts a list of {@code {"type": "text", "text": ...}} parts and joins
 * their texts with {@code "\n"} (as vLLM does for templates that expect a string). Any other part
 * ({@code image_url}, {@code input_audio}, {@code file}) is refused with its index and type.
 *
 * @param role who speaks: {@code system}, {@code user}, {@code assistant}, {@code tool} or any
 *     other name the template knows; 1 to 64 of {@code [A-Za-z0-9_-]}, so that a role cannot carry
 *     markup into a template that prints it
 * @param content the text; may be empty
 */
public record ChatMessage(String role, String content) {

  /** The characters a role may have. */
  private static final Pattern ROLE = Pattern.compile("[A-Za-z0-9_-]{1,64}");

  public ChatMessage {
    if (role == null) {
      throw new IllegalArgumentException("role is missing: a message needs a role");
    }
    if (!ROLE.matcher(role).matches()) {
      throw new IllegalArgumentException(
          "role=\""
              + abbreviate(role)
              + "\" is not a role: 1 to 64 letters, digits, '_' or '-' (system, user, assistant,"
              + " tool)");
    }
    if (content == null) {
      throw new IllegalArgumentException(
          "content is missing: a message needs content (a string or a list of text parts)");
    }
  }

  /** A system message. */
  public static ChatMessage system(String content) {
    return new ChatMessage("system", content);
  }

  /** A user message. */
  public static ChatMessage user(String content) {
    return new ChatMessage("user", content);
  }

  /** An assistant message. */
  public static ChatMessage assistant(String content) {
    return new ChatMessage("assistant", content);
  }

  /**
   * A message from the JSON of a request: {@code content} is a {@link String} or a {@link List} of
   * parts, each a {@link Map} with {@code "type": "text"} and a string {@code "text"} (other keys
   * are ignored). Texts of several parts are joined with {@code "\n"}; an empty list is empty
   * content.
   *
   * @throws IllegalArgumentException naming the field relative to the message ({@code role}, {@code
   *     content}, {@code content[2].type}) and what is allowed; a caller prefixes {@code
   *     messages[i].}
   */
  public static ChatMessage of(String role, Object content) {
    if (content == null || content instanceof String) {
      return new ChatMessage(role, (String) content);
    }
    if (!(content instanceof List<?> parts)) {
      throw new IllegalArgumentException(
          "content must be a string or a list of text parts, not " + PyValues.typeName(content));
    }
    StringBuilder text = new StringBuilder();
    for (int i = 0; i < parts.size(); i++) {
      Object part = parts.get(i);
      String field = "content[" + i + "]";
      if (!(part instanceof Map<?, ?> map)) {
        throw new IllegalArgumentException(
            field
                + " must be an object {\"type\": \"text\", \"text\": ...}, not "
                + PyValues.typeName(part));
      }
      Object type = map.get("type");
      if (!"text".equals(type)) {
        throw new IllegalArgumentException(
            type == null
                ? field + ".type is missing: only {\"type\": \"text\"} parts are supported"
                : field
                    + ".type="
                    + (type instanceof String s
                        ? "\"" + abbreviate(s) + "\""
                        : PyValues.typeName(type))
                    + " is not supported: this model reads text only (type \"text\")");
      }
      Object partText = map.get("text");
      if (!(partText instanceof String s)) {
        throw new IllegalArgumentException(
            field + ".text must be a string, not " + PyValues.typeName(partText));
      }
      if (i > 0) {
        text.append('\n');
      }
      text.append(s);
    }
    return new ChatMessage(role, text.toString());
  }

  private static String abbreviate(String s) {
    String shown = s.length() > 40 ? s.substring(0, 40) + "..." : s;
    return shown.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n");
  }
}
