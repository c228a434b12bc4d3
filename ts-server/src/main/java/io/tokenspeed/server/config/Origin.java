package io.tokenspeed.server.config;

import java.nio.file.Path;

/**
 * Where the value of one setting of a command came from: a flag on its command line, an environment
 * variable, its configuration file, or the command's own default ({@link SettingsSources}).
 */
public sealed interface Origin {

  /** The origin in a few words, for a startup log line or a message: {@code flag --port}. */
  String describe();

  /** The command line gave it, as {@code option}. */
  record Flag(String option) implements Origin {
    @Override
    public String describe() {
      return "flag " + option;
    }
  }

  /** The environment variable {@code variable} gave it. */
  record Environment(String variable) implements Origin {
    @Override
    public String describe() {
      return "environment " + variable;
    }
  }

  /** The configuration file {@code file} gave it, on line {@code line} (1-based). */
  record ConfigFile(Path file, int line) implements Origin {
    @Override
    public String describe() {
      return file + " line " + line;
    }
  }

  /** Nothing gave it: the command's built-in default holds. */
  record BuiltIn() implements Origin {
    @Override
    public String describe() {
      return "default";
    }
  }
}
