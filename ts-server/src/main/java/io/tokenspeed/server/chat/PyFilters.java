package io.tokenspeed.server.chat;

import com.hubspot.jinjava.interpret.Context;
import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.lib.filter.Filter;
import com.hubspot.jinjava.lib.tag.Tag;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.TagNode;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.BiFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Filters with Jinja's meaning where Jinjava's differ or are missing, and the {@code generation}
 * tag: {@code tojson} (Hugging Face's, Python's {@code json.dumps}), {@code length} and {@code
 * count} (code points), {@code upper lower capitalize title trim} (independent of the JVM's locale;
 * {@code trim} removes Unicode white space only), {@code round} (half to even, floats stay floats),
 * {@code max min} and {@code items} (missing from Jinjava).
 */
final class PyFilters {

  private PyFilters() {}

  /**
   * @param maxStringChars the longest text {@code tojson} may write
   */
  static void register(Context global, long maxStringChars) {
    global.registerFilter(new ToJsonFilter(maxStringChars));
    global.registerFilter(new LengthFilter("length"));
    global.registerFilter(new LengthFilter("count"));
    global.registerFilter(new ExtremeFilter("max", 1));
    global.registerFilter(new ExtremeFilter("min", -1));
    global.registerFilter(new ItemsFilter());
    global.registerFilter(new StringFilter("upper", (v, args) -> v.toUpperCase(Locale.ROOT)));
    global.registerFilter(new StringFilter("lower", (v, args) -> v.toLowerCase(Locale.ROOT)));
    global.registerFilter(new StringFilter("capitalize", (v, args) -> PyMethods.capitalize(v)));
    global.registerFilter(new StringFilter("title", (v, args) -> title(v)));
    global.registerFilter(
        new StringFilter(
            "trim",
            (v, args) ->
                PyMethods.strip(
                    v,
                    args.length > 0 && args[0] != null ? String.valueOf(args[0]) : null,
                    true,
                    true)));
    global.registerFilter(new RoundFilter());
    global.registerTag(new GenerationTag());
  }

  /** {@code tojson}: Python's {@code json.dumps}, with Hugging Face's defaults and arguments. */
  private static final class ToJsonFilter implements Filter {

    private final long maxChars;

    ToJsonFilter(long maxChars) {
      this.maxChars = maxChars;
    }

    @Override
    public String getName() {
      return "tojson";
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return filter(var, interpreter, args, Map.of());
    }

    @Override
    public Object filter(
        Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
      // Hugging Face's signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
      // sort_keys=False).
      String[] names = {"ensure_ascii", "indent", "separators", "sort_keys"};
      Object[] values = new Object[names.length];
      if (args.length > names.length) {
        throw new IllegalArgumentException(
            "tojson takes at most 4 arguments (ensure_ascii, indent, separators, sort_keys), got "
                + args.length);
      }
      System.arraycopy(args, 0, values, 0, args.length);
      for (Map.Entry<String, Object> e : kwargs.entrySet()) {
        int i = Arrays.asList(names).indexOf(e.getKey());
        if (i < 0) {
          throw new IllegalArgumentException(
              "tojson has no argument "
                  + e.getKey()
                  + " (allowed: "
                  + String.join(", ", names)
                  + ")");
        }
        values[i] = e.getValue();
      }
      boolean ensureAscii = truthy(values[0]);
      String indent = indent(PyValues.unwrap(values[1]));
      String itemSeparator = indent == null ? ", " : ",";
      String keySeparator = ": ";
      Object separators = PyValues.unwrap(values[2]);
      if (separators != null) {
        if (!(separators instanceof Collection<?> pair) || pair.size() != 2) {
          throw new IllegalArgumentException(
              "tojson separators must be a pair of strings (item, key), got " + separators);
        }
        Object[] both = pair.toArray();
        itemSeparator = String.valueOf(PyValues.unwrap(both[0]));
        keySeparator = String.valueOf(PyValues.unwrap(both[1]));
      }
      boolean sortKeys = truthy(values[3]);
      return PyJson.dumps(
          var,
          new PyJson.Options(ensureAscii, indent, itemSeparator, keySeparator, sortKeys),
          maxChars);
    }

    private static String indent(Object value) {
      if (value == null) {
        return null;
      }
      if (value instanceof String s) {
        return s;
      }
      if (PyValues.isInteger(value)) {
        long n = ((Number) value).longValue();
        if (n < 0 || n > 64) {
          throw new IllegalArgumentException("tojson indent=" + n + " must be in [0, 64]");
        }
        return " ".repeat((int) n);
      }
      throw new IllegalArgumentException(
          "tojson indent must be an integer or a string, got " + PyValues.typeName(value));
    }

    private static boolean truthy(Object value) {
      value = PyValues.unwrap(value);
      if (value == null) {
        return false;
      }
      if (value instanceof Boolean b) {
        return b;
      }
      if (value instanceof Number n) {
        return n.doubleValue() != 0;
      }
      if (value instanceof CharSequence s) {
        return !s.isEmpty();
      }
      if (value instanceof Collection<?> c) {
        return !c.isEmpty();
      }
      if (value instanceof Map<?, ?> m) {
        return !m.isEmpty();
      }
      return true;
    }
  }

  /** {@code length} and {@code count}: Python's {@code len}, strings measured in code points. */
  private static final class LengthFilter implements Filter {

    private final String name;

    LengthFilter(String name) {
      this.name = name;
    }

    @Override
    public String getName() {
      return name;
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      Object value = PyValues.unwrap(var);
      if (value == null) {
        return 0L;
      }
      if (value instanceof CharSequence s) {
        return (long) s.toString().codePointCount(0, s.length());
      }
      if (value instanceof Collection<?> c) {
        return (long) c.size();
      }
      if (value instanceof Map<?, ?> m) {
        return (long) m.size();
      }
      if (value instanceof Object[] a) {
        return (long) a.length;
      }
      if (value instanceof Iterable<?> it) {
        long n = 0;
        for (Object ignored : it) {
          n++;
        }
        return n;
      }
      throw new IllegalArgumentException(
          "object of type '" + PyValues.typeName(value) + "' has no len()");
    }
  }

  /**
   * {@code {% generation %}...{% endgeneration %}}: marks what the assistant wrote, for training
   * masks; for a prompt it is its body.
   */
  private static final class GenerationTag implements Tag {

    private static final long serialVersionUID = 1L;

    @Override
    public String getName() {
      return "generation";
    }

    @Override
    public String interpret(TagNode tagNode, JinjavaInterpreter interpreter) {
      StringBuilder out = new StringBuilder();
      for (Node child : tagNode.getChildren()) {
        out.append(child.render(interpreter).getValue());
      }
      return out.toString();
    }
  }

  /** {@code max} and {@code min} of a sequence, optionally by {@code attribute=}. */
  private static final class ExtremeFilter implements Filter {

    private final String name;
    private final int sign;

    ExtremeFilter(String name, int sign) {
      this.name = name;
      this.sign = sign;
    }

    @Override
    public String getName() {
      return name;
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return filter(var, interpreter, new Object[0], Map.of());
    }

    @Override
    public Object filter(
        Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
      Object attribute = kwargs.get("attribute");
      boolean caseSensitive = Boolean.TRUE.equals(PyValues.unwrap(kwargs.get("case_sensitive")));
      Object best = null;
      Object bestKey = null;
      for (Object item : iterable(var, name)) {
        Object key = item;
        if (attribute != null) {
          if (!(PyValues.unwrap(item) instanceof Map<?, ?> map)) {
            throw new IllegalArgumentException(
                name
                    + "(attribute="
                    + attribute
                    + "): "
                    + PyValues.typeName(item)
                    + " has no attributes");
          }
          key = map.get(String.valueOf(attribute));
        }
        if (best == null || sign * compare(key, bestKey, caseSensitive) > 0) {
          best = item;
          bestKey = key;
        }
      }
      return best;
    }

    private static int compare(Object a, Object b, boolean caseSensitive) {
      a = PyValues.unwrap(a);
      b = PyValues.unwrap(b);
      if (a instanceof Number x && b instanceof Number y) {
        return Double.compare(x.doubleValue(), y.doubleValue());
      }
      if (a instanceof String x && b instanceof String y) {
        // Jinja compares case-insensitively unless case_sensitive=true.
        return caseSensitive
            ? PyValues.compareStrings(x, y)
            : PyValues.compareStrings(x.toLowerCase(Locale.ROOT), y.toLowerCase(Locale.ROOT));
      }
      throw new IllegalArgumentException(
          "cannot compare " + PyValues.typeName(a) + " with " + PyValues.typeName(b));
    }
  }

  /**
   * A filter on the text of a value, with Python's meaning: case mapping independent of the JVM's
   * locale (Jinjava's would make {@code 'i'|upper} a dotted capital I in a Turkish locale), and
   * {@code trim} removing Unicode white space only (Java's {@code trim} also removes control
   * characters and keeps a no-break space).
   */
  private static final class StringFilter implements Filter {

    private final String name;
    private final BiFunction<String, Object[], String> function;

    StringFilter(String name, BiFunction<String, Object[], String> function) {
      this.name = name;
      this.function = function;
    }

    @Override
    public String getName() {
      return name;
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return filter(var, interpreter, (Object[]) args, Map.of());
    }

    @Override
    public Object filter(
        Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
      Object value = PyValues.unwrap(var);
      String text =
          value == null ? "" : value instanceof String s ? s : interpreter.getAsString(value);
      return function.apply(text, args);
    }
  }

  /** Jinja's {@code title}: words split at runs of {@code -}, spaces and opening brackets. */
  private static final Pattern WORD_BEGINNING =
      Pattern.compile("[-\\s({\\[<]+", Pattern.UNICODE_CHARACTER_CLASS);

  static String title(String s) {
    StringBuilder out = new StringBuilder(s.length());
    Matcher m = WORD_BEGINNING.matcher(s);
    int at = 0;
    while (at < s.length()) {
      int end = m.find(at) ? m.start() : s.length();
      if (end > at) {
        int first = s.codePointAt(at);
        out.append(Character.toString(first).toUpperCase(Locale.ROOT))
            .append(s.substring(at + Character.charCount(first), end).toLowerCase(Locale.ROOT));
      }
      if (end < s.length()) {
        out.append(s, end, m.end());
        at = m.end();
      } else {
        at = end;
      }
    }
    return out.toString();
  }

  /**
   * {@code round(precision=0, method='common')}: Python's {@code round} (half to even, on the
   * double's exact value), or {@code ceil} or {@code floor}; a float stays a float ({@code 2.0}).
   */
  private static final class RoundFilter implements Filter {

    @Override
    public String getName() {
      return "round";
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return filter(var, interpreter, (Object[]) args, Map.of());
    }

    @Override
    public Object filter(
        Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
      Object value = PyValues.unwrap(var);
      Object precisionArg = args.length > 0 ? args[0] : kwargs.get("precision");
      Object methodArg = args.length > 1 ? args[1] : kwargs.get("method");
      int precision =
          precisionArg == null ? 0 : (int) Double.parseDouble(String.valueOf(precisionArg));
      String method = methodArg == null ? "common" : String.valueOf(methodArg);
      RoundingMode mode =
          switch (method) {
            case "common" -> RoundingMode.HALF_EVEN;
            case "ceil" -> RoundingMode.CEILING;
            case "floor" -> RoundingMode.FLOOR;
            default ->
                throw new IllegalArgumentException(
                    "round: method=" + method + " must be common, ceil or floor");
          };
      if (PyValues.isInteger(value) && method.equals("common")) {
        return value;
      }
      if (!(value instanceof Number n)) {
        throw new IllegalArgumentException(
            "round: expected a number, not " + PyValues.typeName(value));
      }
      double d = n.doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        return d;
      }
      return new BigDecimal(d).setScale(precision, mode).doubleValue();
    }
  }

  /** {@code items}: a dict's (key, value) pairs, in order. */
  private static final class ItemsFilter implements Filter {

    @Override
    public String getName() {
      return "items";
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      Object value = PyValues.unwrap(var);
      if (value == null) {
        return List.of();
      }
      if (!(value instanceof Map<?, ?> map)) {
        throw new IllegalArgumentException(
            "items: can only get items from a mapping, not " + PyValues.typeName(value));
      }
      List<List<Object>> items = new ArrayList<>(map.size());
      for (Map.Entry<?, ?> e : map.entrySet()) {
        List<Object> pair = new ArrayList<>(2);
        pair.add(e.getKey());
        pair.add(e.getValue());
        items.add(pair);
      }
      return items;
    }
  }

  private static Iterable<?> iterable(Object var, String filter) {
    Object value = PyValues.unwrap(var);
    if (value instanceof Iterable<?> it) {
      return it;
    }
    if (value instanceof Object[] array) {
      return List.of(array);
    }
    throw new IllegalArgumentException(
        filter + ": expected a sequence, not " + PyValues.typeName(value));
  }
}
