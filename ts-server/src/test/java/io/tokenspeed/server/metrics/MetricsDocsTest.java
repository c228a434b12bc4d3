package io.tokenspeed.server.metrics;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.core.metrics.PrometheusText.Family;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.server.ReactorRoot;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * docs/metrics.md matches the exporter: its tables' rows name exactly the families a scrape
 * exposes, each with the type the scrape declares.
 */
class MetricsDocsTest {

  /** A table row: | `name` | type | ... */
  private static final Pattern ROW =
      Pattern.compile("^\\| `(tokenspeed:[a-z0-9_:]+)` \\| ([a-z]+) \\|", Pattern.MULTILINE);

  @Test
  void shouldDocumentEveryExposedFamilyWithItsType() throws Exception {
    Path doc = ReactorRoot.find().resolve("docs").resolve("metrics.md");
    Map<String, String> documented = new TreeMap<>();
    Matcher m = ROW.matcher(Files.readString(doc));
    while (m.find()) {
      documented.put(m.group(1), m.group(2));
    }
    EngineMetrics idle =
        new EngineMetrics(
            System.nanoTime(),
            0,
            0,
            new EngineMetrics.TierUsage(8, 0, 8),
            new EngineMetrics.TierUsage(32, 0, 32),
            Optional.empty());
    Map<String, String> exposed = new TreeMap<>();
    for (Family f :
        PrometheusText.parse(new ServerMetrics("m", "fused", 0, 0, () -> idle).scrape()).values()) {
      exposed.put(f.name(), f.type().wireName());
    }
    assertEquals(exposed, documented, "docs/metrics.md tables vs the scrape");
  }
}
