package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.pd.PdSecret;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code serve --engine-role prefill|decode} and the KV listener's settings: every mistake is a
 * usage error (exit 2) naming the setting, found before any model is loaded. The PD secret comes
 * from the command's environment only.
 */
class ServeRoleOptionsTest {
  @TempDir Path tmp;

  private static final String SECRET = PdSecret.generate().toHex();

  private static ServeSettingsTest.Run serve(Map<String, String> env, String... args) {
    String[] all = new String[args.length + 2];
    all[0] = "--model";
    all[1] = "synthetic:llama-100m";
    System.arraycopy(args, 0, all, 2, args.length);
    return ServeSettingsTest.serve(env, all);
  }

  private static void assertUsage(ServeSettingsTest.Run run, String... fragments) {
    assertEquals(2, run.exitCode(), run.toString());
    for (String f : fragments) {
      assertTrue(run.err().contains(f), () -> f + " in " + run.err());
    }
    assertFalse(run.err().contains("\tat "), run.err()); // no stack trace
  }

  @Test
  void shouldRefuseAPdRoleWithoutTheSecretNamingBothVariables() {
    for (String role : new String[] {"prefill", "decode"}) {
      assertUsage(
          serve(Map.of(), "--engine-role", role),
          "--engine-role=" + role,
          "TOKENSPEED_PD_SECRET",
          "TOKENSPEED_PD_SECRET_FILE");
    }
  }

  @Test
  void shouldRefuseAMalformedOrMissingSecretNamingBothVariables() {
    assertUsage(
        serve(Map.of("TOKENSPEED_PD_SECRET", "not hex"), "--engine-role", "decode"),
        "TOKENSPEED_PD_SECRET or TOKENSPEED_PD_SECRET_FILE",
        "hex");
    assertUsage(
        serve(Map.of("TOKENSPEED_PD_SECRET", "abcd"), "--engine-role", "decode"),
        "TOKENSPEED_PD_SECRET or TOKENSPEED_PD_SECRET_FILE",
        "bytes");
    assertUsage(
        serve(
            Map.of("TOKENSPEED_PD_SECRET_FILE", tmp.resolve("absent").toString()),
            "--engine-role",
            "prefill"),
        "TOKENSPEED_PD_SECRET or TOKENSPEED_PD_SECRET_FILE",
        "absent");
  }

  @Test
  void shouldRefuseTheKvListenerSettingsOutsideTheDecodeRole() {
    Map<String, String> env = Map.of("TOKENSPEED_PD_SECRET", SECRET);
    assertUsage(
        serve(env, "--engine-role", "prefill", "--pd-port", "9100"),
        "--pd-port=9100 is for --engine-role=decode only",
        "role is prefill");
    assertUsage(
        serve(env, "--pd-host", "127.0.0.1"),
        "--pd-host=127.0.0.1 is for --engine-role=decode only",
        "role is fused");
    assertUsage(
        serve(env, "--engine-role", "decode", "--pd-port", "65536"),
        "--pd-port=65536 must be in [0, 65535]");
    assertUsage(
        serve(env, "--engine-role", "decode", "--pd-host", " "), "--pd-host must not be blank");
  }

  @Test
  void shouldTakeAPdRoleOverSeveralRanksButNotKvSplitByPages() {
    Map<String, String> env = Map.of("TOKENSPEED_PD_SECRET", SECRET);
    for (String role : new String[] {"prefill", "decode"}) {
      // --tp 2 is no refusal of its own: the launcher still stops at the missing secret
      assertUsage(
          serve(Map.of(), "--engine-role", role, "--tp", "2"),
          "--engine-role=" + role,
          "TOKENSPEED_PD_SECRET or TOKENSPEED_PD_SECRET_FILE");
      assertUsage(
          serve(env, "--engine-role", role, "--tp", "2", "--tp-kv", "pages"),
          "--tp-kv=pages",
          "--engine-role=" + role,
          "--tp-kv=heads");
      assertUsage(
          serve(env, "--engine-role", role, "--tp", "257"),
          "--tp=257 with --engine-role=" + role,
          "at most 256 ranks");
    }
    // a fused replica may split by pages: the next check is the one that fails
    assertUsage(
        serve(env, "--tp", "2", "--tp-kv", "pages", "--admin-token", " "),
        "--admin-token must not be blank");
  }

  @Test
  void shouldRefuseADecodeReplicaWhoseLastRanksPortIsBeyondTheRange() {
    Map<String, String> env = Map.of("TOKENSPEED_PD_SECRET", SECRET);
    assertUsage(
        serve(env, "--engine-role", "decode", "--tp", "4", "--pd-port", "65533"),
        "--pd-port=65533 with --tp=4",
        "rank r listens on --pd-port + r",
        "65536 is beyond 65535");
    // the last rank on 65535 itself is in range: the next check is the one that fails
    assertUsage(
        serve(
            env,
            "--engine-role",
            "decode",
            "--tp",
            "3",
            "--pd-port",
            "65533",
            "--admin-token",
            " "),
        "--admin-token must not be blank");
  }

  @Test
  void shouldRefuseAKvPortTakenNamingPdPort() throws Exception {
    Path config = tmp.resolve("tiny-untied.json");
    try (java.io.InputStream in = getClass().getResourceAsStream("/models/tiny-untied.json")) {
      Files.write(config, in.readAllBytes());
    }
    try (java.net.ServerSocket taken =
        new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      int port = taken.getLocalPort();
      ServeSettingsTest.Run run =
          ServeSettingsTest.serve(
              Map.of("TOKENSPEED_PD_SECRET", SECRET),
              "--model",
              "synthetic:" + config,
              "--threads",
              "1",
              "--warmup-rounds",
              "0",
              "--port",
              "0",
              "--engine-role",
              "decode",
              "--pd-port",
              Integer.toString(port));
      assertEquals(1, run.exitCode(), run.toString());
      assertTrue(
          run.err()
              .contains(
                  "--pd-port=" + port + ": the KV transfer cannot listen on 127.0.0.1:" + port),
          run::toString);
      assertFalse(run.err().contains("\tat "), run.err());
    }
  }

  @Test
  void shouldRefuseAnUnknownRoleListingTheRoles() {
    assertUsage(
        serve(Map.of(), "--engine-role", "Decode"),
        "--engine-role=Decode is not a role; allowed: fused, prefill, decode");
  }

  @Test
  void shouldReadTheRoleFromTheSettingsFileToo() throws Exception {
    Path file = tmp.resolve("serve.yaml");
    Files.writeString(file, "model: synthetic:llama-100m\nengine-role: decode\npd-port: 9100\n");
    ServeSettingsTest.Run run = ServeSettingsTest.serve(Map.of(), "--config", file.toString());
    assertUsage(run, "TOKENSPEED_PD_SECRET_FILE");
  }
}
