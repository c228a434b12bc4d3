package io.tokenspeed.core.metrics;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.prometheus.metrics.config.EscapingScheme;
import io.prometheus.metrics.core.metrics.Counter;
import io.prometheus.metrics.core.metrics.Gauge;
import io.prometheus.metrics.core.metrics.Histogram;
import io.prometheus.metrics.expositionformats.PrometheusTextFormatWriter;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import io.tokenspeed.core.metrics.PrometheusText.Family;
import io.tokenspeed.core.metrics.PrometheusText.FormatException;
import io.tokenspeed.core.metrics.PrometheusText.Sample;
import io.tokenspeed.core.metrics.PrometheusText.Type;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The Prometheus text parser: a hand-written exposition with every feature of format 0.0.4 reads
 * back exactly, and so does one of the server's shape; each malformed line is refused with its line
 * number; seeded random families written by an independent writer of the format read back equal to
 * what was written; and so do seeded counters, gauges and histograms written by the writer the
 * exporter uses (client_java's text format 0.0.4 writer, a test dependency only: the parser itself
 * does not read the exporter's output with the exporter's own library), with label values and help
 * texts that need every escape.
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

  /** The server's shape, by hand: what a reader of /metrics meets besides plain samples. */
  @Test
  void shouldReadCommentsSeveralSeriesAndSpecialValuesOfTheServersShape() {
    String text =
        """
        # A comment before anything.
        # HELP tokenspeed:l3_payload_bytes_total Successful payload bytes \\\\ of finished jobs.\\n
        # TYPE tokenspeed:l3_payload_bytes_total counter
        tokenspeed:l3_payload_bytes_total{kind="get",model_name="m",tp_rank="0"} 1024.0
        tokenspeed:l3_payload_bytes_total{kind="get",model_name="m",tp_rank="1"} 2048
        tokenspeed:l3_payload_bytes_total{kind="put",model_name="m",tp_rank="0"} 1.5E6 1765000000000
        tokenspeed:l3_payload_bytes_total{ kind = "put" , model_name="m",tp_rank="1", } 5e5

        #\tTYPE tokenspeed:l3_break_even_bandwidth_bytes_per_second gauge
        tokenspeed:l3_break_even_bandwidth_bytes_per_second{model_name="m"} +Inf
        tokenspeed:l3_restore_latency_seconds NaN
        tokenspeed:odd{path="C:\\\\tmp\\\\a \\"b\\"\\nc"} -Inf
        # TYPE old_style counter
        old_style{reason="pressure"} 3
        old_style{reason="slower_than_compute"} 4
        # TYPE tokenspeed:ttft_seconds histogram
        tokenspeed:ttft_seconds_bucket{le="0.5"} 1
        tokenspeed:ttft_seconds_bucket{le="+Inf"} 2
        tokenspeed:ttft_seconds_count 2
        tokenspeed:ttft_seconds_sum 0.75
        # EOF
        """;
    Map<String, Family> f = PrometheusText.parse(text);
    assertEquals(
        List.of(
            "tokenspeed:l3_payload_bytes_total",
            "tokenspeed:l3_break_even_bandwidth_bytes_per_second",
            "tokenspeed:l3_restore_latency_seconds",
            "tokenspeed:odd",
            "old_style",
            "tokenspeed:ttft_seconds"),
        List.copyOf(f.keySet()));
    assertEquals(13, f.values().stream().mapToInt(x -> x.samples().size()).sum(), f::toString);
    Family bytes = f.get("tokenspeed:l3_payload_bytes_total");
    assertEquals(Type.COUNTER, bytes.type());
    assertEquals("Successful payload bytes \\ of finished jobs.\n", bytes.help());
    assertEquals(
        List.of(1024.0, 2048.0),
        PrometheusText.samples(f, "tokenspeed:l3_payload_bytes_total", "kind", "get").stream()
            .map(Sample::value)
            .toList());
    assertEquals(
        2048,
        PrometheusText.value(
            f, "tokenspeed:l3_payload_bytes_total", "kind", "get", "tp_rank", "1"));
    Sample put =
        PrometheusText.sample(
            f, "tokenspeed:l3_payload_bytes_total", "kind", "put", "tp_rank", "0");
    assertEquals(1.5e6, put.value());
    assertEquals(OptionalLong.of(1_765_000_000_000L), put.timestampMs());
    assertEquals(
        5e5,
        PrometheusText.value(
            f, "tokenspeed:l3_payload_bytes_total", "kind", "put", "tp_rank", "1"));
    assertTrue(
        PrometheusText.samples(f, "tokenspeed:l3_payload_bytes_total", "kind", "query").isEmpty());
    assertEquals(Type.GAUGE, f.get("tokenspeed:l3_break_even_bandwidth_bytes_per_second").type());
    assertEquals(
        Double.POSITIVE_INFINITY,
        PrometheusText.value(f, "tokenspeed:l3_break_even_bandwidth_bytes_per_second"));
    assertTrue(Double.isNaN(PrometheusText.value(f, "tokenspeed:l3_restore_latency_seconds")));
    Sample odd = PrometheusText.sample(f, "tokenspeed:odd");
    assertEquals("C:\\tmp\\a \"b\"\nc", odd.labels().get("path"));
    assertEquals(Double.NEGATIVE_INFINITY, odd.value());
    // a counter whose samples carry the family's own name (an exporter that does not append _total)
    assertEquals(Type.COUNTER, f.get("old_style").type());
    assertEquals(3, PrometheusText.value(f, "old_style", "reason", "pressure"));
    assertEquals(2, PrometheusText.samples(f, "old_style").size());
    Family ttft = f.get("tokenspeed:ttft_seconds");
    assertEquals(Type.HISTOGRAM, ttft.type());
    assertEquals(2, PrometheusText.value(f, "tokenspeed:ttft_seconds_count"));
    assertEquals(0.75, PrometheusText.value(f, "tokenspeed:ttft_seconds_sum"));
    assertTrue(
        ttft.samples("tokenspeed:ttft_seconds").isEmpty(),
        "a histogram has no sample of its own name");
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
        Arguments.of("a 1\nb 2\r\nc 3\n", 2, "carriage return"),
        Arguments.of("1a 1\n", 1, "metric name"),
        Arguments.of("9a 1\n", 1, "a metric name expected at column 1"),
        Arguments.of("a-b 1\n", 1, "character '-' in a metric name: a-b 1"),
        Arguments.of("a\n", 1, "no blank before the value"),
        Arguments.of("a 1\nb\n", 2, "no blank before the value of b: b"),
        Arguments.of("a 1x\n", 1, "not a decimal float"),
        Arguments.of("a one\n", 1, "value 'one' is not a decimal float, +Inf, -Inf or NaN"),
        Arguments.of("a Inf\n", 1, "not a decimal float"),
        Arguments.of("a inf\n", 1, "not a decimal float"),
        Arguments.of("a Infinity\n", 1, "value 'Infinity' is not a decimal float"),
        Arguments.of("a nan\n", 1, "not a decimal float"),
        Arguments.of("a 0x10\n", 1, "not a decimal float"),
        Arguments.of("a 1.5d\n", 1, "value '1.5d' is not a decimal float"),
        Arguments.of("a 1e\n", 1, "not a decimal float"),
        Arguments.of("a 1 12.5\n", 1, "timestamp '12.5' is not an int64 of milliseconds"),
        Arguments.of("a 1 2 3\n", 1, "text after the sample: '3'"),
        Arguments.of("a{b=\"1\"\n", 1, "labels are not closed"),
        Arguments.of("a{b=\"1\n", 1, "not closed"),
        Arguments.of("a{b=1} 1\n", 1, "'\"' expected"),
        Arguments.of("a{b} 1\n", 1, "'=' expected"),
        Arguments.of("a{1b=\"1\"} 1\n", 1, "a label name expected at column 3"),
        Arguments.of("a{b=\"1\" c=\"2\"} 1\n", 1, "',' or '}'"),
        Arguments.of("a{kind=\"get\" 1\n", 1, "after the value of label kind: a{kind=\"get\" 1"),
        Arguments.of("a{b=\"1\",b=\"2\"} 1\n", 1, "label b given twice"),
        Arguments.of("a{b=\"x\\ty\"} 1\n", 1, "escape \\t"),
        Arguments.of("a{kind=\"g\\et\"} 1\n", 1, "escape \\e in the value of label kind"),
        Arguments.of("a{b=\"x\\\"} 1\n", 1, "not closed"),
        Arguments.of("a 1\na 2\n", 2, "second sample of series"),
        Arguments.of("a 1\nb 1\na{x=\"1\"} 2\n", 3, "not grouped"),
        Arguments.of("a{x=\"1\"} 1\nb 2\na{x=\"1\"} 3\n", 3, "not grouped"),
        Arguments.of("# HELP\n", 1, "without a metric name"),
        Arguments.of("# HELP a x\\ty\n", 1, "escape \\t"),
        Arguments.of("# HELP a x\\\n", 1, "inside an escape"),
        Arguments.of("# HELP a x\n# HELP a y\n", 2, "second HELP"),
        Arguments.of("# TYPE a gauge\n# TYPE a gauge\n", 2, "second TYPE"),
        Arguments.of("# TYPE a counter\n# TYPE a gauge\n", 2, "a second TYPE for a"),
        Arguments.of("# TYPE a\n", 1, "is not counter"),
        Arguments.of("# TYPE a meter\n", 1, "'meter'"),
        Arguments.of("# TYPE a countr\n", 1, "type 'countr' of a is not counter, gauge"),
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

  /** Up to {@code max - 1} code points of {@link #TEXT}: every character that needs an escape. */
  private static String text(SplittableRandom rnd, int max) {
    StringBuilder sb = new StringBuilder();
    int n = rnd.nextInt(max);
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
          labels.put(word(rnd, "abz_", "abz_09", 6), text(rnd, 8));
        }
        if (rnd.nextInt(3) == 0 && i == 0) {
          labels.clear();
        }
        OptionalLong ts =
            rnd.nextInt(3) == 0 ? OptionalLong.of(rnd.nextLong()) : OptionalLong.empty();
        samples.add(new Sample(sampleName, labels, value(rnd), ts));
      }
      // the parser, like Prometheus', skips the blanks between the name and the help text
      String help = rnd.nextBoolean() ? text(rnd, 8).replaceFirst("^[ \t]+", "") : "";
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

  // ---------------------------------------------------------------- client_java's writer

  private static double gaugeValue(SplittableRandom rnd) {
    return switch (rnd.nextInt(6)) {
      case 0 -> Double.POSITIVE_INFINITY;
      case 1 -> Double.NEGATIVE_INFINITY;
      case 2 -> Double.NaN;
      default -> (rnd.nextDouble() - 0.5) * Math.pow(10, rnd.nextInt(-12, 12));
    };
  }

  /**
   * Seeded counters (client_java appends {@code _total} to a counter's TYPE line and samples),
   * gauges and classic histograms, read back with their names, types, help and exact values.
   */
  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
  void shouldReadBackWhatClientJavaWrote(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    PrometheusRegistry registry = new PrometheusRegistry();
    Map<String, Type> types = new LinkedHashMap<>();
    Map<String, String> helps = new HashMap<>();
    Map<List<String>, Double> values = new HashMap<>(); // (sample name, label value) -> value
    Map<String, Integer> series = new HashMap<>(); // sample name -> how many series
    Map<String, List<Double>> observations = new HashMap<>();
    Map<String, double[]> bounds = new HashMap<>();
    int families = 2 + rnd.nextInt(8);
    for (int i = 0; i < families; i++) {
      String name = "tokenspeed:f" + i + (rnd.nextBoolean() ? "_x:y" : "");
      String help = "t" + text(rnd, 12);
      int kind = rnd.nextInt(3);
      if (kind == 0) {
        Counter c = Counter.builder().name(name).help(help).labelNames("v").register(registry);
        types.put(name + "_total", Type.COUNTER);
        helps.put(name + "_total", help);
        for (int s = 0; s < 1 + rnd.nextInt(4); s++) {
          String v = "t" + text(rnd, 8) + s;
          double amount = rnd.nextInt(1_000_000) + rnd.nextInt(4) * 0.25;
          c.labelValues(v).inc(amount);
          values.put(List.of(name + "_total", v), amount);
          series.merge(name + "_total", 1, Integer::sum);
        }
      } else if (kind == 1) {
        Gauge g = Gauge.builder().name(name).help(help).labelNames("v").register(registry);
        types.put(name, Type.GAUGE);
        helps.put(name, help);
        for (int s = 0; s < 1 + rnd.nextInt(4); s++) {
          String v = "t" + text(rnd, 8) + s;
          double x = gaugeValue(rnd);
          g.labelValues(v).set(x);
          values.put(List.of(name, v), x);
          series.merge(name, 1, Integer::sum);
        }
      } else {
        TreeSet<Double> b = new TreeSet<>();
        while (b.size() < 1 + rnd.nextInt(6)) {
          b.add(Math.pow(10, rnd.nextInt(-3, 3)) * (1 + rnd.nextInt(9)));
        }
        double[] upper = b.stream().mapToDouble(Double::doubleValue).toArray();
        Histogram h =
            Histogram.builder()
                .name(name)
                .help(help)
                .classicOnly()
                .classicUpperBounds(upper)
                .register(registry);
        types.put(name, Type.HISTOGRAM);
        helps.put(name, help);
        bounds.put(name, upper);
        List<Double> obs = new ArrayList<>();
        for (int s = 0; s < rnd.nextInt(50); s++) {
          double x = Math.pow(10, rnd.nextDouble() * 6 - 3);
          h.observe(x);
          obs.add(x);
        }
        observations.put(name, obs);
      }
    }
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    PrometheusTextFormatWriter.create()
        .write(out, registry.scrape(), EscapingScheme.UNDERSCORE_ESCAPING);
    String text = out.toString(StandardCharsets.UTF_8);

    Map<String, Family> f = PrometheusText.parse(text);
    assertEquals(types.keySet(), f.keySet(), text);
    for (var t : types.entrySet()) {
      assertEquals(t.getValue(), f.get(t.getKey()).type(), t.getKey());
      assertEquals(helps.get(t.getKey()), f.get(t.getKey()).help(), t.getKey());
    }
    for (var n : series.entrySet()) {
      assertEquals(n.getValue(), PrometheusText.samples(f, n.getKey()).size(), n.getKey());
    }
    for (var v : values.entrySet()) {
      double got = PrometheusText.value(f, v.getKey().get(0), "v", v.getKey().get(1));
      assertEquals(0, Double.compare(v.getValue(), got), v.getKey() + ": " + got);
    }
    for (var o : observations.entrySet()) {
      String name = o.getKey();
      List<Double> obs = o.getValue();
      assertEquals(obs.size(), PrometheusText.value(f, name + "_count"), name);
      double sum = obs.stream().mapToDouble(Double::doubleValue).sum();
      assertEquals(sum, PrometheusText.value(f, name + "_sum"), 1e-9 * (1 + sum), name);
      double[] upper = bounds.get(name);
      var buckets = f.get(name).samples(name + "_bucket");
      assertEquals(upper.length + 1, buckets.size(), name);
      for (int i = 0; i < upper.length; i++) {
        double bound = upper[i];
        long want = obs.stream().filter(x -> x <= bound).count();
        double le = Double.parseDouble(buckets.get(i).labels().get("le"));
        assertEquals(bound, le, name);
        assertEquals(want, buckets.get(i).value(), name + " le=" + le);
      }
      assertEquals("+Inf", buckets.getLast().labels().get("le"), name);
      assertEquals(obs.size(), buckets.getLast().value(), name);
    }
  }
}
