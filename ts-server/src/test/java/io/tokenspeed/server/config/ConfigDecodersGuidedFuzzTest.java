package io.tokenspeed.server.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.OneLine;
import io.tokenspeed.model.checkpoint.JsonMutator;
import io.tokenspeed.testkit.DecoderContract;
import io.tokenspeed.testkit.DecoderContract.Outcome;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

/**
 * Coverage-guided fuzz targets (Jazzer) of the server's decoders of operator input: the identity
 * JSON ({@link IdentityJson}), the L3 extra configuration ({@link StorageExtraConfig}), the {@code
 * --group} flag ({@link GroupFlag}) and the configuration file in YAML and in JSON ({@link
 * SettingsFile}). Without {@code JAZZER_FUZZ} each replays its seeds under {@code
 * ConfigDecodersGuidedFuzzTestInputs/<method>} as a regression test; with it, it fuzzes
 * (docs/reliability/fuzzing.md has the commands and figures). {@link ConfigDecodersFuzzTest} is the
 * seeded share with damage aimed at each field.
 *
 * <p>An input's bytes are read as UTF-8 text (a malformed sequence becomes U+FFFD, as the files'
 * strict readers never hand a decoder anything else). Every input must give a value or a {@link
 * ConfigException} with a one-line message; never another exception or error, never a hang, and
 * never an allocation out of proportion to the input (DecoderContract). What a decoder accepts must
 * be usable: an identity derives its namespace, a group has a positive size, entries have keys and
 * values. Refusals keep their promises: a {@code --group} message quotes the flag, a settings
 * message names the file, and an L3 configuration never echoes its password.
 */
class ConfigDecodersGuidedFuzzTest {

  /** Jackson and SnakeYAML keep per-parser buffers of a few tens of KiB. */
  private static final long BASE_BYTES = 8L << 20;

  private static final long PER_INPUT_BYTE = 1024;

  private static final String YAML_FILE = "--config=ts.yaml";
  private static final String JSON_FILE = "--config=ts.json";

  @FuzzTest(maxDuration = "3m")
  void identityJson(byte[] data) {
    String text = new String(data, StandardCharsets.UTF_8);
    Outcome<DeploymentIdentity> o = decode(text, () -> IdentityJson.parse(text));
    if (!o.refused()) {
      DeploymentIdentity identity = o.value();
      assertEquals(identity.modelId(), identity.toJsonTree().get("model_id"), quoted(text));
      assertNotNull(Namespace.of(identity), quoted(text));
    }
  }

  /** The first line names the backend; the rest is the JSON object. */
  @FuzzTest(maxDuration = "3m")
  void storageExtraConfig(byte[] data) {
    String text = new String(data, StandardCharsets.UTF_8);
    int newline = text.indexOf('\n');
    String backend = newline < 0 ? text : text.substring(0, newline);
    String json = newline < 0 ? "" : text.substring(newline + 1);
    Outcome<StorageExtraConfig.Resolved> o =
        decode(text, () -> StorageExtraConfig.parse(backend, json));
    if (o.refused()) {
      String password = onlyPassword(json, text);
      if (password != null) {
        assertFalse(
            o.refusal().getMessage().contains(password),
            () -> "the password is echoed: " + o.refusal().getMessage());
      }
    } else {
      assertNotNull(o.value().backend(), quoted(text));
      assertNotNull(o.value().runtime(), quoted(text));
    }
  }

  @FuzzTest(maxDuration = "3m")
  void groupFlag(byte[] data) {
    String text = new String(data, StandardCharsets.UTF_8);
    Outcome<CacheGroupSpec> o = decode(text, () -> GroupFlag.parse(text, 0));
    if (o.refused()) {
      String prefix = OneLine.of("--group \"" + text + "\": ");
      assertTrue(
          o.refusal().getMessage().startsWith(prefix),
          () -> "message does not quote the flag: " + o.refusal().getMessage());
    } else {
      assertEquals(0, o.value().groupId(), quoted(text));
      assertTrue(o.value().bytesPerBlock() >= 1, quoted(text));
    }
  }

  @FuzzTest(maxDuration = "3m")
  void settingsYaml(byte[] data) {
    settings(new String(data, StandardCharsets.UTF_8), false);
  }

  @FuzzTest(maxDuration = "3m")
  void settingsJson(byte[] data) {
    settings(new String(data, StandardCharsets.UTF_8), true);
  }

  private static void settings(String text, boolean json) {
    String where = json ? JSON_FILE : YAML_FILE;
    Outcome<List<SettingsFile.Entry>> o = decode(text, () -> SettingsFile.parse(text, json, where));
    if (o.refused()) {
      assertTrue(
          o.refusal().getMessage().startsWith(where + ": "),
          () -> "message does not name the file: " + o.refusal().getMessage());
      return;
    }
    for (SettingsFile.Entry e : o.value()) {
      assertNotNull(e.key(), quoted(text));
      assertNotNull(e.value(), quoted(text));
      assertTrue(e.line() >= 1 && e.column() >= 1, quoted(text));
      if (e.value() instanceof SettingsFile.Value.Mapping(var tree)) {
        assertNotNull(SettingsFile.toJson(tree), quoted(text));
      } else if (e.value() instanceof SettingsFile.Value.Sequence(var tree, var scalars)) {
        assertNotNull(SettingsFile.toJson(tree), quoted(text));
        assertTrue(scalars == null || scalars.size() == tree.size(), quoted(text));
      }
    }
  }

  private static <T> Outcome<T> decode(String text, DecoderContract.Decoding<T> decoding) {
    return DecoderContract.decode(
        ConfigException.class, BASE_BYTES, PER_INPUT_BYTE, text.length(), quoted(text), decoding);
  }

  private static Supplier<String> quoted(String text) {
    return () -> JsonMutator.quote(text);
  }

  /**
   * The password of an L3 configuration when the whole input (backend line included) holds it
   * exactly once, as the value of {@code password}, and it is distinctive enough (8 characters or
   * more with a digit, a lowercase and an uppercase letter) that a message could not hold it by
   * chance; else null.
   */
  private static String onlyPassword(String json, String input) {
    Object tree;
    try {
      tree = io.tokenspeed.model.checkpoint.Json.parse(json);
    } catch (RuntimeException | StackOverflowError malformed) {
      return null;
    }
    if (!(tree instanceof Map<?, ?> m) || !(m.get("password") instanceof String p)) {
      return null;
    }
    boolean distinctive =
        p.length() >= 8
            && p.chars().anyMatch(Character::isDigit)
            && p.chars().anyMatch(Character::isLowerCase)
            && p.chars().anyMatch(Character::isUpperCase);
    int at = input.indexOf(p);
    return distinctive && input.indexOf(p, at + 1) < 0 ? p : null;
  }
}
