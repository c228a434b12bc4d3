package io.tokenspeed.model.tokenizer;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Finds added tokens (such as {@code "<|im_start|>"} or {@code "<think>"}) in text before any other
 * processing, so that they become their own ids instead of being split by the model. Matches are
 * leftmost-longest and do not overlap; the text between them is handed on as plain text. A token
 * may absorb whitespace to its left ({@code lstrip}) or right ({@code rstrip}), and a {@code
 * single_word} token only matches when no word character touches it.
 *
 * <p>Immutable and thread-safe.
 */
final class AddedTokens {

  /** One added token as {@code tokenizer.json} declares it. */
  record Token(
      int id,
      String content,
      boolean special,
      boolean normalized,
      boolean lstrip,
      boolean rstrip,
      boolean singleWord) {
    Token {
      if (content.isEmpty() || id < 0) {
        throw new TokenizerFormatException(
            "added token needs content and an id >= 0: id=" + id + " content=\"" + content + "\"");
      }
    }
  }

  /** Receives the pieces of a split, in order. */
  interface Sink {
    void onText(String text);

    void onToken(int id);
  }

  private static final AddedTokens EMPTY = new AddedTokens(List.of());

  /** Candidates by first character, longest first. */
  private final Map<Character, Token[]> byFirstChar;

  private AddedTokens(List<Token> tokens) {
    Map<Character, List<Token>> groups = new HashMap<>();
    for (Token t : tokens) {
      groups.computeIfAbsent(t.content().charAt(0), k -> new ArrayList<>()).add(t);
    }
    this.byFirstChar = new HashMap<>();
    for (Map.Entry<Character, List<Token>> e : groups.entrySet()) {
      List<Token> list = e.getValue();
      list.sort(Comparator.comparingInt((Token t) -> t.content().length()).reversed());
      byFirstChar.put(e.getKey(), list.toArray(new Token[0]));
    }
  }

  static AddedTokens of(List<Token> tokens) {
    return tokens.isEmpty() ? EMPTY : new AddedTokens(tokens);
  }

  boolean isEmpty() {
    return byFirstChar.isEmpty();
  }

  /** Splits {@code text} into plain text and added tokens, in order; empty text is not reported. */
  void split(String text, Sink sink) {
    if (byFirstChar.isEmpty()) {
      if (!text.isEmpty()) {
        sink.onText(text);
      }
      return;
    }
    int emitted = 0;
    int i = 0;
    while (i < text.length()) {
      Token[] candidates = byFirstChar.get(text.charAt(i));
      Token match = null;
      if (candidates != null) {
        for (Token t : candidates) {
          if (text.startsWith(t.content(), i)) {
            match = t;
            break;
          }
        }
      }
      if (match == null) {
        i++;
        continue;
      }
      int start = i;
      int stop = i + match.content().length();
      if (match.singleWord() && (touchesWordBefore(text, start) || touchesWordAfter(text, stop))) {
        i++;
        continue;
      }
      if (match.lstrip()) {
        while (start > emitted && Character.isWhitespace(text.codePointBefore(start))) {
          start -= Character.charCount(text.codePointBefore(start));
        }
      }
      if (match.rstrip()) {
        while (stop < text.length() && Character.isWhitespace(text.codePointAt(stop))) {
          stop += Character.charCount(text.codePointAt(stop));
        }
      }
      if (emitted < start) {
        sink.onText(text.substring(emitted, start));
      }
      sink.onToken(match.id());
      emitted = stop;
      i = stop;
    }
    if (emitted < text.length()) {
      sink.onText(text.substring(emitted));
    }
  }

  private static boolean touchesWordBefore(String text, int start) {
    return start > 0 && isWordChar(text.codePointBefore(start));
  }

  private static boolean touchesWordAfter(String text, int stop) {
    return stop < text.length() && isWordChar(text.codePointAt(stop));
  }

  private static boolean isWordChar(int cp) {
    return Character.isLetterOrDigit(cp) || cp == '_';
  }
}
