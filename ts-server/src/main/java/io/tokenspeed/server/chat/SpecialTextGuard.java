package io.tokenspeed.server.chat;

import io.tokenspeed.model.tokenizer.Tokenizer;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Keeps special-token text that a client wrote from becoming special tokens, while the special
 * tokens the template writes do: the rendered prompt is one string, so the two cannot be told apart
 * after rendering. Before rendering, each occurrence of a special token's text in client strings is
 * bracketed by two Unicode noncharacters; after rendering, the text between them is encoded with
 * {@link Tokenizer#encodeAsPlainText} and everything else with {@link Tokenizer#encode}:
 *
 * <pre>
 *   user content   "hi &lt;|im_end|&gt; there"
 *   guarded        "hi \uFDD0&lt;|im_end|&gt;\uFDD1 there"
 *   rendered       "&lt;|im_start|&gt;user\nhi \uFDD0&lt;|im_end|&gt;\uFDD1 there&lt;|im_end|&gt;\n"
 *   encoded        encode("&lt;|im_start|&gt;user\nhi ") + plain("&lt;|im_end|&gt;")
 *                  + encode(" there&lt;|im_end|&gt;\n")
 * </pre>
 *
 * Content without special-token text is not changed, so its prompt is encoded in one piece, exactly
 * as {@code apply_chat_template} encodes it. Noncharacters a client sends are replaced by U+FFFD
 * first, so a client cannot place a bracket of its own. A template that cuts a bracketed token in
 * two leaves an unmatched bracket: text after an unmatched opening bracket is encoded as plain
 * text, and an unmatched closing bracket is dropped.
 */
final class SpecialTextGuard {

  static final char OPEN = '\uFDD0';
  static final char CLOSE = '\uFDD1';

  private static final char REPLACEMENT = '\uFFFD';

  /** Special tokens by first character, longest first. */
  private final Map<Character, List<String>> byFirstChar = new HashMap<>();

  SpecialTextGuard(Collection<String> specialTokens) {
    for (String token : specialTokens) {
      byFirstChar.computeIfAbsent(token.charAt(0), c -> new ArrayList<>()).add(token);
    }
    byFirstChar.values().forEach(list -> list.sort((a, b) -> b.length() - a.length()));
  }

  /**
   * {@code text} with brackets around each special token's text, and no noncharacters of its own.
   */
  String guard(String text) {
    StringBuilder out = null;
    int copied = 0;
    for (int i = 0; i < text.length(); ) {
      char c = text.charAt(i);
      String match = null;
      if (c == OPEN || c == CLOSE) {
        match = "";
      } else {
        List<String> candidates = byFirstChar.get(c);
        if (candidates != null) {
          for (String token : candidates) {
            if (text.startsWith(token, i)) {
              match = token;
              break;
            }
          }
        }
      }
      if (match == null) {
        i++;
        continue;
      }
      if (out == null) {
        out = new StringBuilder(text.length() + 16);
      }
      out.append(text, copied, i);
      if (match.isEmpty()) {
        out.append(REPLACEMENT);
        i++;
      } else {
        out.append(OPEN).append(match).append(CLOSE);
        i += match.length();
      }
      copied = i;
    }
    return out == null ? text : out.append(text, copied, text.length()).toString();
  }

  /** Every string inside a JSON value guarded, the structure kept. */
  Object guardValue(Object value) {
    if (value instanceof String s) {
      return guard(s);
    }
    if (value instanceof Map<?, ?> map) {
      Map<Object, Object> out = new LinkedHashMap<>();
      map.forEach((k, v) -> out.put(k, guardValue(v)));
      return out;
    }
    if (value instanceof Collection<?> items) {
      List<Object> out = new ArrayList<>(items.size());
      items.forEach(v -> out.add(guardValue(v)));
      return out;
    }
    return value;
  }

  /** Encodes rendered text: bracketed parts as plain text, the rest with special tokens. */
  static int[] encode(Tokenizer tokenizer, String rendered) {
    if (rendered.indexOf(OPEN) < 0 && rendered.indexOf(CLOSE) < 0) {
      return tokenizer.encode(rendered);
    }
    List<int[]> parts = new ArrayList<>();
    StringBuilder outside = new StringBuilder();
    int i = 0;
    while (i < rendered.length()) {
      char c = rendered.charAt(i);
      if (c == CLOSE) {
        i++; // unmatched
      } else if (c == OPEN) {
        int close = rendered.indexOf(CLOSE, i + 1);
        int end = close < 0 ? rendered.length() : close;
        if (!outside.isEmpty()) {
          parts.add(tokenizer.encode(outside.toString()));
          outside.setLength(0);
        }
        String plain = rendered.substring(i + 1, end).replace(String.valueOf(OPEN), "");
        parts.add(tokenizer.encodeAsPlainText(plain));
        i = close < 0 ? end : close + 1;
      } else {
        outside.append(c);
        i++;
      }
    }
    if (!outside.isEmpty()) {
      parts.add(tokenizer.encode(outside.toString()));
    }
    int length = 0;
    for (int[] part : parts) {
      length += part.length;
    }
    int[] ids = new int[length];
    int at = 0;
    for (int[] part : parts) {
      System.arraycopy(part, 0, ids, at, part.length);
      at += part.length;
    }
    return ids;
  }
}
