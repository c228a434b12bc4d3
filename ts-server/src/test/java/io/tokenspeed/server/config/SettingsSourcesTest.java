package io.tokenspeed.server.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Callable;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@link SettingsSources} on a small command with options of every kind a server has: each pair of
 * sources in both orders for each kind, the file's shapes (snake_case keys, nested mappings as JSON
 * text, lists), every startup failure with its message, and the help.
 */
class SettingsSourcesTest {

  static final String PREFIX = "TOKENSPEED_PROBE_";

  @TempDir Path tmp;

  /** Options a mixin brings, as ModelOptions does. */
  static final class Shared {
    @Option(names = "--model", required = true, description = "Model folder.")
    String model;

    @Option(names = "--seed", description = "Weight seed.")
    long seed = 7;
  }

  @Command(name = "probe", mixinStandardHelpOptions = true, sortOptions = false)
  static final class Probe implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Mixin Shared shared;

    @Option(names = "--port", paramLabel = "N", description = "Port to listen on.")
    int port = 8000;

    @Option(names = "--max-queued-tokens", paramLabel = "N", description = "Queue bound.")
    long maxQueuedTokens = 1L << 20;

    @Option(names = "--temperature", paramLabel = "T", description = "Sampling temperature.")
    double temperature = 1.0;

    @Option(names = "--served-model-name", paramLabel = "NAME", description = "Model name.")
    String servedModelName;

    @Option(names = "--ignore-eos", description = "Generate past the end token.")
    boolean ignoreEos;

    @Option(
        names = "--kvstore-storage-backend-extra-config",
        paramLabel = "JSON",
        description = "Store settings as one JSON object.")
    String extraConfig;

    @Option(
        names = "--stop-token-ids",
        paramLabel = "ID,...",
        split = ",",
        description = "Token ids that stop generation.")
    List<Integer> stopTokenIds;

    @Option(
        names = "--api-key",
        defaultValue = "none",
        description = "Key a client must send (default: none).")
    String apiKey;

    boolean ran;

    @Override
    public Integer call() {
      if (port < 1 || port > 65535) {
        throw new ParameterException(
            spec.commandLine(),
            "--port=" + port + " must be in [1, 65535]",
            spec.findOption("--port"),
            String.valueOf(port));
      }
      ran = true;
      return 0;
    }
  }

  /** One run: exit code, streams, the command and its sources. */
  record Run(int exitCode, String out, String err, Probe probe, SettingsSources sources) {

    Probe ok() {
      assertEquals(0, exitCode, this::toString);
      assertTrue(probe.ran, this::toString);
      return probe;
    }

    /** Asserts a usage error (exit 2, one line) and returns its message. */
    String usageError() {
      assertEquals(2, exitCode, this::toString);
      assertFalse(probe.ran, this::toString);
      assertEquals(1, err.lines().count(), this::toString);
      assertTrue(err.startsWith("error: "), this::toString);
      return err.strip().substring("error: ".length());
    }

    @Override
    public String toString() {
      return "exit=" + exitCode + "\nout:\n" + out + "\nerr:\n" + err;
    }
  }

  static CommandLine commandLine(Probe probe, StringWriter out, StringWriter err) {
    CommandLine cl = new CommandLine(probe);
    cl.setOut(new PrintWriter(out, true));
    cl.setErr(new PrintWriter(err, true));
    cl.setParameterExceptionHandler(
        (ex, args) -> {
          ParameterException shown = SettingsSources.attributed(ex);
          shown.getCommandLine().getErr().println("error: " + shown.getMessage());
          return 2;
        });
    return cl;
  }

  static Run run(Map<String, String> env, String... args) {
    Probe probe = new Probe();
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    CommandLine cl = commandLine(probe, out, err);
    SettingsSources sources = SettingsSources.install(cl, PREFIX, env);
    int code = cl.execute(args);
    return new Run(code, out.toString(), err.toString(), probe, sources);
  }

  Path file(String name, String text) throws Exception {
    Path file = tmp.resolve(name);
    Files.writeString(file, text, StandardCharsets.UTF_8);
    return file;
  }

  static String[] args(String... args) {
    return args;
  }

  static String[] with(String[] args, String... more) {
    String[] all = Arrays.copyOf(args, args.length + more.length);
    System.arraycopy(more, 0, all, args.length, more.length);
    return all;
  }

  // ------------------------------------------------------------------ precedence

  /**
   * One setting and two values of it: how each is written on the command line, in a variable and in
   * a file, and what the command then holds.
   */
  record Kind(String key, Value low, Value high, Object builtIn) {
    @Override
    public String toString() {
      return key;
    }
  }

  record Value(List<String> flag, String env, String yaml, Object held) {}

  static Object held(Probe p, String key) {
    return switch (key) {
      case "port" -> p.port;
      case "max-queued-tokens" -> p.maxQueuedTokens;
      case "temperature" -> p.temperature;
      case "served-model-name" -> p.servedModelName;
      case "ignore-eos" -> p.ignoreEos;
      case "seed" -> p.shared.seed;
      case "model" -> p.shared.model;
      case "kvstore-storage-backend-extra-config" -> p.extraConfig;
      case "stop-token-ids" -> p.stopTokenIds;
      case "api-key" -> p.apiKey;
      default -> throw new IllegalArgumentException(key);
    };
  }

  /** The built-in default of setting {@code key}. */
  static Object builtIn(String key) {
    return kinds().filter(k -> k.key().equals(key)).findFirst().map(Kind::builtIn).orElse(null);
  }

  static Stream<Kind> kinds() {
    return Stream.of(
        new Kind(
            "port",
            new Value(List.of("--port=9001"), "9001", "9001", 9001),
            new Value(List.of("--port", "9002"), "9002", "9002", 9002),
            8000),
        new Kind(
            "max-queued-tokens",
            new Value(
                List.of("--max-queued-tokens=5000000000"),
                "5000000000",
                "5000000000",
                5_000_000_000L),
            new Value(List.of("--max-queued-tokens=17"), "17", "17", 17L),
            1L << 20),
        new Kind(
            "temperature",
            new Value(List.of("--temperature=0.25"), "0.25", "0.25", 0.25),
            new Value(List.of("--temperature=1.5"), "1.5", "1.5", 1.5),
            1.0),
        new Kind(
            "served-model-name",
            new Value(List.of("--served-model-name=alpha"), "alpha", "alpha", "alpha"),
            new Value(
                List.of("--served-model-name", "beta gamma"),
                "beta gamma",
                "beta gamma",
                "beta gamma"),
            null),
        new Kind(
            "ignore-eos",
            new Value(List.of("--ignore-eos=false"), "false", "false", false),
            new Value(List.of("--ignore-eos"), "true", "true", true),
            false),
        new Kind(
            "seed",
            new Value(List.of("--seed=11"), "11", "11", 11L),
            new Value(List.of("--seed=12"), "12", "12", 12L),
            7L),
        new Kind(
            "kvstore-storage-backend-extra-config",
            new Value(
                List.of("--kvstore-storage-backend-extra-config={\"path\":\"/a\"}"),
                "{\"path\":\"/a\"}",
                "{path: /a}",
                "{\"path\":\"/a\"}"),
            new Value(
                List.of("--kvstore-storage-backend-extra-config", "{\"path\":\"/b\",\"n\":2}"),
                "{\"path\":\"/b\",\"n\":2}",
                "\n  path: /b\n  n: 2",
                "{\"path\":\"/b\",\"n\":2}"),
            null),
        new Kind(
            "stop-token-ids",
            new Value(List.of("--stop-token-ids=1,2"), "1,2", "[1, 2]", List.of(1, 2)),
            new Value(List.of("--stop-token-ids", "3"), "3", "3", List.of(3)),
            null),
        new Kind(
            "api-key",
            new Value(List.of("--api-key=k1"), "k1", "k1", "k1"),
            new Value(List.of("--api-key=k2"), "k2", "k2", "k2"),
            "none"));
  }

  static Stream<Arguments> kindsAndOrders() {
    return kinds().flatMap(k -> Stream.of(Arguments.of(k, false), Arguments.of(k, true)));
  }

  /** Flag, variable and file entry of {@code v} for the setting of {@code k}. */
  String[] flag(Value v) {
    return v.flag().toArray(String[]::new);
  }

  Map<String, String> env(Kind k, Value v) {
    return Map.of(SettingsSources.variable(PREFIX, k.key()), v.env());
  }

  String[] config(Kind k, Value v) throws Exception {
    Path f = file(k.key() + ".yaml", k.key() + ": " + v.yaml() + "\n");
    return args("--config", f.toString());
  }

  static void assertHeld(Object expected, Probe p, String key) {
    assertEquals(expected, held(p, key), key);
  }

  @ParameterizedTest(name = "{0} swapped={1}")
  @MethodSource("kindsAndOrders")
  void shouldLetAFlagWinOverAVariable(Kind k, boolean swapped) {
    Value flag = swapped ? k.low() : k.high();
    Value env = swapped ? k.high() : k.low();
    Run r = run(env(k, env), with(args("--model=m"), flag(flag)));
    assertHeld(flag.held(), r.ok(), k.key());
    assertEquals(new Origin.Flag("--" + k.key()), r.sources().origins().get(k.key()), r::toString);
  }

  @ParameterizedTest(name = "{0} swapped={1}")
  @MethodSource("kindsAndOrders")
  void shouldLetAFlagWinOverTheFile(Kind k, boolean swapped) throws Exception {
    Value flag = swapped ? k.low() : k.high();
    Value file = swapped ? k.high() : k.low();
    Run r = run(Map.of(), with(with(args("--model=m"), config(k, file)), flag(flag)));
    assertHeld(flag.held(), r.ok(), k.key());
  }

  @ParameterizedTest(name = "{0} swapped={1}")
  @MethodSource("kindsAndOrders")
  void shouldLetAVariableWinOverTheFile(Kind k, boolean swapped) throws Exception {
    Value env = swapped ? k.low() : k.high();
    Value file = swapped ? k.high() : k.low();
    Run r = run(env(k, env), with(args("--model=m"), config(k, file)));
    assertHeld(env.held(), r.ok(), k.key());
    assertEquals(
        new Origin.Environment(SettingsSources.variable(PREFIX, k.key())),
        r.sources().origins().get(k.key()));
  }

  @ParameterizedTest(name = "{0} swapped={1}")
  @MethodSource("kindsAndOrders")
  void shouldLetTheFileWinOverTheDefault(Kind k, boolean swapped) throws Exception {
    Value file = swapped ? k.low() : k.high();
    Run r = run(Map.of(), with(args("--model=m"), config(k, file)));
    assertHeld(file.held(), r.ok(), k.key());
    assertEquals(
        new Origin.ConfigFile(tmp.resolve(k.key() + ".yaml"), 1),
        r.sources().origins().get(k.key()));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("kinds")
  void shouldKeepTheDefaultWithoutASource(Kind k) {
    Run r = run(Map.of(), "--model=m");
    assertHeld(k.builtIn(), r.ok(), k.key());
    assertEquals(new Origin.BuiltIn(), r.sources().origins().get(k.key()));
  }

  @Test
  void shouldLetAVariableWinOverAFlagsDefaultOnlyWhenTheFlagIsAbsent() {
    // picocli sets a bare flag to the opposite of its default; with a source saying true the
    // flag must still mean true.
    Map<String, String> env = Map.of(PREFIX + "IGNORE_EOS", "true");
    assertTrue(run(env, "--model=m", "--ignore-eos").ok().ignoreEos);
    assertTrue(run(env, "--model=m").ok().ignoreEos);
    assertFalse(run(env, "--model=m", "--ignore-eos=false").ok().ignoreEos);
  }

  @Test
  void shouldSatisfyARequiredOptionFromASource() throws Exception {
    Path f = file("m.yaml", "model: /models/qwen\n");
    assertEquals("/models/qwen", run(Map.of(), "--config", f.toString()).ok().shared.model);
    assertEquals("/m2", run(Map.of(PREFIX + "MODEL", "/m2")).ok().shared.model);
    String error = run(Map.of()).usageError();
    assertTrue(error.contains("--model"), error);
  }

  @Test
  void shouldReportEveryOriginInOptionOrder() throws Exception {
    Path f = file("s.yaml", "# settings\nport: 9000\ntemperature: 0.5\nserved-model-name: x\n");
    Run r =
        run(
            Map.of(PREFIX + "TEMPERATURE", "0.7", PREFIX + "MODEL", "m"),
            "--config=" + f,
            "--served-model-name",
            "y");
    r.ok();
    Map<String, Origin> origins = r.sources().origins();
    assertEquals(
        List.of(
            "model",
            "seed",
            "port",
            "max-queued-tokens",
            "temperature",
            "served-model-name",
            "ignore-eos",
            "kvstore-storage-backend-extra-config",
            "stop-token-ids",
            "api-key"),
        List.copyOf(origins.keySet()));
    assertEquals(new Origin.Environment(PREFIX + "MODEL"), origins.get("model"));
    assertEquals(new Origin.ConfigFile(f, 2), origins.get("port"));
    assertEquals(new Origin.Environment(PREFIX + "TEMPERATURE"), origins.get("temperature"));
    assertEquals(new Origin.Flag("--served-model-name"), origins.get("served-model-name"));
    assertEquals(new Origin.BuiltIn(), origins.get("seed"));
    assertEquals(f.toString() + " line 2", origins.get("port").describe());
    assertEquals("environment " + PREFIX + "MODEL", origins.get("model").describe());
    assertEquals("flag --served-model-name", origins.get("served-model-name").describe());
    assertEquals("default", origins.get("seed").describe());
    assertEquals(f, r.sources().configFile().orElseThrow());
    assertEquals(9000, r.probe().port);
    assertEquals(9000, r.sources().value("port"));
    assertEquals(0.7, r.sources().value("temperature"));
    assertThrows(IllegalArgumentException.class, () -> r.sources().value("help"));
    assertEquals(0.7, r.probe().temperature);
    assertEquals("y", r.probe().servedModelName);
  }

  @Test
  void shouldNameTheFileWithTheConfigVariableWhenNoFlagDoes() throws Exception {
    Path a = file("a.yaml", "port: 9001\nmodel: m\n");
    Path b = file("b.yaml", "port: 9002\nmodel: m\n");
    Map<String, String> env = Map.of(PREFIX + "CONFIG", a.toString());
    assertEquals(9001, run(env).ok().port);
    assertEquals(9002, run(env, "--config", b.toString()).ok().port);
  }

  @Test
  void shouldForgetTheLastParsesSourcesOnTheNextParse() throws Exception {
    Probe probe = new Probe();
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    CommandLine cl = commandLine(probe, out, err);
    SettingsSources sources = SettingsSources.install(cl, PREFIX, Map.of());
    Path f = file("s.yaml", "port: 9000\n");
    assertEquals(0, cl.execute("--model=m", "--config", f.toString()), err::toString);
    assertEquals(9000, probe.port);
    assertEquals(0, cl.execute("--model=m"), err::toString);
    assertEquals(8000, probe.port);
    assertEquals(new Origin.BuiltIn(), sources.origins().get("port"));
    assertTrue(sources.configFile().isEmpty());
  }

  @Test
  void shouldWorkOnASubcommandOfTheRootThatExecutes() throws Exception {
    @Command(name = "top", mixinStandardHelpOptions = true)
    final class Top implements Callable<Integer> {
      @Override
      public Integer call() {
        return 0;
      }
    }
    Probe probe = new Probe();
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    CommandLine root = new CommandLine(new Top());
    root.addSubcommand("probe", commandLine(probe, out, err));
    root.setErr(new PrintWriter(err, true));
    root.setParameterExceptionHandler(
        (ex, args) -> {
          root.getErr().println("error: " + SettingsSources.attributed(ex).getMessage());
          return 2;
        });
    SettingsSources sources =
        SettingsSources.install(
            root.getSubcommands().get("probe"), PREFIX, Map.of(PREFIX + "SEED", "5"));
    Path f = file("s.yaml", "port: 9000\nmodel: m\n");
    assertEquals(0, root.execute("probe", "--config", f.toString()), err::toString);
    assertEquals(9000, probe.port);
    assertEquals(5L, probe.shared.seed);
    assertEquals(new Origin.ConfigFile(f, 1), sources.origins().get("port"));

    Path bad = file("bad.yaml", "port: abc\nmodel: m\n");
    assertEquals(2, root.execute("probe", "--config=" + bad));
    assertTrue(err.toString().contains("error: port=abc from " + bad + " line 1: "), err::toString);
  }

  // ------------------------------------------------------------------ seeded random sources

  /** One value of a setting as each source writes it, and what the command then holds. */
  record Sample(List<String> flag, String env, String yaml, String json, Object held) {}

  static final JsonMapper JSON = new JsonMapper();

  static String json(Object value) throws Exception {
    return JSON.writeValueAsString(value);
  }

  static String word(Random r) {
    String alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-_.$/ ";
    StringBuilder sb = new StringBuilder();
    sb.append((char) ('a' + r.nextInt(26)));
    for (int i = r.nextInt(8); i > 0; i--) {
      sb.append(alphabet.charAt(r.nextInt(alphabet.length())));
    }
    return sb.toString().strip();
  }

  static List<String> flagOf(Random r, String key, String text) {
    return r.nextBoolean() ? List.of("--" + key + "=" + text) : List.of("--" + key, text);
  }

  static Sample number(Random r, String key, Object value) throws Exception {
    String text = String.valueOf(value);
    return new Sample(flagOf(r, key, text), text, text, text, value);
  }

  static Sample text(Random r, String key) throws Exception {
    String value = word(r);
    String yaml = "'" + value.replace("'", "''") + "'";
    return new Sample(flagOf(r, key, value), value, yaml, json(value), value);
  }

  static Sample sample(String key, Random r) throws Exception {
    return switch (key) {
      case "port" -> number(r, key, 1 + r.nextInt(65535));
      case "max-queued-tokens", "seed" -> number(r, key, r.nextLong() >>> 1);
      case "temperature" -> number(r, key, r.nextInt(20000) / 100.0);
      case "model", "served-model-name", "api-key" -> text(r, key);
      case "ignore-eos" -> {
        boolean value = r.nextBoolean();
        List<String> flag =
            value && r.nextBoolean() ? List.of("--ignore-eos") : List.of("--ignore-eos=" + value);
        String env = r.nextBoolean() ? String.valueOf(value) : String.valueOf(value).toUpperCase();
        yield new Sample(flag, env, String.valueOf(value), String.valueOf(value), value);
      }
      case "kvstore-storage-backend-extra-config" -> {
        Map<String, Object> object = new LinkedHashMap<>();
        object.put("n", r.nextInt(100));
        object.put("path", "/" + word(r));
        String text = json(object);
        String yaml =
            r.nextBoolean()
                ? "{n: " + object.get("n") + ", path: " + json(object.get("path")) + "}"
                : "\n  n: " + object.get("n") + "\n  path: " + json(object.get("path"));
        yield new Sample(flagOf(r, key, text), text, yaml, text, text);
      }
      case "stop-token-ids" -> {
        List<Integer> ids = new ArrayList<>();
        for (int i = 1 + r.nextInt(3); i > 0; i--) {
          ids.add(r.nextInt(50000));
        }
        String joined = String.join(",", ids.stream().map(String::valueOf).toList());
        yield new Sample(flagOf(r, key, joined), joined, ids.toString(), json(ids), ids);
      }
      default -> throw new IllegalArgumentException(key);
    };
  }

  static Stream<Long> seeds() {
    return LongStream.rangeClosed(1, 32).boxed();
  }

  /**
   * Random values for random settings from random sources, in a YAML or a JSON file: every setting
   * must hold the value of the first source that gives it (the brute-force reference), and {@link
   * SettingsSources#origins()} must name that source.
   */
  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldTakeEachSettingFromTheFirstSourceThatGivesIt(long seed) throws Exception {
    Random r = new Random(seed);
    boolean jsonFile = r.nextBoolean();
    Path file = tmp.resolve(jsonFile ? "settings.json" : "settings.yaml");
    List<String> keys = new ArrayList<>(run(Map.of(), "--help").sources().settings().keySet());
    Collections.shuffle(keys, r);
    List<String> args = new ArrayList<>();
    Map<String, String> env = new HashMap<>();
    List<String> lines = new ArrayList<>();
    int physicalLines = jsonFile ? 1 : 0;
    Map<String, Object> expected = new LinkedHashMap<>();
    Map<String, Origin> origins = new HashMap<>();
    for (String key : keys) {
      Sample flag = r.nextInt(3) == 0 ? sample(key, r) : null;
      Sample variable = r.nextInt(3) == 0 ? sample(key, r) : null;
      Sample entry = r.nextInt(2) == 0 ? sample(key, r) : null;
      if (key.equals("model") && flag == null && variable == null && entry == null) {
        flag = sample(key, r);
      }
      if (flag != null) {
        args.addAll(flag.flag());
      }
      if (variable != null) {
        env.put(SettingsSources.variable(PREFIX, key), variable.env());
      }
      int entryLine = physicalLines + 1;
      if (entry != null) {
        String written = r.nextBoolean() ? key : key.replace('-', '_');
        String line =
            jsonFile ? json(written) + ": " + entry.json() : written + ": " + entry.yaml();
        lines.add(line);
        physicalLines += 1 + (int) line.chars().filter(c -> c == '\n').count();
      }
      Sample first = flag != null ? flag : variable != null ? variable : entry;
      expected.put(key, first == null ? null : first.held());
      origins.put(
          key,
          first == null
              ? new Origin.BuiltIn()
              : first == flag
                  ? new Origin.Flag("--" + key)
                  : first == variable
                      ? new Origin.Environment(SettingsSources.variable(PREFIX, key))
                      : new Origin.ConfigFile(file, entryLine));
    }
    Files.writeString(
        file,
        jsonFile ? "{\n" + String.join(",\n", lines) + "\n}\n" : String.join("\n", lines) + "\n");
    args.addAll(
        r.nextBoolean() ? List.of("--config", file.toString()) : List.of("--config=" + file));

    Run run = run(env, args.toArray(String[]::new));
    Probe probe = run.ok();
    for (String key : keys) {
      Object want = expected.get(key);
      if (want == null) {
        want = builtIn(key);
      }
      assertEquals(
          want, held(probe, key), () -> key + " in " + run + "\nargs " + args + "\nenv " + env);
    }
    assertEquals(origins, run.sources().origins(), () -> "args " + args + "\nenv " + env);
  }

  // ------------------------------------------------------------------ the file's shapes

  @Test
  void shouldAcceptSnakeCaseKeys() throws Exception {
    Path f =
        file(
            "s.yaml",
            "model: m\nserved_model_name: qwen\nmax_queued_tokens: 12\nignore_eos: true\n"
                + "kvstore_storage_backend_extra_config: {path: /tmp/l3}\n");
    Probe p = run(Map.of(), "--config", f.toString()).ok();
    assertEquals("qwen", p.servedModelName);
    assertEquals(12L, p.maxQueuedTokens);
    assertTrue(p.ignoreEos);
    assertEquals("{\"path\":\"/tmp/l3\"}", p.extraConfig);
  }

  @Test
  void shouldTurnANestedMappingIntoItsJsonText() throws Exception {
    Path f =
        file(
            "s.yaml",
            String.join(
                "\n",
                "model: m",
                "kvstore-storage-backend-extra-config:",
                "  uri: redis://10.0.0.7:6379",
                "  connections: 4",
                "  ratio: 0.50",
                "  tls: false",
                "  password: null",
                "  async:",
                "    put_workers: 3",
                "    tags: [a, 1]",
                ""));
    Probe p = run(Map.of(), "--config", f.toString()).ok();
    assertEquals(
        "{\"uri\":\"redis://10.0.0.7:6379\",\"connections\":4,\"ratio\":0.50,\"tls\":false,"
            + "\"password\":null,\"async\":{\"put_workers\":3,\"tags\":[\"a\",1]}}",
        p.extraConfig);
  }

  @Test
  void shouldTurnAListIntoJsonTextForAJsonSettingAndJoinItForAListSetting() throws Exception {
    Path f =
        file(
            "s.yaml",
            "model: m\nkvstore-storage-backend-extra-config: [1, x]\nstop-token-ids:\n- 4\n- 5\n");
    Probe p = run(Map.of(), "--config", f.toString()).ok();
    assertEquals("[1,\"x\"]", p.extraConfig);
    assertEquals(List.of(4, 5), p.stopTokenIds);
  }

  @Test
  void shouldKeepAScalarAsWritten() throws Exception {
    Path f = file("s.yaml", "model: m\nserved-model-name: 1.10\napi-key: yes\nseed: 010\n");
    Run r = run(Map.of(), "--config", f.toString());
    assertEquals("1.10", r.ok().servedModelName);
    assertEquals("yes", r.probe().apiKey);
    assertEquals(10L, r.probe().shared.seed, "the digits as on the command line, not YAML's octal");
  }

  @Test
  void shouldDeliverDollarSignsUnchanged() throws Exception {
    String name = "a$$b${env:HOME}c$";
    Path f = file("s.yaml", "model: m\nserved-model-name: '" + name + "'\n");
    assertEquals(name, run(Map.of(), "--config", f.toString()).ok().servedModelName);
    assertEquals(name, run(Map.of(PREFIX + "API_KEY", name), "--model=m").ok().apiKey);
  }

  @Test
  void shouldReadAJsonFile() throws Exception {
    Path f =
        file(
            "s.json",
            "{\"model\": \"m\", \"port\": 9100, \"ignore_eos\": true,"
                + " \"kvstore-storage-backend-extra-config\": {\"path\": \"/x\"}}");
    Probe p = run(Map.of(), "--config", f.toString()).ok();
    assertEquals(9100, p.port);
    assertTrue(p.ignoreEos);
    assertEquals("{\"path\":\"/x\"}", p.extraConfig);
  }

  @ParameterizedTest
  @ValueSource(strings = {"", "# nothing here\n", "---\n", "~\n"})
  void shouldTreatAnEmptyFileAsNoSettings(String text) throws Exception {
    Path f = file("empty.yaml", text);
    assertEquals(8000, run(Map.of(), "--model=m", "--config", f.toString()).ok().port);
  }

  @Test
  void shouldChainToADefaultProviderSetBefore() throws Exception {
    Probe probe = new Probe();
    CommandLine cl = commandLine(probe, new StringWriter(), new StringWriter());
    cl.setDefaultValueProvider(
        arg ->
            arg.isOption()
                    && "--port".equals(((picocli.CommandLine.Model.OptionSpec) arg).longestName())
                ? "7000"
                : null);
    SettingsSources.install(cl, PREFIX, Map.of(PREFIX + "SEED", "3"));
    assertEquals(0, cl.execute("--model=m"));
    assertEquals(7000, probe.port);
    assertEquals(3L, probe.shared.seed);
  }

  // ------------------------------------------------------------------ failures

  @Test
  void shouldNameTheFileTheKeyAndTheNearestSettingForAnUnknownKey() throws Exception {
    Path f = file("s.yaml", "model: m\nprot: 9000\n");
    assertEquals(
        f + " line 2: unknown setting prot of probe; did you mean port?",
        run(Map.of(), "--config", f.toString()).usageError());
    Path g = file("g.yaml", "served_model: x\n");
    assertEquals(
        g + " line 1: unknown setting served_model of probe; did you mean served-model-name?",
        run(Map.of(), "--model=m", "--config", g.toString()).usageError());
    Path h = file("h.yaml", "zzzzzzzz: 1\n");
    assertEquals(
        h + " line 1: unknown setting zzzzzzzz of probe; 'probe --help' lists each setting's key",
        run(Map.of(), "--model=m", "--config", h.toString()).usageError());
  }

  @ParameterizedTest
  @ValueSource(strings = {"help", "version"})
  void shouldRefuseKeysThatAreNoSettings(String key) throws Exception {
    Path f = file("s.yaml", "model: m\n" + key + ": true\n");
    assertEquals(
        f + " line 2: " + key + " is not a setting of probe",
        run(Map.of(), "--config", f.toString()).usageError());
  }

  @Test
  void shouldRefuseAConfigKeyInTheFile() throws Exception {
    Path f = file("s.yaml", "config: other.yaml\n");
    assertEquals(
        f
            + " line 1: config cannot be given in a configuration file; name the file with"
            + " --config or "
            + PREFIX
            + "CONFIG",
        run(Map.of(), "--model=m", "--config", f.toString()).usageError());
  }

  @Test
  void shouldRefuseAnUnknownVariableAndSuggestTheNearest() {
    assertEquals(
        PREFIX + "PROT is not a setting of probe; did you mean " + PREFIX + "PORT?",
        run(Map.of(PREFIX + "PROT", "1"), "--model=m").usageError());
    assertEquals(
        PREFIX + "HELP is not a setting of probe",
        run(Map.of(PREFIX + "HELP", "1"), "--model=m").usageError());
    assertEquals(
        PREFIX
            + "XYZZY_PLUGH is not a setting of probe; 'probe --help' lists each setting's"
            + " variable",
        run(Map.of(PREFIX + "XYZZY_PLUGH", "1"), "--model=m").usageError());
  }

  @Test
  void shouldIgnoreVariablesOutsideThePrefix() {
    Map<String, String> env =
        Map.of("TOKENSPEED_CONTROL_SECRET", "s", "TOKENSPEED_SERVEX", "1", "PORT", "1");
    assertEquals(8000, run(env, "--model=m").ok().port);
  }

  @Test
  void shouldNameTheFileAndLineOfAValueOfTheWrongType() throws Exception {
    Path f = file("s.yaml", "model: m\n\nport: abc\n");
    assertEquals(
        "port=abc from " + f + " line 3: Invalid value for option '--port': 'abc' is not an int",
        run(Map.of(), "--config", f.toString()).usageError());
    Path g = file("g.yaml", "temperature: warm\n");
    assertEquals(
        "temperature=warm from "
            + g
            + " line 1: Invalid value for option '--temperature': 'warm' is not a double",
        run(Map.of(), "--model=m", "--config", g.toString()).usageError());
  }

  @Test
  void shouldNameTheVariableOfAValueOfTheWrongType() {
    assertEquals(
        PREFIX
            + "MAX_QUEUED_TOKENS=1e3: Invalid value for option '--max-queued-tokens': '1e3' is"
            + " not a long",
        run(Map.of(PREFIX + "MAX_QUEUED_TOKENS", "1e3"), "--model=m").usageError());
  }

  @Test
  void shouldNotBlameASourceForABadFlagValue() throws Exception {
    Path f = file("s.yaml", "model: m\nport: 9000\n");
    assertEquals(
        "Invalid value for option '--port': 'xyz' is not an int",
        run(Map.of(PREFIX + "PORT", "9001"), "--config", f.toString(), "--port", "xyz")
            .usageError());
  }

  @Test
  void shouldNameTheSourceOfAValueTheCommandRejectsLater() throws Exception {
    Path f = file("s.yaml", "model: m\nport: 70000\n");
    assertEquals(
        "port=70000 from " + f + " line 2: --port=70000 must be in [1, 65535]",
        run(Map.of(), "--config", f.toString()).usageError());
    assertEquals(
        "--port=70000 must be in [1, 65535]",
        run(Map.of(), "--config", f.toString(), "--port=70000").usageError());
  }

  @Test
  void shouldRefuseAFlagValueOtherThanTrueOrFalse() throws Exception {
    Path f = file("s.yaml", "model: m\nignore-eos: yes\n");
    assertEquals(
        "ignore-eos=yes from " + f + " line 2: --ignore-eos takes true or false",
        run(Map.of(), "--config", f.toString()).usageError());
    assertEquals(
        PREFIX + "IGNORE_EOS=1: --ignore-eos takes true or false",
        run(Map.of(PREFIX + "IGNORE_EOS", "1"), "--model=m").usageError());
  }

  @Test
  void shouldRefuseAKeyWithoutAValue() throws Exception {
    Path f = file("s.yaml", "model: m\nport:\n");
    assertEquals(
        f + " line 2: port has no value; give one or remove the line",
        run(Map.of(), "--config", f.toString()).usageError());
  }

  @Test
  void shouldRefuseAMappingOrAListWhereASingleValueBelongs() throws Exception {
    Path f = file("s.yaml", "model: m\nport: {n: 1}\n");
    assertEquals(
        f
            + " line 2: port takes a single value, not a mapping (only settings whose value is"
            + " JSON text take one)",
        run(Map.of(), "--config", f.toString()).usageError());
    Path g = file("g.yaml", "model: m\nseed: [1, 2]\n");
    assertEquals(
        g + " line 2: seed takes a single value, not a list",
        run(Map.of(), "--config", g.toString()).usageError());
    Path h = file("h.yaml", "model: m\nstop-token-ids: [[1], 2]\n");
    assertEquals(
        h + " line 2: stop-token-ids takes a list of single values",
        run(Map.of(), "--config", h.toString()).usageError());
  }

  @Test
  void shouldRefuseTheSameSettingTwice() throws Exception {
    Path f = file("s.yaml", "model: m\nserved-model-name: a\nserved_model_name: b\n");
    assertEquals(
        f + " line 3: served_model_name sets served-model-name again (line 2)",
        run(Map.of(), "--config", f.toString()).usageError());
    Path g = file("g.yaml", "model: m\nport: 1\nport: 2\n");
    String error = run(Map.of(), "--config", g.toString()).usageError();
    assertTrue(
        error.startsWith("--config=" + g + ": line 3, column ") && error.contains("port"), error);
  }

  @Test
  void shouldGiveTheLineAndColumnOfAYamlError() throws Exception {
    Path f = file("s.yaml", "model: m\nport: 8000: x\n");
    assertEquals(
        "--config="
            + f
            + ": line 2, column 11: not valid YAML: mapping values are not allowed"
            + " here",
        run(Map.of(), "--config", f.toString()).usageError());
    Path g = file("g.yaml", "model: m\n\tport: 1\n");
    String error = run(Map.of(), "--config", g.toString()).usageError();
    assertTrue(error.startsWith("--config=" + g + ": line 2, column 1: not valid YAML: "), error);
    assertTrue(error.contains("TAB"), error);
    Path h = file("h.yaml", "model: m\nserved-model-name: \"qwen\n");
    assertEquals(
        "--config="
            + h
            + ": line 2, column 20: not valid YAML: while scanning a quoted scalar; found"
            + " unexpected end of stream",
        run(Map.of(), "--config", h.toString()).usageError());
  }

  @Test
  void shouldGiveTheLineAndColumnOfAJsonError() throws Exception {
    Path f = file("s.json", "{\n  \"model\": \"m\",\n  \"port\": 8000,\n}\n");
    assertEquals(
        "--config="
            + f
            + ": line 4, column 1: not valid JSON: Unexpected character ('}' (code 125)): was"
            + " expecting double-quote to start field name",
        run(Map.of(), "--config", f.toString()).usageError());
    Path g = file("g.json", "model: m\n");
    String error = run(Map.of(), "--config", g.toString()).usageError();
    assertEquals(
        "--config="
            + g
            + ": line 1, column 1: not valid JSON: Unrecognized token 'model': was expecting (JSON"
            + " String, Number, Array, Object or token 'null', 'true' or 'false')",
        error);
  }

  @ParameterizedTest
  @MethodSource("notMappings")
  void shouldRefuseATopLevelThatIsNoMapping(String name, String text, String kind)
      throws Exception {
    Path f = file(name, text);
    assertEquals(
        "--config=" + f + ": the top level must be a mapping of settings (port: 8000), not " + kind,
        run(Map.of(), "--model=m", "--config", f.toString()).usageError());
  }

  static Stream<Arguments> notMappings() {
    return Stream.of(
        Arguments.of("list.yaml", "- port: 1\n", "a list"),
        Arguments.of("scalar.yaml", "port\n", "a single value"),
        Arguments.of("list.json", "[{\"port\": 1}]", "a list"));
  }

  @Test
  void shouldRefuseASecondDocument() throws Exception {
    Path f = file("s.yaml", "model: m\n---\nport: 1\n");
    assertEquals(
        "--config="
            + f
            + ": line 3, column 1: a second YAML document; the settings must be one"
            + " mapping",
        run(Map.of(), "--config", f.toString()).usageError());
    Path g = file("g.json", "{\"model\": \"m\"} {\"port\": 1}");
    assertEquals(
        "--config=" + g + ": line 1, column 16: more text after the top-level object",
        run(Map.of(), "--config", g.toString()).usageError());
  }

  @Test
  void shouldRefuseAYamlAlias() throws Exception {
    Path f = file("s.yaml", "model: &m x\nserved-model-name: *m\n");
    assertEquals(
        "--config="
            + f
            + ": line 2, column 20: YAML aliases (*m) are not supported; write the"
            + " value out",
        run(Map.of(), "--config", f.toString()).usageError());
  }

  @Test
  void shouldNameAMissingUnreadableOrDirectoryFile() throws Exception {
    Path missing = tmp.resolve("missing.yaml");
    assertEquals(
        "--config=" + missing + ": no such file",
        run(Map.of(), "--model=m", "--config", missing.toString()).usageError());
    assertEquals(
        PREFIX + "CONFIG=" + missing + ": no such file",
        run(Map.of(PREFIX + "CONFIG", missing.toString()), "--model=m").usageError());
    assertEquals(
        "--config=" + tmp + " is a directory, not a file",
        run(Map.of(), "--model=m", "--config=" + tmp).usageError());
    assertEquals(
        "--config= needs a file name", run(Map.of(), "--model=m", "--config=").usageError());
    Path latin1 = tmp.resolve("latin1.yaml");
    Files.write(latin1, new byte[] {'p', 'o', 'r', 't', ':', ' ', (byte) 0xE9, '\n'});
    assertEquals(
        "--config=" + latin1 + ": not valid UTF-8 text",
        run(Map.of(), "--model=m", "--config", latin1.toString()).usageError());
  }

  // ------------------------------------------------------------------ help

  @Test
  void shouldListEverySettingWithItsDefaultVariableAndKey() {
    Run r = run(Map.of(), "--help");
    assertEquals(0, r.exitCode(), r::toString);
    String help = r.out().replaceAll("\\s+", " ");
    for (String line :
        List.of(
            "Model folder. (env TOKENSPEED_PROBE_MODEL; config key model)",
            "Weight seed. (default: 7; env TOKENSPEED_PROBE_SEED; config key seed)",
            "Port to listen on. (default: 8000; env TOKENSPEED_PROBE_PORT; config key port)",
            "Queue bound. (default: 1048576; env TOKENSPEED_PROBE_MAX_QUEUED_TOKENS; config key"
                + " max-queued-tokens)",
            "Sampling temperature. (default: 1.0; env TOKENSPEED_PROBE_TEMPERATURE; config key"
                + " temperature)",
            "Model name. (env TOKENSPEED_PROBE_SERVED_MODEL_NAME; config key served-model-name)",
            "Generate past the end token. (default: false; env TOKENSPEED_PROBE_IGNORE_EOS;"
                + " config key ignore-eos)",
            "Store settings as one JSON object. (env"
                + " TOKENSPEED_PROBE_KVSTORE_STORAGE_BACKEND_EXTRA_CONFIG; config key"
                + " kvstore-storage-backend-extra-config)",
            "Token ids that stop generation. (env TOKENSPEED_PROBE_STOP_TOKEN_IDS; config key"
                + " stop-token-ids)",
            "Key a client must send (default: none). (env TOKENSPEED_PROBE_API_KEY; config key"
                + " api-key)",
            "(env TOKENSPEED_PROBE_CONFIG)",
            "--config=FILE Settings file, YAML or JSON",
            "1. its flag --KEY=VALUE",
            "2. its environment variable TOKENSPEED_PROBE_NAME=VALUE",
            "3. the --config file KEY: VALUE",
            "4. its default")) {
      assertTrue(help.contains(line), () -> "missing [" + line + "] in\n" + r.out());
    }
    assertEquals(
        r.sources().settings().size(), help.split("config key ", -1).length - 1, r::toString);
  }

  @Test
  void shouldShowTheBuiltInDefaultsWhateverTheSourcesHold() throws Exception {
    String plain = run(Map.of(), "--help").out();
    Path f = file("s.yaml", "port: 9000\nseed: 99\n");
    Run fromSources =
        run(Map.of(PREFIX + "TEMPERATURE", "0.1"), "--config", f.toString(), "--help");
    assertEquals(0, fromSources.exitCode(), fromSources::toString);
    assertEquals(plain, fromSources.out());
  }

  @Test
  void shouldShowHelpEvenWhenTheSourcesAreBroken() throws Exception {
    Path f = file("s.yaml", "prot: [\n");
    Run r = run(Map.of(PREFIX + "BOGUS", "1"), "--config", f.toString(), "-h");
    assertEquals(0, r.exitCode(), r::toString);
    assertTrue(r.out().replaceAll("\\s+", " ").contains("config key port"), r::toString);
    Run v = run(Map.of(PREFIX + "BOGUS", "1"), "--version");
    assertEquals(0, v.exitCode(), v::toString);
  }

  @Test
  void shouldDescribeEachSettingForReports() {
    Run r = run(Map.of(), "--model=m");
    SettingsSources.Setting port = r.sources().settings().get("port");
    assertEquals(new SettingsSources.Setting("port", "--port", PREFIX + "PORT", "8000"), port);
    assertNull(r.sources().settings().get("served-model-name").builtInDefault());
    assertEquals("none", r.sources().settings().get("api-key").builtInDefault());
    assertFalse(r.sources().settings().containsKey("help"));
    assertFalse(r.sources().settings().containsKey("config"));
  }

  // ------------------------------------------------------------------ installation

  @Test
  void shouldRefuseToInstallTwiceOrWithABadPrefix() {
    CommandLine cl = new CommandLine(new Probe());
    assertThrows(IllegalArgumentException.class, () -> SettingsSources.install(cl, "x_", Map.of()));
    assertThrows(
        IllegalArgumentException.class, () -> SettingsSources.install(cl, "TOKENSPEED", Map.of()));
    SettingsSources.install(cl, PREFIX, Map.of());
    assertThrows(IllegalStateException.class, () -> SettingsSources.install(cl, PREFIX, Map.of()));
  }

  @Test
  void shouldRefuseOriginsBeforeAParse() {
    SettingsSources sources =
        SettingsSources.install(new CommandLine(new Probe()), PREFIX, Map.of());
    assertThrows(IllegalStateException.class, sources::origins);
  }

  @Test
  void shouldSuggestOnlyNearNames() {
    List<String> keys = new ArrayList<>(List.of("port", "seed", "served-model-name", "model"));
    assertEquals("port", SettingsSources.nearest("prot", keys));
    assertEquals("served-model-name", SettingsSources.nearest("served-model", keys));
    assertEquals("model", SettingsSources.nearest("modle", keys));
    assertNull(SettingsSources.nearest("zzzzzz", keys));
    assertEquals(3, SettingsSources.distance("kitten", "sitting"));
    assertEquals(0, SettingsSources.distance("", ""));
    assertEquals(4, SettingsSources.distance("", "port"));
  }
}
