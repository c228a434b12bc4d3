package io.tokenspeed.server.chat;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Template source as Jinja's lexer reads it, before Jinjava parses it: CRLF and CR become LF, one
 * trailing newline is dropped ({@code keep_trailing_newline=False}), and {@code lstrip_blocks} is
 * applied here rather than by Jinjava.
 *
 * <p>Jinja's {@code lstrip_blocks} removes the spaces and tabs between the start of a line and a
 * block tag or comment on it, and nothing else:
 *
 * <pre>
 *   "    {% if x %}"   the four spaces go (only whitespace before the tag on its line)
 *   "a   {% if x %}"   nothing goes (text before the tag)
 *   "    {%+ if x %}"  nothing goes ({@code +} turns it off for one tag)
 * </pre>
 *
 * Jinjava's option of the same name strips the spaces before every tag, {@code "a {% endif %}"}
 * included, which changes real templates ({@code "{{ m.role }} {% endfor %}"}), so Jinjava runs
 * with it off and this pass does Jinja's. It reads the text the way the lexer does: expressions
 * {@code {{ }}} and block tags are skipped over with their string literals, so a {@code %}} inside
 * a quoted string does not end a tag, and the body of {@code {% raw %}} is left as Jinja leaves it
 * (its first newline too, which Jinjava's {@code trim_blocks} would remove).
 */
final class TemplateText {

  private static final Pattern END_RAW = Pattern.compile("\\{%[-+]?\\s*endraw\\s*[-+]?%}");
  private static final Pattern RAW = Pattern.compile("\\{%[-+]?\\s*raw\\s*[-+]?%}");

  private TemplateText() {}

  /** The source Jinjava should parse. */
  static String prepare(String source) {
    String text = source.replace("\r\n", "\n").replace('\r', '\n');
    if (text.endsWith("\n")) {
      text = text.substring(0, text.length() - 1);
    }
    return lstripBlocks(text);
  }

  static String lstripBlocks(String s) {
    StringBuilder out = new StringBuilder(s.length());
    int lineStart = 0; // where the current line begins in out
    boolean blankSoFar = true; // only whitespace since the start of the line
    int i = 0;
    while (i < s.length()) {
      boolean block = s.startsWith("{%", i);
      boolean comment = s.startsWith("{#", i);
      if (block || comment) {
        int end = comment ? endOfComment(s, i) : endOfTag(s, i + 2, "%}");
        char sign = i + 2 < s.length() ? s.charAt(i + 2) : 0;
        String tag = s.substring(i, end);
        if (sign == '+') {
          out.append(tag, 0, 2).append(tag, 3, tag.length()); // Jinjava does not know the sign
        } else {
          if (sign != '-' && blankSoFar) {
            out.setLength(lineStart);
          }
          out.append(tag);
        }
        i = end;
        blankSoFar = false;
        if (block && RAW.matcher(tag).matches()) {
          Matcher endRaw = END_RAW.matcher(s);
          int bodyEnd = endRaw.find(i) ? endRaw.start() : s.length();
          String body = s.substring(i, bodyEnd);
          if (body.startsWith("\n") && !tag.endsWith("-%}")) {
            // Jinja keeps a raw body's first newline; Jinjava's trim_blocks would eat it.
            out.append('\n');
          }
          out.append(body);
          int newline = body.lastIndexOf('\n');
          if (newline >= 0) {
            lineStart = out.length() - body.length() + newline + 1;
            blankSoFar = isBlank(body, newline + 1);
          } else {
            blankSoFar = false;
          }
          i = bodyEnd;
        }
        continue;
      }
      if (s.startsWith("{{", i)) {
        int end = endOfTag(s, i + 2, "}}");
        out.append(s, i, end);
        i = end;
        blankSoFar = false;
        continue;
      }
      char c = s.charAt(i++);
      out.append(c);
      if (c == '\n') {
        lineStart = out.length();
        blankSoFar = true;
      } else if (!PyValues.isWhitespace(c)) {
        blankSoFar = false;
      }
    }
    return out.toString();
  }

  private static boolean isBlank(String s, int from) {
    for (int i = from; i < s.length(); i++) {
      if (!PyValues.isWhitespace(s.charAt(i))) {
        return false;
      }
    }
    return true;
  }

  /** The index after the {@code close} that ends a tag, skipping string literals in it. */
  private static int endOfTag(String s, int i, String close) {
    while (i < s.length()) {
      char c = s.charAt(i);
      if (c == '\'' || c == '"') {
        i++;
        while (i < s.length() && s.charAt(i) != c) {
          i += s.charAt(i) == '\\' ? 2 : 1;
        }
        i++;
      } else if (s.startsWith(close, i)) {
        return i + close.length();
      } else {
        i++;
      }
    }
    return s.length(); // unclosed: the parser reports it
  }

  private static int endOfComment(String s, int i) {
    int end = s.indexOf("#}", i + 2);
    return end < 0 ? s.length() : end + 2;
  }
}
