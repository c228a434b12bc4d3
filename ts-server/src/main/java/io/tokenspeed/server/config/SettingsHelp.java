package io.tokenspeed.server.config;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import picocli.CommandLine;
import picocli.CommandLine.Help;
import picocli.CommandLine.Help.Ansi.Text;
import picocli.CommandLine.Help.ColorScheme;
import picocli.CommandLine.Help.IOptionRenderer;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Model.UsageMessageSpec;

/**
 * The help of a command with {@link SettingsSources}: a line under each setting's description with
 * its built-in default, its variable and its key, and a section after the options saying which
 * source wins.
 *
 * <pre>
 *       --port=N              Port to listen on.
 *                               (default: 8000; env TOKENSPEED_SERVE_PORT; config key port)
 * </pre>
 *
 * <p>The default shown is the option's own ({@link SettingsSources#builtInDefault}), never a value
 * from the environment or the file, so the help reads the same on every machine. It is left out
 * when there is none, and when the description already states the same default.
 */
final class SettingsHelp {

  /** The key of the help section about the sources. */
  static final String SECTION_KEY = "settingsSources";

  /** The long option column, which spans the description column when its text is longer. */
  private static final int SPAN_COLUMN = 3;

  private SettingsHelp() {}

  static void install(CommandLine command, SettingsSources sources) {
    command.setHelpFactory(
        (spec, scheme) ->
            new Help(spec, scheme) {
              @Override
              public IOptionRenderer createDefaultOptionRenderer() {
                IOptionRenderer plain = super.createDefaultOptionRenderer();
                return (option, labels, colors) ->
                    withSources(plain.render(option, labels, colors), option, colors, sources);
              }
            });
    UsageMessageSpec usage = command.getCommandSpec().usageMessage();
    List<String> keys = new ArrayList<>(usage.sectionKeys());
    int footer = keys.indexOf(UsageMessageSpec.SECTION_KEY_FOOTER_HEADING);
    keys.add(footer < 0 ? keys.size() : footer, SECTION_KEY);
    usage.sectionKeys(keys);
    usage.sectionMap().put(SECTION_KEY, help -> section(sources));
  }

  /**
   * The line under {@code option}'s description: {@code (default: 8000; env TOKENSPEED_SERVE_PORT;
   * config key port)}; null for an option that is no setting.
   */
  static String line(OptionSpec option, SettingsSources sources) {
    if (sources.isConfigOption(option)) {
      return "(env " + sources.prefix() + SettingsSources.CONFIG_VARIABLE + ")";
    }
    SettingsSources.Setting setting = sources.settingOf(option);
    if (setting == null) {
      return null;
    }
    List<String> parts = new ArrayList<>();
    String builtIn = setting.builtInDefault();
    if (builtIn != null && !states(option.description(), "default: " + builtIn)) {
      parts.add("default: " + builtIn);
    }
    parts.add("env " + setting.variable());
    parts.add("config key " + setting.key());
    return "(" + String.join("; ", parts) + ")";
  }

  private static boolean states(String[] description, String text) {
    String wanted = text.toLowerCase(Locale.ROOT);
    return Arrays.stream(description)
        .anyMatch(line -> line.toLowerCase(Locale.ROOT).contains(wanted));
  }

  private static Text[][] withSources(
      Text[][] rows, OptionSpec option, ColorScheme colors, SettingsSources sources) {
    String line = line(option, sources);
    if (line == null || rows.length == 0) {
      return rows;
    }
    Text[][] more = Arrays.copyOf(rows, rows.length + 1);
    Text[] row = new Text[SPAN_COLUMN + 1];
    Arrays.fill(row, colors.text(""));
    row[SPAN_COLUMN] = colors.text(" " + line);
    more[rows.length] = row;
    return more;
  }

  private static String section(SettingsSources sources) {
    String n = System.lineSeparator();
    String prefix = sources.prefix();
    String config = SettingsSources.CONFIG_OPTION;
    return n
        + "Each setting comes from the first of these that gives it:"
        + n
        + row("1. its flag", "--KEY=VALUE")
        + row("2. its environment variable", prefix + "NAME=VALUE")
        + row("3. the " + config + " file", "KEY: VALUE")
        + row("4. its default", "")
        + "KEY is the long option name without the dashes (snake_case also works in the file);"
        + n
        + "NAME is KEY in capitals with - as _. The file is YAML, or JSON when its name ends in"
        + n
        + ".json; "
        + prefix
        + SettingsSources.CONFIG_VARIABLE
        + " names it when "
        + config
        + " does not. See docs/configuration.md."
        + n;
  }

  private static String row(String source, String example) {
    return String.format(Locale.ROOT, "  %-30s %s", source, example).stripTrailing()
        + System.lineSeparator();
  }
}
