package io.tokenspeed.server.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.l3.StorageBackend;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStoreSettings;
import io.tokenspeed.l3.store.mooncake.MooncakeStoreSettings;
import io.tokenspeed.scheduler.StorageConfig;
import java.lang.reflect.RecordComponent;
import java.nio.charset.CharsetEncoder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link StorageExtraConfig}: the defaults and overrides of every backend, the {@code async}
 * object's fields reaching their record components, one case per error class with the JSON path
 * asserted, and seeded random valid configurations whose every given value must arrive exactly.
 */
class StorageExtraConfigTest {

  private static final JsonMapper JSON = new JsonMapper();

  private static final String REDIS_URI = "redis://127.0.0.1:6379";

  private static final String MOONCAKE_REQUIRED =
      "'library_path': '/opt/mooncake/libmooncake_store.so', 'local_hostname': '10.0.0.5',"
          + " 'master_server_address': '10.0.0.1:50051'";

  /** JSON written with single quotes, for readable test data. */
  static String j(String singleQuoted) {
    return singleQuoted.replace('\'', '"');
  }

  // ---------------------------------------------------------------- defaults

  @ParameterizedTest
  @ValueSource(strings = {"", "  \n ", "{}", " { } "})
  void shouldGiveEveryDefaultWhenTheMemoryConfigIsEmpty(String json) {
    StorageExtraConfig.Resolved r = StorageExtraConfig.parse("memory", json);
    assertEquals(new StorageBackend.Memory(MemoryStoreSettings.defaults()), r.backend());
    assertEquals(StorageRuntimeConfig.defaults(), r.runtime());
  }

  @Test
  void shouldTreatNullJsonAsEmpty() {
    StorageExtraConfig.Resolved r = StorageExtraConfig.parse("memory", null);
    assertEquals(new StorageBackend.Memory(MemoryStoreSettings.defaults()), r.backend());
    assertEquals(StorageRuntimeConfig.defaults(), r.runtime());
    assertEquals(Long.MAX_VALUE, ((StorageBackend.Memory) r.backend()).settings().capacityBytes());
  }

  @Test
  void shouldPutTheFileStoreUnderTmpdirByDefault() {
    StorageExtraConfig.Resolved r = StorageExtraConfig.parse("file", "{}");
    Path expected =
        Path.of(System.getProperty("java.io.tmpdir"), "tokenspeed-l3").toAbsolutePath().normalize();
    assertEquals(new StorageBackend.File(FileStoreSettings.of(expected)), r.backend());
    FileStoreSettings s = ((StorageBackend.File) r.backend()).settings();
    assertEquals(expected, s.root());
    assertTrue(s.fsync());
    assertEquals(StorageExtraConfig.defaultFilePath().toAbsolutePath().normalize(), s.root());
    assertEquals(StorageRuntimeConfig.defaults(), r.runtime());
  }

  @Test
  void shouldGiveTheStandaloneDefaultsWithOnlyAUri() {
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse("redis", j("{'uri': '" + REDIS_URI + "'}"));
    assertEquals(new StorageBackend.Redis(RedisStoreSettings.standalone(REDIS_URI)), r.backend());
    RedisStoreSettings s = ((StorageBackend.Redis) r.backend()).settings();
    assertFalse(s.cluster());
    assertEquals("", s.username());
    assertEquals(null, s.password());
    assertEquals(StorageRuntimeConfig.defaults(), r.runtime());
  }

  @Test
  void shouldGiveTheClusterDefaultsWithOnlySeeds() {
    List<String> seeds = List.of("redis://10.0.0.1:7000", "10.0.0.2:7001", "redis://[::1]:7002");
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse("redis", j("{'cluster': ['" + String.join("', '", seeds) + "']}"));
    assertEquals(new StorageBackend.Redis(RedisStoreSettings.cluster(seeds)), r.backend());
    assertTrue(((StorageBackend.Redis) r.backend()).settings().cluster());
  }

  @Test
  void shouldGiveThePureClientDefaultsWithOnlyTheRequiredMooncakeFields() {
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse("mooncake", j("{" + MOONCAKE_REQUIRED + "}"));
    MooncakeStoreSettings expected =
        MooncakeStoreSettings.pureClient(
            Path.of("/opt/mooncake/libmooncake_store.so"), "10.0.0.5", "10.0.0.1:50051");
    assertEquals(new StorageBackend.Mooncake(expected), r.backend());
    assertTrue(((StorageBackend.Mooncake) r.backend()).settings().pureClientMode());
    assertEquals(StorageRuntimeConfig.defaults(), r.runtime());
  }

  // ---------------------------------------------------------------- overrides

  @Test
  void shouldSetEveryMemoryField() {
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse(
            "memory",
            j("{'max_key_bytes': 300, 'max_value_bytes': 2147483639, 'capacity_bytes': 1}"));
    assertEquals(
        new StorageBackend.Memory(new MemoryStoreSettings(300, Integer.MAX_VALUE - 8, 1)),
        r.backend());
  }

  @Test
  void shouldSetEveryFileFieldAndMakeAPathAbsolute() {
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse(
            "file",
            j(
                "{'path': 'l3/./objects/../store', 'fsync': false, 'max_key_bytes': 65535,"
                    + " 'max_value_bytes': 1099511627776, 'direct_io': 'off',"
                    + " 'read_threads': 0, 'read_chunk_bytes': 65536}"));
    Path root = Path.of("l3/store").toAbsolutePath();
    assertEquals(
        new StorageBackend.File(
            new FileStoreSettings(
                root, 65_535, 1L << 40, false, FileStoreSettings.DirectIo.OFF, 0, 65_536)),
        r.backend());
    assertEquals(root, ((StorageBackend.File) r.backend()).settings().root());
  }

  @Test
  void shouldSetEveryRedisField() {
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse(
            "redis",
            j(
                "{'uri': 'rediss://cache.internal:6380', 'username': 'tenant-a', 'password':"
                    + " 'p a ss', 'tls': true, 'connect_timeout_ms': 10, 'command_timeout_ms':"
                    + " 600000, 'connections': 64, 'pipeline_depth': 1024, 'max_value_bytes':"
                    + " 536870912, 'max_key_bytes': 1}"));
    RedisStoreSettings expected =
        new RedisStoreSettings(
            List.of("rediss://cache.internal:6380"),
            false,
            "tenant-a",
            "p a ss",
            true,
            10,
            600_000,
            64,
            1024,
            512L << 20,
            1);
    assertEquals(new StorageBackend.Redis(expected), r.backend());
    assertFalse(r.toString().contains("p a ss"), r::toString);
  }

  @Test
  void shouldSetEveryMooncakeField() {
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse(
            "mooncake",
            j(
                "{"
                    + MOONCAKE_REQUIRED
                    + ", 'metadata_server': 'http://meta:8080/metadata', 'protocol': 'rdma',"
                    + " 'device_name': 'mlx5_0,mlx5_1', 'global_segment_size_bytes': 17592186044416,"
                    + " 'local_buffer_size_bytes': 0, 'max_key_bytes': 4096}"));
    MooncakeStoreSettings expected =
        new MooncakeStoreSettings(
            Path.of("/opt/mooncake/libmooncake_store.so"),
            "10.0.0.5",
            "http://meta:8080/metadata",
            "10.0.0.1:50051",
            "rdma",
            "mlx5_0,mlx5_1",
            1L << 44,
            0,
            4096,
            MooncakeStoreSettings.DEFAULT_LEASE_TTL_MS,
            MooncakeStoreSettings.DEFAULT_NAMESPACE_DELETE_WAIT_MS);
    assertEquals(new StorageBackend.Mooncake(expected), r.backend());
  }

  @Test
  void shouldRouteAsyncFieldsToTheirRecords() {
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse(
            "memory",
            j(
                "{'async': {'soft_deadline_ms': 750, 'max_operations': 8,"
                    + " 'min_extension_tokens': 64, 'get_workers': 16, 'health_cooldown_ms': 0}}"));
    StorageConfig s = r.runtime().scheduling();
    L3ExecutorConfig e = r.runtime().executor();
    assertEquals(750, s.softDeadlineMs());
    assertEquals(8, s.maxOperations());
    assertEquals(64, s.minExtensionTokens());
    assertEquals(16, e.getWorkers());
    assertEquals(0, e.healthCooldownMs());
    assertEquals(
        new StorageConfig(
            8,
            StorageConfig.DEFAULT_MAX_HOST_BLOCKS,
            StorageConfig.DEFAULT_RETRACTION_RESERVE_PERCENT,
            750,
            StorageConfig.DEFAULT_READY_HOLD_MS,
            64,
            StorageConfig.DEFAULT_LOOKAHEAD_TOKENS,
            StorageConfig.DEFAULT_MAX_QUERY_KEYS,
            StorageConfig.DEFAULT_NEGATIVE_METADATA_CAPACITY,
            StorageConfig.DEFAULT_BACKUP_CANDIDATE_CAPACITY,
            StorageConfig.DEFAULT_MAX_PUT_KEYS,
            StorageConfig.DEFAULT_HIGH_QUEUED_JOBS,
            StorageConfig.DEFAULT_LOW_QUEUED_JOBS,
            StorageConfig.DEFAULT_HIGH_QUEUED_BYTES,
            StorageConfig.DEFAULT_LOW_QUEUED_BYTES,
            StorageConfig.DEFAULT_HIGH_OLDEST_AGE_MS,
            StorageConfig.DEFAULT_LOW_OLDEST_AGE_MS,
            StorageConfig.DEFAULT_MAX_BACKUP_BACKOFF_MS),
        s,
        "nothing else in the scheduling settings changes");
    assertEquals(
        new L3ExecutorConfig(
            L3ExecutorConfig.DEFAULT_QUERY_WORKERS,
            16,
            L3ExecutorConfig.DEFAULT_PUT_WORKERS,
            L3ExecutorConfig.DEFAULT_QUERY_QUEUE_CAPACITY,
            L3ExecutorConfig.DEFAULT_GET_QUEUE_CAPACITY,
            L3ExecutorConfig.DEFAULT_PUT_QUEUE_CAPACITY,
            L3ExecutorConfig.DEFAULT_MAX_OUTSTANDING_OPERATIONS,
            0,
            L3ExecutorConfig.DEFAULT_CLOSE_JOIN_DEADLINE_MS),
        e,
        "nothing else in the executor settings changes");
    assertEquals(new StorageBackend.Memory(MemoryStoreSettings.defaults()), r.backend());
  }

  static Stream<String> asyncFields() {
    return StorageExtraConfig.ASYNC_FIELDS.stream()
        .filter(f -> !f.equals("cost_model") && !f.equals("early_h2d"));
  }

  /**
   * Each numeric async field, set alone to its default minus one (plus one for a default of 0),
   * changes exactly its own component.
   */
  @ParameterizedTest
  @MethodSource("asyncFields")
  void shouldChangeExactlyTheNamedComponentForEachAsyncField(String field) throws Exception {
    boolean scheduling = StorageExtraConfig.SCHEDULING_FIELDS.contains(field);
    Record defaults = scheduling ? StorageConfig.defaults() : L3ExecutorConfig.defaults();
    long byDefault = ((Number) component(defaults, camel(field))).longValue();
    long value = byDefault == 0 ? 1 : byDefault - 1;
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse("file", j("{'async': {'" + field + "': " + value + "}}"));
    assertChangedExactly(r, scheduling, defaults, camel(field), value);
  }

  /**
   * The on/off switches ({@code async.cost_model}, {@code async.early_h2d}) are spelt "on" or "off"
   * and each changes only its own component.
   */
  @ParameterizedTest
  @CsvSource({
    "cost_model, on, costModel",
    "cost_model, off, costModel",
    "early_h2d, on, earlyH2d",
    "early_h2d, off, earlyH2d"
  })
  void shouldSwitchEachOnOffSettingAlone(String field, String value, String component)
      throws Exception {
    StorageExtraConfig.Resolved r =
        StorageExtraConfig.parse("file", j("{'async': {'" + field + "': '" + value + "'}}"));
    assertChangedExactly(r, true, StorageConfig.defaults(), component, value.equals("on"));
  }

  private static void assertChangedExactly(
      StorageExtraConfig.Resolved r, boolean scheduling, Record defaults, String name, Object value)
      throws Exception {
    Record changed = scheduling ? r.runtime().scheduling() : r.runtime().executor();
    Record untouched = scheduling ? r.runtime().executor() : r.runtime().scheduling();
    assertEquals(scheduling ? L3ExecutorConfig.defaults() : StorageConfig.defaults(), untouched);
    for (RecordComponent c : changed.getClass().getRecordComponents()) {
      Object expected =
          c.getName().equals(name) ? value : normalize(c.getAccessor().invoke(defaults));
      assertEquals(expected, normalize(c.getAccessor().invoke(changed)), c.getName());
    }
  }

  /** The JSON names are the records' components in snake_case, none missing, none extra. */
  @Test
  void shouldNameEveryRecordComponentInSnakeCase() {
    assertEquals(StorageExtraConfig.SCHEDULING_FIELDS, snakeComponents(StorageConfig.class));
    assertEquals(StorageExtraConfig.EXECUTOR_FIELDS, snakeComponents(L3ExecutorConfig.class));
    assertEquals(StorageExtraConfig.MEMORY_FIELDS, snakeComponents(MemoryStoreSettings.class));
    assertEquals(StorageExtraConfig.MOONCAKE_FIELDS, snakeComponents(MooncakeStoreSettings.class));
    assertEquals(
        Set.copyOf(StorageExtraConfig.FILE_FIELDS),
        Set.copyOf(
            snakeComponents(FileStoreSettings.class).stream()
                .map(f -> f.equals("root") ? "path" : f)
                .toList()));
    // uris + cluster (a flag) are spelt uri (standalone) or cluster (the seeds)
    List<String> redis = new ArrayList<>(snakeComponents(RedisStoreSettings.class));
    redis.set(redis.indexOf("uris"), "uri");
    assertEquals(StorageExtraConfig.REDIS_FIELDS, redis);
    assertEquals(
        33, StorageExtraConfig.ASYNC_FIELDS.stream().distinct().count(), "no name in both");
  }

  // ---------------------------------------------------------------- errors

  /**
   * One rejected configuration.
   *
   * @param path the JSON path the message starts with (null: a document-level error)
   * @param needles what the message must contain
   * @param secrets what it must not
   */
  record Bad(
      String name,
      String backend,
      String json,
      String path,
      List<String> needles,
      List<String> secrets) {
    @Override
    public String toString() {
      return name;
    }
  }

  static Bad bad(String name, String backend, String json, String path, String... needles) {
    return new Bad(name, backend, j(json), path, List.of(needles), List.of());
  }

  static Bad secret(String name, String json, String path, String secret, String... needles) {
    return new Bad(name, "redis", j(json), path, List.of(needles), List.of(secret));
  }

  static Stream<Bad> badConfigs() {
    return Stream.of(
        // unknown fields, with the allowed ones listed
        bad(
            "unknown top-level field",
            "memory",
            "{'capacity': 5}",
            null,
            "unknown field capacity for the memory backend; allowed: max_key_bytes,"
                + " max_value_bytes, capacity_bytes, async"),
        bad(
            "unknown async field",
            "memory",
            "{'async': {'soft_deadline': 5}}",
            null,
            "unknown field async.soft_deadline; allowed: max_operations, max_host_blocks,",
            "close_join_deadline_ms"),
        bad(
            "another backend's field",
            "memory",
            "{'path': '/x'}",
            null,
            "unknown field path",
            "(path is a field of the file backend)"),
        bad(
            "an async field at the top",
            "file",
            "{'soft_deadline_ms': 5}",
            null,
            "unknown field soft_deadline_ms",
            "belongs in the async object"),
        bad(
            "a backend field in async",
            "redis",
            "{'uri': 'h:1', 'async': {'connections': 2}}",
            null,
            "unknown field async.connections",
            "belongs at the top level"),
        bad(
            "a mooncake field with redis",
            "redis",
            "{'uri': 'h:1', 'protocol': 'tcp'}",
            null,
            "(protocol is a field of the mooncake backend)"),
        // wrong JSON types
        bad(
            "string for an integer",
            "memory",
            "{'async': {'soft_deadline_ms': '200'}}",
            "async.soft_deadline_ms=",
            "async.soft_deadline_ms=\"200\" must be an integer",
            "not a string"),
        bad(
            "fraction for an integer",
            "memory",
            "{'async': {'max_operations': 1.5}}",
            "async.max_operations=",
            "async.max_operations=1.5 must be an integer",
            "not a fraction"),
        bad(
            "exponent for an integer",
            "memory",
            "{'max_key_bytes': 1e3}",
            "max_key_bytes=",
            "must be an integer (a JSON number without fraction or exponent)"),
        bad(
            "boolean for an integer",
            "memory",
            "{'async': {'get_workers': true}}",
            "async.get_workers=",
            "async.get_workers=true must be an integer",
            "not a boolean"),
        bad(
            "past the int range",
            "memory",
            "{'async': {'max_operations': 3000000000}}",
            "async.max_operations=",
            "async.max_operations=3000000000 is out of range for a 32-bit integer"
                + " [-2147483648, 2147483647]"),
        bad(
            "below the int range",
            "redis",
            "{'uri': 'h:1', 'connections': -2147483649}",
            "connections=",
            "connections=-2147483649 is out of range for a 32-bit integer"),
        bad(
            "past the long range",
            "file",
            "{'max_value_bytes': 99999999999999999999}",
            "max_value_bytes=",
            "max_value_bytes=99999999999999999999 is out of range for a 64-bit integer"),
        bad(
            "string for a boolean",
            "file",
            "{'fsync': 'yes'}",
            "fsync=",
            "fsync=\"yes\" must be true or false, not a string"),
        bad("null for a boolean", "file", "{'fsync': null}", "fsync=", "fsync=null must be true"),
        bad("number for a string", "file", "{'path': 5}", "path=", "path=5 must be a string"),
        bad(
            "object for a string",
            "mooncake",
            "{" + MOONCAKE_REQUIRED + ", 'protocol': {'name': 'tcp'}}",
            "protocol=",
            "must be a string, not an object"),
        bad(
            "string for the seed array",
            "redis",
            "{'cluster': 'h:1'}",
            "cluster=",
            "cluster=\"h:1\" must be an array of strings"),
        bad(
            "number in the seed array",
            "redis",
            "{'cluster': ['h:1', 7]}",
            "cluster[1]=",
            "cluster[1]=7 must be a string"),
        bad(
            "async not an object",
            "memory",
            "{'async': [1]}",
            "async=",
            "async=[1] must be a JSON object"),
        bad(
            "document not an object",
            "memory",
            "[1, 2]",
            "the configuration=",
            "the configuration=[1,2] must be a JSON object"),
        bad("document null", "memory", "null", "the configuration=", "must be a JSON object"),
        // malformed JSON
        bad("unclosed object", "memory", "{'async': {", null, "malformed JSON at line 1"),
        bad(
            "bare word",
            "memory",
            "{max_key_bytes: 5}",
            null,
            "malformed JSON at line 1, column 2"),
        bad(
            "duplicate field",
            "memory",
            "{'max_key_bytes': 5,\n 'max_key_bytes': 6}",
            null,
            "malformed JSON at line 2",
            "max_key_bytes"),
        bad("trailing content", "memory", "{} {}", null, "malformed JSON"),
        // redis: uri and cluster
        bad(
            "both uri and cluster",
            "redis",
            "{'uri': 'h:1', 'cluster': ['h:2']}",
            "uri and cluster",
            "uri and cluster cannot both be given"),
        bad(
            "neither uri nor cluster",
            "redis",
            "{'tls': false}",
            "uri or cluster",
            "uri or cluster is required for the redis backend",
            "redis://127.0.0.1:6379"),
        bad(
            "empty cluster",
            "redis",
            "{'cluster': []}",
            "cluster has",
            "cluster has 0 seed nodes; it must list 1 to 64"),
        bad(
            "65 seeds",
            "redis",
            "{'cluster': [" + String.join(",", Collections.nCopies(65, "'h:1'")) + "]}",
            "cluster has",
            "cluster has 65 seed nodes; it must list 1 to 64"),
        bad(
            "seed without a port",
            "redis",
            "{'cluster': ['redis://a:1', 'redis://b']}",
            "cluster[1]=",
            "cluster[1]=redis://b needs a port in [1, 65535]"),
        bad(
            "uri with a database",
            "redis",
            "{'uri': 'redis://h:6379/0'}",
            "uri=",
            "uri=redis://h:6379/0 must be host:port only"),
        bad(
            "unknown scheme",
            "redis",
            "{'uri': 'http://h:6379'}",
            "uri=",
            "must use redis:// or rediss://"),
        bad(
            "rediss without tls",
            "redis",
            "{'cluster': ['rediss://h:6379']}",
            "cluster[0]=",
            "cluster[0]=rediss://h:6379 uses rediss:// but tls=false"),
        bad(
            "redis with tls",
            "redis",
            "{'uri': 'redis://h:6379', 'tls': true}",
            "uri=",
            "uses redis:// but tls=true"),
        bad(
            "username without password",
            "redis",
            "{'uri': 'h:1', 'username': 'alice'}",
            "username=",
            "username=alice needs a password"),
        bad(
            "username with a space",
            "redis",
            "{'uri': 'h:1', 'username': 'al ice', 'password': 'x'}",
            "username=",
            "must not contain whitespace"),
        bad(
            "connections zero",
            "redis",
            "{'uri': 'h:1', 'connections': 0}",
            "connections=",
            "connections=0 must be in [1, 64]"),
        bad(
            "connect timeout too short",
            "redis",
            "{'uri': 'h:1', 'connect_timeout_ms': 9}",
            "connect_timeout_ms=",
            "connect_timeout_ms=9 must be in [10, 600000]"),
        bad(
            "redis value limit",
            "redis",
            "{'uri': 'h:1', 'max_value_bytes': 536870913}",
            "max_value_bytes=",
            "max_value_bytes=536870913 must be in [1, 536870912]"),
        // secrets never echoed
        secret(
            "credentials in the uri",
            "{'uri': 'redis://bob:hunter2@h:6379'}",
            "uri=",
            "hunter2",
            "carries credentials"),
        secret(
            "credentials in a rediss uri without tls",
            "{'uri': 'rediss://bob:hunter2@h:6379'}",
            "uri=",
            "hunter2",
            "uri=rediss://***@h:6379 uses rediss:// but tls=false"),
        secret(
            "credentials in a seed",
            "{'cluster': ['h:1', 'bob:hunter2@h:2/x']}",
            "cluster[1]=",
            "hunter2",
            "cluster[1]="),
        secret(
            "password without quotes",
            "{'uri': 'h:1',\n 'password': hunter2}",
            "malformed JSON at line 2",
            "hunter2",
            "Unrecognized token (not echoed)"),
        secret(
            "empty password",
            "{'uri': 'h:1', 'password': ''}",
            "password is empty",
            "\"\"",
            "leave the field out"),
        secret(
            "password not a string",
            "{'uri': 'h:1', 'password': 123456789}",
            "password=",
            "123456789",
            "password=(hidden) must be a string, not an integer"),
        // memory and file
        bad(
            "memory key limit",
            "memory",
            "{'max_key_bytes': 0}",
            "max_key_bytes=",
            "max_key_bytes=0 must be in [1, 65535]"),
        bad(
            "memory value limit",
            "memory",
            "{'max_value_bytes': 2147483640}",
            "max_value_bytes=",
            "max_value_bytes=2147483640 must be in [1, 2147483639]"),
        bad(
            "memory capacity zero",
            "memory",
            "{'capacity_bytes': 0}",
            "capacity_bytes=",
            "capacity_bytes=0 must be in [1, 9223372036854775807]"),
        bad("blank path", "file", "{'path': '  '}", "path=", "path=\"  \" must name a directory"),
        bad("path with NUL", "file", "{'path': 'a\\u0000b'}", "path=", "is not a valid path"),
        bad(
            "file value limit",
            "file",
            "{'max_value_bytes': 1099511627777}",
            "max_value_bytes=",
            "max_value_bytes=1099511627777 must be in [1, 1099511627776]"),
        bad(
            "file key limit",
            "file",
            "{'max_key_bytes': 65536}",
            "max_key_bytes=",
            "must be in [1, 65535]"),
        bad(
            "file direct_io not a mode",
            "file",
            "{'direct_io': 'ON'}",
            "direct_io=",
            "direct_io=\"ON\" must be auto, on or off"),
        bad(
            "file direct_io a boolean",
            "file",
            "{'direct_io': true}",
            "direct_io=",
            "direct_io=true must be a string, not a boolean"),
        bad(
            "file read threads",
            "file",
            "{'read_threads': 257}",
            "read_threads=",
            "read_threads=257 must be in [0, 256]"),
        bad(
            "file read chunk",
            "file",
            "{'read_chunk_bytes': 512}",
            "read_chunk_bytes=",
            "read_chunk_bytes=512 must be in [4096, 268435456]"),
        // mooncake
        bad(
            "mooncake without required fields",
            "mooncake",
            "{'local_hostname': 'h'}",
            "library_path, master_server_address are missing",
            "the mooncake backend requires library_path, local_hostname, master_server_address"),
        bad(
            "mooncake without the master",
            "mooncake",
            "{'library_path': '/l.so', 'local_hostname': 'h'}",
            "master_server_address is missing",
            "master_server_address is missing"),
        bad(
            "blank library path",
            "mooncake",
            "{'library_path': '', 'local_hostname': 'h', 'master_server_address': 'm:1'}",
            "library_path=",
            "library_path=\"\" must name the shared library"),
        bad(
            "upper-case protocol",
            "mooncake",
            "{" + MOONCAKE_REQUIRED + ", 'protocol': 'TCP'}",
            "protocol=",
            "protocol=TCP must match [a-z][a-z0-9_]{0,31}"),
        bad(
            "hostname with a space",
            "mooncake",
            "{" + MOONCAKE_REQUIRED.replace("10.0.0.5", "my host") + "}",
            "local_hostname=",
            "local_hostname='my host' must be non-blank without whitespace or NUL"),
        bad(
            "blank metadata server",
            "mooncake",
            "{" + MOONCAKE_REQUIRED + ", 'metadata_server': ''}",
            "metadata_server=",
            "must be non-blank"),
        bad(
            "device name with a tab",
            "mooncake",
            "{" + MOONCAKE_REQUIRED + ", 'device_name': 'a\\tb'}",
            "device_name=",
            "may be empty but must not contain whitespace"),
        bad(
            "over-long hostname",
            "mooncake",
            "{" + MOONCAKE_REQUIRED.replace("10.0.0.5", "h".repeat(1025)) + "}",
            "local_hostname of 1025 chars",
            "must be at most 1024 UTF-8 bytes"),
        bad(
            "negative segment",
            "mooncake",
            "{" + MOONCAKE_REQUIRED + ", 'global_segment_size_bytes': -1}",
            "global_segment_size_bytes=",
            "global_segment_size_bytes=-1 must be in [0, 17592186044416]"),
        bad(
            "mooncake key limit",
            "mooncake",
            "{" + MOONCAKE_REQUIRED + ", 'max_key_bytes': 4097}",
            "max_key_bytes=",
            "max_key_bytes=4097 must be in [1, 4096]"),
        // async ranges, both records
        bad(
            "soft deadline zero",
            "memory",
            "{'async': {'soft_deadline_ms': 0}}",
            "async.soft_deadline_ms=",
            "async.soft_deadline_ms=0 must be in [1, 3600000]"),
        bad(
            "max operations over the bound",
            "memory",
            "{'async': {'max_operations': 1048577}}",
            "async.max_operations=",
            "must be in [1, 1048576]"),
        bad(
            "low jobs at the default high mark",
            "memory",
            "{'async': {'low_queued_jobs': 192}}",
            "async.low_queued_jobs=",
            "async.low_queued_jobs=192 must be in [0, 191] (it must stay below"
                + " async.high_queued_jobs=192)"),
        bad(
            "high bytes under the default low mark",
            "memory",
            "{'async': {'high_queued_bytes': 1024}}",
            "async.low_queued_bytes=",
            "async.low_queued_bytes=1073741824 must be in [0, 1023] (it must stay below"
                + " async.high_queued_bytes=1024)"),
        bad(
            "low age above high age",
            "memory",
            "{'async': {'high_oldest_age_ms': 100, 'low_oldest_age_ms': 100}}",
            "async.low_oldest_age_ms=",
            "below async.high_oldest_age_ms=100"),
        bad(
            "too many workers",
            "memory",
            "{'async': {'get_workers': 257}}",
            "async.get_workers=",
            "async.get_workers=257 must be in [1, 256]"),
        bad(
            "negative cooldown",
            "memory",
            "{'async': {'health_cooldown_ms': -1}}",
            "async.health_cooldown_ms=",
            "async.health_cooldown_ms=-1 must be in [0, 3600000]"),
        bad(
            "zero queue",
            "memory",
            "{'async': {'put_queue_capacity': 0}}",
            "async.put_queue_capacity=",
            "async.put_queue_capacity=0 must be in [1, 1048576]"));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("badConfigs")
  void shouldRejectWithTheFieldPath(Bad c) {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> StorageExtraConfig.parse(c.backend(), c.json()));
    assertInstanceOf(ConfigException.class, e);
    String message = e.getMessage();
    assertFalse(message.contains("\n"), message);
    if (c.path() != null) {
      assertTrue(
          message.startsWith(c.path()), () -> "'" + c.path() + "' does not start " + message);
    }
    for (String needle : c.needles()) {
      assertTrue(message.contains(needle), () -> "missing '" + needle + "' in: " + message);
    }
    for (String secret : c.secrets()) {
      assertFalse(message.contains(secret), () -> "'" + secret + "' leaked in: " + message);
    }
  }

  /**
   * A path holding a lone surrogate, which no file-name encoding has bytes for (UTF-8 included):
   * the message names the field, the value (escaped, exact on an ASCII terminal too), the encoding
   * and the character.
   */
  @ParameterizedTest
  @ValueSource(strings = {"path", "library_path"})
  void shouldExplainAPathThatNoFileNameEncodingCanRepresent(String field) {
    String backend = field.equals("path") ? "file" : "mooncake";
    String others =
        field.equals("path") ? "" : ", 'local_hostname': 'h', 'master_server_address': 'm:1'";
    ConfigException e =
        assertThrows(
            ConfigException.class,
            () ->
                StorageExtraConfig.parse(
                    backend, j("{'" + field + "': '/tmp/l\\ud800x'" + others + "}")));
    assertEquals(
        field
            + "=\"/tmp/l\\ud800x\" cannot be a file name in this JVM: its file-name encoding"
            + " (sun.jnu.encoding) is "
            + FileNames.fileNameEncoding().name()
            + ", which cannot represent U+D800 (half of a surrogate pair: the text is not valid"
            + " Unicode)",
        e.getMessage().replaceFirst("; (no locale is set|the locale|LC_|LANG).*$", ""));
  }

  /**
   * A path with a non-ASCII letter: kept exactly under a UTF-8 locale; without one (the JVM's
   * file-name encoding is then ASCII) the message says so and how to fix it. Either way the outcome
   * is what this JVM can do.
   */
  @Test
  void shouldExplainAPathTheFileNameEncodingCannotRepresent() {
    String json = j("{'path': '/tmp/l\u00e93'}");
    if (FileNames.fileNameEncoding().newEncoder().canEncode('\u00e9')) {
      FileStoreSettings s =
          ((StorageBackend.File) StorageExtraConfig.parse("file", json).backend()).settings();
      assertEquals(Path.of("/tmp/l\u00e93"), s.root());
      return;
    }
    ConfigException e =
        assertThrows(ConfigException.class, () -> StorageExtraConfig.parse("file", json));
    String message = e.getMessage();
    assertTrue(
        message.startsWith(
            "path=\"/tmp/l\\u00e93\" cannot be a file name in this JVM: its file-name encoding"
                + " (sun.jnu.encoding) is "
                + FileNames.fileNameEncoding().name()
                + ", which cannot represent U+00E9; "),
        message);
    assertTrue(message.contains("set a UTF-8 locale, for example "), message);
    assertTrue(message.endsWith("=C.UTF-8"), message);
  }

  @ParameterizedTest
  @ValueSource(strings = {"s3", "Memory", "", "none"})
  void shouldRejectAnUnknownBackendListingTheAllowedOnes(String backend) {
    ConfigException e =
        assertThrows(ConfigException.class, () -> StorageExtraConfig.parse(backend, "{}"));
    assertEquals(
        "backend=\"" + backend + "\" is not an L3 backend; allowed: memory, file, redis, mooncake",
        e.getMessage());
  }

  @Test
  void shouldRejectANullBackend() {
    ConfigException e =
        assertThrows(ConfigException.class, () -> StorageExtraConfig.parse(null, "{}"));
    assertTrue(e.getMessage().startsWith("backend=null is not an L3 backend"), e.getMessage());
  }

  @Test
  void shouldKeepTheRecordsMessageAsTheCause() {
    ConfigException e =
        assertThrows(
            ConfigException.class,
            () -> StorageExtraConfig.parse("memory", j("{'async': {'ready_hold_ms': 0}}")));
    assertEquals("ready_hold_ms=0 must be in [1, 3600000]", e.getCause().getMessage());
    assertEquals("async.ready_hold_ms=0 must be in [1, 3600000]", e.getMessage());
  }

  @Test
  void shouldRedactOnlyTheUserInformationOfAUri() {
    assertEquals("redis://***@h:1", StorageExtraConfig.redactUri("redis://u:p@h:1"));
    assertEquals("***@h:1", StorageExtraConfig.redactUri("u:p@h:1"));
    assertEquals("rediss://h:1", StorageExtraConfig.redactUri("rediss://h:1"));
  }

  // ---------------------------------------------------------------- random valid configurations

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 8).map(i -> 0x13C0_F160L + i * 104_729);
  }

  private static final int CONFIGS_PER_SEED = 250;

  /**
   * Random valid configurations (a random subset of each backend's fields and of {@code async}, in
   * random order, with values at the edges of their ranges or anywhere inside) parse, and every
   * resolved component is the given value or, when not given, the record's default.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldCarryEveryGivenValueExactly(long seed) throws Exception {
    Random rnd = new Random(seed);
    Map<String, Integer> givenCounts = new HashMap<>();
    for (int i = 0; i < CONFIGS_PER_SEED; i++) {
      String backend = StorageExtraConfig.BACKENDS.get(rnd.nextInt(4));
      Map<String, Object> top = new LinkedHashMap<>();
      switch (backend) {
        case "memory" -> numbers(rnd, MEMORY_RANGES, top);
        case "file" -> randomFile(rnd, top);
        case "redis" -> randomRedis(rnd, top);
        default -> randomMooncake(rnd, top);
      }
      Map<String, Object> async = new LinkedHashMap<>();
      if (rnd.nextBoolean()) {
        randomAsync(rnd, async);
      }
      String json = toJson(rnd, top, async);
      String where = "seed=" + seed + " config#" + i + " " + backend + " " + json;
      StorageExtraConfig.Resolved r;
      try {
        r = StorageExtraConfig.parse(backend, json);
      } catch (IllegalArgumentException e) {
        throw new AssertionError("rejected a valid configuration: " + where + ": " + e, e);
      }
      assertEquals(backend, r.backend().name(), where);
      Record settings = settings(r.backend());
      Record defaults = defaults(backend, top);
      for (String field : StorageExtraConfig.backendFields(backend)) {
        if (field.equals("uri") || field.equals("cluster")) {
          continue;
        }
        String name = field.equals("path") ? "root" : camel(field);
        Object expected =
            top.containsKey(field) ? expected(field, top.get(field)) : component(defaults, name);
        assertEquals(
            normalize(expected), normalize(component(settings, name)), field + ", " + where);
      }
      if (settings instanceof RedisStoreSettings redis) {
        boolean cluster = top.containsKey("cluster");
        assertEquals(cluster, redis.cluster(), where);
        assertEquals(cluster ? top.get("cluster") : List.of(top.get("uri")), redis.uris(), where);
      }
      for (String field : StorageExtraConfig.ASYNC_FIELDS) {
        Record record =
            StorageExtraConfig.SCHEDULING_FIELDS.contains(field)
                ? r.runtime().scheduling()
                : r.runtime().executor();
        Record recordDefaults =
            StorageExtraConfig.SCHEDULING_FIELDS.contains(field)
                ? StorageConfig.defaults()
                : L3ExecutorConfig.defaults();
        Object expected =
            async.containsKey(field)
                ? expected(field, async.get(field))
                : component(recordDefaults, camel(field));
        assertEquals(
            normalize(expected),
            normalize(component(record, camel(field))),
            "async." + field + ", " + where);
      }
      top.keySet().forEach(k -> givenCounts.merge(backend + "." + k, 1, Integer::sum));
      async.keySet().forEach(k -> givenCounts.merge("async." + k, 1, Integer::sum));
    }
    // the generator really exercises every field (of backends drawn often enough)
    for (String field : StorageExtraConfig.ASYNC_FIELDS) {
      assertTrue(givenCounts.getOrDefault("async." + field, 0) > 0, "never generated: " + field);
    }
    for (String backend : StorageExtraConfig.BACKENDS) {
      for (String field : StorageExtraConfig.backendFields(backend)) {
        assertTrue(
            givenCounts.getOrDefault(backend + "." + field, 0) > 0,
            "never generated: " + backend + "." + field);
      }
    }
  }

  /** An inclusive range of a numeric field, and whether it is an int. */
  record Range(String field, long min, long max, boolean isInt) {}

  static final List<Range> MEMORY_RANGES =
      List.of(
          new Range("max_key_bytes", 1, MemoryStoreSettings.MAX_KEY_BYTES_LIMIT, true),
          new Range("max_value_bytes", 1, MemoryStoreSettings.MAX_VALUE_BYTES_LIMIT, false),
          new Range("capacity_bytes", 1, Long.MAX_VALUE, false));

  static final List<Range> FILE_RANGES =
      List.of(
          new Range("max_key_bytes", 1, FileStoreSettings.MAX_KEY_BYTES_LIMIT, true),
          new Range("max_value_bytes", 1, FileStoreSettings.MAX_VALUE_BYTES_LIMIT, false),
          new Range("read_threads", 0, FileStoreSettings.MAX_READ_THREADS, true),
          new Range(
              "read_chunk_bytes",
              FileStoreSettings.MIN_READ_CHUNK_BYTES,
              FileStoreSettings.MAX_READ_CHUNK_BYTES,
              true));

  static final List<Range> REDIS_RANGES =
      List.of(
          new Range("connect_timeout_ms", 10, RedisStoreSettings.MAX_TIMEOUT_MS, false),
          new Range("command_timeout_ms", 10, RedisStoreSettings.MAX_TIMEOUT_MS, false),
          new Range("connections", 1, RedisStoreSettings.MAX_CONNECTIONS, true),
          new Range("pipeline_depth", 1, RedisStoreSettings.MAX_PIPELINE_DEPTH, true),
          new Range("max_value_bytes", 1, RedisStoreSettings.MAX_VALUE_BYTES_LIMIT, false),
          new Range("max_key_bytes", 1, RedisStoreSettings.MAX_KEY_BYTES_LIMIT, true));

  static final List<Range> MOONCAKE_RANGES =
      List.of(
          new Range("global_segment_size_bytes", 0, MooncakeStoreSettings.MAX_SIZE_BYTES, false),
          new Range("local_buffer_size_bytes", 0, MooncakeStoreSettings.MAX_SIZE_BYTES, false),
          new Range("max_key_bytes", 1, MooncakeStoreSettings.MAX_KEY_BYTES_LIMIT, true),
          new Range("lease_ttl_ms", 0, MooncakeStoreSettings.MAX_LEASE_TTL_MS, false),
          new Range(
              "namespace_delete_wait_ms",
              0,
              MooncakeStoreSettings.MAX_NAMESPACE_DELETE_WAIT_MS,
              false));

  private static final long HOUR_MS = 3_600_000;

  /** The async fields with a fixed range (the low watermarks depend on the high ones). */
  static final List<Range> ASYNC_RANGES =
      List.of(
          new Range("max_operations", 1, 1 << 20, true),
          new Range("max_host_blocks", 0, Integer.MAX_VALUE, true),
          new Range("retraction_reserve_percent", 0, 99, true),
          new Range("soft_deadline_ms", 1, HOUR_MS, false),
          new Range("ready_hold_ms", 1, HOUR_MS, false),
          new Range("min_extension_tokens", 1, Integer.MAX_VALUE, true),
          new Range("lookahead_tokens", 1, Integer.MAX_VALUE, true),
          new Range("max_query_keys", 1, 1 << 24, true),
          new Range("negative_metadata_capacity", 0, 1 << 24, true),
          new Range("backup_candidate_capacity", 0, 1 << 24, true),
          new Range("max_put_keys", 1, 1 << 20, true),
          new Range(
              "max_backup_backoff_ms",
              StorageConfig.DEFAULT_BACKUP_RETRY_BACKOFF_MS,
              HOUR_MS,
              false),
          new Range("cost_model_margin_percent", 0, 1000, true),
          new Range("cost_model_reference_tokens", 1, 1 << 24, true),
          new Range("cost_model_explore_ms", 0, HOUR_MS, false),
          new Range("cost_model_prior_mbps", 0, 1_000_000_000, false),
          new Range("query_workers", 1, L3ExecutorConfig.MAX_WORKERS, true),
          new Range("get_workers", 1, L3ExecutorConfig.MAX_WORKERS, true),
          new Range("put_workers", 1, L3ExecutorConfig.MAX_WORKERS, true),
          new Range("query_queue_capacity", 1, L3ExecutorConfig.MAX_CAPACITY, true),
          new Range("get_queue_capacity", 1, L3ExecutorConfig.MAX_CAPACITY, true),
          new Range("put_queue_capacity", 1, L3ExecutorConfig.MAX_CAPACITY, true),
          new Range("max_outstanding_operations", 1, L3ExecutorConfig.MAX_CAPACITY, true),
          new Range("health_cooldown_ms", 0, HOUR_MS, false),
          new Range("close_join_deadline_ms", 0, HOUR_MS, false));

  /** A value in [min, max]: often an edge, otherwise uniform or small. */
  static long pick(Random rnd, long min, long max) {
    if (min == max) {
      return min;
    }
    return switch (rnd.nextInt(5)) {
      case 0 -> min;
      case 1 -> max;
      case 2 -> min + rnd.nextLong(Math.min(max - min, 1000) + 1);
      default -> rnd.nextLong(min, max);
    };
  }

  private static void numbers(Random rnd, List<Range> ranges, Map<String, Object> out) {
    for (Range range : ranges) {
      if (rnd.nextBoolean()) {
        long v = pick(rnd, range.min(), range.max());
        out.put(range.field(), range.isInt() ? (Object) (int) v : (Object) v);
      }
    }
  }

  private static void randomFile(Random rnd, Map<String, Object> top) {
    numbers(rnd, FILE_RANGES, top);
    if (rnd.nextBoolean()) {
      top.put("fsync", rnd.nextBoolean());
    }
    if (rnd.nextBoolean()) {
      top.put(
          "direct_io",
          FileStoreSettings.DirectIo.values()[
              rnd.nextInt(FileStoreSettings.DirectIo.values().length)]
              .jsonName());
    }
    if (rnd.nextBoolean()) {
      String path =
          (rnd.nextBoolean() ? "/" : "")
              + token(rnd, PATH_CHARS, 1, 12)
              + (rnd.nextBoolean() ? "/./" + token(rnd, PATH_CHARS, 1, 8) + "/.." : "")
              + "/"
              + token(rnd, PATH_CHARS, 1, 12);
      top.put("path", nameable(path));
    }
  }

  /**
   * {@code path} with every character that the running JVM's file-name encoding cannot represent
   * replaced by {@code _}: without a UTF-8 locale that encoding is ASCII and the JVM can name no
   * file {@code é} (a valid configuration then fails to parse: {@link
   * #shouldExplainAPathTheFileNameEncodingCannotRepresent}). The random draws stay the same in
   * every locale.
   */
  static String nameable(String path) {
    CharsetEncoder encoder = FileNames.fileNameEncoding().newEncoder();
    StringBuilder sb = new StringBuilder(path.length());
    for (char c : path.toCharArray()) {
      sb.append(encoder.canEncode(c) ? c : '_');
    }
    return sb.toString();
  }

  private static void randomRedis(Random rnd, Map<String, Object> top) {
    numbers(rnd, REDIS_RANGES, top);
    boolean tls = rnd.nextBoolean();
    if (tls || rnd.nextBoolean()) {
      top.put("tls", tls);
    }
    if (rnd.nextBoolean()) {
      top.put("uri", redisUri(rnd, tls));
    } else {
      int n = rnd.nextInt(4) == 0 ? RedisStoreSettings.MAX_CONNECTIONS : 1 + rnd.nextInt(6);
      List<String> seeds = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        seeds.add(redisUri(rnd, tls));
      }
      top.put("cluster", seeds);
    }
    if (rnd.nextBoolean()) {
      top.put("username", rnd.nextInt(4) == 0 ? "" : token(rnd, TOKEN_CHARS, 1, 16));
    }
    boolean needsPassword = !((String) top.getOrDefault("username", "")).isEmpty();
    if (needsPassword || rnd.nextBoolean()) {
      top.put("password", token(rnd, TOKEN_CHARS + " \"\\", 1, 24));
    }
  }

  private static String redisUri(Random rnd, boolean tls) {
    String[] hosts = {"127.0.0.1", "localhost", "[::1]", "redis-" + rnd.nextInt(100) + ".svc"};
    String scheme = rnd.nextBoolean() ? "" : tls ? "rediss://" : "redis://";
    return scheme + hosts[rnd.nextInt(hosts.length)] + ":" + pick(rnd, 1, 65_535);
  }

  private static void randomMooncake(Random rnd, Map<String, Object> top) {
    numbers(rnd, MOONCAKE_RANGES, top);
    top.put(
        "library_path",
        nameable(
            "/" + token(rnd, PATH_CHARS, 1, 10) + "/lib" + token(rnd, PATH_CHARS, 1, 6) + ".so"));
    top.put("local_hostname", token(rnd, TOKEN_CHARS, 1, 30));
    top.put("master_server_address", token(rnd, TOKEN_CHARS, 1, 30) + ":" + pick(rnd, 1, 65_535));
    if (rnd.nextBoolean()) {
      top.put(
          "metadata_server", rnd.nextBoolean() ? "P2PHANDSHAKE" : token(rnd, TOKEN_CHARS, 1, 40));
    }
    if (rnd.nextBoolean()) {
      top.put(
          "protocol",
          token(rnd, "abcdefghijklmnopqrstuvwxyz", 1, 1)
              + token(rnd, "abcdefghijklmnopqrstuvwxyz0123456789_", 0, 31));
    }
    if (rnd.nextBoolean()) {
      top.put("device_name", token(rnd, TOKEN_CHARS, 0, 20));
    }
  }

  private static void randomAsync(Random rnd, Map<String, Object> async) {
    numbers(rnd, ASYNC_RANGES, async);
    if (rnd.nextBoolean()) {
      async.put("cost_model", rnd.nextBoolean() ? "on" : "off");
    }
    if (rnd.nextBoolean()) {
      async.put("early_h2d", rnd.nextBoolean() ? "on" : "off");
    }
    watermarks(
        rnd,
        async,
        "high_queued_jobs",
        "low_queued_jobs",
        Integer.MAX_VALUE,
        true,
        StorageConfig.DEFAULT_HIGH_QUEUED_JOBS,
        StorageConfig.DEFAULT_LOW_QUEUED_JOBS);
    watermarks(
        rnd,
        async,
        "high_queued_bytes",
        "low_queued_bytes",
        Long.MAX_VALUE,
        false,
        StorageConfig.DEFAULT_HIGH_QUEUED_BYTES,
        StorageConfig.DEFAULT_LOW_QUEUED_BYTES);
    watermarks(
        rnd,
        async,
        "high_oldest_age_ms",
        "low_oldest_age_ms",
        HOUR_MS,
        false,
        StorageConfig.DEFAULT_HIGH_OLDEST_AGE_MS,
        StorageConfig.DEFAULT_LOW_OLDEST_AGE_MS);
  }

  /** A valid pair: the low mark below the high one, whichever of them is left at its default. */
  private static void watermarks(
      Random rnd,
      Map<String, Object> async,
      String high,
      String low,
      long highMax,
      boolean isInt,
      long defaultHigh,
      long defaultLow) {
    boolean giveHigh = rnd.nextBoolean();
    boolean giveLow = rnd.nextBoolean();
    long h = defaultHigh;
    if (giveHigh) {
      h = pick(rnd, giveLow ? 1 : defaultLow + 1, highMax);
      async.put(high, isInt ? (Object) (int) h : (Object) h);
    }
    if (giveLow) {
      long l = pick(rnd, 0, h - 1);
      async.put(low, isInt ? (Object) (int) l : (Object) l);
    }
  }

  private static final String TOKEN_CHARS =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:/@[]%é中";

  private static final String PATH_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789._- é";

  private static String token(Random rnd, String chars, int minLength, int maxLength) {
    int n = minLength + rnd.nextInt(maxLength - minLength + 1);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < n; i++) {
      sb.append(chars.charAt(rnd.nextInt(chars.length())));
    }
    return sb.toString();
  }

  /** The fields in random order, the async object (when given) somewhere among them. */
  private static String toJson(Random rnd, Map<String, Object> top, Map<String, Object> async)
      throws Exception {
    List<String> order = new ArrayList<>(top.keySet());
    if (!async.isEmpty() || rnd.nextInt(8) == 0) {
      order.add(StorageExtraConfig.ASYNC);
    }
    Collections.shuffle(order, rnd);
    ObjectNode root = JSON.createObjectNode();
    for (String field : order) {
      if (field.equals(StorageExtraConfig.ASYNC)) {
        List<String> asyncOrder = new ArrayList<>(async.keySet());
        Collections.shuffle(asyncOrder, rnd);
        ObjectNode a = root.putObject(StorageExtraConfig.ASYNC);
        asyncOrder.forEach(k -> a.set(k, JSON.valueToTree(async.get(k))));
      } else {
        root.set(field, JSON.valueToTree(top.get(field)));
      }
    }
    return rnd.nextBoolean()
        ? JSON.writeValueAsString(root)
        : JSON.writerWithDefaultPrettyPrinter().writeValueAsString(root);
  }

  /** The value a given JSON field should resolve to. */
  private static Object expected(String field, Object given) {
    return switch (field) {
      case "path" -> Path.of((String) given).toAbsolutePath().normalize();
      case "library_path" -> Path.of((String) given);
      case "direct_io" -> FileStoreSettings.DirectIo.ofJsonName((String) given);
      case "cost_model", "early_h2d" -> given.equals("on");
      default -> given;
    };
  }

  /** Numbers compared as longs: an int component equals an int-valued long. */
  private static Object normalize(Object v) {
    return v instanceof Integer i ? (Object) i.longValue() : v;
  }

  private static Record settings(StorageBackend backend) {
    return switch (backend) {
      case StorageBackend.Memory m -> m.settings();
      case StorageBackend.File f -> f.settings();
      case StorageBackend.Redis r -> r.settings();
      case StorageBackend.Mooncake m -> m.settings();
    };
  }

  /** The record defaults of {@code backend} (mooncake's required fields from {@code top}). */
  private static Record defaults(String backend, Map<String, Object> top) {
    return switch (backend) {
      case "memory" -> MemoryStoreSettings.defaults();
      case "file" -> FileStoreSettings.of(StorageExtraConfig.defaultFilePath());
      case "redis" -> RedisStoreSettings.standalone("h:1");
      default ->
          MooncakeStoreSettings.pureClient(
              Path.of((String) top.get("library_path")),
              (String) top.get("local_hostname"),
              (String) top.get("master_server_address"));
    };
  }

  // ---------------------------------------------------------------- reflection helpers

  static String camel(String snake) {
    StringBuilder sb = new StringBuilder();
    boolean upper = false;
    for (char c : snake.toCharArray()) {
      if (c == '_') {
        upper = true;
      } else {
        sb.append(upper ? Character.toUpperCase(c) : c);
        upper = false;
      }
    }
    return sb.toString();
  }

  static String snake(String camel) {
    return camel.replaceAll("([A-Z])", "_$1").toLowerCase(java.util.Locale.ROOT);
  }

  static List<String> snakeComponents(Class<? extends Record> type) {
    return Arrays.stream(type.getRecordComponents()).map(c -> snake(c.getName())).toList();
  }

  static Object component(Record record, String name) throws Exception {
    for (RecordComponent c : record.getClass().getRecordComponents()) {
      if (c.getName().equals(name)) {
        return c.getAccessor().invoke(record);
      }
    }
    throw new AssertionError(
        record.getClass().getSimpleName()
            + " has no component "
            + name
            + "; it has "
            + new TreeSet<>(
                Arrays.stream(record.getClass().getRecordComponents())
                    .map(RecordComponent::getName)
                    .toList()));
  }
}
