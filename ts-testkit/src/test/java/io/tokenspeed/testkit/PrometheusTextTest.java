package io.tokenspeed.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.testkit.PrometheusText.Family;
import io.tokenspeed.testkit.PrometheusText.FormatException;
import io.tokenspeed.testkit.PrometheusText.Sample;
import io.tokenspeed.testkit.PrometheusText.Type;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The Prometheus text parser: a hand-written exposition with every feature of format 0.0.4 reads
 * back exactly; each malformed line is refused with its line number; seeded random families written
 * by an independent writer of the format read back equal to what was written.
 */
class PrometheusTextTest {

  private static final String EXPOSITION =
      """
      # A comment, then a blank line

      # HELP tokenspeed:requests_total Requests \\\\ served,\\nby reason.
      # TYPE tokenspeed:requests_total counter
      tokenspeed:requests_total{reason="stop",model_name="a\\"b\\\\c\\nd"} 3
      tokenspeed:requests_total{ reason = "length" , model_name="x", } 1.5e3 1700000000000
      # TYPE temperature gauge
      temperature -Inf
      temperature{room="hall"}\t+Inf\t-5
      temperature{room="cellar"} NaN
      # HELP latency_seconds Latency.
      # TYPE latency_seconds histogram
      latency_seconds_bucket{le="0.1"} 1
      latency_seconds_bucket{le="1.0"} 3
      latency_seconds_bucket{le="+Inf"} 4
      latency_seconds_count 4
      latency_seconds_sum 2.25
      latency_seconds_created 1.7e9
      # TYPE rpc summary
      rpc{quantile="0.5"} .5
      rpc{quantile="0.99"} 2.
      rpc_sum 10
      rpc_count 7
      # TYPE bytes counter
      bytes_total{kind="get"} 10
      bytes_created{kind="get"} 1.7e9
      orphan_metric{a="1"} 0
      # TYPE plain untyped
      plain {} -0.25
      """;

  @Test
  void shouldReadEveryFeatureOfTheFormat() {
    Map<String, Family> f = PrometheusText.parse(EXPOSITION);
    assertEquals(
        List.of(
            "tokenspeed:requests_total",
            "temperature",
            "latency_seconds",
            "rpc",
            "bytes",
            "orphan_metric",
            "plain"),
        List.copyOf(f.keySet()),
        "families in order of appearance");

    Family requests = f.get("tokenspeed:requests_total");
    assertEquals(Type.COUNTER, requests.type());
    assertEquals("Requests \\ served,\nby reason.", requests.help());
    assertEquals(
        new Sample(
            "tokenspeed:requests_total", Map.of("reason", "stop", "model_name", "a\"b\\c\nd"), 3),
        requests.samples().get(0));
    assertEquals(
        new Sample(
            "tokenspeed:requests_total",
            Map.of("reason", "length", "model_name", "x"),
            1500,
            OptionalLong.of(1_700_000_000_000L)),
        requests.samples().get(1));

    Family temperature = f.get("temperature");
    assertEquals(Type.GAUGE, temperature.type());
    assertEquals("", temperature.help());
    assertEquals(
        new Sample("temperature", Map.of(), Double.NEGATIVE_INFINITY),
        temperature.samples().get(0));
    Sample hall = PrometheusText.sample(f, "temperature", "room", "hall");
    assertEquals(Double.POSITIVE_INFINITY, hall.value());
    assertEquals(OptionalLong.of(-5), hall.timestampMs());
    assertTrue(Double.isNaN(PrometheusText.value(f, "temperature", "room", "cellar")));

    Family latency = f.get("latency_seconds");
    assertEquals(Type.HISTOGRAM, latency.type());
    assertEquals(3, latency.samples("latency_seconds_bucket").size());
    assertEquals(3, PrometheusText.value(f, "latency_seconds_bucket", "le", "1.0"));
    assertEquals(2.25, PrometheusText.value(f, "latency_seconds_sum"));
    assertEquals(1.7e9, PrometheusText.value(f, "latency_seconds_created"));

    assertEquals(Type.SUMMARY, f.get("rpc").type());
    assertEquals(0.5, PrometheusText.value(f, "rpc", "quantile", "0.5"));
    assertEquals(2.0, PrometheusText.value(f, "rpc", "quantile", "0.99"));
    assertEquals(7, PrometheusText.value(f, "rpc_count"));

    Family bytes = f.get("bytes");
    assertEquals(Type.COUNTER, bytes.type());
    assertEquals(List.of("bytes_total", "bytes_created"), names(bytes));

    Family orphan = f.get("orphan_metric");
    assertEquals(Type.UNTYPED, orphan.type(), "a sample without TYPE is its own untyped family");
    assertEquals(-0.25, PrometheusText.value(f, "plain"));
    assertEquals(Map.of(), f.get("plain").samples().getFirst().labels());
  }

  private static List<String> names(Family f) {
    return f.samples().stream().map(Sample::name).toList();
  }

  @Test
  void shouldFindOneSampleByNameAndIncludedLabelsOrSayWhy() {
    Map<String, Family> f = PrometheusText.parse(EXPOSITION);
    assertEquals(3, PrometheusText.value(f, "tokenspeed:requests_total", "reason", "stop"));
    assertEquals(2, PrometheusText.samples(f, "tokenspeed:requests_total").size());
    IllegalArgumentException several =
        assertThrows(
            IllegalArgumentException.class,
            () -> PrometheusText.value(f, "tokenspeed:requests_total"));
    assertTrue(several.getMessage().startsWith("2 samples"), several.getMessage());
    IllegalArgumentException none =
        assertThrows(
            IllegalArgumentException.class,
            () -> PrometheusText.value(f, "tokenspeed:requests_total", "reason", "error"));
    assertTrue(none.getMessage().startsWith("0 samples"), none.getMessage());
    assertThrows(
        IllegalArgumentException.class,
        () -> PrometheusText.value(f, "tokenspeed:requests_total", "reason"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"", "\n", "# only a comment\n", "\n\n  \n"})
  void shouldReadNoFamilyFromAnExpositionWithoutSamplesOrMetadata(String text) {
    assertEquals(Map.of(), PrometheusText.parse(text));
  }

  static Stream<Arguments> malformed() {
    return Stream.of(
        Arguments.of("a 1", 1, "line feed"),
        Arguments.of("a 1\nb 2", 2, "line feed"),
        Arguments.of("a 1\r\n", 1, "carriage return"),
        Arguments.of("1a 1\n", 1, "metric name"),
        Arguments.of("a-b 1\n", 1, "in a metric name"),
        Arguments.of("a\n", 1, "no blank before the value"),
        Arguments.of("a 1x\n", 1, "not a decimal float"),
        Arguments.of("a Inf\n", 1, "not a decimal float"),
        Arguments.of("a nan\n", 1, "not a decimal float"),
        Arguments.of("a 0x10\n", 1, "not a decimal float"),
        Arguments.of("a 1e\n", 1, "not a decimal float"),
        Arguments.of("a 1 2.5\n", 1, "int64"),
        Arguments.of("a 1 2 3\n", 1, "text after the sample"),
        Arguments.of("a{b=\"1\"\n", 1, "labels are not closed"),
        Arguments.of("a{b=\"1\n", 1, "not closed"),
        Arguments.of("a{b=1} 1\n", 1, "'\"' expected"),
        Arguments.of("a{b} 1\n", 1, "'=' expected"),
        Arguments.of("a{1b=\"1\"} 1\n", 1, "label name expected"),
        Arguments.of("a{b=\"1\" c=\"2\"} 1\n", 1, "',' or '}'"),
        Arguments.of("a{b=\"1\",b=\"2\"} 1\n", 1, "given twice"),
        Arguments.of("a{b=\"x\\ty\"} 1\n", 1, "escape \\t"),
        Arguments.of("a{b=\"x\\\"} 1\n", 1, "not closed"),
        Arguments.of("a 1\na 2\n", 2, "second sample of series"),
        Arguments.of("a 1\nb 1\na{x=\"1\"} 2\n", 3, "not grouped"),
        Arguments.of("# HELP\n", 1, "without a metric name"),
        Arguments.of("# HELP a x\\ty\n", 1, "escape \\t"),
        Arguments.of("# HELP a x\\\n", 1, "inside an escape"),
        Arguments.of("# HELP a x\n# HELP a y\n", 2, "second HELP"),
        Arguments.of("# TYPE a gauge\n# TYPE a gauge\n", 2, "second TYPE"),
        Arguments.of("# TYPE a\n", 1, "is not counter"),
        Arguments.of("# TYPE a meter\n", 1, "'meter'"),
        Arguments.of("# TYPE a gauge extra\n", 1, "'gauge extra'"),
        Arguments.of("# TYPE a{x=\"1\"} gauge\n", 1, "after the metric name"),
        Arguments.of("a 1\n# TYPE a gauge\n", 2, "after its first sample"),
        Arguments.of("# TYPE a gauge\nb 1\n# HELP a late\n", 3, "not grouped"),
        Arguments.of("# TYPE a counter\n# TYPE a_total counter\n", 2, "sample name of family a"),
        Arguments.of("# TYPE h histogram\nh 1\n", 2, "under its own name"),
        Arguments.of("# TYPE h histogram\nh_bucket 1\n", 2, "without an le"),
        Arguments.of("# TYPE h histogram\nh_bucket{le=\"x\"} 1\n", 2, "bucket bound"),
        Arguments.of(
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n",
            2,
            "not cumulative"),
        Arguments.of("# TYPE h histogram\nh_bucket{le=\"1\"} 2\n", 2, "lack le=\"+Inf\""),
        Arguments.of(
            "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n", 2, "differs from the +Inf"),
        Arguments.of("# TYPE s summary\ns 1\n", 2, "without a quantile"));
  }

  @ParameterizedTest(name = "[{index}] line {1}: {2}")
  @MethodSource("malformed")
  void shouldRefuseMalformedInputNamingTheLine(String text, int line, String fragment) {
    FormatException e = assertThrows(FormatException.class, () -> PrometheusText.parse(text));
    assertEquals(line, e.lineNumber(), e.getMessage());
    assertTrue(e.getMessage().startsWith("line " + line + ": "), e.getMessage());
    assertTrue(e.getMessage().contains(fragment), () -> fragment + " in: " + e.getMessage());
  }

  // ---------------------------------------------------------------- random round trips

  private static final String NAME_FIRST = "abcxyzABZ_:";
  private static final String NAME_REST = NAME_FIRST + "0189";
  private static final String TEXT = "ab \\\"\n\t{}=,#é€😀";

  private static String word(SplittableRandom rnd, String first, String rest, int max) {
    StringBuilder sb = new StringBuilder();
    sb.append(first.charAt(rnd.nextInt(first.length())));
    int n = rnd.nextInt(max);
    for (int i = 0; i < n; i++) {
      sb.append(rest.charAt(rnd.nextInt(rest.length())));
    }
    return sb.toString();
  }

  private static String text(SplittableRandom rnd) {
    StringBuilder sb = new StringBuilder();
    int n = rnd.nextInt(8);
    for (int i = 0; i < n; i++) {
      int at = TEXT.offsetByCodePoints(0, rnd.nextInt(TEXT.codePointCount(0, TEXT.length())));
      sb.appendCodePoint(TEXT.codePointAt(at));
    }
    return sb.toString();
  }

  private static double value(SplittableRandom rnd) {
    return switch (rnd.nextInt(8)) {
      case 0 -> Double.POSITIVE_INFINITY;
      case 1 -> Double.NEGATIVE_INFINITY;
      case 2 -> Double.NaN;
      case 3 -> rnd.nextInt(1000);
      case 4 -> -rnd.nextDouble() * 1e-300;
      default -> (rnd.nextDouble() - 0.5) * Math.pow(10, rnd.nextInt(-20, 20));
    };
  }

  /** An independent writer of the format: what a correct exporter may produce. */
  private static String write(List<Family> families, SplittableRandom rnd) {
    StringBuilder sb = new StringBuilder();
    for (Family f : families) {
      if (rnd.nextBoolean()) {
        sb.append("# a comment about ").append(f.name()).append('\n');
      }
      if (!f.help().isEmpty()) {
        sb.append("# HELP ").append(f.name()).append(' ');
        sb.append(f.help().replace("\\", "\\\\").replace("\n", "\\n")).append('\n');
      }
      if (f.type() != Type.UNTYPED || rnd.nextBoolean()) {
        sb.append("# TYPE ").append(f.name()).append(' ').append(f.type().wireName()).append('\n');
      }
      for (Sample s : f.samples()) {
        sb.append(s.name());
        if (!s.labels().isEmpty() || rnd.nextInt(4) == 0) {
          sb.append('{');
          String sep = "";
          for (var l : s.labels().entrySet()) {
            sb.append(sep).append(l.getKey()).append("=\"");
            sb.append(
                l.getValue().replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n"));
            sb.append('"');
            sep = rnd.nextInt(4) == 0 ? " , " : ",";
          }
          sb.append(rnd.nextInt(4) == 0 && !s.labels().isEmpty() ? ",}" : "}");
        }
        sb.append(rnd.nextInt(4) == 0 ? "\t " : " ").append(format(s.value()));
        if (s.timestampMs().isPresent()) {
          sb.append(' ').append(s.timestampMs().getAsLong());
        }
        sb.append('\n');
      }
      if (rnd.nextInt(4) == 0) {
        sb.append('\n');
      }
    }
    return sb.toString();
  }

  private static String format(double v) {
    if (Double.isNaN(v)) {
      return "NaN";
    }
    if (Double.isInfinite(v)) {
      return v > 0 ? "+Inf" : "-Inf";
    }
    return Double.toString(v); // e.g. 1.0E-5: a decimal float in the format's grammar
  }

  /** Random gauge, counter and untyped families with random labels, values and timestamps. */
  private static List<Family> families(SplittableRandom rnd) {
    Map<String, Family> out = new LinkedHashMap<>();
    int n = 1 + rnd.nextInt(6);
    while (out.size() < n) {
      String name = "f" + out.size() + word(rnd, NAME_FIRST, NAME_REST, 10);
      Type type = List.of(Type.GAUGE, Type.COUNTER, Type.UNTYPED).get(rnd.nextInt(3));
      String sampleName = type == Type.COUNTER ? name + "_total" : name;
      List<Sample> samples = new ArrayList<>();
      int k = 1 + rnd.nextInt(5);
      for (int i = 0; i < k; i++) {
        Map<String, String> labels = new TreeMap<>();
        labels.put("i", Integer.toString(i)); // distinct series
        int m = rnd.nextInt(4);
        for (int j = 0; j < m; j++) {
          labels.put(word(rnd, "abz_", "abz_09", 6), text(rnd));
        }
        if (rnd.nextInt(3) == 0 && i == 0) {
          labels.clear();
        }
        OptionalLong ts =
            rnd.nextInt(3) == 0 ? OptionalLong.of(rnd.nextLong()) : OptionalLong.empty();
        samples.add(new Sample(sampleName, labels, value(rnd), ts));
      }
      // the parser, like Prometheus', skips the blanks between the name and the help text
      String help = rnd.nextBoolean() ? text(rnd).replaceFirst("^[ \t]+", "") : "";
      out.put(name, new Family(name, type, help, samples));
    }
    return List.copyOf(out.values());
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
  void shouldReadBackRandomFamiliesAsWritten(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int round = 0; round < 50; round++) {
      List<Family> want = families(rnd);
      String text = write(want, rnd);
      Map<String, Family> got = PrometheusText.parse(text);
      assertEquals(
          want.stream().map(Family::name).toList(),
          List.copyOf(got.keySet()),
          () -> "seed=" + seed + "\n" + text);
      for (Family w : want) {
        Family g = got.get(w.name());
        assertEquals(w.type(), g.type(), w.name());
        assertEquals(w.help(), g.help(), w.name());
        assertEquals(w.samples().size(), g.samples().size(), w.name());
        for (int i = 0; i < w.samples().size(); i++) {
          Sample ws = w.samples().get(i);
          Sample gs = g.samples().get(i);
          assertEquals(ws.name(), gs.name());
          assertEquals(ws.labels(), gs.labels(), () -> "seed=" + seed + "\n" + text);
          assertEquals(0, Double.compare(ws.value(), gs.value()), ws + " vs " + gs);
          assertEquals(ws.timestampMs(), gs.timestampMs());
        }
      }
    }
  }
}
