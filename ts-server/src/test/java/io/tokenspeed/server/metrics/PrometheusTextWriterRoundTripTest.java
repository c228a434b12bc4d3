package io.tokenspeed.server.metrics;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.prometheus.metrics.config.EscapingScheme;
import io.prometheus.metrics.core.metrics.Counter;
import io.prometheus.metrics.core.metrics.Gauge;
import io.prometheus.metrics.core.metrics.Histogram;
import io.prometheus.metrics.expositionformats.PrometheusTextFormatWriter;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import io.tokenspeed.testkit.PrometheusText;
import io.tokenspeed.testkit.PrometheusText.Family;
import io.tokenspeed.testkit.PrometheusText.Type;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeSet;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The testkit's parser against the writer the exporter uses (client_java 1.8's text format 0.0.4
 * writer): seeded random counters, gauges and histograms, with label values and help texts that
 * need every escape, read back with their names, types, help and exact values.
 */
class PrometheusTextWriterRoundTripTest {

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

  private static double gaugeValue(SplittableRandom rnd) {
    return switch (rnd.nextInt(6)) {
      case 0 -> Double.POSITIVE_INFINITY;
      case 1 -> Double.NEGATIVE_INFINITY;
      case 2 -> Double.NaN;
      default -> (rnd.nextDouble() - 0.5) * Math.pow(10, rnd.nextInt(-12, 12));
    };
  }

  @ParameterizedTest(name = "seed={0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
  void shouldReadBackWhatClientJavaWrote(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    PrometheusRegistry registry = new PrometheusRegistry();
    Map<String, Type> types = new LinkedHashMap<>();
    Map<String, String> helps = new HashMap<>();
    Map<List<String>, Double> values = new HashMap<>(); // (sample name, label value) -> value
    Map<String, List<Double>> observations = new HashMap<>();
    Map<String, double[]> bounds = new HashMap<>();
    int families = 2 + rnd.nextInt(8);
    for (int i = 0; i < families; i++) {
      String name = "tokenspeed:f" + i + (rnd.nextBoolean() ? "_x:y" : "");
      String help = text(rnd, 12);
      int kind = rnd.nextInt(3);
      if (kind == 0) {
        Counter c = Counter.builder().name(name).help(help).labelNames("v").register(registry);
        types.put(name + "_total", Type.COUNTER);
        helps.put(name + "_total", help);
        for (int s = 0; s < 1 + rnd.nextInt(4); s++) {
          String v = text(rnd, 8) + s;
          double amount = rnd.nextInt(1000) + rnd.nextInt(4) * 0.25;
          c.labelValues(v).inc(amount);
          values.put(List.of(name + "_total", v), amount);
        }
      } else if (kind == 1) {
        Gauge g = Gauge.builder().name(name).help(help).labelNames("v").register(registry);
        types.put(name, Type.GAUGE);
        helps.put(name, help);
        for (int s = 0; s < 1 + rnd.nextInt(4); s++) {
          String v = text(rnd, 8) + s;
          double x = gaugeValue(rnd);
          g.labelValues(v).set(x);
          values.put(List.of(name, v), x);
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
      assertTrue(buckets.getLast().labels().get("le").equals("+Inf"), name);
      assertEquals(obs.size(), buckets.getLast().value(), name);
    }
  }
}
