package io.tokenspeed.server.http;

import java.util.List;

/**
 * Finds the first stop string in growing text, and says how much of the text is safe to send: a
 * suffix that could still become the start of a stop string is held back until the next token
 * decides it.
 */
final class StopStrings {
  private final List<String> stops;
  private final int holdBack;

  StopStrings(List<String> stops) {
    this.stops = List.copyOf(stops);
    int longest = 0;
    for (String s : stops) {
      longest = Math.max(longest, s.length());
    }
    this.holdBack = Math.max(0, longest - 1);
  }

  boolean isEmpty() {
    return stops.isEmpty();
  }

  /**
   * The index in {@code text} where the earliest stop string starts, searching only matches that
   * end at or after {@code newFrom} (text before it was searched already), or -1.
   */
  int find(CharSequence text, int newFrom) {
    int best = -1;
    String s = text.toString();
    for (String stop : stops) {
      int from = Math.max(0, newFrom - stop.length() + 1);
      int at = s.indexOf(stop, from);
      if (at >= 0 && (best < 0 || at < best)) {
        best = at;
      }
    }
    return best;
  }

  /**
   * How many chars of {@code text} may be sent now: all but the held-back suffix, never cutting a
   * surrogate pair.
   */
  int safeLength(CharSequence text) {
    int cut = Math.max(0, text.length() - holdBack);
    if (cut > 0 && cut < text.length() && Character.isHighSurrogate(text.charAt(cut - 1))) {
      cut--;
    }
    return cut;
  }
}
