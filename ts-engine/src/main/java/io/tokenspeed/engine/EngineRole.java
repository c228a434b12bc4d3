package io.tokenspeed.engine;

import java.util.Locale;

/**
 * What an engine does with the requests it serves (docs/pd.md): a fused engine computes the prompt
 * and generates the whole answer; a prefill engine computes the prompt's KV and the first token and
 * sends both to a decode engine, which lands them and generates the rest.
 */
public enum EngineRole {
  FUSED,
  PREFILL,
  DECODE;

  /** The role's name on the command line and in metrics ({@code engine_role}): lower case. */
  public String wireName() {
    return name().toLowerCase(Locale.ROOT);
  }

  /**
   * The role a name gives.
   *
   * @throws IllegalArgumentException naming the accepted values
   */
  public static EngineRole parse(String name) {
    for (EngineRole r : values()) {
      if (r.wireName().equals(name)) {
        return r;
      }
    }
    throw new IllegalArgumentException(
        "engine role '" + name + "' is none of fused, prefill, decode");
  }
}
