package io.tokenspeed.bench;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** The {@code --flag value} pairs of a harness's command line, in order (a flag may repeat). */
final class BenchFlags {

  private BenchFlags() {}

  /**
   * The pairs of {@code args}.
   *
   * @throws IllegalArgumentException when the last flag has no value
   */
  static List<Map.Entry<String, String>> of(String[] args) {
    List<Map.Entry<String, String>> out = new ArrayList<>();
    for (int i = 0; i < args.length; i += 2) {
      if (i + 1 >= args.length) {
        throw new IllegalArgumentException(args[i] + " needs a value");
      }
      out.add(Map.entry(args[i], args[i + 1]));
    }
    return out;
  }
}
