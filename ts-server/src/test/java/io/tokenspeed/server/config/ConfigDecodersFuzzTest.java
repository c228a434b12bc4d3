package io.tokenspeed.server.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.OneLine;
import io.tokenspeed.model.checkpoint.Json;
import io.tokenspeed.model.checkpoint.JsonMutator;
import io.tokenspeed.testkit.DecoderContract;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.function.Function;
import org.junit.jupiter.api.Test;

/**
 * Feeds the server's decoders of operator input — the identity JSON ({@link IdentityJson}), the L3
 * extra configuration ({@link StorageExtraConfig}), the {@code --group} flag ({@link GroupFlag})
 * and the configuration file ({@link SettingsFile}) — tens of thousands of damaged documents each.
 * Every input must give a value or a {@link ConfigException} whose message is one line and, where
 * one field was damaged, names it; never another exception or error, and never a hang. The L3
 * configuration's password never appears in a message, nor any piece of it of 4 characters or more
 * (what a mutation left of it).
 *
 * <p>Damage is to the text (truncation, stray characters, tokens swapped, deep nesting) and to the
 * parsed tree (members dropped, values of other types or out of range, subtrees copied elsewhere,
 * unknown keys). A failure message carries the seed, the input's number and the input, so it
 * replays.
 */
class ConfigDecodersFuzzTest {

  private static final long SEED = 20261204L;
  private static final int BATCHES = 4;
  private static final int PER_BATCH = 5_000;

  private static final String PASSWORD = "pw-Zq9x7Kv";

  private static final List<String> IDENTITIES =
      List.of(
          """
          {"model_id": "tiny-hybrid", "checkpoint_revision": "rev-1", "weight_version": "w1",
           "attention_tp_size": 1, "kvp_size": 1, "qcp_size": 1, "linear_attention_tp_size": 1,
           "attention_backend": "cpu-reference",
           "cache": {"prefix_granularity": 64, "dtype": "bf16", "groups": [
             {"kind": "full", "block_granularity": 16, "fields": [
               {"name": "k", "bytes_per_block": 2048}, {"name": "v", "bytes_per_block": 2048}],
              "sharding": "head_partitioned"},
             {"kind": "swa", "window_tokens": 128, "block_granularity": 32, "fields": [
               {"name": "k", "bytes_per_block": 2048}, {"name": "v", "bytes_per_block": 2048}],
              "sharding": "head_partitioned"},
             {"kind": "state", "block_granularity": 64,
              "fields": [{"name": "ssm", "bytes_per_block": 8192}], "sharding": "replicated"}]}}
          """,
          """
          {"model_id": "m", "checkpoint_revision": "r", "weight_version": "w",
           "draft_model_id": "d", "draft_weight_version": "dw", "attention_tp_size": 4,
           "attention_backend": "flash", "dp_rank": 3, "storage": {"anything": [1, 2]},
           "cache": {"prefix_granularity": 32, "dtype": "fp8", "groups": [
             {"group_id": 0, "kind": "full", "block_granularity": 32,
              "fields": [{"name": "kv", "bytes_per_block": 65536}],
              "sharding": "page_cyclic", "shard_count": 2}]}}
          """);

  private static final List<String[]> STORAGE_CONFIGS =
      List.of(
          new String[] {
            "memory",
            """
            {"max_key_bytes": 512, "max_value_bytes": 1048576, "capacity_bytes": 1073741824,
             "async": {"max_operations": 8, "soft_deadline_ms": 50, "high_queued_jobs": 64,
                       "low_queued_jobs": 32, "query_workers": 2, "health_cooldown_ms": 1000}}
            """
          },
          new String[] {
            "file", "{\"path\": \"/var/tmp/l3\", \"fsync\": true, \"max_value_bytes\": 4096}"
          },
          new String[] {
            "redis",
            """
            {"uri": "redis://127.0.0.1:6379", "username": "ts", "password": "%s", "tls": false,
             "connect_timeout_ms": 2000, "command_timeout_ms": 500, "connections": 4,
             "async": {"max_put_keys": 16}}
            """
                .formatted(PASSWORD)
          },
          new String[] {
            "redis",
            """
            {"cluster": ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"], "password": "%s",
             "max_key_bytes": 256}
            """
                .formatted(PASSWORD)
          },
          new String[] {
            "mooncake",
            """
            {"library_path": "/opt/mooncake/libmooncake_store.so", "local_hostname": "10.0.0.5",
             "master_server_address": "10.0.0.1:50051", "protocol": "tcp",
             "global_segment_size_bytes": 1073741824, "async": {"get_workers": 2}}
            """
          });

  private static final List<String> GROUP_FLAGS =
      List.of(
          "kind=full,bg=16,bytes=4096",
          "kind=swa,bg=32,window=128,field=k:2048,field=v:2048,sharding=head_partitioned",
          "kind=full,bg=16,bytes=4096,sharding=page_cyclic,shards=2",
          "kind=state,bg=64,field=ssm:8192,sharding=replicated");

  private static final String YAML =
      """
      # settings
      port: 8000
      host: 127.0.0.1
      served-model-name: qwen
      max_num_seqs: 64
      ignore-eos: true
      temperature: 0.70
      kvstore-storage-backend-extra-config:
        async:
          max_operations: 8
      group:
        - kind=full,bg=16,bytes=4096
        - "kind=swa,bg=32,window=128,bytes=2048"
      stop: [ "a", 'b' ]
      nothing: ~
      empty:
      quoted: 'it''s'
      multi: |
        line one
        line two
      """;

  private static final String JSON =
      """
      {"port": 8000, "host": "127.0.0.1", "ignore-eos": true, "temperature": 0.70,
       "kvstore-storage-backend-extra-config": {"async": {"max_operations": 8}},
       "group": ["kind=full,bg=16,bytes=4096"], "stop": ["a", "b"], "nothing": null}
      """;

  /** Text YAML gives its own meaning to. */
  private static final String[] YAML_PIECES = {
    "&a ",
    "*a",
    "<<: *a",
    "!!binary ",
    "!!int ",
    "!!float ",
    "!custom ",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "? ",
    "- ",
    "\t",
    "|",
    ">-",
    "{",
    "[",
    "]",
    "}",
    "0x1F",
    "0o17",
    ".inf",
    "-.inf",
    ".nan",
    "1_000",
    "@",
    "`",
    "%",
    "\"\\",
    "'",
    ": ",
    "\n  ",
    "\n",
    "#",
    "=",
    "1e999",
    "99999999999999999999999999",
    "\u0000",
    "\ufeff",
    "\u2028"
  };

  // ---------------------------------------------------------------- identity JSON

  @Test
  void shouldGiveAnIdentityOrAConfigExceptionWhenFuzzedWithDamagedIdentityJson() {
    List<Object> trees = IDENTITIES.stream().map(Json::parse).toList();
    for (String valid : IDENTITIES) {
      assertNotNull(IdentityJson.parse(valid));
    }
    int[] counts =
        fuzz(
            "identity",
            (rnd, keys) -> {
              int base = rnd.nextInt(IDENTITIES.size());
              return damage(IDENTITIES.get(base), trees.get(base), rnd, keys);
            },
            input -> {
              DeploymentIdentity identity = IdentityJson.parse(input);
              // An identity that parses must be usable: its tree is what keys are derived from.
              assertEquals(identity.modelId(), identity.toJsonTree().get("model_id"));
              return identity;
            },
            (input, e) -> {});
    assertTrue(counts[0] > 500 && counts[1] > 5_000, Arrays.toString(counts));
  }

  // ---------------------------------------------------------------- L3 extra configuration

  @Test
  void shouldGiveASettingOrAConfigExceptionWhenFuzzedWithDamagedStorageConfig() {
    List<Object> trees = STORAGE_CONFIGS.stream().map(c -> Json.parse(c[1])).toList();
    for (String[] valid : STORAGE_CONFIGS) {
      assertNotNull(StorageExtraConfig.parse(valid[0], valid[1]));
    }
    int[] counts =
        fuzz(
            "storage",
            (rnd, keys) -> {
              int base = rnd.nextInt(STORAGE_CONFIGS.size());
              String[] c = STORAGE_CONFIGS.get(base);
              String json = damage(c[1], trees.get(base), rnd, keys);
              if (rnd.nextInt(50) == 0) {
                keys.clear(); // the backend is refused before the fields are read
                return JsonMutator.mutateText(JsonMutator.TextMutation.CHARS_REPLACED, c[0], rnd)
                    + "\n"
                    + json;
              }
              return c[0] + "\n" + json;
            },
            input -> {
              int newline = input.indexOf('\n');
              return StorageExtraConfig.parse(
                  input.substring(0, newline), input.substring(newline + 1));
            },
            (input, e) -> {
              for (String piece : secretPieces(input)) {
                assertFalse(
                    e.getMessage().contains(piece),
                    "the password, or " + piece + " of it, is echoed: " + e.getMessage());
              }
            });
    assertTrue(counts[0] > 500 && counts[1] > 5_000, Arrays.toString(counts));
  }

  /** Every piece of the password long enough to identify it: 4 characters or more. */
  private static final List<String> PASSWORD_PIECES =
      java.util.stream.IntStream.range(0, PASSWORD.length())
          .boxed()
          .flatMap(
              from ->
                  java.util.stream.IntStream.rangeClosed(from + 4, PASSWORD.length())
                      .mapToObj(to -> PASSWORD.substring(from, to)))
          .distinct()
          .toList();

  /**
   * The pieces of the password (see {@link #PASSWORD_PIECES}) that a refusal of {@code input} must
   * not show: those the input holds only inside the password's value, whatever a mutation left of
   * it (truncated, a character replaced, the text cut off inside it). A piece that the input also
   * holds elsewhere is left out: a mutation may copy the password, or part of it, into another
   * field, such as {@code uri}, whose value may be echoed.
   */
  private static List<String> secretPieces(String input) {
    String json = input.substring(input.indexOf('\n') + 1);
    String password; // the value as the decoder reads it; null when the text is not JSON
    try {
      Object tree = Json.parse(json);
      password =
          tree instanceof java.util.Map<?, ?> m && m.get("password") instanceof String p ? p : "";
    } catch (IllegalArgumentException malformed) {
      password = null;
    }
    List<String> out = new java.util.ArrayList<>();
    for (String piece : PASSWORD_PIECES) {
      int inInput = occurrences(input, piece);
      // malformed: the one occurrence is what is left of the password's value
      boolean onlyInThePassword =
          password == null ? inInput == 1 : inInput > 0 && occurrences(password, piece) == inInput;
      if (onlyInThePassword) {
        out.add(piece);
      }
    }
    return out;
  }

  private static int occurrences(String text, String piece) {
    int n = 0;
    for (int at = text.indexOf(piece); at >= 0; at = text.indexOf(piece, at + 1)) {
      n++;
    }
    return n;
  }

  @Test
  void shouldRefuseFieldsWhoseSizesOverflowWithAConfigException() {
    // Found by the identity fuzz test: bytes_per_block values whose sum overflows a long were
    // accepted, and deriving the identity's keys then threw an ArithmeticException.
    String json =
        """
        {"model_id": "m", "checkpoint_revision": "r", "weight_version": "w",
         "attention_backend": "b", "cache": {"prefix_granularity": 16, "dtype": "bf16",
         "groups": [{"kind": "full", "block_granularity": 16, "fields": [
           {"name": "k", "bytes_per_block": 9223372036854775805},
           {"name": "v", "bytes_per_block": 2048}]}]}}
        """;
    ConfigException e = assertThrows(ConfigException.class, () -> IdentityJson.parse(json));
    assertEquals(
        "cache.groups[0]: group 0 fields' bytes_per_block add up to more than"
            + " 9223372036854775807 bytes",
        e.getMessage());
    ConfigException flag =
        assertThrows(
            ConfigException.class,
            () -> GroupFlag.parse("kind=full,bg=16,field=k:9223372036854775805,field=v:2048", 0));
    assertTrue(flag.getMessage().contains("add up to more than"), flag.getMessage());
  }

  @Test
  void shouldKeepMessagesOnOneLineWhenTheInputHoldsALineBreak() {
    // Found by the fuzz tests: a line break in a --group flag or in an identity field's name
    // reached the message as is.
    ConfigException e =
        assertThrows(ConfigException.class, () -> GroupFlag.parse("kind=full\n,bg=16", 0));
    assertEquals(
        "--group \"kind=full\\u000a,bg=16\": bytes=N or field=NAME:BYTES is missing",
        e.getMessage());
    ConfigException field =
        assertThrows(ConfigException.class, () -> IdentityJson.parse("{\"sha\\rding\": 1}"));
    assertTrue(
        field.getMessage().startsWith("unknown field sha\\u000dding; allowed: "),
        field.getMessage());
  }

  @Test
  void shouldNameTheGroupFlagKeyWhenItsValueIsBelowOne() {
    // Found by the --group fuzz test: bg=0 was refused as "block_granularity=0", a name the flag
    // does not use.
    ConfigException bg =
        assertThrows(ConfigException.class, () -> GroupFlag.parse("kind=full,bg=0,bytes=1", 0));
    assertEquals("--group \"kind=full,bg=0,bytes=1\": bg=0 must be at least 1", bg.getMessage());
    ConfigException shards =
        assertThrows(
            ConfigException.class,
            () -> GroupFlag.parse("kind=full,bg=1,bytes=1,sharding=page_cyclic,shards=0", 0));
    assertTrue(shards.getMessage().endsWith(": shards=0 must be at least 1"), shards.getMessage());
  }

  // ---------------------------------------------------------------- --group

  @Test
  void shouldGiveAGroupOrAConfigExceptionWhenFuzzedWithDamagedGroupFlags() {
    for (String valid : GROUP_FLAGS) {
      assertNotNull(GroupFlag.parse(valid, 0));
    }
    String[] changedKey = {""}; // the key whose value the input replaced, if one
    int[] counts =
        fuzz(
            "group",
            (rnd, keys) -> {
              changedKey[0] = "";
              String flag = GROUP_FLAGS.get(rnd.nextInt(GROUP_FLAGS.size()));
              if (rnd.nextInt(10) == 0) {
                return flag;
              }
              List<String> items = new java.util.ArrayList<>(List.of(flag.split(",")));
              switch (rnd.nextInt(4)) {
                case 0 -> items.remove(rnd.nextInt(items.size()));
                case 1 ->
                    items.add(rnd.nextInt(items.size() + 1), items.get(rnd.nextInt(items.size())));
                case 2 -> {
                  int at = rnd.nextInt(items.size());
                  String item = items.get(at);
                  changedKey[0] = item.substring(0, Math.max(0, item.indexOf('=')));
                  items.set(
                      at,
                      item.substring(0, item.indexOf('=') + 1)
                          + JsonMutator.randomToken(rnd).replace("\"", ""));
                }
                default -> {
                  JsonMutator.TextMutation[] all = JsonMutator.TextMutation.values();
                  return JsonMutator.mutateText(all[rnd.nextInt(all.length - 1)], flag, rnd);
                }
              }
              return String.join(",", items);
            },
            input -> {
              CacheGroupSpec g = GroupFlag.parse(input, 0);
              assertEquals(0, g.groupId());
              assertTrue(g.bytesPerBlock() >= 1);
              return g;
            },
            (input, e) -> {
              String prefix = OneLine.of("--group \"" + input + "\": ");
              assertTrue(
                  e.getMessage().startsWith(prefix),
                  "message does not quote the flag: " + e.getMessage());
              if (!changedKey[0].isEmpty()) {
                assertTrue(
                    e.getMessage().substring(prefix.length()).contains(changedKey[0]),
                    "message does not name " + changedKey[0] + ": " + e.getMessage());
              }
            });
    assertTrue(counts[0] > 500 && counts[1] > 5_000, Arrays.toString(counts));
  }

  // ---------------------------------------------------------------- --config FILE

  @Test
  void shouldGiveEntriesOrAConfigExceptionWhenFuzzedWithDamagedConfigFiles() {
    assertEquals(13, SettingsFile.parse(YAML, false, "--config=ts.yaml").size());
    assertEquals(8, SettingsFile.parse(JSON, true, "--config=ts.json").size());
    int[] counts =
        fuzz(
            "settings",
            (rnd, keys) -> {
              boolean json = rnd.nextInt(3) == 0;
              String text = json ? JSON : YAML;
              String damaged;
              if (rnd.nextInt(10) == 0) {
                damaged = text;
              } else if (!json && rnd.nextBoolean()) {
                int at = rnd.nextInt(text.length() + 1);
                damaged =
                    text.substring(0, at)
                        + YAML_PIECES[rnd.nextInt(YAML_PIECES.length)]
                        + text.substring(at);
              } else {
                JsonMutator.TextMutation[] all = JsonMutator.TextMutation.values();
                damaged = JsonMutator.mutateText(all[rnd.nextInt(all.length)], text, rnd);
              }
              return (json ? "J" : "Y") + damaged;
            },
            input -> {
              boolean json = input.charAt(0) == 'J';
              List<SettingsFile.Entry> entries =
                  SettingsFile.parse(input.substring(1), json, where(json));
              for (SettingsFile.Entry e : entries) {
                assertNotNull(e.key());
                assertNotNull(e.value());
                assertTrue(e.line() >= 1, "line " + e.line());
              }
              return entries;
            },
            (input, e) ->
                assertTrue(
                    e.getMessage().startsWith(where(input.charAt(0) == 'J') + ": "),
                    "message does not name the file: " + e.getMessage()));
    assertTrue(counts[0] > 500 && counts[1] > 5_000, Arrays.toString(counts));
  }

  private static String where(boolean json) {
    return json ? "--config=ts.json" : "--config=ts.yaml";
  }

  // ---------------------------------------------------------------- the loop

  /** Makes one input; adds the keys of the field it damaged (if one) to {@code keys}. */
  private interface Generator {
    String next(SplittableRandom rnd, List<String> keys);
  }

  /** Extra checks of a refusal. */
  private interface RefusalCheck {
    void check(String input, ConfigException e);
  }

  /**
   * Runs {@code BATCHES * PER_BATCH} inputs through {@code decoder}; returns [values, refusals].
   */
  private static int[] fuzz(
      String name, Generator generator, Function<String, ?> decoder, RefusalCheck refusal) {
    SplittableRandom rnd = new SplittableRandom(SEED ^ name.hashCode());
    int[] counts = new int[2];
    for (int batch = 0; batch < BATCHES; batch++) {
      int first = batch * PER_BATCH;
      assertTimeoutPreemptively(
          Duration.ofSeconds(60),
          () -> {
            for (int i = first; i < first + PER_BATCH; i++) {
              List<String> keys = new java.util.ArrayList<>();
              String input = generator.next(rnd, keys);
              String replay =
                  name + " seed=" + SEED + " input " + i + ": " + JsonMutator.quote(input) + ": ";
              Object value;
              try {
                value = decoder.apply(input);
              } catch (ConfigException e) {
                DecoderContract.assertClearMessage(e, () -> replay); // present, not blank, one line
                String message = e.getMessage();
                if (!keys.isEmpty() && !keys.getFirst().isEmpty()) {
                  assertTrue(
                      keys.stream().anyMatch(message::contains),
                      replay + "message names none of " + keys + ": " + message);
                }
                try {
                  refusal.check(input, e);
                } catch (AssertionError a) {
                  throw new AssertionError(replay + a.getMessage(), a);
                }
                counts[1]++;
                continue;
              } catch (AssertionError e) {
                throw new AssertionError(replay + e.getMessage(), e);
              } catch (Throwable e) {
                throw new AssertionError(replay + "threw " + e, e);
              }
              assertNotNull(value, replay);
              counts[0]++;
            }
          },
          () -> name + " seed=" + SEED + ": batch starting at input " + first + " did not finish");
    }
    return counts;
  }

  /** {@code text} damaged on its text or on its tree, or left valid one time in ten. */
  private static String damage(String text, Object tree, SplittableRandom rnd, List<String> keys) {
    int choice = rnd.nextInt(10);
    if (choice == 0) {
      return text;
    }
    if (choice < 5) {
      JsonMutator.TextMutation[] all = JsonMutator.TextMutation.values();
      return JsonMutator.mutateText(all[rnd.nextInt(all.length)], text, rnd);
    }
    JsonMutator.TreeMutation[] all = JsonMutator.TreeMutation.values();
    JsonMutator.Mutated m = JsonMutator.mutateTree(all[rnd.nextInt(all.length)], tree, rnd);
    keys.addAll(m.keys());
    return JsonMutator.write(m.root());
  }
}
