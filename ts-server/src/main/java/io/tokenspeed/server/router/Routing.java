package io.tokenspeed.server.router;

import java.util.Arrays;

/** How the router chooses among a role's ready backends ({@code router --routing}). */
public enum Routing {
  /**
   * By the prompt's prefixes the backends hold and their load ({@link PrefixChooser}): the prefill
   * backends of a disaggregated deployment, or the replicas of {@code --replicas}. Decode backends
   * are always taken round robin.
   */
  PREFIX("prefix"),
  /** Round robin over the ready ones, in the order configured. */
  ROUND_ROBIN("round-robin");

  private final String wireName;

  Routing(String wireName) {
    this.wireName = wireName;
  }

  /** The name on the command line. */
  public String wireName() {
    return wireName;
  }

  /**
   * The routing named {@code name}.
   *
   * @throws IllegalArgumentException naming the value and the allowed ones
   */
  public static Routing of(String name) {
    for (Routing r : values()) {
      if (r.wireName.equals(name)) {
        return r;
      }
    }
    throw new IllegalArgumentException(
        "--routing="
            + name
            + " is not a routing; allowed: "
            + String.join(", ", Arrays.stream(values()).map(Routing::wireName).toList()));
  }
}
