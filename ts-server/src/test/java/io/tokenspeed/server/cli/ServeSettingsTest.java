package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import picocli.CommandLine;
import picocli.CommandLine.Model.OptionSpec;

/**
 * {@code tokenspeed serve}'s one configuration surface, through the real command line: settings out
 * of range fail at startup naming the setting and where its value came from (flag, variable, file),
 * unknown settings fail, and the help lists every setting with its default, variable and key. These
 * fail before any model is loaded.
 */
class ServeSettingsTest {
  @TempDir Path tmp;

  record Run(int exitCode, String out, String err) {}

  static Run serve(Map<String, String> env, String... args) {
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    CommandLine cli =
        TokenSpeedCli.commandLine(new PrintWriter(out, true), new PrintWriter(err, true), env);
    String[] all = new String[args.length + 1];
    all[0] = "serve";
    System.arraycopy(args, 0, all, 1, args.length);
    int code = cli.execute(all);
    return new Run(code, out.toString(), err.toString());
  }

  @ParameterizedTest(name = "{0}={1}")
  @CsvSource({
    "port, 70000, must be in [0, 65535]",
    "max-model-len, 1, must be in [2, ",
    "max-running, 0, must be in [1, 4096]",
    "max-body-bytes, 10, must be in [1024, 1073741824]",
    "shutdown-timeout, -1, must be in [0, 86400]",
    "host-ratio, 0, must be a finite number > 0",
    "engine-role, tpu, 'is not a role; allowed: fused, prefill, decode'",
    "pd-port, 9100, is for --engine-role=decode only",
    "pd-host, 0.0.0.0, is for --engine-role=decode only",
  })
  void shouldRefuseAnOutOfRangeSettingFromEachSourceNamingIt(String key, String value, String why)
      throws Exception {
    Run flag = serve(Map.of(), "--model", "synthetic:llama-100m", "--" + key + "=" + value);
    assertEquals(2, flag.exitCode(), flag.toString());
    assertTrue(flag.err().contains("--" + key + "="), flag.err());
    assertTrue(flag.err().contains(why), flag.err());

    String variable =
        "TOKENSPEED_SERVE_" + key.toUpperCase(java.util.Locale.ROOT).replace('-', '_');
    Run env = serve(Map.of(variable, value), "--model", "synthetic:llama-100m");
    assertEquals(2, env.exitCode(), env.toString());
    assertTrue(env.err().contains(variable + "=" + value), env.err());
    assertTrue(env.err().contains(why), env.err());

    Path file = tmp.resolve("serve.yaml");
    Files.writeString(file, "model: synthetic:llama-100m\n" + key + ": " + value + "\n");
    Run fromFile = serve(Map.of(), "--config", file.toString());
    assertEquals(2, fromFile.exitCode(), fromFile.toString());
    assertTrue(fromFile.err().contains(file.toString()), fromFile.err());
    assertTrue(fromFile.err().contains(why), fromFile.err());
  }

  @Test
  void shouldRefuseUnknownSettingsInTheFileAndTheEnvironment() throws Exception {
    Path file = tmp.resolve("serve.yaml");
    Files.writeString(file, "model: synthetic:llama-100m\nmax-runing: 8\n");
    Run typo = serve(Map.of(), "--config", file.toString());
    assertEquals(2, typo.exitCode(), typo.toString());
    assertTrue(typo.err().contains("max-runing"), typo.err());
    assertTrue(typo.err().contains("max-running"), "suggests the nearest setting: " + typo.err());

    Run env = serve(Map.of("TOKENSPEED_SERVE_PROT", "80"), "--model", "synthetic:llama-100m");
    assertEquals(2, env.exitCode(), env.toString());
    assertTrue(env.err().contains("TOKENSPEED_SERVE_PROT"), env.err());
  }

  @Test
  void shouldListEverySettingWithItsDefaultVariableAndKeyInTheHelp() {
    Run help = serve(Map.of(), "--help");
    assertEquals(0, help.exitCode(), help.toString());
    CommandLine serve =
        TokenSpeedCli.commandLine(null, null, Map.of()).getSubcommands().get("serve");
    int settings = 0;
    for (OptionSpec o : serve.getCommandSpec().options()) {
      if (o.usageHelp() || o.versionHelp() || o.longestName().equals("--config")) {
        continue;
      }
      settings++;
      String key = o.longestName().substring(2);
      String variable =
          "TOKENSPEED_SERVE_" + key.toUpperCase(java.util.Locale.ROOT).replace('-', '_');
      assertTrue(help.out().contains(o.longestName()), key);
      assertTrue(help.out().contains(variable), () -> variable + " in\n" + help.out());
    }
    assertTrue(settings >= 20, "serve has its settings: " + settings);
    for (String shown :
        List.of("default: 8000", "default: 127.0.0.1", "default: 4096", "default: 4194304")) {
      assertTrue(help.out().contains(shown), () -> shown + " in\n" + help.out());
    }
  }

  @Test
  void shouldDocumentExactlyTheSettingsServeHas() throws Exception {
    String doc = Files.readString(Path.of("..", "docs", "configuration.md"));
    String table = doc.substring(doc.indexOf("## Settings of `tokenspeed serve`"));
    java.util.Set<String> documented = new java.util.TreeSet<>();
    for (String line : table.lines().toList()) {
      if (line.startsWith("| `")) {
        documented.add(line.substring(3, line.indexOf('`', 3)));
      }
    }
    java.util.Set<String> options = new java.util.TreeSet<>();
    CommandLine serve =
        TokenSpeedCli.commandLine(null, null, Map.of()).getSubcommands().get("serve");
    for (OptionSpec o : serve.getCommandSpec().options()) {
      if (!o.usageHelp() && !o.versionHelp() && !o.longestName().equals("--config")) {
        options.add(o.longestName().substring(2));
      }
    }
    assertEquals(options, documented);
  }
}
