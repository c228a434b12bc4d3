package io.tokenspeed.server.chat;

import java.time.LocalDateTime;

/**
 * C's {@code strftime} in the "C" locale, for the {@code strftime_now} function of chat templates
 * (Llama 3.1 writes {@code strftime_now("%d %b %Y")} into its system prompt). Names of days and
 * months are English whatever the JVM's locale, as Python's are in the default locale.
 *
 * <p>Supported: {@code %a %A %b %B %c %d %e %f %H %I %j %m %M %p %S %y %Y %F %T %D %R %h %u %w %U
 * %W %z %Z %n %t %%}; {@code %z} and {@code %Z} print nothing, as Python's do for the naive time of
 * {@code datetime.now()}. Any other directive fails with an {@link IllegalArgumentException} naming
 * it, rather than printing something that differs from the reference.
 */
final class Strftime {

  /** Names as C's "C" locale writes them, whatever the JVM's locale (Monday first). */
  private static final String[] DAYS = {
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"
  };

  private static final String[] MONTHS = {
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December"
  };

  private Strftime() {}

  static String format(LocalDateTime t, String format) {
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < format.length(); i++) {
      char c = format.charAt(i);
      if (c != '%') {
        out.append(c);
        continue;
      }
      if (i + 1 == format.length()) {
        throw new IllegalArgumentException(
            "strftime_now: format=\"" + format + "\" ends with a lone %");
      }
      char d = format.charAt(++i);
      switch (d) {
        case 'a' -> out.append(DAYS[t.getDayOfWeek().getValue() - 1], 0, 3);
        case 'A' -> out.append(DAYS[t.getDayOfWeek().getValue() - 1]);
        case 'b', 'h' -> out.append(MONTHS[t.getMonthValue() - 1], 0, 3);
        case 'B' -> out.append(MONTHS[t.getMonthValue() - 1]);
        case 'c' ->
            out.append(format(t, "%a %b "))
                .append(pad(t.getDayOfMonth(), 2, ' '))
                .append(format(t, " %H:%M:%S %Y"));
        case 'd' -> out.append(pad(t.getDayOfMonth(), 2, '0'));
        case 'e' -> out.append(pad(t.getDayOfMonth(), 2, ' '));
        case 'f' -> out.append(pad(t.getNano() / 1000, 6, '0'));
        case 'H' -> out.append(pad(t.getHour(), 2, '0'));
        case 'I' -> out.append(pad((t.getHour() + 11) % 12 + 1, 2, '0'));
        case 'j' -> out.append(pad(t.getDayOfYear(), 3, '0'));
        case 'm' -> out.append(pad(t.getMonthValue(), 2, '0'));
        case 'M' -> out.append(pad(t.getMinute(), 2, '0'));
        case 'p' -> out.append(t.getHour() < 12 ? "AM" : "PM");
        case 'S' -> out.append(pad(t.getSecond(), 2, '0'));
        case 'y' -> out.append(pad(t.getYear() % 100, 2, '0'));
        case 'Y' -> out.append(t.getYear());
        case 'F' -> out.append(format(t, "%Y-%m-%d"));
        case 'T' -> out.append(format(t, "%H:%M:%S"));
        case 'D' -> out.append(format(t, "%m/%d/%y"));
        case 'R' -> out.append(format(t, "%H:%M"));
        case 'u' -> out.append(t.getDayOfWeek().getValue());
        case 'w' -> out.append(t.getDayOfWeek().getValue() % 7);
        case 'U' ->
            out.append(pad((t.getDayOfYear() + 6 - t.getDayOfWeek().getValue() % 7) / 7, 2, '0'));
        case 'W' ->
            out.append(
                pad((t.getDayOfYear() + 6 - (t.getDayOfWeek().getValue() + 6) % 7) / 7, 2, '0'));
        case 'z', 'Z' -> {} // Python's now() is naive: no zone to print
        case 'n' -> out.append('\n');
        case 't' -> out.append('\t');
        case '%' -> out.append('%');
        default ->
            throw new IllegalArgumentException(
                "strftime_now: directive %"
                    + d
                    + " in format=\""
                    + format
                    + "\" is not supported (supported: %a %A %b %B %c %d %e %f %H %I %j %m %M %p"
                    + " %S %y %Y %F %T %D %R %h %u %w %U %W %z %Z %n %t %%)");
      }
    }
    return out.toString();
  }

  private static String pad(int value, int width, char fill) {
    String text = Integer.toString(value);
    return text.length() >= width
        ? text
        : String.valueOf(fill).repeat(width - text.length()) + text;
  }
}
