package io.tokenspeed.server.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.l3.StorageBackend;
import io.tokenspeed.server.ReactorRoot;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * docs/configuration.md matches the code: its YAML and JSON examples are files the reader accepts
 * whose store settings validate, and its naming table follows the key and variable rules.
 */
class ConfigurationDocsTest {

  private static final Pattern NAME_ROW =
      Pattern.compile("^\\| `(--[a-z-]+)` \\| `([a-z-]+)` \\| `([A-Z_]+)` \\|$");

  /** One fenced example: its language and text. */
  record Example(String language, String text) {}

  private static final List<Example> examples = new ArrayList<>();
  private static List<String> lines;

  @BeforeAll
  static void readDoc() throws Exception {
    lines =
        Files.readAllLines(
            ReactorRoot.find().resolve("docs").resolve("configuration.md"), StandardCharsets.UTF_8);
    String language = null;
    StringBuilder block = null;
    for (String line : lines) {
      if (block == null && line.startsWith("```") && line.length() > 3) {
        language = line.substring(3);
        block = new StringBuilder();
      } else if (block != null && line.equals("```")) {
        examples.add(new Example(language, block.toString()));
        block = null;
      } else if (block != null) {
        block.append(line).append('\n');
      }
    }
  }

  /** The examples' settings, keys in dash form, values as the options would receive them. */
  static Map<String, String> settings(Example example) {
    Map<String, String> settings = new LinkedHashMap<>();
    for (SettingsFile.Entry e :
        SettingsFile.parse(example.text(), example.language().equals("json"), "example")) {
      String value =
          switch (e.value()) {
            case SettingsFile.Value.Scalar s -> s.text();
            case SettingsFile.Value.Mapping m -> SettingsFile.toJson(m.json());
            case SettingsFile.Value.Sequence s -> SettingsFile.toJson(s.json());
            case SettingsFile.Value.Null n -> null;
          };
      assertNotNull(value, e.key());
      settings.put(e.key().replace('_', '-'), value);
    }
    return settings;
  }

  @Test
  void shouldHaveFileExamplesWhoseStoreSettingsValidate() {
    List<Example> files = examples.stream().filter(e -> e.language().matches("yaml|json")).toList();
    assertEquals(2, files.size(), examples::toString);
    for (Example example : files) {
      Map<String, String> settings = settings(example);
      assertEquals("redis", settings.get("kvstore-storage-backend"), example.text());
      StorageExtraConfig.Resolved resolved =
          StorageExtraConfig.parse(
              settings.get("kvstore-storage-backend"),
              settings.get("kvstore-storage-backend-extra-config"));
      assertInstanceOf(StorageBackend.Redis.class, resolved.backend());
      assertTrue(settings.containsKey("model"), example.text());
    }
  }

  @Test
  void shouldNameKeysAndVariablesByTheRules() {
    int rows = 0;
    for (String line : lines) {
      Matcher row = NAME_ROW.matcher(line);
      if (row.matches()) {
        rows++;
        assertEquals(row.group(1).substring(2), row.group(2), line);
        assertEquals(SettingsSources.variable("TOKENSPEED_SERVE_", row.group(2)), row.group(3));
      }
    }
    assertEquals(3, rows);
  }
}
