package io.tokenspeed.server.metrics;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.core.metrics.PrometheusText.Family;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.server.ReactorRoot;
import java.nio.file.Files;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * docs/metrics.md matches the exporters: its tables' rows name exactly the families a scrape
 * exposes, each with the type the scrape declares; the rows of its "Router" section those of the
 * router's exporter, the other rows those of an engine's.
 */
class MetricsDocsTest {

  /** A table row: | `name` | type | ... */
  private static final Pattern ROW =
      Pattern.compile("^\\| `(tokenspeed:[a-z0-9_:]+)` \\| ([a-z]+) \\|", Pattern.MULTILINE);

  /** The heading of the router's section, which runs to the next {@code ## } heading. */
  private static final String ROUTER_HEADING = "\n## Router\n";

  /** The document's text outside the router's section ({@code false}) or inside it. */
  private static String section(boolean router) throws Exception {
    String text = Files.readString(ReactorRoot.find().resolve("docs").resolve("metrics.md"));
    int start = text.indexOf(ROUTER_HEADING);
    if (start < 0) {
      throw new AssertionError("docs/metrics.md has no section " + ROUTER_HEADING.strip());
    }
    int end = text.indexOf("\n## ", start + ROUTER_HEADING.length());
    end = end < 0 ? text.length() : end;
    return router ? text.substring(start, end) : text.substring(0, start) + text.substring(end);
  }

  private static Map<String, String> rows(String text) {
    Map<String, String> documented = new TreeMap<>();
    Matcher m = ROW.matcher(text);
    while (m.find()) {
      documented.put(m.group(1), m.group(2));
    }
    return documented;
  }

  private static Map<String, String> families(String exposition) {
    Map<String, String> exposed = new TreeMap<>();
    for (Family f : PrometheusText.parse(exposition).values()) {
      exposed.put(f.name(), f.type().wireName());
    }
    return exposed;
  }

  @Test
  void shouldDocumentEveryFamilyOfTheRouterWithItsType() throws Exception {
    RouterMetrics router =
        new RouterMetrics(
            Map.of("prefill", java.util.List.of("http://p:1"), "decode", java.util.List.of()),
            (role, url) -> false);
    assertEquals(
        families(new String(router.scrape(), java.nio.charset.StandardCharsets.UTF_8)),
        rows(section(true)),
        "docs/metrics.md's Router section vs the router's scrape");
  }

  @Test
  void shouldDocumentEveryExposedFamilyWithItsType() throws Exception {
    Map<String, String> documented = rows(section(false));
    EngineMetrics idle =
        new EngineMetrics(
            System.nanoTime(),
            0,
            0,
            new EngineMetrics.TierUsage(8, 0, 8),
            new EngineMetrics.TierUsage(32, 0, 32),
            Optional.empty());
    assertEquals(
        families(new ServerMetrics("m", "fused", 0, 0, () -> idle).scrape()),
        documented,
        "docs/metrics.md tables vs the scrape");
  }
}
