package io.tokenspeed.server.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.JsonMutator;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Runs a command ({@link SettingsSourcesTest.Probe}) thousands of times with a damaged {@code
 * --config} file, YAML or JSON, so that the whole path from the file's text to the command's
 * settings is exercised: parsing, key lookup, conversion of each value by picocli. Every run must
 * either succeed or end in a usage error (exit status 2, one line on stderr starting with {@code
 * error: }); an exception escaping to picocli (exit status 1, a stack trace) or a hang fails the
 * test. A failure message carries the seed, the input's number and the file, so it replays.
 */
class ConfigFileFuzzTest {

  private static final long SEED = 20261205L;
  private static final int BATCHES = 4;
  private static final int PER_BATCH = 1_000;

  private static final String YAML =
      """
      # probe settings
      model: /models/qwen
      seed: 11
      port: 8080
      max-queued-tokens: 4096
      temperature: 0.5
      served_model_name: qwen
      ignore-eos: true
      kvstore-storage-backend-extra-config:
        async:
          max_operations: 8
      stop-token-ids: [1, 2, 3]
      api-key: 'it''s'
      """;

  private static final String JSON =
      """
      {"model": "/models/qwen", "seed": 11, "port": 8080, "max-queued-tokens": 4096,
       "temperature": 0.5, "served-model-name": "qwen", "ignore-eos": true,
       "kvstore-storage-backend-extra-config": {"async": {"max_operations": 8}},
       "stop-token-ids": [1, 2, 3], "api-key": "k"}
      """;

  private static final String[] YAML_PIECES = {
    "&a ",
    "*a",
    "!!binary ",
    "!!int ",
    "---\n",
    "...\n",
    "? ",
    "- ",
    "\t",
    "|",
    ">-",
    "{",
    "[",
    "0x1F",
    ".inf",
    ".nan",
    "1_000",
    "@",
    "%",
    "'",
    ": ",
    "\n  ",
    "\n",
    "#",
    "~",
    "null",
    "yes",
    "9223372036854775808",
    "-1",
    "0",
    "1e999"
  };

  @TempDir Path dir;

  @Test
  void shouldRunOrGiveAUsageErrorWhenFuzzedWithDamagedConfigFiles() {
    assertEquals(0, run(dir, YAML, false).exitCode());
    assertEquals(0, run(dir, JSON, true).exitCode());
    SplittableRandom rnd = new SplittableRandom(SEED);
    int[] counts = new int[2]; // [ran, usage errors]
    for (int batch = 0; batch < BATCHES; batch++) {
      int first = batch * PER_BATCH;
      assertTimeoutPreemptively(
          Duration.ofSeconds(60),
          () -> {
            for (int i = first; i < first + PER_BATCH; i++) {
              boolean json = rnd.nextInt(3) == 0;
              String text = damage(json ? JSON : YAML, json, rnd);
              SettingsSourcesTest.Run r = run(dir, text, json);
              String replay =
                  "seed="
                      + SEED
                      + " input "
                      + i
                      + " ("
                      + (json ? "JSON" : "YAML")
                      + "): "
                      + JsonMutator.quote(text)
                      + ": "
                      + r;
              if (r.exitCode() == 0) {
                assertTrue(r.probe().ran, replay);
                counts[0]++;
              } else {
                assertEquals(2, r.exitCode(), replay);
                assertEquals(1, r.err().lines().count(), replay);
                assertTrue(r.err().startsWith("error: "), replay);
                counts[1]++;
              }
            }
          },
          () -> "seed=" + SEED + ": batch starting at input " + first + " did not finish");
    }
    assertTrue(counts[0] > 200 && counts[1] > 1_000, Arrays.toString(counts));
  }

  private static SettingsSourcesTest.Run run(Path dir, String text, boolean json) {
    Path file = dir.resolve(json ? "probe.json" : "probe.yaml");
    try {
      Files.writeString(file, text, StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new AssertionError(e);
    }
    return SettingsSourcesTest.run(Map.of(), "--config", file.toString());
  }

  private static String damage(String text, boolean json, SplittableRandom rnd) {
    int choice = rnd.nextInt(10);
    if (choice == 0) {
      return text;
    }
    if (!json && choice < 5) {
      int at = rnd.nextInt(text.length() + 1);
      return text.substring(0, at)
          + YAML_PIECES[rnd.nextInt(YAML_PIECES.length)]
          + text.substring(at);
    }
    JsonMutator.TextMutation[] all = JsonMutator.TextMutation.values();
    return JsonMutator.mutateText(all[rnd.nextInt(all.length)], text, rnd);
  }
}
