package io.tokenspeed.server.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.l3.StorageBackend;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStoreSettings;
import io.tokenspeed.l3.store.mooncake.MooncakeStoreSettings;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.server.ReactorRoot;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * docs/l3-configuration.md matches the code: every field's table row (path, default, allowed range)
 * per backend and for {@code async}, every JSON example, and every error message it quotes. A
 * documented numeric range is probed at both ends and just outside them.
 */
class L3ConfigurationDocsTest {

  private static final JsonMapper JSON = new JsonMapper();

  private static final Pattern FIELDS_HEADING = Pattern.compile("^### `(\\w+)` fields$");
  private static final Pattern RANGE = Pattern.compile("^\\[(-?\\d+), (-?\\d+)\\]$");

  /** One row of a field table. */
  record Row(String section, String path, String type, String defaultValue, String allowed) {}

  /** One JSON example and the backend heading it stands under. */
  record Example(String backend, String json) {}

  private static List<String> lines;
  private static final List<Row> rows = new ArrayList<>();
  private static final List<Example> examples = new ArrayList<>();

  @BeforeAll
  static void readDoc() throws Exception {
    Path doc = ReactorRoot.find().resolve("docs").resolve("l3-configuration.md");
    lines = Files.readAllLines(doc, StandardCharsets.UTF_8);
    String heading = "";
    String section = null;
    StringBuilder block = null;
    for (String line : lines) {
      if (block != null) {
        if (line.equals("```")) {
          examples.add(new Example(heading, block.toString()));
          block = null;
        } else {
          block.append(line).append('\n');
        }
        continue;
      }
      if (line.equals("```json")) {
        block = new StringBuilder();
      } else if (line.startsWith("#")) {
        heading = line.replaceFirst("^#+ ", "");
        Matcher m = FIELDS_HEADING.matcher(line);
        section = m.matches() ? m.group(1) : null;
      } else if (section != null && line.startsWith("| `")) {
        List<String> cells = cells(line);
        assertEquals(5, cells.size(), line);
        rows.add(new Row(section, unquote(cells.get(0)), cells.get(1), cells.get(2), cells.get(3)));
      }
    }
  }

  private static List<String> cells(String line) {
    String inner = line.substring(1, line.length() - 1);
    List<String> out = new ArrayList<>();
    for (String cell : inner.split(" \\| ", -1)) {
      out.add(cell.trim());
    }
    return out;
  }

  private static String unquote(String cell) {
    return cell.startsWith("`") && cell.endsWith("`") ? cell.substring(1, cell.length() - 1) : cell;
  }

  @Test
  void shouldDocumentExactlyTheFieldsOfEachBackendAndOfAsync() {
    Map<String, List<String>> documented = new LinkedHashMap<>();
    for (Row row : rows) {
      documented.computeIfAbsent(row.section(), s -> new ArrayList<>()).add(row.path());
    }
    Map<String, List<String>> expected = new LinkedHashMap<>();
    for (String backend : StorageExtraConfig.BACKENDS) {
      expected.put(backend, StorageExtraConfig.backendFields(backend));
    }
    expected.put("async", StorageExtraConfig.ASYNC_FIELDS.stream().map(f -> "async." + f).toList());
    assertEquals(expected, documented);
  }

  @Test
  void shouldDocumentEveryDefaultExactly() {
    Map<String, Map<String, String>> defaults = new LinkedHashMap<>();
    defaults.put(
        "memory",
        Map.of(
            "max_key_bytes", str(MemoryStoreSettings.DEFAULT_MAX_KEY_BYTES),
            "max_value_bytes", str(MemoryStoreSettings.DEFAULT_MAX_VALUE_BYTES),
            "capacity_bytes", str(MemoryStoreSettings.DEFAULT_CAPACITY_BYTES)));
    defaults.put(
        "file",
        Map.of(
            "path", "`${java.io.tmpdir}/" + StorageExtraConfig.DEFAULT_FILE_DIRECTORY + "`",
            "fsync", str(FileStoreSettings.DEFAULT_FSYNC),
            "max_key_bytes", str(FileStoreSettings.DEFAULT_MAX_KEY_BYTES),
            "max_value_bytes", str(FileStoreSettings.DEFAULT_MAX_VALUE_BYTES),
            "direct_io", "\"" + FileStoreSettings.DEFAULT_DIRECT_IO.jsonName() + "\"",
            "read_threads", str(FileStoreSettings.DEFAULT_READ_THREADS),
            "read_chunk_bytes", str(FileStoreSettings.DEFAULT_READ_CHUNK_BYTES)));
    RedisStoreSettings redis = RedisStoreSettings.standalone("h:1");
    Map<String, String> redisDefaults = new LinkedHashMap<>();
    redisDefaults.put("uri", "required: uri or cluster");
    redisDefaults.put("cluster", "required: uri or cluster");
    redisDefaults.put("username", "\"" + redis.username() + "\"");
    redisDefaults.put("password", "none");
    redisDefaults.put("tls", str(redis.tls()));
    redisDefaults.put("connect_timeout_ms", str(redis.connectTimeoutMs()));
    redisDefaults.put("command_timeout_ms", str(redis.commandTimeoutMs()));
    redisDefaults.put("connections", str(redis.connections()));
    redisDefaults.put("pipeline_depth", str(redis.pipelineDepth()));
    redisDefaults.put("max_value_bytes", str(redis.maxValueBytes()));
    redisDefaults.put("max_key_bytes", str(redis.maxKeyBytes()));
    defaults.put("redis", redisDefaults);
    MooncakeStoreSettings mooncake = MooncakeStoreSettings.pureClient(Path.of("l"), "h", "m");
    Map<String, String> mooncakeDefaults = new LinkedHashMap<>();
    StorageExtraConfig.MOONCAKE_REQUIRED.forEach(f -> mooncakeDefaults.put(f, "required"));
    mooncakeDefaults.put("metadata_server", "\"" + mooncake.metadataServer() + "\"");
    mooncakeDefaults.put("protocol", "\"" + mooncake.protocol() + "\"");
    mooncakeDefaults.put("device_name", "\"" + mooncake.deviceName() + "\"");
    mooncakeDefaults.put("global_segment_size_bytes", str(mooncake.globalSegmentSizeBytes()));
    mooncakeDefaults.put("local_buffer_size_bytes", str(mooncake.localBufferSizeBytes()));
    mooncakeDefaults.put("max_key_bytes", str(mooncake.maxKeyBytes()));
    mooncakeDefaults.put("lease_ttl_ms", str(mooncake.leaseTtlMs()));
    mooncakeDefaults.put("namespace_delete_wait_ms", str(mooncake.namespaceDeleteWaitMs()));
    defaults.put("mooncake", mooncakeDefaults);
    Map<String, String> asyncDefaults = new LinkedHashMap<>();
    for (Record r : List.<Record>of(StorageConfig.defaults(), L3ExecutorConfig.defaults())) {
      for (var c : r.getClass().getRecordComponents()) {
        try {
          Object v = c.getAccessor().invoke(r);
          asyncDefaults.put(
              "async." + StorageExtraConfigTest.snake(c.getName()),
              v instanceof Boolean on // the on/off switches (cost_model, early_h2d)
                  ? (on ? "\"on\"" : "\"off\"")
                  : String.valueOf(v));
        } catch (ReflectiveOperationException e) {
          throw new AssertionError(e);
        }
      }
    }
    defaults.put("async", asyncDefaults);

    assertFalse(rows.isEmpty());
    for (Row row : rows) {
      String expected = defaults.get(row.section()).get(row.path());
      assertTrue(expected != null, () -> "no default known for " + row);
      String cell = row.defaultValue();
      assertTrue(
          cell.equals(expected) || cell.startsWith(expected + " ("),
          () -> row.section() + " " + row.path() + ": documented " + cell + ", code " + expected);
    }
    assertEquals(
        Path.of(System.getProperty("java.io.tmpdir"), StorageExtraConfig.DEFAULT_FILE_DIRECTORY),
        StorageExtraConfig.defaultFilePath());
  }

  /**
   * Every documented range [min, max]: min and max are accepted and arrive in the settings; min - 1
   * and max + 1 are rejected with a message that starts with the field's path.
   */
  @Test
  void shouldEnforceEveryDocumentedRangeExactly() throws Exception {
    int probed = 0;
    for (Row row : rows) {
      Matcher m = RANGE.matcher(row.allowed());
      if (!m.matches()) {
        continue;
      }
      BigInteger min = new BigInteger(m.group(1));
      BigInteger max = new BigInteger(m.group(2));
      for (BigInteger ok : List.of(min, max)) {
        StorageExtraConfig.Resolved r = parse(row, ok);
        String field = row.path().replaceFirst("^async\\.", "");
        Record record =
            row.section().equals("async")
                ? StorageExtraConfig.SCHEDULING_FIELDS.contains(field)
                    ? r.runtime().scheduling()
                    : r.runtime().executor()
                : settings(r.backend());
        Object value =
            StorageExtraConfigTest.component(record, StorageExtraConfigTest.camel(field));
        assertEquals(ok.longValueExact(), ((Number) value).longValue(), row.toString());
      }
      for (BigInteger bad : List.of(min.subtract(BigInteger.ONE), max.add(BigInteger.ONE))) {
        ConfigException e =
            assertThrows(ConfigException.class, () -> parse(row, bad), row::toString);
        assertTrue(
            e.getMessage().startsWith(row.path() + "=" + bad),
            () -> row.path() + "=" + bad + ": " + e.getMessage());
      }
      probed++;
    }
    // every integer field has a numeric range but the three low watermarks (relative to high)
    long integers = rows.stream().filter(r -> r.type().equals("integer")).count();
    assertEquals(integers - 3, probed);
  }

  private static StorageExtraConfig.Resolved parse(Row row, BigInteger value) throws Exception {
    ObjectNode root = base(row.section().equals("async") ? "memory" : row.section());
    ObjectNode target = root;
    String field = row.path();
    if (row.section().equals("async")) {
      target = root.putObject("async");
      field = field.substring("async.".length());
      if (field.startsWith("high_")) {
        target.put("low_" + field.substring("high_".length()), 0);
      }
    }
    target.put(field, value);
    return StorageExtraConfig.parse(
        row.section().equals("async") ? "memory" : row.section(), JSON.writeValueAsString(root));
  }

  /** The smallest valid configuration of {@code backend}. */
  private static ObjectNode base(String backend) {
    ObjectNode root = JSON.createObjectNode();
    if (backend.equals("redis")) {
      root.put("uri", "127.0.0.1:6379");
    } else if (backend.equals("mooncake")) {
      root.put("library_path", "/opt/mooncake/libmooncake_store.so");
      root.put("local_hostname", "10.0.0.5");
      root.put("master_server_address", "10.0.0.1:50051");
    }
    return root;
  }

  private static Record settings(StorageBackend backend) {
    return switch (backend) {
      case StorageBackend.Memory m -> m.settings();
      case StorageBackend.File f -> f.settings();
      case StorageBackend.Redis r -> r.settings();
      case StorageBackend.Mooncake m -> m.settings();
    };
  }

  @Test
  void shouldParseEveryExampleWithItsBackend() {
    int parsed = 0;
    for (Example example : examples) {
      if (StorageExtraConfig.BACKENDS.contains(example.backend())) {
        StorageExtraConfig.Resolved r = StorageExtraConfig.parse(example.backend(), example.json());
        assertEquals(example.backend(), r.backend().name(), example.json());
        parsed++;
      }
    }
    assertTrue(parsed >= 5, "examples found: " + parsed);
  }

  /** The error table: each input gives exactly the documented message ("..." ends a prefix). */
  @Test
  void shouldGiveEveryDocumentedErrorMessage() {
    int checked = 0;
    boolean inErrors = false;
    for (String line : lines) {
      if (line.startsWith("## ")) {
        inErrors = line.equals("## Errors");
        continue;
      }
      if (!inErrors
          || !line.startsWith("| ")
          || line.startsWith("| backend")
          || line.startsWith("| ---")) {
        continue;
      }
      List<String> cells = cells(line);
      String backend = cells.get(0);
      String input = unquote(cells.get(1));
      String message = unquote(cells.get(2));
      ConfigException e =
          assertThrows(ConfigException.class, () -> StorageExtraConfig.parse(backend, input), line);
      if (message.endsWith("...")) {
        String prefix = message.substring(0, message.length() - 3);
        assertTrue(e.getMessage().startsWith(prefix), () -> line + "\n  code: " + e.getMessage());
      } else {
        assertEquals(message, e.getMessage(), line);
      }
      checked++;
    }
    assertTrue(checked >= 10, "error rows found: " + checked);
  }

  private static String str(Object value) {
    return String.valueOf(value);
  }
}
