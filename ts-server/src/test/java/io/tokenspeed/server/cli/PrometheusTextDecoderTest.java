package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.prometheus.metrics.config.EscapingScheme;
import io.prometheus.metrics.core.metrics.Counter;
import io.prometheus.metrics.core.metrics.Gauge;
import io.prometheus.metrics.core.metrics.Histogram;
import io.prometheus.metrics.expositionformats.PrometheusTextFormatWriter;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import io.tokenspeed.server.cli.PrometheusTextDecoder.Exposition;
import io.tokenspeed.server.cli.PrometheusTextDecoder.Sample;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The decoder {@code bench trace --targets} reads {@code /metrics} with: against the writer the
 * exporter uses (client_java's text format 0.0.4, seeded counters and gauges whose label values
 * need every escape), against a hand-written exposition of the server's shape (comments, several
 * series of a family, NaN and infinities, a histogram, timestamps), and malformed lines, each
 * refused with its line number and text.
 */
class PrometheusTextDecoderTest {

  private static final String TEXT = "ab \\\"\n\t{}=,#é€😀";

  private static String text(SplittableRandom rnd, int max) {
    StringBuilder sb = new StringBuilder("t");
    int n = rnd.nextInt(max);
    int points = TEXT.codePointCount(0, TEXT.length());
    for (int i = 0; i < n; i++) {
      sb.appendCodePoint(TEXT.codePointAt(TEXT.offsetByCodePoints(0, rnd.nextInt(points))));
    }
    return sb.toString();
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8})
  void shouldReadBackWhatClientJavaWrote(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    PrometheusRegistry registry = new PrometheusRegistry();
    Map<List<String>, Double> counters = new HashMap<>(); // (family, label value) -> value
    Map<List<String>, Double> gauges = new HashMap<>();
    Map<String, Double> counterSums = new HashMap<>();
    int families = 2 + rnd.nextInt(6);
    for (int i = 0; i < families; i++) {
      String name = "tokenspeed:f" + i;
      String help = text(rnd, 12);
      if (rnd.nextBoolean()) {
        Counter c = Counter.builder().name(name).help(help).labelNames("v").register(registry);
        for (int s = 0; s < 1 + rnd.nextInt(4); s++) {
          String v = text(rnd, 8) + s;
          double amount = rnd.nextInt(1_000_000) + rnd.nextInt(4) * 0.25;
          c.labelValues(v).inc(amount);
          counters.put(List.of(name, v), amount);
          counterSums.merge(name, amount, Double::sum);
        }
      } else {
        Gauge g = Gauge.builder().name(name).help(help).labelNames("v").register(registry);
        for (int s = 0; s < 1 + rnd.nextInt(4); s++) {
          String v = text(rnd, 8) + s;
          double x =
              switch (rnd.nextInt(5)) {
                case 0 -> Double.POSITIVE_INFINITY;
                case 1 -> Double.NEGATIVE_INFINITY;
                case 2 -> Double.NaN;
                default -> (rnd.nextDouble() - 0.5) * Math.pow(10, rnd.nextInt(-12, 12));
              };
          g.labelValues(v).set(x);
          gauges.put(List.of(name, v), x);
        }
      }
    }
    Histogram.builder()
        .name("tokenspeed:latency_seconds")
        .help("h")
        .classicOnly()
        .classicUpperBounds(0.1, 1)
        .register(registry)
        .observe(0.5);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    PrometheusTextFormatWriter.create()
        .write(out, registry.scrape(), EscapingScheme.UNDERSCORE_ESCAPING);
    String written = out.toString(StandardCharsets.UTF_8);

    Exposition e = PrometheusTextDecoder.decode(written);
    for (var c : counters.entrySet()) {
      String family = c.getKey().get(0);
      double got = e.counter(family, "v", c.getKey().get(1)).orElseThrow();
      assertEquals(c.getValue(), got, family + " " + c.getKey().get(1) + " in\n" + written);
      assertEquals("counter", e.types().get(family + "_total"), family);
    }
    for (var s : counterSums.entrySet()) {
      assertEquals(s.getValue(), e.counter(s.getKey()).orElseThrow(), 1e-6, s.getKey());
    }
    for (var g : gauges.entrySet()) {
      double got = e.sum(g.getKey().get(0), "v", g.getKey().get(1)).orElseThrow();
      assertEquals(0, Double.compare(g.getValue(), got), g.getKey() + ": " + got);
    }
    assertEquals(1, e.sum("tokenspeed:latency_seconds_count").orElseThrow());
    assertEquals(1, e.sum("tokenspeed:latency_seconds_bucket", "le", "+Inf").orElseThrow());
    assertEquals(0, e.sum("tokenspeed:latency_seconds_bucket", "le", "0.1").orElseThrow());
  }

  /** The server's shape, by hand: what a reader of /metrics meets besides plain samples. */
  @Test
  void shouldDecodeCommentsLabelsSeveralSeriesAndSpecialValues() {
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
        tokenspeed:ttft_seconds_count 2\r
        tokenspeed:ttft_seconds_sum 0.75
        # EOF
        """;
    Exposition e = PrometheusTextDecoder.decode(text);
    assertEquals(13, e.samples().size(), e.samples()::toString);
    assertEquals(3072, e.counter("tokenspeed:l3_payload_bytes", "kind", "get").orElseThrow());
    assertEquals(2_000_000, e.counter("tokenspeed:l3_payload_bytes", "kind", "put").orElseThrow());
    assertEquals(
        2048,
        e.counter("tokenspeed:l3_payload_bytes", "kind", "get", "tp_rank", "1").orElseThrow());
    assertTrue(e.counter("tokenspeed:l3_payload_bytes", "kind", "query").isEmpty());
    assertEquals(
        Double.POSITIVE_INFINITY,
        e.sum("tokenspeed:l3_break_even_bandwidth_bytes_per_second").orElseThrow());
    assertTrue(Double.isNaN(e.sum("tokenspeed:l3_restore_latency_seconds").orElseThrow()));
    Sample odd =
        e.samples().stream()
            .filter(s -> s.name().equals("tokenspeed:odd"))
            .findFirst()
            .orElseThrow();
    assertEquals("C:\\tmp\\a \"b\"\nc", odd.labels().get("path"));
    assertEquals(Double.NEGATIVE_INFINITY, odd.value());
    // a counter without the _total suffix (an exporter that does not append it)
    assertEquals(3, e.counter("old_style", "reason", "pressure").orElseThrow());
    assertEquals(7, e.counter("old_style").orElseThrow());
    assertEquals("counter", e.types().get("old_style"));
    assertEquals("histogram", e.types().get("tokenspeed:ttft_seconds"));
    assertEquals(2, e.sum("tokenspeed:ttft_seconds_count").orElseThrow());
    assertTrue(e.has("tokenspeed:ttft_seconds_sum"));
    assertTrue(!e.has("tokenspeed:ttft_seconds"), "a histogram has no sample of its own name");
  }

  @Test
  void shouldDecodeAnEmptyExpositionAndALastLineWithoutItsLineFeed() {
    assertEquals(0, PrometheusTextDecoder.decode("").samples().size());
    assertEquals(0, PrometheusTextDecoder.decode("\n# only a comment\n").samples().size());
    assertEquals(5, PrometheusTextDecoder.decode("a 1\nb 5").sum("b").orElseThrow());
  }

  @ParameterizedTest(name = "{1}")
  @CsvSource(
      delimiter = '|',
      quoteCharacter = '`',
      value = {
        "a 1\\nb | line 2: no value after b: b",
        "a{kind=\"get\" 1 | line 1: ',' or '}' expected after the value of label kind",
        "a{kind=\"get} 1 | line 1: the value of label kind is not closed",
        "a{kind=\"g\\et\"} 1 | line 1: escape \\e in the value of label kind",
        "a{kind=get} 1 | line 1: '\"' expected to open the value of label kind",
        "a{1kind=\"get\"} 1 | line 1: a label name expected at column 3",
        "a{kind=\"x\",kind=\"y\"} 1 | line 1: label kind given twice",
        "a one | line 1: value 'one' is not a decimal float, NaN, +Inf or -Inf",
        "a 0x10 | line 1: value '0x10' is not a decimal float",
        "a 1.5d | line 1: value '1.5d' is not a decimal float",
        "a Infinity | line 1: value 'Infinity' is not a decimal float",
        "a 1 12.5 | line 1: timestamp '12.5' is not an int64 of milliseconds",
        "a 1 2 3 | line 1: text after the sample: '3'",
        "a-b 1 | line 1: character '-' in a metric name: a-b 1",
        "9a 1 | line 1: a metric name expected at column 1",
        "# TYPE a countr | line 1: type 'countr' of a is not counter, gauge",
        "# TYPE a | line 1: type '' of a is not counter",
        "# TYPE a counter\\n# TYPE a gauge | line 2: a second TYPE for a",
        "# HELP | line 1: HELP without a metric name",
        "a{x=\"1\"} 1\\nb 2\\na{x=\"1\"} 3 | line 3: series a{x=1} given twice: a{x=\"1\"} 3"
      })
  void shouldNameTheLineAndWhatIsWrongWithIt(String lines, String message) {
    String text = lines.replace("\\n", "\n") + "\n";
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> PrometheusTextDecoder.decode(text));
    assertTrue(e.getMessage().startsWith(message.strip()), e.getMessage());
  }
}
