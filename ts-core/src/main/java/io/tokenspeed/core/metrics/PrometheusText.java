package io.tokenspeed.core.metrics;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.OptionalLong;
import java.util.Set;
import java.util.TreeMap;

/**
 * A strict parser of the Prometheus text exposition format, version 0.0.4: the one reader of what
 * an exporter wrote, for tests (instead of matching strings) and for {@code bench trace --targets},
 * which sums the counters of the project's own servers' {@code /metrics} across scrapes. Anything
 * the format does not allow is an error naming the line ({@link FormatException}); nothing is
 * skipped or repaired, since a line dropped or guessed at would make a test pass or a sum wrong.
 *
 * <p>It reads what a correct exporter writes and no more: a carriage return, a last line without
 * its line feed, and the value spellings other than {@code +Inf}, {@code -Inf} and {@code NaN}
 * (such as {@code Inf} or {@code nan}) are refused, since the exporter it reads (client_java's
 * writer, behind every {@code /metrics} of the project) never writes them.
 *
 * <pre>
 *   exposition  line*                      every line ends with '\n'; blank lines are ignored
 *   line        '# HELP ' name ' ' help    help escapes: \\  \n
 *               '# TYPE ' name ' ' type    counter | gauge | histogram | summary | untyped
 *               '#' other text             a comment
 *               name labels? ' ' value (' ' timestamp)?
 *   labels      '{' (lname '=' '"' lvalue '"' (',' lname '=' '"' lvalue '"')* ','?)? '}'
 *   lvalue      escapes: \\  \"  \n
 *   value       a decimal float, +Inf, -Inf or NaN
 *   timestamp   milliseconds since the epoch, an int64
 *   name        [a-zA-Z_:][a-zA-Z0-9_:]*     lname  [a-zA-Z_][a-zA-Z0-9_]*
 * </pre>
 *
 * <p>Samples are grouped into families: a sample belongs to the family its name declares (HELP or
 * TYPE), else to that of its name less a suffix its type defines — {@code _bucket}, {@code _sum},
 * {@code _count} and {@code _created} of a histogram, {@code _sum}, {@code _count} and {@code
 * _created} of a summary, {@code _total} and {@code _created} of a counter — else to an untyped
 * family of its own name. A family's lines must be one group: HELP and TYPE at most once each and
 * before its first sample, no sample after another family began, no series twice. A histogram's
 * buckets carry an {@code le}, are cumulative and end with {@code +Inf}, whose count equals {@code
 * _count}; a summary's own samples carry a {@code quantile}.
 */
public final class PrometheusText {
  private PrometheusText() {}

  /** The metric types of the format. */
  public enum Type {
    COUNTER,
    GAUGE,
    HISTOGRAM,
    SUMMARY,
    UNTYPED;

    /** The type's word in a TYPE line. */
    public String wireName() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }

    static Type ofWireName(String word) {
      for (Type t : values()) {
        if (t.wireName().equals(word)) {
          return t;
        }
      }
      return null;
    }

    /** The sample name suffixes a family of this type owns besides its own name. */
    List<String> suffixes() {
      return switch (this) {
        case COUNTER -> List.of("_total", "_created");
        case HISTOGRAM -> List.of("_bucket", "_sum", "_count", "_created");
        case SUMMARY -> List.of("_sum", "_count", "_created");
        case GAUGE, UNTYPED -> List.of();
      };
    }
  }

  /**
   * One metric family.
   *
   * @param name the name its HELP or TYPE line declared (or its samples' name when untyped)
   * @param type its type ({@link Type#UNTYPED} without a TYPE line)
   * @param help its help text, unescaped; empty without a HELP line
   * @param samples its samples in exposition order
   */
  public record Family(String name, Type type, String help, List<Sample> samples) {
    public Family {
      Objects.requireNonNull(name, "name");
      Objects.requireNonNull(type, "type");
      Objects.requireNonNull(help, "help");
      samples = List.copyOf(samples);
    }

    /** The samples named {@code sampleName}, in exposition order. */
    public List<Sample> samples(String sampleName) {
      return samples.stream().filter(s -> s.name().equals(sampleName)).toList();
    }
  }

  /**
   * One sample line.
   *
   * @param name the sample's name (a family's name, or it with a suffix)
   * @param labels its labels, unescaped, sorted by name
   * @param value its value
   * @param timestampMs its timestamp, if the line has one
   */
  public record Sample(
      String name, Map<String, String> labels, double value, OptionalLong timestampMs) {
    public Sample {
      Objects.requireNonNull(name, "name");
      labels = Collections.unmodifiableMap(new TreeMap<>(labels));
      Objects.requireNonNull(timestampMs, "timestampMs");
    }

    /** A sample without a timestamp. */
    public Sample(String name, Map<String, String> labels, double value) {
      this(name, labels, value, OptionalLong.empty());
    }
  }

  /** Input the format does not allow; {@link #lineNumber} is 1-based. */
  public static final class FormatException extends IllegalArgumentException {
    private final int lineNumber;

    FormatException(int lineNumber, String message) {
      super("line " + lineNumber + ": " + message);
      this.lineNumber = lineNumber;
    }

    /** The line at fault (1-based). */
    public int lineNumber() {
      return lineNumber;
    }
  }

  /**
   * Parses {@code text}; returns its families by name, in order of appearance.
   *
   * @throws FormatException at the first line the format does not allow
   */
  public static Map<String, Family> parse(String text) {
    return new Parser().parse(text);
  }

  /**
   * The value of the one sample named {@code sampleName} whose labels include every pair of {@code
   * labels} (name, value, name, value, ...).
   *
   * @throws IllegalArgumentException when no sample or more than one matches
   */
  public static double value(Map<String, Family> families, String sampleName, String... labels) {
    return sample(families, sampleName, labels).value();
  }

  /**
   * The one sample named {@code sampleName} whose labels include every pair of {@code labels}.
   *
   * @throws IllegalArgumentException when no sample or more than one matches
   */
  public static Sample sample(Map<String, Family> families, String sampleName, String... labels) {
    List<Sample> found = samples(families, sampleName, labels);
    if (found.size() != 1) {
      throw new IllegalArgumentException(
          found.size()
              + " samples named "
              + sampleName
              + " with labels "
              + pairs(labels)
              + " (one expected): "
              + (found.isEmpty() ? samples(families, sampleName) : found));
    }
    return found.getFirst();
  }

  /** Every sample named {@code sampleName} whose labels include every pair of {@code labels}. */
  public static List<Sample> samples(
      Map<String, Family> families, String sampleName, String... labels) {
    Map<String, String> want = pairs(labels);
    List<Sample> out = new ArrayList<>();
    for (Family f : families.values()) {
      for (Sample s : f.samples()) {
        if (s.name().equals(sampleName) && s.labels().entrySet().containsAll(want.entrySet())) {
          out.add(s);
        }
      }
    }
    return out;
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

  // ---------------------------------------------------------------- the parser

  /** A sample's identity: its name and labels. */
  private record SeriesKey(String name, Map<String, String> labels) {}

  /** A family being built. */
  private static final class Building {
    final String name;
    final int firstLine;
    Type type;
    String help;
    final List<Sample> samples = new ArrayList<>();
    final Set<SeriesKey> series = new HashSet<>();
    final List<Integer> sampleLines = new ArrayList<>();

    Building(String name, int firstLine) {
      this.name = name;
      this.firstLine = firstLine;
    }

    Family build() {
      return new Family(
          name, type == null ? Type.UNTYPED : type, help == null ? "" : help, samples);
    }
  }

  private static final class Parser {
    private final Map<String, Building> families = new LinkedHashMap<>();
    private Building current;
    private int lineNumber;
    private String line;
    private int pos;

    Map<String, Family> parse(String text) {
      Objects.requireNonNull(text, "text");
      if (!text.isEmpty() && !text.endsWith("\n")) {
        int lines = (int) text.chars().filter(c -> c == '\n').count() + 1;
        throw new FormatException(lines, "the last line does not end with a line feed");
      }
      int start = 0;
      while (start < text.length()) {
        int end = text.indexOf('\n', start);
        lineNumber++;
        line = text.substring(start, end);
        pos = 0;
        parseLine();
        start = end + 1;
      }
      Map<String, Family> out = new LinkedHashMap<>();
      for (Building b : families.values()) {
        checkFamily(b);
        out.put(b.name, b.build());
      }
      return Collections.unmodifiableMap(out);
    }

    private FormatException error(String message) {
      return new FormatException(lineNumber, message + ": " + line);
    }

    private void parseLine() {
      if (line.indexOf('\r') >= 0) {
        throw error("a carriage return (lines end with a line feed only)");
      }
      skipBlanks();
      if (pos == line.length()) {
        return; // a blank line
      }
      if (line.charAt(pos) == '#') {
        parseComment();
      } else {
        parseSample();
      }
    }

    private void parseComment() {
      pos++;
      skipBlanks();
      int wordStart = pos;
      while (pos < line.length() && !isBlank(line.charAt(pos))) {
        pos++;
      }
      String word = line.substring(wordStart, pos);
      if (!word.equals("HELP") && !word.equals("TYPE")) {
        return; // an ordinary comment
      }
      if (!skipBlanks()) {
        throw error(word + " without a metric name");
      }
      String name = metricName();
      if (pos < line.length() && !isBlank(line.charAt(pos))) {
        throw error("character '" + line.charAt(pos) + "' after the metric name of a " + word);
      }
      Building f = declaredFamily(name, word);
      skipBlanks();
      if (word.equals("HELP")) {
        if (f.help != null) {
          throw error("a second HELP for " + name);
        }
        f.help = helpText();
      } else {
        if (f.type != null) {
          throw error("a second TYPE for " + name);
        }
        int typeStart = pos;
        Type type = Type.ofWireName(token());
        skipBlanks();
        if (type == null || pos != line.length()) {
          throw error(
              "type '"
                  + line.substring(typeStart)
                  + "' of "
                  + name
                  + " is not counter, gauge, histogram, summary or untyped");
        }
        f.type = type;
      }
    }

    /** The family a HELP or TYPE line declares: new, or the current one before its samples. */
    private Building declaredFamily(String name, String word) {
      Building f = families.get(name);
      if (f == null) {
        Building owner = ownerOf(name);
        if (owner != null) {
          throw error(word + " of " + name + ", a sample name of family " + owner.name);
        }
        f = new Building(name, lineNumber);
        families.put(name, f);
      } else if (f != current) {
        throw error(
            word + " of " + name + " after another family began: its lines are not grouped");
      }
      if (!f.samples.isEmpty()) {
        throw error(word + " of " + name + " after its first sample");
      }
      current = f;
      return f;
    }

    /** The declared family whose type owns {@code sampleName} through a suffix, or null. */
    private Building ownerOf(String sampleName) {
      for (Building b : families.values()) {
        if (b.type == null) {
          continue;
        }
        for (String suffix : b.type.suffixes()) {
          if (sampleName.equals(b.name + suffix)) {
            return b;
          }
        }
      }
      return null;
    }

    private String helpText() {
      StringBuilder sb = new StringBuilder();
      while (pos < line.length()) {
        char c = line.charAt(pos++);
        if (c != '\\') {
          sb.append(c);
          continue;
        }
        if (pos == line.length()) {
          throw error("the help text ends inside an escape");
        }
        char e = line.charAt(pos++);
        switch (e) {
          case '\\' -> sb.append('\\');
          case 'n' -> sb.append('\n');
          default -> throw error("escape \\" + e + " in a help text (only \\\\ and \\n)");
        }
      }
      return sb.toString();
    }

    private void parseSample() {
      String name = metricName();
      Map<String, String> labels = new TreeMap<>();
      boolean blank = skipBlanks();
      if (pos < line.length() && line.charAt(pos) == '{') {
        pos++;
        parseLabels(labels);
        blank = skipBlanks();
      }
      if (!blank) {
        throw error("no blank before the value of " + name);
      }
      double value = parseValue(token());
      OptionalLong timestamp = OptionalLong.empty();
      if (skipBlanks() && pos < line.length()) {
        String t = token();
        try {
          timestamp = OptionalLong.of(Long.parseLong(t));
        } catch (NumberFormatException e) {
          throw error("timestamp '" + t + "' is not an int64 of milliseconds");
        }
        skipBlanks();
      }
      if (pos != line.length()) {
        throw error("text after the sample: '" + line.substring(pos) + "'");
      }
      Building f = familyOf(name);
      if (!f.series.add(new SeriesKey(name, Map.copyOf(labels)))) {
        throw error("a second sample of series " + name + labels);
      }
      f.samples.add(new Sample(name, labels, value, timestamp));
      f.sampleLines.add(lineNumber);
    }

    /** The family of a sample: the current one, or a new one; never an earlier one. */
    private Building familyOf(String sampleName) {
      Building f = families.get(sampleName);
      if (f == null) {
        f = ownerOf(sampleName);
      }
      if (f == null) {
        f = new Building(sampleName, lineNumber);
        families.put(sampleName, f);
      } else if (f != current) {
        throw error(
            "a sample of family "
                + f.name
                + " after another family began: its lines are not grouped");
      }
      if (f.type == Type.HISTOGRAM && sampleName.equals(f.name)) {
        throw error("histogram " + f.name + " has a sample under its own name");
      }
      current = f;
      return f;
    }

    private void parseLabels(Map<String, String> labels) {
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
        String lname = line.substring(start, pos);
        skipBlanks();
        expect('=', "after label " + lname);
        skipBlanks();
        expect('"', "to open the value of label " + lname);
        String lvalue = labelValue(lname);
        if (labels.put(lname, lvalue) != null) {
          throw error("label " + lname + " given twice");
        }
        skipBlanks();
        if (pos < line.length() && line.charAt(pos) == ',') {
          pos++;
        } else if (pos < line.length() && line.charAt(pos) != '}') {
          throw error("',' or '}' expected after the value of label " + lname);
        }
      }
    }

    private String labelValue(String lname) {
      StringBuilder sb = new StringBuilder();
      while (true) {
        if (pos == line.length()) {
          throw error("the value of label " + lname + " is not closed");
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
          throw error("the value of label " + lname + " ends inside an escape");
        }
        char e = line.charAt(pos++);
        switch (e) {
          case '\\' -> sb.append('\\');
          case '"' -> sb.append('"');
          case 'n' -> sb.append('\n');
          default ->
              throw error("escape \\" + e + " in the value of label " + lname + " (\\\\ \\\" \\n)");
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

    private double parseValue(String v) {
      switch (v) {
        case "+Inf":
          return Double.POSITIVE_INFINITY;
        case "-Inf":
          return Double.NEGATIVE_INFINITY;
        case "NaN":
          return Double.NaN;
        default:
          if (!isDecimal(v)) {
            throw error("value '" + v + "' is not a decimal float, +Inf, -Inf or NaN");
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

    // ---------------------------------------------------------------- family checks

    private void checkFamily(Building f) {
      if (f.type == Type.HISTOGRAM) {
        checkHistogram(f);
      } else if (f.type == Type.SUMMARY) {
        for (int i = 0; i < f.samples.size(); i++) {
          Sample s = f.samples.get(i);
          if (s.name().equals(f.name) && !s.labels().containsKey("quantile")) {
            throw new FormatException(
                f.sampleLines.get(i), "a sample of summary " + f.name + " without a quantile");
          }
        }
      }
    }

    /** Buckets: an {@code le} each, cumulative, ending with +Inf equal to _count. */
    private static void checkHistogram(Building f) {
      Map<Map<String, String>, TreeMap<Double, Double>> buckets = new HashMap<>();
      Map<Map<String, String>, Integer> lines = new HashMap<>();
      Map<Map<String, String>, Double> counts = new HashMap<>();
      for (int i = 0; i < f.samples.size(); i++) {
        Sample s = f.samples.get(i);
        int at = f.sampleLines.get(i);
        if (s.name().equals(f.name + "_bucket")) {
          String le = s.labels().get("le");
          if (le == null) {
            throw new FormatException(at, "a bucket of " + f.name + " without an le label");
          }
          double bound;
          try {
            bound = le.equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(le);
          } catch (NumberFormatException e) {
            throw new FormatException(at, "bucket bound le=\"" + le + "\" of " + f.name);
          }
          Map<String, String> series = new TreeMap<>(s.labels());
          series.remove("le");
          buckets.computeIfAbsent(series, k -> new TreeMap<>()).put(bound, s.value());
          lines.putIfAbsent(series, at);
        } else if (s.name().equals(f.name + "_count")) {
          counts.put(s.labels(), s.value());
          lines.putIfAbsent(s.labels(), at);
        }
      }
      for (var e : buckets.entrySet()) {
        int at = lines.get(e.getKey());
        double previous = 0;
        for (var b : e.getValue().entrySet()) {
          if (b.getValue() < previous) {
            throw new FormatException(
                at, "buckets of " + f.name + e.getKey() + " are not cumulative: " + e.getValue());
          }
          previous = b.getValue();
        }
        Double inf = e.getValue().get(Double.POSITIVE_INFINITY);
        if (inf == null) {
          throw new FormatException(at, "buckets of " + f.name + e.getKey() + " lack le=\"+Inf\"");
        }
        Double count = counts.get(e.getKey());
        if (count != null && count.doubleValue() != inf.doubleValue()) {
          throw new FormatException(
              at,
              f.name + e.getKey() + ": _count " + count + " differs from the +Inf bucket " + inf);
        }
      }
    }

    // ---------------------------------------------------------------- characters

    private static boolean isBlank(char c) {
      return c == ' ' || c == '\t';
    }

    private static boolean isNameChar(char c, boolean first) {
      return (c >= 'a' && c <= 'z')
          || (c >= 'A' && c <= 'Z')
          || c == '_'
          || c == ':'
          || (!first && c >= '0' && c <= '9');
    }

    private static boolean isLabelChar(char c, boolean first) {
      return (c >= 'a' && c <= 'z')
          || (c >= 'A' && c <= 'Z')
          || c == '_'
          || (!first && c >= '0' && c <= '9');
    }

    /** [+-]? (digits (. digits?)? | . digits) ([eE] [+-]? digits)? */
    private static boolean isDecimal(String v) {
      int n = v.length();
      int start = afterSign(v, 0);
      int i = afterDigits(v, start);
      int digits = i - start;
      if (i < n && v.charAt(i) == '.') {
        int fractionEnd = afterDigits(v, i + 1);
        digits += fractionEnd - (i + 1);
        i = fractionEnd;
      }
      if (digits == 0) {
        return false;
      }
      if (i < n && (v.charAt(i) == 'e' || v.charAt(i) == 'E')) {
        int exponent = afterSign(v, i + 1);
        i = afterDigits(v, exponent);
        if (i == exponent) {
          return false; // an exponent without digits
        }
      }
      return i == n;
    }

    /** The index after the sign at {@code i}, if there is one. */
    private static int afterSign(String v, int i) {
      return i < v.length() && (v.charAt(i) == '+' || v.charAt(i) == '-') ? i + 1 : i;
    }

    /** The index after the run of digits at {@code i}. */
    private static int afterDigits(String v, int i) {
      while (i < v.length() && v.charAt(i) >= '0' && v.charAt(i) <= '9') {
        i++;
      }
      return i;
    }
  }
}
