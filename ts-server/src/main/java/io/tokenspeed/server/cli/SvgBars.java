package io.tokenspeed.server.cli;

import java.util.Locale;

/** The benchmark reports' horizontal bar charts, written as SVG text. */
final class SvgBars {
  private SvgBars() {}

  /** The document's opening tag: {@code width} by {@code height} pixels, 12-pixel sans-serif. */
  static StringBuilder open(int width, int height) {
    return new StringBuilder(
        String.format(
            Locale.ROOT,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\""
                + " font-family=\"sans-serif\" font-size=\"12\">%n",
            width,
            height));
  }

  /**
   * One bar of a row starting at {@code y}, {@code rowH} pixels high: its label right-aligned
   * before {@code left}, a bar {@code barWidth} pixels long (at least 1) in {@code color}, and
   * {@code value} after it with one decimal.
   */
  static void bar(
      StringBuilder s,
      String label,
      double value,
      double barWidth,
      int left,
      int y,
      int rowH,
      String color) {
    double w = Math.max(1, barWidth);
    s.append(
        String.format(
            Locale.ROOT,
            "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>%n"
                + "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>%n"
                + "<text x=\"%.1f\" y=\"%d\">%.1f</text>%n",
            left - 6,
            y + 14,
            label,
            left,
            y + 2,
            w,
            rowH - 6,
            color,
            left + w + 4,
            y + 14,
            value));
  }
}
