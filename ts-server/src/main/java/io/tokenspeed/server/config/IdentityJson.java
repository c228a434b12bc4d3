package io.tokenspeed.server.config;

import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.json.JsonMapper;
import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import java.io.IOException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.function.Supplier;

/**
 * Reads a {@link DeploymentIdentity} from the identity JSON format (docs/identity-json.md).
 *
 * <p>The format mirrors the identity record in snake_case, with the cache layout in a {@code cache}
 * object whose groups take their group id from their position:
 *
 * <pre>
 *   { "model_id", "checkpoint_revision", "weight_version",
 *     ["draft_model_id", "draft_weight_version"],
 *     ["attention_tp_size", "kvp_size", "qcp_size", "linear_attention_tp_size"]  (default 1),
 *     "attention_backend",
 *     "cache": { "prefix_granularity", "dtype",
 *                "groups": [ { "kind", "block_granularity", ["window_tokens"],
 *                              "fields": [ { "name", "bytes_per_block" } ],
 *                              ["sharding", "shard_count"], ["group_id"] } ] } }
 * </pre>
 *
 * <p>Typo safety: a field this reader does not know is an error naming it, because a misspelt
 * identity field that was silently dropped would move the deployment into another namespace (or,
 * worse, keep it in one whose bytes mean something else). The one exception is {@link
 * #IGNORED_FIELDS}: settings that a full engine configuration carries next to the identity but that
 * must never split or merge namespaces (architecture §7). They are accepted with any value and
 * never read.
 *
 * <p>Duplicate keys and trailing content are errors. Every error is a {@link ConfigException} whose
 * message is one line naming the field (as a path such as {@code cache.groups[1].window_tokens})
 * and the offending value.
 */
public final class IdentityJson {

  /** Default of {@code attention_tp_size}, {@code kvp_size}, {@code qcp_size} and friends. */
  public static final int DEFAULT_PARALLEL_SIZE = 1;

  /** The name of the single field created by the compact {@code bytes=N} group form. */
  public static final String DEFAULT_FIELD_NAME = "kv";

  /**
   * Top-level fields a full engine configuration may carry that are not part of the identity. They
   * are accepted and ignored: DP placement, the Host allocation, and the scheduling and storage
   * settings.
   */
  public static final Set<String> IGNORED_FIELDS =
      Set.of("dp_replica_id", "dp_rank", "dp_size", "host_allocation_id", "scheduling", "storage");

  private static final List<String> ROOT_FIELDS =
      List.of(
          "model_id",
          "checkpoint_revision",
          "weight_version",
          "draft_model_id",
          "draft_weight_version",
          "attention_tp_size",
          "kvp_size",
          "qcp_size",
          "linear_attention_tp_size",
          "attention_backend",
          "cache");
  private static final List<String> CACHE_FIELDS = List.of("prefix_granularity", "dtype", "groups");
  private static final List<String> GROUP_FIELDS =
      List.of(
          "group_id",
          "kind",
          "block_granularity",
          "window_tokens",
          "fields",
          "sharding",
          "shard_count");
  private static final List<String> FIELD_FIELDS = List.of("name", "bytes_per_block");

  private static final JsonMapper MAPPER =
      JsonMapper.builder()
          .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
          .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
          .build();

  private IdentityJson() {}

  /** Reads and validates the identity file at {@code file}; errors start with the file name. */
  public static DeploymentIdentity read(Path file) {
    String text;
    try {
      if (Files.isDirectory(file)) {
        throw new ConfigException("--identity=" + file + " is a directory, not a file");
      }
      text = Files.readString(file, StandardCharsets.UTF_8);
    } catch (NoSuchFileException e) {
      throw new ConfigException("--identity=" + file + ": no such file", e);
    } catch (AccessDeniedException e) {
      throw new ConfigException("--identity=" + file + ": permission denied", e);
    } catch (CharacterCodingException e) {
      throw new ConfigException(file + ": not valid UTF-8 text", e);
    } catch (IOException e) {
      throw new ConfigException("--identity=" + file + ": cannot be read: " + e.getMessage(), e);
    }
    try {
      return parse(text);
    } catch (ConfigException e) {
      throw new ConfigException(file + ": " + e.getMessage(), e);
    }
  }

  /** Parses and validates identity JSON text. */
  public static DeploymentIdentity parse(String json) {
    JsonNode root;
    try {
      root = MAPPER.readTree(json);
    } catch (JsonProcessingException e) {
      JsonLocation at = e.getLocation();
      String where =
          at == null ? "" : " at line " + at.getLineNr() + ", column " + at.getColumnNr();
      throw new ConfigException("malformed JSON" + where + ": " + e.getOriginalMessage(), e);
    }
    if (root == null || root.isMissingNode()) {
      throw new ConfigException("malformed JSON: the document is empty");
    }
    Obj top = new Obj(root, "", ROOT_FIELDS, IGNORED_FIELDS);
    String modelId = top.text("model_id");
    String checkpointRevision = top.text("checkpoint_revision");
    String weightVersion = top.text("weight_version");
    String draftModelId = top.optionalText("draft_model_id");
    String draftWeightVersion = top.optionalText("draft_weight_version");
    int attentionTpSize = top.optionalInt("attention_tp_size", DEFAULT_PARALLEL_SIZE);
    int kvpSize = top.optionalInt("kvp_size", DEFAULT_PARALLEL_SIZE);
    int qcpSize = top.optionalInt("qcp_size", DEFAULT_PARALLEL_SIZE);
    int linearAttentionTpSize = top.optionalInt("linear_attention_tp_size", DEFAULT_PARALLEL_SIZE);
    String attentionBackend = top.text("attention_backend");
    CacheLayout layout = layout(top.object("cache", CACHE_FIELDS));
    return top.build(
        () ->
            new DeploymentIdentity(
                modelId,
                checkpointRevision,
                weightVersion,
                draftModelId,
                draftWeightVersion,
                layout,
                attentionTpSize,
                kvpSize,
                qcpSize,
                linearAttentionTpSize,
                attentionBackend));
  }

  private static CacheLayout layout(Obj cache) {
    int p = cache.integer("prefix_granularity");
    String dtype = cache.text("dtype");
    JsonNode groupsNode = cache.array("groups");
    List<CacheGroupSpec> groups = new ArrayList<>();
    for (int i = 0; i < groupsNode.size(); i++) {
      groups.add(group(cache.element(groupsNode, "groups", i, GROUP_FIELDS), i));
    }
    return cache.build(() -> new CacheLayout(p, dtype, groups));
  }

  private static CacheGroupSpec group(Obj g, int position) {
    Integer declaredId = g.optionalInteger("group_id");
    if (declaredId != null && declaredId != position) {
      throw g.error("group_id", declaredId + " must equal the group's position " + position);
    }
    String kindName = g.text("kind");
    Integer window = g.optionalInteger("window_tokens");
    GroupKind kind = g.build(() -> GroupKind.parse(kindName, window));
    if (window != null && !(kind instanceof GroupKind.SlidingWindow)) {
      throw g.error("window_tokens", window + " is only allowed with kind=swa, not " + kindName);
    }
    int bg = g.integer("block_granularity");
    String shardingName = g.optionalText("sharding");
    Integer shardCount = g.optionalInteger("shard_count");
    if (shardCount != null && !"page_cyclic".equals(shardingName)) {
      throw g.error("shard_count", shardCount + " is only allowed with sharding=page_cyclic");
    }
    Sharding sharding = g.build(() -> Sharding.parse(shardingName, shardCount));
    JsonNode fieldsNode = g.array("fields");
    List<CacheField> fields = new ArrayList<>();
    for (int i = 0; i < fieldsNode.size(); i++) {
      Obj f = g.element(fieldsNode, "fields", i, FIELD_FIELDS);
      String name = f.text("name");
      long bytes = f.longInteger("bytes_per_block");
      fields.add(f.build(() -> new CacheField(name, bytes)));
    }
    return g.build(() -> new CacheGroupSpec(position, kind, bg, fields, sharding));
  }

  /** One JSON object being read, with its path for messages. */
  private static final class Obj {
    private final JsonNode node;
    private final String path;

    Obj(JsonNode node, String path, List<String> known, Set<String> ignored) {
      if (node == null || !node.isObject()) {
        throw new ConfigException(
            (path.isEmpty() ? "the document" : path)
                + "="
                + render(node)
                + " must be a JSON object");
      }
      this.node = node;
      this.path = path;
      for (Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
        String name = it.next();
        if (!known.contains(name) && !ignored.contains(name)) {
          throw new ConfigException(
              "unknown field "
                  + path(name)
                  + "; allowed: "
                  + String.join(", ", known)
                  + (ignored.isEmpty()
                      ? ""
                      : " (ignored: "
                          + String.join(", ", ignored.stream().sorted().toList())
                          + ")"));
        }
      }
    }

    String path(String field) {
      return path.isEmpty() ? field : path + "." + field;
    }

    ConfigException error(String field, String problem) {
      return new ConfigException(path(field) + "=" + problem);
    }

    /** Runs a ts-core constructor; its validation message gets this object's path in front. */
    <T> T build(Supplier<T> constructor) {
      try {
        return constructor.get();
      } catch (ConfigException e) {
        throw e;
      } catch (IllegalArgumentException e) {
        throw new ConfigException((path.isEmpty() ? "" : path + ": ") + e.getMessage(), e);
      }
    }

    private JsonNode present(String field) {
      JsonNode v = node.get(field);
      if (v == null || v.isNull()) {
        throw new ConfigException(path(field) + " is missing");
      }
      return v;
    }

    String text(String field) {
      JsonNode v = present(field);
      if (!v.isTextual()) {
        throw error(field, render(v) + " must be a string");
      }
      return v.textValue();
    }

    String optionalText(String field) {
      JsonNode v = node.get(field);
      return v == null || v.isNull() ? null : text(field);
    }

    int integer(String field) {
      JsonNode v = present(field);
      if (!v.isIntegralNumber()) {
        throw error(field, render(v) + " must be an integer");
      }
      if (!v.canConvertToInt()) {
        throw error(
            field,
            render(v) + " is out of range [" + Integer.MIN_VALUE + ", " + Integer.MAX_VALUE + "]");
      }
      return v.intValue();
    }

    Integer optionalInteger(String field) {
      JsonNode v = node.get(field);
      return v == null || v.isNull() ? null : integer(field);
    }

    int optionalInt(String field, int defaultValue) {
      Integer v = optionalInteger(field);
      return v == null ? defaultValue : v;
    }

    long longInteger(String field) {
      JsonNode v = present(field);
      if (!v.isIntegralNumber() || !v.canConvertToLong()) {
        throw error(field, render(v) + " must be an integer");
      }
      return v.longValue();
    }

    Obj object(String field, List<String> known) {
      return new Obj(present(field), path(field), known, Set.of());
    }

    Obj element(JsonNode array, String field, int index, List<String> known) {
      return new Obj(array.get(index), path(field) + "[" + index + "]", known, Set.of());
    }

    JsonNode array(String field) {
      JsonNode v = present(field);
      if (!v.isArray()) {
        throw error(field, render(v) + " must be a JSON array");
      }
      return v;
    }
  }

  private static final int MAX_RENDERED_CHARS = 60;

  /** The value as JSON text, shortened so that an error message stays one readable line. */
  private static String render(JsonNode v) {
    if (v == null) {
      return "null";
    }
    String s = v.toString();
    return s.length() <= MAX_RENDERED_CHARS ? s : s.substring(0, MAX_RENDERED_CHARS) + "...";
  }
}
