package io.tokenspeed.server.config;

import java.nio.charset.Charset;
import java.nio.charset.CharsetEncoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * File names given by the operator (a store's directory, a library, a model folder, a flag's file)
 * and why the JVM cannot use one.
 *
 * <p>The JVM turns a file name into bytes with its file-name encoding ({@code sun.jnu.encoding}),
 * which it takes from the locale at startup ({@code LC_ALL}, else {@code LC_CTYPE}, else {@code
 * LANG}) and which no JVM option overrides. Without a UTF-8 locale (a fresh container, cron, many
 * CI images) that encoding is ASCII ({@code ANSI_X3.4-1968}): the JVM cannot name a file {@code lé}
 * at all, and it has already decoded every non-ASCII byte of its command line as U+FFFD. {@link
 * Path#of} then only says "Malformed input or input contains unmappable characters"; {@link
 * #whyInvalid} names the character, the encoding, the locale that chose it and the fix.
 *
 * <p>{@link #quote} renders a value with every non-ASCII character escaped, so that the message
 * stays exact on an ASCII terminal too (where the character itself would print as {@code ?}).
 */
public final class FileNames {

  /** The property holding the JVM's file-name encoding. */
  public static final String ENCODING_PROPERTY = "sun.jnu.encoding";

  /** The locale the fix suggests: built into glibc since 2.35, and in Debian and Ubuntu. */
  public static final String SUGGESTED_LOCALE = "C.UTF-8";

  /** The variables that choose the character type's locale, the first non-empty one winning. */
  static final List<String> LOCALE_VARIABLES = List.of("LC_ALL", "LC_CTYPE", "LANG");

  private static final int REPLACEMENT_CHARACTER = 0xFFFD;

  private FileNames() {}

  /** The JVM's file-name encoding; the default charset when the property is absent or unknown. */
  public static Charset fileNameEncoding() {
    String name = System.getProperty(ENCODING_PROPERTY);
    try {
      return name == null ? Charset.defaultCharset() : Charset.forName(name);
    } catch (IllegalArgumentException e) {
      return Charset.defaultCharset();
    }
  }

  /**
   * Why {@code text} is no path, as the predicate of a message that starts with {@code name=value}:
   * "is not a valid path: REASON", or, when a character has no byte in the file-name encoding,
   * "cannot be a file name in this JVM: " with the character, the encoding, the locale and the fix.
   */
  public static String whyInvalid(String text, InvalidPathException e) {
    return whyInvalid(text, e.getReason(), fileNameEncoding(), System.getenv());
  }

  /**
   * {@link #whyInvalid(String, InvalidPathException)} for a given encoding and environment.
   *
   * @param reason what {@link Path#of} said, used when every character has a byte
   */
  static String whyInvalid(
      String text, String reason, Charset encoding, Map<String, String> environment) {
    int unmappable = firstUnmappable(text, encoding);
    if (unmappable < 0) {
      return "is not a valid path: " + reason;
    }
    StringBuilder why =
        new StringBuilder("cannot be a file name in this JVM: its file-name encoding (")
            .append(ENCODING_PROPERTY)
            .append(") is ")
            .append(encoding.name())
            .append(", which cannot represent ")
            .append(codePoint(unmappable));
    if (unmappable == REPLACEMENT_CHARACTER) {
      why.append(" (the replacement character: the JVM read bytes of its command line that ")
          .append(encoding.name())
          .append(" cannot decode)");
    } else if (Character.isBmpCodePoint(unmappable) && Character.isSurrogate((char) unmappable)) {
      why.append(" (half of a surrogate pair: the text is not valid Unicode)");
    }
    if (!encoding.equals(StandardCharsets.UTF_8)) {
      why.append("; ").append(localeCause(environment));
    }
    return why.toString();
  }

  /**
   * {@code text} as a JSON string whose characters outside printable ASCII are written as a
   * backslash, the letter u and four hex digits.
   */
  public static String quote(String text) {
    StringBuilder sb = new StringBuilder(text.length() + 2).append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '"' || c == '\\') {
        sb.append('\\').append(c);
      } else if (c < 0x20 || c > 0x7E) {
        sb.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
      } else {
        sb.append(c);
      }
    }
    return sb.append('"').toString();
  }

  /** The first code point (or lone surrogate) that {@code encoding} has no bytes for, else -1. */
  private static int firstUnmappable(String text, Charset encoding) {
    CharsetEncoder encoder = encoding.newEncoder();
    for (int i = 0; i < text.length(); ) {
      int cp = text.codePointAt(i);
      int n = Character.charCount(cp);
      if (!encoder.canEncode(text.substring(i, i + n))) {
        return cp;
      }
      i += n;
    }
    return -1;
  }

  private static String codePoint(int cp) {
    return String.format(Locale.ROOT, "U+%04X", cp);
  }

  /** Which locale variable chose the encoding, why it is not UTF-8, and the variable to set. */
  private static String localeCause(Map<String, String> environment) {
    for (String variable : LOCALE_VARIABLES) {
      String value = environment.get(variable);
      if (value == null || value.isEmpty()) {
        continue;
      }
      String setting = variable + "=" + value;
      String lower = value.toLowerCase(Locale.ROOT);
      String cause =
          lower.contains("utf-8") || lower.contains("utf8")
              ? setting
                  + " names a locale that this machine does not have (see locale -a), so the C"
                  + " locale applies"
              : "the locale " + setting + " is not a UTF-8 one";
      return cause + ": set a UTF-8 locale, for example " + variable + "=" + SUGGESTED_LOCALE;
    }
    return "no locale is set (LC_ALL, LC_CTYPE and LANG are unset), so the C locale and its ASCII"
        + " apply: set a UTF-8 locale, for example LANG="
        + SUGGESTED_LOCALE;
  }
}
