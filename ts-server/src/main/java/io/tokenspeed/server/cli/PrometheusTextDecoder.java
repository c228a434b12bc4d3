package io.tokenspeed.server.cli;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.OptionalDouble;
import java.util.Set;
import java.util.TreeMap;

/**
 * Decodes the Prometheus text exposition format, version 0.0.4 (what {@code tokenspeed serve}'s
 * {@code /metrics} answers, docs/metrics.md), into its samples, for a client that sums counters
 * across scrapes ({@code bench trace --targets}).
 *
 * <pre>
 *   exposition  line*                        lines end with '\n' ('\r\n' is accepted too)
 *   line        blank                        ignored
 *               '# HELP ' name ' ' text      ignored once the name is checked
 *               '# TYPE ' name ' ' type      counter | gauge | histogram | summary | untyped
 *               '#' anything else            a comment, ignored
 *               name labels? value timestamp?
 *   labels      '{' (lname '="' lvalue '"' (',' lname '="' lvalue '"')* ','?)? '}'
 *   lvalue      any text; escapes \\  \"  \n
 *   value       a decimal float, NaN, +Inf, -Inf (Inf)
 *   timestamp   an int64 of milliseconds, ignored
 *   name        [a-zA-Z_:][a-zA-Z0-9_:]*       lname  [a-zA-Z_][a-zA-Z0-9_]*
 * </pre>
 *
 * <p>Nothing the format does not allow is skipped or repaired: the first such line is an {@link
 * IllegalArgumentException} naming its number and quoting it, since a line dropped silently would
 * make a sum wrong. A series (name and labels) given twice is refused for the same reason.
 *
 * <p>Counters are looked up by their family's name: client_java appends {@code _total} to a
 * counter's samples (and to its TYPE line), so {@link Exposition#counter} reads the samples named
 * {@code family_total}, or those named {@code family} when there are none (an exporter that does
 * not append it).
 */
final class PrometheusTextDecoder {
  private PrometheusTextDecoder() {}

  /** The TYPE words of the format. */
  static final Set<String> TYPES = Set.of("counter", "gauge", "histogram", "summary", "untyped");

  /**
   * One sample line.
   *
   * @param name the sample's name (a family's name, or it with a suffix such as {@code _total})
   * @param labels its labels, unescaped, sorted by name
   * @param value its value; NaN and the infinities as such
   */
  record Sample(String name, Map<String, String> labels, double value) {
    Sample {
      Objects.requireNonNull(name, "name");
      labels = Collections.unmodifiableMap(new TreeMap<>(labels));
    }

    /** Whether the labels include every pair of {@code want}. */
    boolean matches(Map<String, String> want) {
      return labels.entrySet().containsAll(want.entrySet());
    }
  }

  /**
   * A decoded exposition.
   *
   * @param types the TYPE lines: family name to type word
   * @param samples every sample, in exposition order
   */
  record Exposition(Map<String, String> types, List<Sample> samples) {
    Exposition {
      types = Collections.unmodifiableMap(new LinkedHashMap<>(types));
      samples = List.copyOf(samples);
    }

    /** Whether any sample is named {@code sampleName}. */
    boolean has(String sampleName) {
      return samples.stream().anyMatch(s -> s.name().equals(sampleName));
    }

    /**
     * The sum of the samples named {@code sampleName} whose labels include every pair of {@code
     * labels} (name, value, name, value, ...); empty when none matches.
     */
    OptionalDouble sum(String sampleName, String... labels) {
      Map<String, String> want = pairs(labels);
      double sum = 0;
      boolean any = false;
      for (Sample s : samples) {
        if (s.name().equals(sampleName) && s.matches(want)) {
          sum += s.value();
          any = true;
        }
      }
      return any ? OptionalDouble.of(sum) : OptionalDouble.empty();
    }

    /**
     * The sum of counter {@code family}'s samples whose labels include {@code labels}: those named
     * {@code family_total}, else those named {@code family}; empty when none matches.
     */
    OptionalDouble counter(String family, String... labels) {
      OptionalDouble total = sum(family + "_total", labels);
      return total.isPresent() ? total : sum(family, labels);
    }

    private static Map<String, String> pairs(String... labels) {
      if (labels.length % 2 != 0) {
        throw new IllegalArgumentException(
            "labels come in name, value pairs: " + labels.length + " strings given");
      }
      Map<String, String> m = new TreeMap<>();
      for (int i = 0; i < labels.length; i += 2) {
        m.put(labels[i], labels[i + 1]);
      }
      return m;
    }
  }

  /**
   * Decodes {@code text}.
   *
   * @throws IllegalArgumentException at the first line the format does not allow: {@code line N:
   *     what is wrong: the line}
   */
  static Exposition decode(String text) {
    Objects.requireNonNull(text, "text");
    Map<String, String> types = new LinkedHashMap<>();
    List<Sample> samples = new ArrayList<>();
    Set<SeriesKey> series = new HashSet<>();
    int lineNumber = 0;
    int start = 0;
    while (start < text.length()) {
      int end = text.indexOf('\n', start);
      if (end < 0) {
        end = text.length(); // a last line without its line feed
      }
      lineNumber++;
      String line = text.substring(start, end);
      if (line.endsWith("\r")) {
        line = line.substring(0, line.length() - 1);
      }
      new LineDecoder(lineNumber, line).decode(types, samples, series);
      start = end + 1;
    }
    return new Exposition(types, samples);
  }

  /** A series' identity: its sample name and labels. */
  private record SeriesKey(String name, Map<String, String> labels) {}

  /** One line's cursor. */
  private static final class LineDecoder {
    private final int lineNumber;
    private final String line;
    private int pos;

    LineDecoder(int lineNumber, String line) {
      this.lineNumber = lineNumber;
      this.line = line;
    }

    void decode(Map<String, String> types, List<Sample> samples, Set<SeriesKey> series) {
      skipBlanks();
      if (pos == line.length()) {
        return;
      }
      if (line.charAt(pos) == '#') {
        comment(types);
        return;
      }
      Sample s = sample();
      if (!series.add(new SeriesKey(s.name(), s.labels()))) {
        throw error("series " + s.name() + s.labels() + " given twice");
      }
      samples.add(s);
    }

    private IllegalArgumentException error(String message) {
      return new IllegalArgumentException("line " + lineNumber + ": " + message + ": " + line);
    }

    private void comment(Map<String, String> types) {
      pos++;
      skipBlanks();
      String word = token();
      if (!word.equals("HELP") && !word.equals("TYPE")) {
        return; // an ordinary comment
      }
      if (!skipBlanks() || pos == line.length()) {
        throw error(word + " without a metric name");
      }
      String name = metricName();
      if (pos < line.length() && !isBlank(line.charAt(pos))) {
        throw error("character '" + line.charAt(pos) + "' in the metric name of a " + word);
      }
      if (word.equals("HELP")) {
        return; // the help text may hold anything but a bad escape; it is not needed
      }
      skipBlanks();
      int typeStart = pos;
      String type = token();
      skipBlanks();
      if (!TYPES.contains(type) || pos != line.length()) {
        throw error(
            "type '"
                + line.substring(typeStart)
                + "' of "
                + name
                + " is not counter, gauge, histogram, summary or untyped");
      }
      if (types.putIfAbsent(name, type) != null) {
        throw error("a second TYPE for " + name);
      }
    }

    private Sample sample() {
      String name = metricName();
      Map<String, String> labels = new TreeMap<>();
      if (pos < line.length() && line.charAt(pos) == '{') {
        pos++;
        labels(labels);
      }
      if (!skipBlanks() || pos == line.length()) {
        throw error("no value after " + name);
      }
      double value = value(token());
      if (skipBlanks() && pos < line.length()) {
        String t = token();
        try {
          Long.parseLong(t);
        } catch (NumberFormatException e) {
          throw error("timestamp '" + t + "' is not an int64 of milliseconds");
        }
        skipBlanks();
      }
      if (pos != line.length()) {
        throw error("text after the sample: '" + line.substring(pos) + "'");
      }
      return new Sample(name, labels, value);
    }

    private void labels(Map<String, String> labels) {
      while (true) {
        skipBlanks();
        if (pos == line.length()) {
          throw error("the labels are not closed");
        }
        if (line.charAt(pos) == '}') {
          pos++;
          return;
        }
        int start = pos;
        while (pos < line.length() && isLabelChar(line.charAt(pos), pos == start)) {
          pos++;
        }
        if (pos == start) {
          throw error("a label name expected at column " + (pos + 1));
        }
        String name = line.substring(start, pos);
        skipBlanks();
        expect('=', "after label " + name);
        skipBlanks();
        expect('"', "to open the value of label " + name);
        if (labels.put(name, labelValue(name)) != null) {
          throw error("label " + name + " given twice");
        }
        skipBlanks();
        if (pos < line.length() && line.charAt(pos) == ',') {
          pos++;
        } else if (pos < line.length() && line.charAt(pos) != '}') {
          throw error("',' or '}' expected after the value of label " + name);
        }
      }
    }

    private String labelValue(String name) {
      StringBuilder sb = new StringBuilder();
      while (true) {
        if (pos == line.length()) {
          throw error("the value of label " + name + " is not closed");
        }
        char c = line.charAt(pos++);
        if (c == '"') {
          return sb.toString();
        }
        if (c != '\\') {
          sb.append(c);
          continue;
        }
        if (pos == line.length()) {
          throw error("the value of label " + name + " ends inside an escape");
        }
        char e = line.charAt(pos++);
        switch (e) {
          case '\\' -> sb.append('\\');
          case '"' -> sb.append('"');
          case 'n' -> sb.append('\n');
          default ->
              throw error("escape \\" + e + " in the value of label " + name + " (\\\\ \\\" \\n)");
        }
      }
    }

    private void expect(char c, String where) {
      if (pos == line.length() || line.charAt(pos) != c) {
        throw error("'" + c + "' expected " + where);
      }
      pos++;
    }

    private String metricName() {
      int start = pos;
      while (pos < line.length() && isNameChar(line.charAt(pos), pos == start)) {
        pos++;
      }
      if (pos == start) {
        throw error("a metric name expected at column " + (pos + 1));
      }
      if (pos < line.length() && !isBlank(line.charAt(pos)) && line.charAt(pos) != '{') {
        throw error("character '" + line.charAt(pos) + "' in a metric name");
      }
      return line.substring(start, pos);
    }

    private String token() {
      int start = pos;
      while (pos < line.length() && !isBlank(line.charAt(pos))) {
        pos++;
      }
      return line.substring(start, pos);
    }

    /** A decimal float, NaN or an infinity (Java's own spellings, hex and suffixes refused). */
    private double value(String v) {
      switch (v.toLowerCase(Locale.ROOT)) {
        case "nan":
          return Double.NaN;
        case "+inf", "inf":
          return Double.POSITIVE_INFINITY;
        case "-inf":
          return Double.NEGATIVE_INFINITY;
        default:
          if (!isDecimal(v)) {
            throw error("value '" + v + "' is not a decimal float, NaN, +Inf or -Inf");
          }
          return Double.parseDouble(v);
      }
    }

    /** Skips blanks; returns whether there were any. */
    private boolean skipBlanks() {
      int start = pos;
      while (pos < line.length() && isBlank(line.charAt(pos))) {
        pos++;
      }
      return pos > start;
    }

    private static boolean isDigit(char c) {
      return c >= '0' && c <= '9';
    }

    private static boolean isBlank(char c) {
      return c == ' ' || c == '\t';
    }

    private static boolean isNameChar(char c, boolean first) {
      return isLabelChar(c, first) || c == ':';
    }

    private static boolean isLabelChar(char c, boolean first) {
      return (c >= 'a' && c <= 'z')
          || (c >= 'A' && c <= 'Z')
          || c == '_'
          || (!first && c >= '0' && c <= '9');
    }

    /** [+-]? (digits (. digits?)? | . digits) ([eE] [+-]? digits)? */
    private static boolean isDecimal(String v) {
      int i = 0;
      int n = v.length();
      if (i < n && (v.charAt(i) == '+' || v.charAt(i) == '-')) {
        i++;
      }
      int digits = 0;
      while (i < n && isDigit(v.charAt(i))) {
        i++;
        digits++;
      }
      if (i < n && v.charAt(i) == '.') {
        i++;
        while (i < n && isDigit(v.charAt(i))) {
          i++;
          digits++;
        }
      }
      if (digits == 0) {
        return false;
      }
      if (i < n && (v.charAt(i) == 'e' || v.charAt(i) == 'E')) {
        i++;
        if (i < n && (v.charAt(i) == '+' || v.charAt(i) == '-')) {
          i++;
        }
        int exp = 0;
        while (i < n && isDigit(v.charAt(i))) {
          i++;
          exp++;
        }
        if (exp == 0) {
          return false;
        }
      }
      return i == n;
    }
  }
}
