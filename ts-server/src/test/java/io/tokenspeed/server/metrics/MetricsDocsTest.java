package io.tokenspeed.server.metrics;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.core.metrics.PrometheusText.Family;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.server.ReactorRoot;
import java.nio.file.Files;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * docs/metrics.md matches the exporters: its tables' rows name exactly the families a scrape
 * exposes, each with the type the scrape declares; the rows of its "Router" section those of the
 * router's exporter, the rows of its "Disaggregation" section those a prefill or decode engine's
 * exporter adds to a fused one's, the other rows those of a fused engine's.
 */
class MetricsDocsTest {

  /** A table row: | `name` | type | ... */
  private static final Pattern ROW =
      Pattern.compile("^\\| `(tokenspeed:[a-z0-9_:]+)` \\| ([a-z]+) \\|", Pattern.MULTILINE);

  /** The heading of the router's section, which runs to the next {@code ## } heading. */
  private static final String ROUTER_HEADING = "\n## Router\n";

  /** The heading of the PD roles' section, which runs to the next {@code ## } heading. */
  private static final String PD_HEADING = "\n## Disaggregation\n";

  /** The document's text inside the section under {@code heading}. */
  private static String section(String heading) throws Exception {
    String text = document();
    return text.substring(start(text, heading), end(text, heading));
  }

  /** The document's text outside the router's and the PD roles' sections. */
  private static String engineSections() throws Exception {
    String text = document();
    for (String heading : List.of(ROUTER_HEADING, PD_HEADING)) {
      text = text.substring(0, start(text, heading)) + text.substring(end(text, heading));
    }
    return text;
  }

  private static String document() throws Exception {
    return Files.readString(ReactorRoot.find().resolve("docs").resolve("metrics.md"));
  }

  private static int start(String text, String heading) {
    int start = text.indexOf(heading);
    if (start < 0) {
      throw new AssertionError("docs/metrics.md has no section " + heading.strip());
    }
    return start;
  }

  private static int end(String text, String heading) {
    int end = text.indexOf("\n## ", start(text, heading) + heading.length());
    return end < 0 ? text.length() : end;
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
        rows(section(ROUTER_HEADING)),
        "docs/metrics.md's Router section vs the router's scrape");
  }

  @Test
  void shouldDocumentEveryExposedFamilyWithItsType() throws Exception {
    Map<String, String> documented = rows(engineSections());
    assertEquals(
        families(new ServerMetrics("m", "fused", 0, 0, () -> IDLE).scrape()),
        documented,
        "docs/metrics.md tables vs the scrape");
  }

  @Test
  void shouldDocumentEveryFamilyThePdRolesAddWithItsType() throws Exception {
    Map<String, String> fused =
        families(new ServerMetrics("m", "fused", 0, 0, () -> IDLE).scrape());
    for (String role : List.of("prefill", "decode")) {
      Map<String, String> added =
          new TreeMap<>(
              families(new ServerMetrics("m", role, 0, 0, () -> IDLE, Optional::empty).scrape()));
      Map<String, String> kept = new TreeMap<>(added);
      kept.keySet().retainAll(fused.keySet());
      assertEquals(fused, kept, role + " keeps every family of fused");
      added.keySet().removeAll(fused.keySet());
      assertEquals(
          added, rows(section(PD_HEADING)), "docs/metrics.md's Disaggregation section vs " + role);
    }
  }

  private static final EngineMetrics IDLE =
      new EngineMetrics(
          System.nanoTime(),
          0,
          0,
          new EngineMetrics.TierUsage(8, 0, 8),
          new EngineMetrics.TierUsage(32, 0, 32),
          Optional.empty());
}
