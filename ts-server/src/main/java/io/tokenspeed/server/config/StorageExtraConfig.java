package io.tokenspeed.server.config;

import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.json.JsonMapper;
import io.tokenspeed.engine.l3.StorageBackend;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.redis.RedisStoreSettings;
import io.tokenspeed.l3.store.file.FileStoreSettings;
import io.tokenspeed.l3.store.memory.MemoryStoreSettings;
import io.tokenspeed.l3.store.mooncake.MooncakeStoreSettings;
import io.tokenspeed.scheduler.StorageConfig;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The L3 configuration of a deployment: the backend {@code --kvstore-storage-backend} names and the
 * JSON object of {@code --kvstore-storage-backend-extra-config} (docs/l3-configuration.md).
 *
 * <pre>
 *   { backend fields in snake_case (memory, file, redis or mooncake),
 *     "async": { StorageConfig and L3ExecutorConfig fields in snake_case } }
 * </pre>
 *
 * <p>Every field is optional except the ones a backend cannot do without (redis: {@code uri} or
 * {@code cluster}; mooncake: {@code library_path}, {@code local_hostname}, {@code
 * master_server_address}); a field that is left out keeps the documented default of its record.
 *
 * <p>Every error is a {@link ConfigException} (an {@link IllegalArgumentException}) whose one-line
 * message starts with the field's JSON path ({@code async.soft_deadline_ms}, {@code cluster[1]})
 * and says what is allowed: unknown fields, wrong JSON types, values out of range, malformed JSON.
 * Passwords and URI credentials are never echoed. Parsing opens no connection and touches no file:
 * the file store's directory and Mooncake's library are only checked when the store is opened.
 */
public final class StorageExtraConfig {

  /** The backends {@code --kvstore-storage-backend} accepts. */
  public static final List<String> BACKENDS = List.of("memory", "file", "redis", "mooncake");

  /** The object of the asynchronous path's settings. */
  public static final String ASYNC = "async";

  /** The file store's default directory, under {@code java.io.tmpdir}. */
  public static final String DEFAULT_FILE_DIRECTORY = "tokenspeed-l3";

  /** The memory backend's fields. */
  public static final List<String> MEMORY_FIELDS =
      List.of("max_key_bytes", "max_value_bytes", "capacity_bytes");

  /** The file backend's fields. */
  public static final List<String> FILE_FIELDS =
      List.of(
          "path",
          "fsync",
          "max_key_bytes",
          "max_value_bytes",
          "direct_io",
          "read_threads",
          "read_chunk_bytes");

  /** The redis backend's fields. */
  public static final List<String> REDIS_FIELDS =
      List.of(
          "uri",
          "cluster",
          "username",
          "password",
          "tls",
          "connect_timeout_ms",
          "command_timeout_ms",
          "connections",
          "pipeline_depth",
          "max_value_bytes",
          "max_key_bytes");

  /** The mooncake backend's fields. */
  public static final List<String> MOONCAKE_FIELDS =
      List.of(
          "library_path",
          "local_hostname",
          "metadata_server",
          "master_server_address",
          "protocol",
          "device_name",
          "global_segment_size_bytes",
          "local_buffer_size_bytes",
          "max_key_bytes",
          "lease_ttl_ms",
          "namespace_delete_wait_ms");

  /** The mooncake fields without a default. */
  public static final List<String> MOONCAKE_REQUIRED =
      List.of("library_path", "local_hostname", "master_server_address");

  /** The {@code async} fields that set {@link StorageConfig}, in its component order. */
  public static final List<String> SCHEDULING_FIELDS =
      List.of(
          "max_operations",
          "max_host_blocks",
          "retraction_reserve_percent",
          "soft_deadline_ms",
          "ready_hold_ms",
          "min_extension_tokens",
          "lookahead_tokens",
          "max_query_keys",
          "negative_metadata_capacity",
          "backup_candidate_capacity",
          "max_put_keys",
          "high_queued_jobs",
          "low_queued_jobs",
          "high_queued_bytes",
          "low_queued_bytes",
          "high_oldest_age_ms",
          "low_oldest_age_ms",
          "max_backup_backoff_ms",
          "cost_model",
          "cost_model_margin_percent",
          "cost_model_reference_tokens",
          "cost_model_explore_ms",
          "cost_model_prior_mbps",
          "early_h2d");

  /** The {@code async} fields that set {@link L3ExecutorConfig}, in its component order. */
  public static final List<String> EXECUTOR_FIELDS =
      List.of(
          "query_workers",
          "get_workers",
          "put_workers",
          "query_queue_capacity",
          "get_queue_capacity",
          "put_queue_capacity",
          "max_outstanding_operations",
          "health_cooldown_ms",
          "close_join_deadline_ms");

  /** Every {@code async} field: the scheduling ones, then the executor's. */
  public static final List<String> ASYNC_FIELDS = concat(SCHEDULING_FIELDS, EXECUTOR_FIELDS);

  private static final Map<String, List<String>> BACKEND_FIELDS =
      Map.of(
          "memory", MEMORY_FIELDS,
          "file", FILE_FIELDS,
          "redis", REDIS_FIELDS,
          "mooncake", MOONCAKE_FIELDS);

  /** Fields whose values never appear in a message. */
  private static final List<String> SECRET_FIELDS = List.of("password");

  /** A record's message: an optional "redis " or "mooncake " prefix, then the field's name. */
  private static final Pattern RECORD_MESSAGE =
      Pattern.compile("^(?:redis |mooncake )?([a-z_]+)(.*)$", Pattern.DOTALL);

  /** Jackson's message for a bare word, which quotes it. */
  private static final Pattern UNRECOGNIZED_TOKEN = Pattern.compile("Unrecognized token '[^']*'");

  private static final JsonMapper MAPPER =
      JsonMapper.builder()
          .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
          .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
          .build();

  private StorageExtraConfig() {}

  /**
   * The selected backend with its settings and the asynchronous path's settings.
   *
   * @param backend the store {@code --kvstore-storage-backend} names, with its settings
   * @param runtime the scheduler's storage contract and the executor's settings ({@code async})
   */
  public record Resolved(StorageBackend backend, StorageRuntimeConfig runtime) {
    public Resolved {
      if (backend == null || runtime == null) {
        throw new IllegalArgumentException("the backend and the runtime settings are required");
      }
    }
  }

  /**
   * The file store's default directory: {@value #DEFAULT_FILE_DIRECTORY} under the JVM's tmpdir.
   */
  public static Path defaultFilePath() {
    return Path.of(System.getProperty("java.io.tmpdir"), DEFAULT_FILE_DIRECTORY);
  }

  /** The top-level fields of {@code backend} (one of {@link #BACKENDS}), without {@code async}. */
  public static List<String> backendFields(String backend) {
    List<String> fields = backend == null ? null : BACKEND_FIELDS.get(backend);
    if (fields == null) {
      throw unknownBackend(backend);
    }
    return fields;
  }

  /**
   * Parses and validates the extra configuration of {@code backend}.
   *
   * @param backend one of {@link #BACKENDS}
   * @param json one JSON object; null, empty or blank is {@code {}} (every default)
   * @throws ConfigException naming the field by its JSON path and what is allowed
   */
  public static Resolved parse(String backend, String json) {
    List<String> fields = backendFields(backend);
    JsonNode root = readTree(json);
    Fields top = new Fields(root, "", concat(fields, List.of(ASYNC)), backend);
    StorageBackend store =
        switch (backend) {
          case "memory" -> memory(top);
          case "file" -> file(top);
          case "redis" -> redis(top);
          case "mooncake" -> mooncake(top);
          default -> throw unknownBackend(backend);
        };
    JsonNode asyncNode = top.node.get(ASYNC);
    JsonNode asyncObject = asyncNode == null ? MAPPER.createObjectNode() : asyncNode;
    return new Resolved(store, runtime(new Fields(asyncObject, ASYNC, ASYNC_FIELDS, null)));
  }

  private static ConfigException unknownBackend(String backend) {
    return new ConfigException(
        "backend="
            + (backend == null ? "null" : "\"" + backend + "\"")
            + " is not an L3 backend; allowed: "
            + String.join(", ", BACKENDS));
  }

  private static JsonNode readTree(String json) {
    if (json == null || json.isBlank()) {
      return MAPPER.createObjectNode();
    }
    try {
      return MAPPER.readTree(json);
    } catch (JsonProcessingException e) {
      JsonLocation at = e.getLocation();
      String where =
          at == null ? "" : " at line " + at.getLineNr() + ", column " + at.getColumnNr();
      // an unquoted token may be a password typed without its quotes: never echo it
      String problem =
          UNRECOGNIZED_TOKEN
              .matcher(oneLine(e.getOriginalMessage()))
              .replaceAll("Unrecognized token (not echoed)");
      throw new ConfigException("malformed JSON" + where + ": " + problem, e);
    }
  }

  private static StorageBackend memory(Fields f) {
    int maxKeyBytes = f.integer("max_key_bytes", MemoryStoreSettings.DEFAULT_MAX_KEY_BYTES);
    long maxValueBytes =
        f.longInteger("max_value_bytes", MemoryStoreSettings.DEFAULT_MAX_VALUE_BYTES);
    long capacityBytes =
        f.longInteger("capacity_bytes", MemoryStoreSettings.DEFAULT_CAPACITY_BYTES);
    return new StorageBackend.Memory(
        f.build(() -> new MemoryStoreSettings(maxKeyBytes, maxValueBytes, capacityBytes)));
  }

  private static StorageBackend file(Fields f) {
    String pathText = f.text("path", null);
    Path root;
    if (pathText == null) {
      root = defaultFilePath();
    } else {
      if (pathText.isBlank()) {
        throw f.error("path", "\"" + pathText + "\" must name a directory (it is blank)");
      }
      try {
        root = Path.of(pathText);
      } catch (InvalidPathException e) {
        throw f.error("path", FileNames.quote(pathText) + " " + FileNames.whyInvalid(pathText, e));
      }
    }
    boolean fsync = f.bool("fsync", FileStoreSettings.DEFAULT_FSYNC);
    int maxKeyBytes = f.integer("max_key_bytes", FileStoreSettings.DEFAULT_MAX_KEY_BYTES);
    long maxValueBytes =
        f.longInteger("max_value_bytes", FileStoreSettings.DEFAULT_MAX_VALUE_BYTES);
    String directIoText = f.text("direct_io", FileStoreSettings.DEFAULT_DIRECT_IO.jsonName());
    FileStoreSettings.DirectIo directIo = FileStoreSettings.DirectIo.ofJsonName(directIoText);
    if (directIo == null) {
      throw f.error(
          "direct_io", f.render("direct_io", f.node.get("direct_io")) + " must be auto, on or off");
    }
    int readThreads = f.integer("read_threads", FileStoreSettings.DEFAULT_READ_THREADS);
    int readChunkBytes = f.integer("read_chunk_bytes", FileStoreSettings.DEFAULT_READ_CHUNK_BYTES);
    return new StorageBackend.File(
        f.build(
            Map.of("root", "path"),
            Map.of(),
            () ->
                new FileStoreSettings(
                    root,
                    maxKeyBytes,
                    maxValueBytes,
                    fsync,
                    directIo,
                    readThreads,
                    readChunkBytes)));
  }

  private static StorageBackend redis(Fields f) {
    boolean hasUri = f.present("uri");
    boolean hasCluster = f.present("cluster");
    if (hasUri && hasCluster) {
      throw new ConfigException(
          "uri and cluster cannot both be given: uri names one standalone server, cluster"
              + " lists the seed nodes of a Redis Cluster");
    }
    if (!hasUri && !hasCluster) {
      throw new ConfigException(
          "uri or cluster is required for the redis backend: uri names one standalone server"
              + " (\"redis://127.0.0.1:6379\"), cluster is an array of a Redis Cluster's seed"
              + " node URIs");
    }
    boolean tls = f.bool("tls", false);
    List<String> uris = new ArrayList<>();
    if (hasUri) {
      String uri = f.text("uri", null);
      checkRedisUri(f.path("uri"), uri, tls);
      uris.add(uri);
    } else {
      List<String> seeds = f.textArray("cluster");
      if (seeds.isEmpty() || seeds.size() > RedisStoreSettings.MAX_CONNECTIONS) {
        throw new ConfigException(
            f.path("cluster")
                + " has "
                + seeds.size()
                + " seed nodes; it must list 1 to "
                + RedisStoreSettings.MAX_CONNECTIONS);
      }
      for (int i = 0; i < seeds.size(); i++) {
        checkRedisUri(f.path("cluster") + "[" + i + "]", seeds.get(i), tls);
      }
      uris.addAll(seeds);
    }
    String username = f.text("username", "");
    String password = f.text("password", null);
    if (password != null && password.isEmpty()) {
      throw new ConfigException(
          f.path("password") + " is empty; leave the field out when the server needs no AUTH");
    }
    long connectTimeoutMs =
        f.longInteger("connect_timeout_ms", RedisStoreSettings.DEFAULT_CONNECT_TIMEOUT_MS);
    long commandTimeoutMs =
        f.longInteger("command_timeout_ms", RedisStoreSettings.DEFAULT_COMMAND_TIMEOUT_MS);
    int connections = f.integer("connections", RedisStoreSettings.DEFAULT_CONNECTIONS);
    int pipelineDepth = f.integer("pipeline_depth", RedisStoreSettings.DEFAULT_PIPELINE_DEPTH);
    long maxValueBytes =
        f.longInteger("max_value_bytes", RedisStoreSettings.DEFAULT_MAX_VALUE_BYTES);
    int maxKeyBytes = f.integer("max_key_bytes", RedisStoreSettings.DEFAULT_MAX_KEY_BYTES);
    return new StorageBackend.Redis(
        f.build(
            () ->
                new RedisStoreSettings(
                    uris,
                    hasCluster,
                    username,
                    password,
                    tls,
                    connectTimeoutMs,
                    commandTimeoutMs,
                    connections,
                    pipelineDepth,
                    maxValueBytes,
                    maxKeyBytes)));
  }

  /**
   * Checks one server address with the settings' own rules (a single-server settings object is
   * built and dropped: nothing connects), so that the error names the JSON field it came from.
   */
  private static void checkRedisUri(String path, String uri, boolean tls) {
    try {
      RedisStoreSettings unused =
          new RedisStoreSettings(
              List.of(uri),
              false,
              "",
              null,
              tls,
              RedisStoreSettings.DEFAULT_CONNECT_TIMEOUT_MS,
              RedisStoreSettings.DEFAULT_COMMAND_TIMEOUT_MS,
              RedisStoreSettings.DEFAULT_CONNECTIONS,
              RedisStoreSettings.DEFAULT_PIPELINE_DEPTH,
              RedisStoreSettings.DEFAULT_MAX_VALUE_BYTES,
              RedisStoreSettings.DEFAULT_MAX_KEY_BYTES);
    } catch (IllegalArgumentException e) {
      String message = e.getMessage().replace(uri, redactUri(uri));
      Matcher m = RECORD_MESSAGE.matcher(message);
      String rest = m.matches() && m.group(1).equals("uri") ? m.group(2) : ": " + message;
      throw new ConfigException(path + rest, e);
    }
  }

  /** {@code uri} with any user information (credentials) before the host replaced by ***. */
  static String redactUri(String uri) {
    int scheme = uri.indexOf("://");
    int start = scheme < 0 ? 0 : scheme + 3;
    int at = uri.lastIndexOf('@');
    return at < start ? uri : uri.substring(0, start) + "***" + uri.substring(at);
  }

  private static StorageBackend mooncake(Fields f) {
    List<String> missing = new ArrayList<>();
    for (String field : MOONCAKE_REQUIRED) {
      if (!f.present(field)) {
        missing.add(field);
      }
    }
    if (!missing.isEmpty()) {
      throw new ConfigException(
          String.join(", ", missing)
              + (missing.size() == 1 ? " is" : " are")
              + " missing; the mooncake backend requires "
              + String.join(", ", MOONCAKE_REQUIRED));
    }
    String library = f.text("library_path", null);
    if (library.isBlank()) {
      throw f.error(
          "library_path",
          "\"" + library + "\" must name the shared library implementing store_c.h");
    }
    Path libraryPath;
    try {
      libraryPath = Path.of(library);
    } catch (InvalidPathException e) {
      throw f.error(
          "library_path", FileNames.quote(library) + " " + FileNames.whyInvalid(library, e));
    }
    String localHostname = f.text("local_hostname", null);
    String metadataServer =
        f.text("metadata_server", MooncakeStoreSettings.DEFAULT_METADATA_SERVER);
    String masterServerAddress = f.text("master_server_address", null);
    String protocol = f.text("protocol", MooncakeStoreSettings.DEFAULT_PROTOCOL);
    String deviceName = f.text("device_name", MooncakeStoreSettings.DEFAULT_DEVICE_NAME);
    long globalSegmentSizeBytes =
        f.longInteger(
            "global_segment_size_bytes", MooncakeStoreSettings.DEFAULT_GLOBAL_SEGMENT_SIZE_BYTES);
    long localBufferSizeBytes =
        f.longInteger(
            "local_buffer_size_bytes", MooncakeStoreSettings.DEFAULT_LOCAL_BUFFER_SIZE_BYTES);
    int maxKeyBytes = f.integer("max_key_bytes", MooncakeStoreSettings.DEFAULT_MAX_KEY_BYTES);
    long leaseTtlMs = f.longInteger("lease_ttl_ms", MooncakeStoreSettings.DEFAULT_LEASE_TTL_MS);
    long namespaceDeleteWaitMs =
        f.longInteger(
            "namespace_delete_wait_ms", MooncakeStoreSettings.DEFAULT_NAMESPACE_DELETE_WAIT_MS);
    return new StorageBackend.Mooncake(
        f.build(
            () ->
                new MooncakeStoreSettings(
                    libraryPath,
                    localHostname,
                    metadataServer,
                    masterServerAddress,
                    protocol,
                    deviceName,
                    globalSegmentSizeBytes,
                    localBufferSizeBytes,
                    maxKeyBytes,
                    leaseTtlMs,
                    namespaceDeleteWaitMs)));
  }

  /** A switch spelt {@code "on"} or {@code "off"}. */
  private static boolean onOff(Fields a, String field, boolean defaultValue) {
    String v = a.text(field, defaultValue ? "on" : "off");
    return switch (v) {
      case "on" -> true;
      case "off" -> false;
      default -> throw a.error(field, "\"" + v + "\" must be \"on\" or \"off\"");
    };
  }

  private static StorageRuntimeConfig runtime(Fields a) {
    int maxOperations = a.integer("max_operations", StorageConfig.DEFAULT_MAX_OPERATIONS);
    int maxHostBlocks = a.integer("max_host_blocks", StorageConfig.DEFAULT_MAX_HOST_BLOCKS);
    int retractionReservePercent =
        a.integer("retraction_reserve_percent", StorageConfig.DEFAULT_RETRACTION_RESERVE_PERCENT);
    long softDeadlineMs = a.longInteger("soft_deadline_ms", StorageConfig.DEFAULT_SOFT_DEADLINE_MS);
    long readyHoldMs = a.longInteger("ready_hold_ms", StorageConfig.DEFAULT_READY_HOLD_MS);
    int minExtensionTokens =
        a.integer("min_extension_tokens", StorageConfig.DEFAULT_MIN_EXTENSION_TOKENS);
    int lookaheadTokens = a.integer("lookahead_tokens", StorageConfig.DEFAULT_LOOKAHEAD_TOKENS);
    int maxQueryKeys = a.integer("max_query_keys", StorageConfig.DEFAULT_MAX_QUERY_KEYS);
    int negativeMetadataCapacity =
        a.integer("negative_metadata_capacity", StorageConfig.DEFAULT_NEGATIVE_METADATA_CAPACITY);
    int backupCandidateCapacity =
        a.integer("backup_candidate_capacity", StorageConfig.DEFAULT_BACKUP_CANDIDATE_CAPACITY);
    int maxPutKeys = a.integer("max_put_keys", StorageConfig.DEFAULT_MAX_PUT_KEYS);
    int highQueuedJobs = a.integer("high_queued_jobs", StorageConfig.DEFAULT_HIGH_QUEUED_JOBS);
    int lowQueuedJobs = a.integer("low_queued_jobs", StorageConfig.DEFAULT_LOW_QUEUED_JOBS);
    long highQueuedBytes =
        a.longInteger("high_queued_bytes", StorageConfig.DEFAULT_HIGH_QUEUED_BYTES);
    long lowQueuedBytes = a.longInteger("low_queued_bytes", StorageConfig.DEFAULT_LOW_QUEUED_BYTES);
    long highOldestAgeMs =
        a.longInteger("high_oldest_age_ms", StorageConfig.DEFAULT_HIGH_OLDEST_AGE_MS);
    long lowOldestAgeMs =
        a.longInteger("low_oldest_age_ms", StorageConfig.DEFAULT_LOW_OLDEST_AGE_MS);
    long maxBackupBackoffMs =
        a.longInteger("max_backup_backoff_ms", StorageConfig.DEFAULT_MAX_BACKUP_BACKOFF_MS);
    boolean costModel = onOff(a, "cost_model", StorageConfig.DEFAULT_COST_MODEL);
    int costModelMarginPercent =
        a.integer("cost_model_margin_percent", StorageConfig.DEFAULT_COST_MODEL_MARGIN_PERCENT);
    int costModelReferenceTokens =
        a.integer("cost_model_reference_tokens", StorageConfig.DEFAULT_COST_MODEL_REFERENCE_TOKENS);
    long costModelExploreMs =
        a.longInteger("cost_model_explore_ms", StorageConfig.DEFAULT_COST_MODEL_EXPLORE_MS);
    long costModelPriorMbps =
        a.longInteger("cost_model_prior_mbps", StorageConfig.DEFAULT_COST_MODEL_PRIOR_MBPS);
    boolean earlyH2d = onOff(a, "early_h2d", StorageConfig.DEFAULT_EARLY_H2D);
    // the watermark pairs: the record's range for a low mark is [0, high - 1]; say why
    Map<String, String> notes =
        Map.of(
            "low_queued_jobs",
            " (it must stay below " + a.path("high_queued_jobs") + "=" + highQueuedJobs + ")",
            "low_queued_bytes",
            " (it must stay below " + a.path("high_queued_bytes") + "=" + highQueuedBytes + ")",
            "low_oldest_age_ms",
            " (it must stay below " + a.path("high_oldest_age_ms") + "=" + highOldestAgeMs + ")");
    StorageConfig scheduling =
        a.build(
            Map.of(),
            notes,
            () ->
                new StorageConfig(
                    maxOperations,
                    maxHostBlocks,
                    retractionReservePercent,
                    softDeadlineMs,
                    readyHoldMs,
                    minExtensionTokens,
                    lookaheadTokens,
                    maxQueryKeys,
                    negativeMetadataCapacity,
                    backupCandidateCapacity,
                    maxPutKeys,
                    highQueuedJobs,
                    lowQueuedJobs,
                    highQueuedBytes,
                    lowQueuedBytes,
                    highOldestAgeMs,
                    lowOldestAgeMs,
                    maxBackupBackoffMs,
                    costModel,
                    costModelMarginPercent,
                    costModelReferenceTokens,
                    costModelExploreMs,
                    costModelPriorMbps,
                    earlyH2d));
    int queryWorkers = a.integer("query_workers", L3ExecutorConfig.DEFAULT_QUERY_WORKERS);
    int getWorkers = a.integer("get_workers", L3ExecutorConfig.DEFAULT_GET_WORKERS);
    int putWorkers = a.integer("put_workers", L3ExecutorConfig.DEFAULT_PUT_WORKERS);
    int queryQueueCapacity =
        a.integer("query_queue_capacity", L3ExecutorConfig.DEFAULT_QUERY_QUEUE_CAPACITY);
    int getQueueCapacity =
        a.integer("get_queue_capacity", L3ExecutorConfig.DEFAULT_GET_QUEUE_CAPACITY);
    int putQueueCapacity =
        a.integer("put_queue_capacity", L3ExecutorConfig.DEFAULT_PUT_QUEUE_CAPACITY);
    int maxOutstandingOperations =
        a.integer(
            "max_outstanding_operations", L3ExecutorConfig.DEFAULT_MAX_OUTSTANDING_OPERATIONS);
    long healthCooldownMs =
        a.longInteger("health_cooldown_ms", L3ExecutorConfig.DEFAULT_HEALTH_COOLDOWN_MS);
    long closeJoinDeadlineMs =
        a.longInteger("close_join_deadline_ms", L3ExecutorConfig.DEFAULT_CLOSE_JOIN_DEADLINE_MS);
    L3ExecutorConfig executor =
        a.build(
            () ->
                new L3ExecutorConfig(
                    queryWorkers,
                    getWorkers,
                    putWorkers,
                    queryQueueCapacity,
                    getQueueCapacity,
                    putQueueCapacity,
                    maxOutstandingOperations,
                    healthCooldownMs,
                    closeJoinDeadlineMs));
    return new StorageRuntimeConfig(scheduling, executor);
  }

  private static List<String> concat(List<String> a, List<String> b) {
    List<String> all = new ArrayList<>(a);
    all.addAll(b);
    return List.copyOf(all);
  }

  private static String oneLine(String message) {
    return message == null ? "(no message)" : message.replaceAll("\\s*[\\r\\n]+\\s*", " ");
  }

  /** One JSON object being read, with its path for messages. */
  private static final class Fields {
    private static final int MAX_RENDERED_CHARS = 60;

    private final JsonNode node;
    private final String path;
    private final List<String> known;

    /**
     * Checks that {@code node} is an object of {@code known} fields only.
     *
     * @param backend the backend whose top-level object this is, for hints; null for {@code async}
     */
    Fields(JsonNode node, String path, List<String> known, String backend) {
      this.path = path;
      this.known = known;
      if (node == null || !node.isObject()) {
        throw new ConfigException(
            (path.isEmpty() ? "the configuration" : path)
                + "="
                + render(path, node)
                + " must be a JSON object");
      }
      this.node = node;
      for (Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
        String name = it.next();
        if (!known.contains(name)) {
          throw new ConfigException(
              "unknown field "
                  + path(name)
                  + (backend == null ? "" : " for the " + backend + " backend")
                  + "; allowed: "
                  + String.join(", ", known)
                  + hint(name, backend));
        }
      }
    }

    /** Where else {@code name} is a field, when it is one: a likely mix-up. */
    private static String hint(String name, String backend) {
      List<String> owners = new ArrayList<>();
      for (String other : BACKENDS) {
        if (!other.equals(backend) && BACKEND_FIELDS.get(other).contains(name)) {
          owners.add(other);
        }
      }
      if (backend != null && ASYNC_FIELDS.contains(name)) {
        return " (" + name + " belongs in the async object)";
      }
      if (backend == null && BACKEND_FIELDS.values().stream().anyMatch(l -> l.contains(name))) {
        return " (" + name + " is a backend field: it belongs at the top level)";
      }
      return owners.isEmpty()
          ? ""
          : " (" + name + " is a field of the " + String.join(", ", owners) + " backend)";
    }

    String path(String field) {
      return path.isEmpty() ? field : path + "." + field;
    }

    ConfigException error(String field, String problem) {
      return new ConfigException(path(field) + "=" + problem);
    }

    /** Whether {@code field} is given (a JSON null counts as given: it is then a type error). */
    boolean present(String field) {
      return node.has(field);
    }

    private JsonNode get(String field) {
      if (!known.contains(field)) {
        throw new IllegalStateException("not a field of " + path + ": " + field);
      }
      return node.get(field);
    }

    int integer(String field, int defaultValue) {
      JsonNode v = get(field);
      if (v == null) {
        return defaultValue;
      }
      requireIntegral(field, v);
      if (!v.canConvertToInt()) {
        throw error(
            field,
            render(field, v)
                + " is out of range for a 32-bit integer ["
                + Integer.MIN_VALUE
                + ", "
                + Integer.MAX_VALUE
                + "]");
      }
      return v.intValue();
    }

    long longInteger(String field, long defaultValue) {
      JsonNode v = get(field);
      if (v == null) {
        return defaultValue;
      }
      requireIntegral(field, v);
      if (!v.canConvertToLong()) {
        throw error(
            field,
            render(field, v)
                + " is out of range for a 64-bit integer ["
                + Long.MIN_VALUE
                + ", "
                + Long.MAX_VALUE
                + "]");
      }
      return v.longValue();
    }

    private void requireIntegral(String field, JsonNode v) {
      if (!v.isIntegralNumber()) {
        throw error(
            field,
            render(field, v)
                + " must be an integer (a JSON number without fraction or exponent), not "
                + kind(v));
      }
    }

    boolean bool(String field, boolean defaultValue) {
      JsonNode v = get(field);
      if (v == null) {
        return defaultValue;
      }
      if (!v.isBoolean()) {
        throw error(field, render(field, v) + " must be true or false, not " + kind(v));
      }
      return v.booleanValue();
    }

    /** The string value, or {@code defaultValue} (which may be null) when the field is absent. */
    String text(String field, String defaultValue) {
      JsonNode v = get(field);
      if (v == null) {
        return defaultValue;
      }
      if (!v.isTextual()) {
        throw error(field, render(field, v) + " must be a string, not " + kind(v));
      }
      return v.textValue();
    }

    List<String> textArray(String field) {
      JsonNode v = get(field);
      if (!v.isArray()) {
        throw error(field, render(field, v) + " must be an array of strings, not " + kind(v));
      }
      List<String> out = new ArrayList<>();
      for (int i = 0; i < v.size(); i++) {
        JsonNode e = v.get(i);
        if (!e.isTextual()) {
          throw new ConfigException(
              path(field)
                  + "["
                  + i
                  + "]="
                  + render(field, e)
                  + " must be a string, not "
                  + kind(e));
        }
        out.add(e.textValue());
      }
      return out;
    }

    /** Runs a record's constructor whose JSON names equal its own and need no notes. */
    <T> T build(Supplier<T> constructor) {
      return build(Map.of(), Map.of(), constructor);
    }

    /**
     * Runs a record's constructor. Its validation message names the record's field first
     * (optionally after "redis " or "mooncake "); that name becomes the JSON path (through {@code
     * renamed} where the JSON name differs), and {@code notes} adds context by JSON field.
     */
    <T> T build(Map<String, String> renamed, Map<String, String> notes, Supplier<T> constructor) {
      try {
        return constructor.get();
      } catch (ConfigException e) {
        throw e;
      } catch (IllegalArgumentException e) {
        String message = oneLine(e.getMessage());
        Matcher m = RECORD_MESSAGE.matcher(message);
        if (m.matches()) {
          String field = renamed.getOrDefault(m.group(1), m.group(1));
          if (known.contains(field)) {
            throw new ConfigException(path(field) + m.group(2) + notes.getOrDefault(field, ""), e);
          }
        }
        throw new ConfigException(
            (path.isEmpty() ? "the configuration" : path) + ": " + message, e);
      }
    }

    /** The value as JSON text, shortened to keep the message one readable line; secrets hidden. */
    String render(String field, JsonNode v) {
      if (v == null) {
        return "null";
      }
      if (SECRET_FIELDS.contains(field)) {
        return "(hidden)";
      }
      String s = v.toString();
      if (v.isTextual() && (field.equals("uri") || field.equals("cluster"))) {
        s = s.replace(v.textValue(), redactUri(v.textValue()));
      }
      return s.length() <= MAX_RENDERED_CHARS ? s : s.substring(0, MAX_RENDERED_CHARS) + "...";
    }

    private static String kind(JsonNode v) {
      if (v.isNull()) {
        return "null";
      }
      if (v.isTextual()) {
        return "a string";
      }
      if (v.isBoolean()) {
        return "a boolean";
      }
      if (v.isNumber()) {
        return v.isIntegralNumber() ? "an integer" : "a fraction";
      }
      if (v.isArray()) {
        return "an array";
      }
      return v.isObject()
          ? "an object"
          : "a " + v.getNodeType().toString().toLowerCase(Locale.ROOT);
    }
  }
}
