package io.tokenspeed.server.config;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The compact command-line form of one cache group, the flag twin of a group object in the identity
 * JSON:
 *
 * <pre>
 *   kind=full,bg=16,bytes=4096
 *   kind=swa,bg=32,window=128,field=k:2048,field=v:2048,sharding=head_partitioned
 *   kind=full,bg=16,bytes=4096,sharding=page_cyclic,shards=2
 * </pre>
 *
 * <p>{@code bytes=N} is one field named {@value IdentityJson#DEFAULT_FIELD_NAME}; {@code
 * field=name:bytes} (repeatable, in layout order) names the fields instead. The group id is the
 * flag's position among the {@code --group} flags. Every key but {@code field} may appear once, and
 * an unknown key is an error, as in the JSON form.
 */
public final class GroupFlag {

  private static final Set<String> KEYS =
      Set.of("kind", "bg", "bytes", "field", "window", "sharding", "shards");

  private GroupFlag() {}

  /** Parses {@code text} as group {@code groupId}; errors quote the flag and name the key. */
  public static CacheGroupSpec parse(String text, int groupId) {
    try {
      return parseUnchecked(text, groupId);
    } catch (IllegalArgumentException e) {
      throw new ConfigException("--group \"" + text + "\": " + e.getMessage(), e);
    }
  }

  private static CacheGroupSpec parseUnchecked(String text, int groupId) {
    Map<String, String> single = new HashMap<>();
    List<CacheField> fields = new ArrayList<>();
    for (String item : text.split(",", -1)) {
      int eq = item.indexOf('=');
      if (eq <= 0) {
        throw new ConfigException(
            "item \"" + item + "\" must be key=value; keys: " + String.join(", ", sorted(KEYS)));
      }
      String key = item.substring(0, eq).trim();
      String value = item.substring(eq + 1).trim();
      if (!KEYS.contains(key)) {
        throw new ConfigException(
            "unknown key " + key + "=" + value + "; keys: " + String.join(", ", sorted(KEYS)));
      }
      if (key.equals("field")) {
        fields.add(field(value));
      } else if (single.putIfAbsent(key, value) != null) {
        throw new ConfigException(key + "=" + value + " is given twice");
      }
    }
    String kindName = single.get("kind");
    if (kindName == null) {
      throw new ConfigException("kind is missing; allowed: full, swa, state");
    }
    Integer window = optionalInt(single, "window");
    if (window != null && window < 1) {
      throw new ConfigException("window=" + window + " must be at least 1");
    }
    if (window == null && kindName.equals("swa")) {
      throw new ConfigException("kind=swa needs window=N (the window in tokens)");
    }
    GroupKind kind = GroupKind.parse(kindName, window);
    if (window != null && !(kind instanceof GroupKind.SlidingWindow)) {
      throw new ConfigException("window=" + window + " is only allowed with kind=swa");
    }
    Integer bg = optionalInt(single, "bg");
    if (bg == null) {
      throw new ConfigException("bg (block granularity in tokens) is missing");
    }
    if (bg < 1) {
      throw new ConfigException("bg=" + bg + " must be at least 1");
    }
    String bytes = single.get("bytes");
    if (bytes != null && !fields.isEmpty()) {
      throw new ConfigException("bytes=" + bytes + " cannot be combined with field=NAME:BYTES");
    }
    if (bytes != null) {
      fields.add(new CacheField(IdentityJson.DEFAULT_FIELD_NAME, parseLong("bytes", bytes)));
    }
    if (fields.isEmpty()) {
      throw new ConfigException("bytes=N or field=NAME:BYTES is missing");
    }
    String shardingName = single.get("sharding");
    Integer shards = optionalInt(single, "shards");
    if (shards != null && shards < 1) {
      throw new ConfigException("shards=" + shards + " must be at least 1");
    }
    if (shards != null && !"page_cyclic".equals(shardingName)) {
      throw new ConfigException("shards=" + shards + " is only allowed with sharding=page_cyclic");
    }
    if (shardingName != null && shardingName.equals("page_cyclic") && shards == null) {
      throw new ConfigException("sharding=page_cyclic needs shards=N");
    }
    Sharding sharding = Sharding.parse(shardingName, shards);
    return new CacheGroupSpec(groupId, kind, bg, fields, sharding);
  }

  private static CacheField field(String value) {
    int colon = value.lastIndexOf(':');
    if (colon <= 0) {
      throw new ConfigException("field=" + value + " must be NAME:BYTES");
    }
    long bytes;
    try {
      bytes = Long.parseLong(value.substring(colon + 1));
    } catch (NumberFormatException e) {
      throw new ConfigException("field=" + value + " must be NAME:BYTES with BYTES an integer");
    }
    return new CacheField(value.substring(0, colon), bytes);
  }

  private static Integer optionalInt(Map<String, String> single, String key) {
    String v = single.get(key);
    if (v == null) {
      return null;
    }
    long parsed = parseLong(key, v);
    if (parsed != (int) parsed) {
      throw new ConfigException(key + "=" + v + " is out of range");
    }
    return (int) parsed;
  }

  private static long parseLong(String key, String value) {
    try {
      return Long.parseLong(value);
    } catch (NumberFormatException e) {
      throw new ConfigException(key + "=" + value + " is not an integer");
    }
  }

  private static List<String> sorted(Set<String> keys) {
    return keys.stream().sorted().toList();
  }
}
