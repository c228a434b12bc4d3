package io.tokenspeed.server.config;

import java.io.IOException;
import java.lang.reflect.Array;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.Stack;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Pattern;
import picocli.CommandLine;
import picocli.CommandLine.IDefaultValueProvider;
import picocli.CommandLine.IParameterPreprocessor;
import picocli.CommandLine.Model.ArgSpec;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.ParseResult;

/**
 * The sources of a picocli command's settings besides its built-in defaults: environment variables
 * and a configuration file. The first source that gives a setting a value wins:
 *
 * <pre>
 *   1. a flag on the command line        --served-model-name=qwen
 *   2. an environment variable           TOKENSPEED_SERVE_SERVED_MODEL_NAME=qwen
 *   3. the configuration file            served-model-name: qwen   (in --config FILE)
 *   4. the built-in default              the field's initializer or the option's defaultValue
 * </pre>
 *
 * <p>A setting is an option of the command (its mixins' included) other than {@code --help}, {@code
 * --version} and {@code --config}. Its key is its longest name without the leading dashes ({@code
 * served-model-name}; a file may write {@code served_model_name}); its variable is the prefix given
 * to {@link #install} followed by the key in capitals with {@code -} as {@code _}. {@code
 * PREFIX_CONFIG} names the file when {@code --config} does not.
 *
 * <p>How it rides on picocli. The sources are the command's {@link IDefaultValueProvider}: picocli
 * asks it for the value of every option the command line did not give, after it has read the whole
 * command line, and converts the answer exactly as it converts a flag's value. The sources are read
 * once per parse, before picocli reads the arguments, by the command's {@link
 * IParameterPreprocessor}; it finds {@code --config} among the command's own arguments (after the
 * subcommand name, up to {@code --}), and loads nothing when help or the version is asked for, so
 * that {@code --help} works whatever the environment holds and shows the built-in defaults. The
 * preprocessor fails the parse, as a usage error naming the setting and its source, for an
 * unreadable or malformed file, an unknown key or variable, a value that is no {@code true} or
 * {@code false} for a flag, and a list or mapping where the setting takes none.
 *
 * <p>Three picocli behaviours are adjusted, and must stay so:
 *
 * <ul>
 *   <li>A flag without a value ({@code --ignore-eos}) normally sets the opposite of the option's
 *       default, and picocli asks the default provider for that default: with {@code ignore-eos:
 *       true} in the file the flag would set false. The command is made to toggle the flag's
 *       current value instead, which while the command line is read is still the built-in default.
 *   <li>picocli expands {@code ${...}} in a default provider's answer and turns {@code $$} into
 *       {@code $}; every {@code $} of a value is doubled so that a value arrives as written.
 *   <li>picocli's own "Default:" column is turned off: {@code SettingsHelp} writes each setting's
 *       built-in default, variable and key under its description instead.
 * </ul>
 *
 * <p>A value of the wrong type fails in picocli's converter with picocli's message, which does not
 * know the source; {@link #attributed} puts the source in front of it ({@code port=abc from
 * /etc/ts.yaml line 3: ...}), and does the same for a usage error the command raises later about an
 * option whose value a source gave.
 *
 * <p>Options inside an {@code @ArgGroup} and inherited options are not settings: picocli applies
 * their defaults elsewhere.
 */
public final class SettingsSources implements IDefaultValueProvider {

  /** The option that names the configuration file. */
  public static final String CONFIG_OPTION = "--config";

  /** The variable name, after the prefix, that names the configuration file. */
  public static final String CONFIG_VARIABLE = "CONFIG";

  private static final Pattern PREFIX = Pattern.compile("[A-Z][A-Z0-9_]*_");

  /** Delimiters tried, in order, to join a list for an option that splits its value. */
  private static final List<String> JOINERS = List.of(",", ";", " ", ":", "|");

  /**
   * One setting of the command.
   *
   * @param key the configuration file key ({@code served-model-name})
   * @param option the option's longest name ({@code --served-model-name})
   * @param variable the environment variable ({@code TOKENSPEED_SERVE_SERVED_MODEL_NAME})
   * @param builtInDefault the value without any source, as text; null when there is none
   */
  public record Setting(String key, String option, String variable, String builtInDefault) {}

  /** A value a source gave, as the option's text, and how a message names it. */
  private record SourceValue(String text, Origin origin, String shown) {}

  /** What one parse loaded. */
  private record Loaded(
      Map<String, SourceValue> values, String configFromEnvironment, Path configFile) {}

  private final CommandLine command;
  private final CommandSpec spec;
  private final String prefix;
  private final Map<String, String> environment;
  private final OptionSpec configOption;
  private final IDefaultValueProvider previous;
  private final Map<String, Setting> settings = new LinkedHashMap<>();
  private final Map<String, OptionSpec> optionsByKey = new HashMap<>();
  private final Map<ArgSpec, Setting> settingsByOption = new IdentityHashMap<>();
  private final Map<String, Setting> settingsByVariable = new HashMap<>();
  private final Set<String> reservedKeys = new TreeSet<>();
  private final Set<String> helpNames = new TreeSet<>();

  /** The sources of the current parse; null before one, and when help was asked for. */
  private Loaded loaded;

  /** The options picocli took a source's value for in the current parse. */
  private final Map<ArgSpec, SourceValue> applied = new IdentityHashMap<>();

  private SettingsSources(
      CommandLine command, OptionSpec configOption, String prefix, Map<String, String> env) {
    this.command = command;
    this.spec = command.getCommandSpec();
    this.prefix = prefix;
    this.environment = Collections.unmodifiableMap(new TreeMap<>(env));
    this.configOption = configOption;
    this.previous = spec.defaultValueProvider();
    for (OptionSpec option : spec.options()) {
      String key = key(option);
      if (option.usageHelp() || option.versionHelp() || option.help() || option == configOption) {
        reservedKeys.add(key);
        if (option != configOption) {
          helpNames.addAll(List.of(option.names()));
        }
        continue;
      }
      if (option.group() != null || option.inherited()) {
        continue;
      }
      Setting setting =
          new Setting(key, option.longestName(), variable(prefix, key), builtInDefault(option));
      if (settings.putIfAbsent(key, setting) != null
          || settingsByVariable.putIfAbsent(setting.variable(), setting) != null) {
        throw new IllegalStateException(
            spec.qualifiedName()
                + ": two options share the key "
                + key
                + " or the variable "
                + setting.variable());
      }
      optionsByKey.put(key, option);
      settingsByOption.put(option, setting);
    }
  }

  /**
   * Gives {@code command} its sources: adds {@code --config FILE}, makes the sources its default
   * provider (one set before is asked for what no source gives), reads them at each parse, and
   * writes each setting's default, variable and key into its help.
   *
   * <p>Call it once, after the command line is built and before it parses; for a subcommand, pass
   * the subcommand's own {@code CommandLine} ({@code root.getSubcommands().get("serve")}) and
   * execute the root as usual. Pass every usage error to {@link #attributed} before printing it.
   *
   * @param prefix the variables' prefix, capitals, digits and underscores ending in {@code _}
   *     ({@code TOKENSPEED_SERVE_})
   * @param environment the environment, {@link System#getenv()} outside tests
   * @throws IllegalStateException when the command already has {@code --config}, or two of its
   *     options would share a key or a variable
   */
  public static SettingsSources install(
      CommandLine command, String prefix, Map<String, String> environment) {
    Objects.requireNonNull(command, "command");
    Objects.requireNonNull(environment, "environment");
    if (prefix == null || !PREFIX.matcher(prefix).matches()) {
      throw new IllegalArgumentException(
          "prefix=" + prefix + " must be capitals, digits and underscores ending in _");
    }
    CommandSpec spec = command.getCommandSpec();
    if (spec.findOption(CONFIG_OPTION) != null) {
      throw new IllegalStateException(
          spec.qualifiedName() + " already has " + CONFIG_OPTION + "; install its sources once");
    }
    OptionSpec config =
        OptionSpec.builder(CONFIG_OPTION)
            .paramLabel("FILE")
            .type(String.class)
            .description(
                "Settings file, YAML or JSON (a .json name): keys are the long option names"
                    + " without the dashes. Flags and "
                    + prefix
                    + "* variables override it (docs/configuration.md).")
            .build();
    spec.addOption(config);
    SettingsSources sources = new SettingsSources(command, config, prefix, environment);
    spec.defaultValueProvider(sources);
    spec.preprocessor(sources.new Loader(spec.preprocessor()));
    spec.parser().toggleBooleanFlags(true);
    spec.usageMessage().showDefaultValues(false);
    SettingsHelp.install(command, sources);
    return sources;
  }

  /** The variable of setting {@code key} under {@code prefix}: {@code TOKENSPEED_SERVE_PORT}. */
  public static String variable(String prefix, String key) {
    return prefix + key.toUpperCase(Locale.ROOT).replace('-', '_');
  }

  /**
   * {@code ex} with the source of the value it is about in front of its message ({@code port=abc
   * from /etc/ts.yaml line 3: ...}, {@code TOKENSPEED_SERVE_PORT=abc: ...}) when that value came
   * from a command's environment or configuration file; otherwise {@code ex} itself.
   */
  public static ParameterException attributed(ParameterException ex) {
    CommandLine cl = ex.getCommandLine();
    if (cl == null || !(cl.getCommandSpec().defaultValueProvider() instanceof SettingsSources s)) {
      return ex;
    }
    ArgSpec arg = ex.getArgSpec();
    SourceValue value = arg == null ? null : s.applied.get(arg);
    if (value == null || s.matchedOnCommandLine(arg)) {
      return ex;
    }
    return new ParameterException(
        cl, value.shown() + ": " + ex.getMessage(), ex, arg, ex.getValue());
  }

  /**
   * The environment the sources read: a command reads its other variables (a secret, say) from it
   * too, so that a test's environment is the command's whole environment.
   */
  public Map<String, String> environment() {
    return environment;
  }

  /** The command's settings in option order, keyed by their configuration file keys. */
  public Map<String, Setting> settings() {
    return Collections.unmodifiableMap(settings);
  }

  /**
   * The value setting {@code key} holds now: after a parse, the effective one.
   *
   * @throws IllegalArgumentException when the command has no setting {@code key}
   */
  public Object value(String key) {
    OptionSpec option = optionsByKey.get(key);
    if (option == null) {
      throw new IllegalArgumentException(spec.qualifiedName() + " has no setting " + key);
    }
    return option.getValue();
  }

  /** The prefix of the command's variables. */
  public String prefix() {
    return prefix;
  }

  /** The configuration file the last parse read, if any. */
  public Optional<Path> configFile() {
    return loaded == null ? Optional.empty() : Optional.ofNullable(loaded.configFile());
  }

  /**
   * Where each setting's value came from in the last parse, in option order, keyed by configuration
   * file keys.
   *
   * @throws IllegalStateException before the command has parsed
   */
  public Map<String, Origin> origins() {
    ParseResult parsed = command.getParseResult();
    if (parsed == null) {
      throw new IllegalStateException(spec.qualifiedName() + " has not parsed a command line");
    }
    Map<String, Origin> origins = new LinkedHashMap<>();
    for (Setting setting : settings.values()) {
      OptionSpec option = optionsByKey.get(setting.key());
      SourceValue value = loaded == null ? null : loaded.values().get(setting.key());
      Origin origin;
      if (parsed.hasMatchedOption(option)) {
        origin = new Origin.Flag(option.longestName());
      } else if (value != null) {
        origin = value.origin();
      } else {
        origin = new Origin.BuiltIn();
      }
      origins.put(setting.key(), origin);
    }
    return Collections.unmodifiableMap(origins);
  }

  @Override
  public String defaultValue(ArgSpec arg) throws Exception {
    if (loaded != null) {
      if (arg == configOption && loaded.configFromEnvironment() != null) {
        return escaped(arg, loaded.configFromEnvironment());
      }
      Setting setting = settingsByOption.get(arg);
      SourceValue value = setting == null ? null : loaded.values().get(setting.key());
      if (value != null) {
        applied.put(arg, value);
        return escaped(arg, value.text());
      }
    }
    return previous == null ? null : previous.defaultValue(arg);
  }

  @Override
  public String toString() {
    return "settings of " + spec.qualifiedName() + " from " + prefix + "* and " + CONFIG_OPTION;
  }

  /** The setting of {@code option}, or null when it is none. */
  Setting settingOf(OptionSpec option) {
    return settingsByOption.get(option);
  }

  /** Whether {@code option} is the {@code --config} option these sources added. */
  boolean isConfigOption(OptionSpec option) {
    return option == configOption;
  }

  /** The key of {@code option}: its longest name without the leading dashes. */
  static String key(OptionSpec option) {
    String name = option.longestName();
    int i = 0;
    while (i < name.length() - 1 && name.charAt(i) == '-') {
      i++;
    }
    return name.substring(i);
  }

  /**
   * The value {@code option} has without any source, as text: the option's {@code defaultValue},
   * else the field's initial value; null when it has neither (or an empty one).
   */
  static String builtInDefault(OptionSpec option) {
    String annotated = option.defaultValue();
    if (annotated != null && !CommandLine.Option.NULL_VALUE.equals(annotated)) {
      return annotated;
    }
    Object initial = option.hasInitialValue() ? option.initialValue() : null;
    if (initial instanceof Optional<?> optional) {
      initial = optional.orElse(null);
    }
    if (initial == null) {
      return null;
    }
    if (initial.getClass().isArray()) {
      List<String> items = new ArrayList<>();
      for (int i = 0; i < Array.getLength(initial); i++) {
        items.add(String.valueOf(Array.get(initial, i)));
      }
      return items.isEmpty() ? null : String.join(",", items);
    }
    if (initial instanceof Collection<?> items) {
      return items.isEmpty()
          ? null
          : String.join(",", items.stream().map(String::valueOf).toList());
    }
    if (initial instanceof Map<?, ?> map) {
      return map.isEmpty() ? null : map.toString();
    }
    return String.valueOf(initial);
  }

  /**
   * The candidate nearest to {@code name}, when it is near enough to be a likely slip (a few edits,
   * or one contains the other); otherwise null.
   */
  static String nearest(String name, Collection<String> candidates) {
    String best = null;
    int bestDistance = Integer.MAX_VALUE;
    for (String candidate : candidates) {
      int d = distance(name, candidate);
      if (d < bestDistance) {
        best = candidate;
        bestDistance = d;
      }
    }
    if (best == null) {
      return null;
    }
    boolean close = bestDistance <= Math.max(2, Math.min(name.length(), best.length()) / 3);
    boolean contained = name.length() >= 3 && (best.contains(name) || name.contains(best));
    return close || contained ? best : null;
  }

  /** Levenshtein distance: insertions, deletions and substitutions of one character. */
  static int distance(String a, String b) {
    int[] row = new int[b.length() + 1];
    for (int j = 0; j <= b.length(); j++) {
      row[j] = j;
    }
    for (int i = 1; i <= a.length(); i++) {
      int diagonal = row[0];
      row[0] = i;
      for (int j = 1; j <= b.length(); j++) {
        int above = row[j];
        int cost = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
        row[j] = Math.min(Math.min(row[j - 1] + 1, above + 1), diagonal + cost);
        diagonal = above;
      }
    }
    return row[b.length()];
  }

  private boolean matchedOnCommandLine(ArgSpec arg) {
    ParseResult parsed = command.getParseResult();
    return parsed != null && arg instanceof OptionSpec option && parsed.hasMatchedOption(option);
  }

  /** {@code text} as picocli must receive it to deliver it unchanged after its interpolation. */
  private String escaped(ArgSpec arg, String text) {
    CommandSpec owner = arg.command() == null ? spec : arg.command();
    return owner.interpolateVariables() ? text.replace("$", "$$") : text;
  }

  // ------------------------------------------------------------------ loading, once per parse

  /** Reads the sources at the start of each parse of the command, then hands over. */
  private final class Loader implements IParameterPreprocessor {
    private final IParameterPreprocessor next;

    Loader(IParameterPreprocessor next) {
      this.next = next;
    }

    @Override
    public boolean preprocess(
        Stack<String> args, CommandSpec commandSpec, ArgSpec argSpec, Map<String, Object> info) {
      loaded = null;
      applied.clear();
      if (!scanForHelp(args)) {
        loaded = load(scanForConfig(args));
      }
      return next.preprocess(args, commandSpec, argSpec, info);
    }
  }

  /** The command's arguments, first first, up to the end-of-options delimiter. */
  private List<String> optionArguments(Stack<String> args) {
    List<String> ordered = new ArrayList<>(args);
    Collections.reverse(ordered);
    String end = spec.parser().endOfOptionsDelimiter();
    int stop = ordered.indexOf(end);
    return stop < 0 ? ordered : ordered.subList(0, stop);
  }

  private boolean scanForHelp(Stack<String> args) {
    for (String arg : optionArguments(args)) {
      if (helpNames.contains(arg)) {
        return true;
      }
    }
    return false;
  }

  /** The last {@code --config} value of the command's arguments, or null. */
  private String scanForConfig(Stack<String> args) {
    List<String> ordered = optionArguments(args);
    String attached = CONFIG_OPTION + spec.parser().separator();
    String found = null;
    for (int i = 0; i < ordered.size(); i++) {
      String arg = ordered.get(i);
      if (arg.equals(CONFIG_OPTION) && i + 1 < ordered.size()) {
        found = ordered.get(++i);
      } else if (arg.startsWith(attached)) {
        found = arg.substring(attached.length());
      }
    }
    return found;
  }

  private Loaded load(String configFromCommandLine) {
    Map<String, SourceValue> fromEnvironment = new LinkedHashMap<>();
    String configFromEnvironment = null;
    String configVariable = prefix + CONFIG_VARIABLE;
    for (Map.Entry<String, String> e : environment.entrySet()) {
      String name = e.getKey();
      if (!name.startsWith(prefix)) {
        continue;
      }
      if (name.equals(configVariable)) {
        configFromEnvironment = e.getValue();
        continue;
      }
      Setting setting = settingsByVariable.get(name);
      if (setting == null) {
        throw usage(unknownVariable(name));
      }
      String shown = name + "=" + e.getValue();
      checkFlagValue(setting, e.getValue(), shown);
      fromEnvironment.put(
          setting.key(), new SourceValue(e.getValue(), new Origin.Environment(name), shown));
    }
    Map<String, SourceValue> values = new LinkedHashMap<>();
    Path file = null;
    if (configFromCommandLine != null || configFromEnvironment != null) {
      boolean onCommandLine = configFromCommandLine != null;
      String name = onCommandLine ? configFromCommandLine : configFromEnvironment;
      String where = (onCommandLine ? CONFIG_OPTION : configVariable) + "=" + name;
      file = configPath(name, where);
      String text = read(file, where);
      List<SettingsFile.Entry> entries;
      try {
        entries = SettingsFile.parse(text, SettingsFile.isJson(name), where);
      } catch (ConfigException e) {
        throw usage(e.getMessage(), e);
      }
      values.putAll(fileValues(entries, file));
    }
    values.putAll(fromEnvironment);
    return new Loaded(
        Collections.unmodifiableMap(values),
        configFromCommandLine == null ? configFromEnvironment : null,
        file);
  }

  private String unknownVariable(String name) {
    String key = name.substring(prefix.length()).toLowerCase(Locale.ROOT).replace('_', '-');
    if (reservedKeys.contains(key)) {
      return name + " is not a setting of " + spec.qualifiedName();
    }
    String near = nearest(key, settings.keySet());
    return name
        + " is not a setting of "
        + spec.qualifiedName()
        + (near == null
            ? "; '" + spec.qualifiedName() + " --help' lists each setting's variable"
            : "; did you mean " + settings.get(near).variable() + "?");
  }

  private Path configPath(String name, String where) {
    if (name.isEmpty()) {
      throw usage(where + " needs a file name");
    }
    try {
      return Path.of(name);
    } catch (InvalidPathException e) {
      throw usage(
          where.substring(0, where.indexOf('=') + 1)
              + FileNames.quote(name)
              + " "
              + FileNames.whyInvalid(name, e),
          e);
    }
  }

  private String read(Path file, String where) {
    try {
      if (Files.isDirectory(file)) {
        throw usage(where + " is a directory, not a file");
      }
      return Files.readString(file, StandardCharsets.UTF_8);
    } catch (NoSuchFileException e) {
      throw usage(where + ": no such file", e);
    } catch (AccessDeniedException e) {
      throw usage(where + ": permission denied", e);
    } catch (CharacterCodingException e) {
      throw usage(where + ": not valid UTF-8 text", e);
    } catch (IOException e) {
      throw usage(where + ": cannot be read: " + e.getMessage(), e);
    }
  }

  private Map<String, SourceValue> fileValues(List<SettingsFile.Entry> entries, Path file) {
    Map<String, SourceValue> values = new LinkedHashMap<>();
    Map<String, SettingsFile.Entry> seen = new HashMap<>();
    for (SettingsFile.Entry entry : entries) {
      String at = file + " line " + entry.line();
      String key = entry.key().replace('_', '-');
      Setting setting = settings.get(key);
      if (setting == null) {
        throw usage(at + ": " + unknownKey(entry.key(), key));
      }
      SettingsFile.Entry before = seen.putIfAbsent(key, entry);
      if (before != null) {
        throw usage(
            at + ": " + entry.key() + " sets " + key + " again (line " + before.line() + ")");
      }
      String text = text(setting, entry, at);
      String shown = entry.key() + "=" + text + " from " + at;
      checkFlagValue(setting, text, shown);
      values.put(key, new SourceValue(text, new Origin.ConfigFile(file, entry.line()), shown));
    }
    return values;
  }

  private String unknownKey(String written, String key) {
    if (reservedKeys.contains(key)) {
      return key.equals(key(configOption))
          ? written
              + " cannot be given in a configuration file; name the file with "
              + CONFIG_OPTION
              + " or "
              + prefix
              + CONFIG_VARIABLE
          : written + " is not a setting of " + spec.qualifiedName();
    }
    String near = nearest(key, settings.keySet());
    return "unknown setting "
        + written
        + " of "
        + spec.qualifiedName()
        + (near == null
            ? "; '" + spec.qualifiedName() + " --help' lists each setting's key"
            : "; did you mean " + near + "?");
  }

  /** The option text of a file entry's value. */
  private String text(Setting setting, SettingsFile.Entry entry, String at) {
    OptionSpec option = optionsByKey.get(setting.key());
    boolean json = !option.isMultiValue() && option.type() == String.class;
    return switch (entry.value()) {
      case SettingsFile.Value.Scalar scalar -> scalar.text();
      case SettingsFile.Value.Null ignored ->
          throw usage(at + ": " + entry.key() + " has no value; give one or remove the line");
      case SettingsFile.Value.Mapping mapping -> {
        if (!json) {
          throw usage(
              at
                  + ": "
                  + entry.key()
                  + " takes a single value, not a mapping"
                  + " (only settings whose value is JSON text take one)");
        }
        yield SettingsFile.toJson(mapping.json());
      }
      case SettingsFile.Value.Sequence list -> {
        if (json) {
          yield SettingsFile.toJson(list.json());
        }
        if (!option.isMultiValue()) {
          throw usage(at + ": " + entry.key() + " takes a single value, not a list");
        }
        yield joined(option, entry, list, at);
      }
    };
  }

  /** A list for a multi-value option, joined by a delimiter its split pattern splits on. */
  private String joined(
      OptionSpec option, SettingsFile.Entry entry, SettingsFile.Value.Sequence list, String at) {
    if (list.scalars() == null) {
      throw usage(at + ": " + entry.key() + " takes a list of single values");
    }
    if (list.scalars().size() == 1) {
      return list.scalars().getFirst();
    }
    String split = option.splitRegex();
    if (split == null || split.isEmpty()) {
      throw usage(
          at + ": " + entry.key() + " takes one value here (the option does not split a value)");
    }
    Pattern pattern = Pattern.compile(split);
    for (String joiner : JOINERS) {
      if (pattern.matcher(joiner).matches()) {
        for (String item : list.scalars()) {
          if (pattern.matcher(item).find()) {
            throw usage(
                at + ": " + entry.key() + " item " + item + " contains the separator " + joiner);
          }
        }
        return String.join(joiner, list.scalars());
      }
    }
    throw usage(at + ": " + entry.key() + " takes one value here; write the items as one string");
  }

  /** A flag's value must be true or false, as picocli reads it. */
  private void checkFlagValue(Setting setting, String text, String shown) {
    OptionSpec option = optionsByKey.get(setting.key());
    if (option.typeInfo().isBoolean()
        && !option.isMultiValue()
        && !"true".equalsIgnoreCase(text)
        && !"false".equalsIgnoreCase(text)) {
      throw usage(shown + ": " + setting.option() + " takes true or false");
    }
  }

  private ParameterException usage(String message) {
    return new ParameterException(command, message);
  }

  private ParameterException usage(String message, Throwable cause) {
    return new ParameterException(command, message, cause);
  }
}
