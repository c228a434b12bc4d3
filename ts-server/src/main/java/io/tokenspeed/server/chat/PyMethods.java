package io.tokenspeed.server.chat;

import com.hubspot.jinjava.el.ext.NamedParameter;
import java.beans.FeatureDescriptor;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import jinjava.javax.el.ELContext;
import jinjava.javax.el.ELException;
import jinjava.javax.el.ELResolver;

/**
 * Method calls on the values a chat template handles, with Python's names and meaning: {@code
 * content.startswith('<tool_response>')}, {@code content.split('</think>')[-1]}, {@code
 * text.strip('\n')}, {@code message.get('name', '')}. Jinjava would otherwise call the Java method
 * of the same name when one exists ({@code split} taking a regular expression) and fail when none
 * does ({@code lstrip}, {@code startswith}).
 *
 * <p>The set is closed, like Hugging Face's immutable sandbox: strings have the methods below,
 * dicts {@code items keys values get}, lists {@code index count}. Anything else on those types,
 * Java methods and the list and dict methods that modify their object ({@code append}, {@code
 * update}, {@code pop}) included, fails with the method's name. Calls on other objects (Jinjava's
 * own filters and tests, {@code loop}) are left to the resolvers after this one.
 *
 * <p>String methods: {@code startswith endswith} (a prefix or a tuple of them), {@code strip lstrip
 * rstrip} (whitespace or the given characters), {@code split rsplit} (on runs of whitespace, or on
 * a separator, with an optional maxsplit), {@code splitlines}, {@code upper lower title capitalize
 * swapcase}, {@code replace} (with an optional count), {@code find rfind count} (code point
 * indices), {@code join}, {@code isdigit isalpha isalnum isspace isupper islower}. Results are
 * bounded by {@code maxStringChars}.
 */
final class PyMethods extends ELResolver {

  private final long maxStringChars;

  PyMethods(long maxStringChars) {
    this.maxStringChars = maxStringChars;
  }

  @Override
  public Object invoke(
      ELContext context, Object base, Object method, Class<?>[] paramTypes, Object[] params) {
    Object value = PyValues.unwrap(base);
    if (!(value instanceof String || value instanceof Map || value instanceof List)) {
      return null;
    }
    String name = String.valueOf(method);
    Object[] args = positional(name, params == null ? new Object[0] : params);
    Object result;
    if (value instanceof String s) {
      result = onString(s, name, args);
    } else if (value instanceof Map<?, ?> map) {
      result = onDict(map, name, args);
    } else {
      result = onList((List<?>) value, name, args);
    }
    context.setPropertyResolved(true);
    return result;
  }

  private static Object[] positional(String method, Object[] params) {
    Object[] args = new Object[params.length];
    for (int i = 0; i < params.length; i++) {
      if (params[i] instanceof NamedParameter p) {
        throw new ELException(
            method
                + "(): keyword argument "
                + p.getName()
                + "= is not supported; pass it by"
                + " position");
      }
      args[i] = PyValues.unwrap(params[i]);
    }
    return args;
  }

  // ---------------------------------------------------------------- str

  private Object onString(String s, String method, Object[] args) {
    return switch (method) {
      case "startswith" -> {
        arity(method, args, 1, 1);
        yield anyAffix(s, args[0], true);
      }
      case "endswith" -> {
        arity(method, args, 1, 1);
        yield anyAffix(s, args[0], false);
      }
      case "strip" -> strip(s, chars(method, args), true, true);
      case "lstrip" -> strip(s, chars(method, args), true, false);
      case "rstrip" -> strip(s, chars(method, args), false, true);
      case "split" -> split(s, method, args, false);
      case "rsplit" -> split(s, method, args, true);
      case "splitlines" -> {
        arity(method, args, 0, 0);
        yield splitLines(s);
      }
      case "upper" -> {
        arity(method, args, 0, 0);
        yield s.toUpperCase(Locale.ROOT);
      }
      case "lower" -> {
        arity(method, args, 0, 0);
        yield s.toLowerCase(Locale.ROOT);
      }
      case "title" -> {
        arity(method, args, 0, 0);
        yield title(s);
      }
      case "capitalize" -> {
        arity(method, args, 0, 0);
        yield capitalize(s);
      }
      case "swapcase" -> {
        arity(method, args, 0, 0);
        yield swapCase(s);
      }
      case "replace" -> {
        arity(method, args, 2, 3);
        yield replace(
            s,
            string(method, args[0]),
            string(method, args[1]),
            args.length == 3 ? integer(method, args[2]) : -1);
      }
      case "find" -> {
        arity(method, args, 1, 1);
        yield find(s, string(method, args[0]), false);
      }
      case "rfind" -> {
        arity(method, args, 1, 1);
        yield find(s, string(method, args[0]), true);
      }
      case "count" -> {
        arity(method, args, 1, 1);
        yield count(s, string(method, args[0]));
      }
      case "join" -> {
        arity(method, args, 1, 1);
        yield join(s, args[0]);
      }
      case "isdigit" -> test(method, args, s, Character::isDigit);
      case "isalpha" -> test(method, args, s, Character::isLetter);
      case "isalnum" -> test(method, args, s, Character::isLetterOrDigit);
      case "isspace" -> test(method, args, s, PyValues::isWhitespace);
      case "isupper" -> {
        arity(method, args, 0, 0);
        yield hasCased(s) && s.equals(s.toUpperCase(Locale.ROOT));
      }
      case "islower" -> {
        arity(method, args, 0, 0);
        yield hasCased(s) && s.equals(s.toLowerCase(Locale.ROOT));
      }
      default -> throw unsupported("str", method);
    };
  }

  private static boolean anyAffix(String s, Object affix, boolean prefix) {
    if (affix instanceof Collection<?> options) {
      for (Object o : options) {
        if (anyAffix(s, PyValues.unwrap(o), prefix)) {
          return true;
        }
      }
      return false;
    }
    String a = string(prefix ? "startswith" : "endswith", affix);
    return prefix ? s.startsWith(a) : s.endsWith(a);
  }

  private static String chars(String method, Object[] args) {
    arity(method, args, 0, 1);
    return args.length == 0 || args[0] == null ? null : string(method, args[0]);
  }

  static String strip(String s, String chars, boolean left, boolean right) {
    int begin = 0;
    int end = s.length();
    if (left) {
      while (begin < end && stripped(s.codePointAt(begin), chars)) {
        begin += Character.charCount(s.codePointAt(begin));
      }
    }
    if (right) {
      while (end > begin && stripped(s.codePointBefore(end), chars)) {
        end -= Character.charCount(s.codePointBefore(end));
      }
    }
    return s.substring(begin, end);
  }

  private static boolean stripped(int cp, String chars) {
    return chars == null ? PyValues.isWhitespace(cp) : chars.indexOf(Character.toString(cp)) >= 0;
  }

  private static List<String> split(String s, String method, Object[] args, boolean fromRight) {
    arity(method, args, 0, 2);
    String sep = args.length > 0 && args[0] != null ? string(method, args[0]) : null;
    int maxSplit =
        args.length > 1 ? (int) Math.min(Integer.MAX_VALUE, integer(method, args[1])) : -1;
    if (sep != null && sep.isEmpty()) {
      throw new ELException(method + "(): empty separator");
    }
    if (maxSplit < 0) {
      maxSplit = Integer.MAX_VALUE;
    }
    List<String> parts =
        sep == null
            ? splitWhitespace(s, maxSplit, fromRight)
            : splitOn(s, sep, maxSplit, fromRight);
    return parts;
  }

  private static List<String> splitOn(String s, String sep, int maxSplit, boolean fromRight) {
    List<String> parts = new ArrayList<>();
    if (!fromRight) {
      int from = 0;
      int at;
      while (parts.size() < maxSplit && (at = s.indexOf(sep, from)) >= 0) {
        parts.add(s.substring(from, at));
        from = at + sep.length();
      }
      parts.add(s.substring(from));
      return parts;
    }
    int to = s.length();
    int at;
    while (parts.size() < maxSplit && (at = s.lastIndexOf(sep, to - sep.length())) >= 0) {
      parts.add(s.substring(at + sep.length(), to));
      to = at;
    }
    parts.add(s.substring(0, to));
    Collections.reverse(parts);
    return parts;
  }

  private static List<String> splitWhitespace(String s, int maxSplit, boolean fromRight) {
    List<String> parts = new ArrayList<>();
    if (!fromRight) {
      int i = skip(s, 0, true);
      while (i < s.length()) {
        if (parts.size() == maxSplit) {
          parts.add(s.substring(i)); // the rest, trailing white space included
          return parts;
        }
        int end = skip(s, i, false);
        parts.add(s.substring(i, end));
        i = skip(s, end, true);
      }
      return parts;
    }
    int i = s.length();
    while (i > 0 && PyValues.isWhitespace(s.codePointBefore(i))) {
      i -= Character.charCount(s.codePointBefore(i));
    }
    while (i > 0) {
      if (parts.size() == maxSplit) {
        parts.add(s.substring(0, i)); // the rest, leading white space included
        break;
      }
      int begin = i;
      while (begin > 0 && !PyValues.isWhitespace(s.codePointBefore(begin))) {
        begin -= Character.charCount(s.codePointBefore(begin));
      }
      parts.add(s.substring(begin, i));
      i = begin;
      while (i > 0 && PyValues.isWhitespace(s.codePointBefore(i))) {
        i -= Character.charCount(s.codePointBefore(i));
      }
    }
    Collections.reverse(parts);
    return parts;
  }

  /** The index of the first code point at or after {@code i} that is (not) whitespace. */
  private static int skip(String s, int i, boolean whitespace) {
    while (i < s.length() && PyValues.isWhitespace(s.codePointAt(i)) == whitespace) {
      i += Character.charCount(s.codePointAt(i));
    }
    return i;
  }

  private static List<String> splitLines(String s) {
    List<String> lines = new ArrayList<>();
    int begin = 0;
    int i = 0;
    while (i < s.length()) {
      char c = s.charAt(i);
      boolean boundary =
          c == '\n'
              || c == '\r'
              || c == '\u000b'
              || c == '\u000c'
              || (c >= '\u001c' && c <= '\u001e')
              || c == '\u0085'
              || c == '\u2028'
              || c == '\u2029';
      if (!boundary) {
        i++;
        continue;
      }
      lines.add(s.substring(begin, i));
      i += (c == '\r' && i + 1 < s.length() && s.charAt(i + 1) == '\n') ? 2 : 1;
      begin = i;
    }
    if (begin < s.length()) {
      lines.add(s.substring(begin));
    }
    return lines;
  }

  static String title(String s) {
    StringBuilder out = new StringBuilder(s.length());
    boolean previousCased = false;
    for (int i = 0; i < s.length(); ) {
      int cp = s.codePointAt(i);
      i += Character.charCount(cp);
      out.appendCodePoint(previousCased ? Character.toLowerCase(cp) : Character.toTitleCase(cp));
      previousCased = isCased(cp);
    }
    return out.toString();
  }

  static String capitalize(String s) {
    if (s.isEmpty()) {
      return s;
    }
    int first = s.codePointAt(0);
    return new StringBuilder()
        .appendCodePoint(Character.toTitleCase(first))
        .append(s.substring(Character.charCount(first)).toLowerCase(Locale.ROOT))
        .toString();
  }

  private static String swapCase(String s) {
    StringBuilder out = new StringBuilder(s.length());
    s.codePoints()
        .forEach(
            cp ->
                out.appendCodePoint(
                    Character.isUpperCase(cp)
                        ? Character.toLowerCase(cp)
                        : Character.isLowerCase(cp) ? Character.toUpperCase(cp) : cp));
    return out.toString();
  }

  private static boolean isCased(int cp) {
    return Character.isUpperCase(cp) || Character.isLowerCase(cp) || Character.isTitleCase(cp);
  }

  private static boolean hasCased(String s) {
    return s.codePoints().anyMatch(PyMethods::isCased);
  }

  private String replace(String s, String old, String replacement, long count) {
    if (count < 0) {
      count = Long.MAX_VALUE;
    }
    StringBuilder out = new StringBuilder();
    int from = 0;
    long done = 0;
    if (old.isEmpty()) {
      // Python inserts the replacement before every code point and at the end.
      for (int i = 0; i <= s.length() && done < count; ) {
        out.append(replacement);
        done++;
        if (i == s.length()) {
          from = i;
          break;
        }
        int cp = s.codePointAt(i);
        out.appendCodePoint(cp);
        i += Character.charCount(cp);
        from = i;
        bound(out);
      }
      return out.append(s, from, s.length()).toString();
    }
    int at;
    while (done < count && (at = s.indexOf(old, from)) >= 0) {
      out.append(s, from, at).append(replacement);
      from = at + old.length();
      done++;
      bound(out);
    }
    return out.append(s, from, s.length()).toString();
  }

  private static int find(String s, String sub, boolean last) {
    int at = last ? s.lastIndexOf(sub) : s.indexOf(sub);
    return at < 0 ? -1 : s.codePointCount(0, at);
  }

  private static int count(String s, String sub) {
    if (sub.isEmpty()) {
      return s.codePointCount(0, s.length()) + 1;
    }
    int n = 0;
    for (int at = s.indexOf(sub); at >= 0; at = s.indexOf(sub, at + sub.length())) {
      n++;
    }
    return n;
  }

  private String join(String separator, Object items) {
    if (!(items instanceof Iterable<?> iterable)) {
      throw new ELException("join(): can only join an iterable, not " + PyValues.typeName(items));
    }
    StringBuilder out = new StringBuilder();
    int i = 0;
    for (Object item : iterable) {
      Object v = PyValues.unwrap(item);
      if (!(v instanceof String text)) {
        throw new ELException(
            "join(): sequence item "
                + i
                + ": expected str instance, "
                + PyValues.typeName(v)
                + " found");
      }
      if (i++ > 0) {
        out.append(separator);
      }
      out.append(text);
      bound(out);
    }
    return out.toString();
  }

  private static boolean test(
      String method, Object[] args, String s, java.util.function.IntPredicate p) {
    arity(method, args, 0, 0);
    return !s.isEmpty() && s.codePoints().allMatch(p);
  }

  private void bound(StringBuilder out) {
    if (out.length() > maxStringChars) {
      throw new StringLimitException("string result", maxStringChars);
    }
  }

  // ---------------------------------------------------------------- dict and list

  private static Object onDict(Map<?, ?> map, String method, Object[] args) {
    return switch (method) {
      case "items" -> {
        arity(method, args, 0, 0);
        List<List<Object>> items = new ArrayList<>(map.size());
        for (Map.Entry<?, ?> e : map.entrySet()) {
          List<Object> pair = new ArrayList<>(2);
          pair.add(e.getKey());
          pair.add(e.getValue());
          items.add(pair);
        }
        yield items;
      }
      case "keys" -> {
        arity(method, args, 0, 0);
        yield new ArrayList<Object>(map.keySet());
      }
      case "values" -> {
        arity(method, args, 0, 0);
        yield new ArrayList<Object>(map.values());
      }
      case "get" -> {
        arity(method, args, 1, 2);
        yield map.containsKey(args[0]) ? map.get(args[0]) : (args.length == 2 ? args[1] : null);
      }
      default -> throw unsupported("dict", method);
    };
  }

  private static Object onList(List<?> list, String method, Object[] args) {
    return switch (method) {
      case "index" -> {
        arity(method, args, 1, 1);
        for (int i = 0; i < list.size(); i++) {
          if (equal(list.get(i), args[0])) {
            yield i;
          }
        }
        throw new ELException("index(): " + args[0] + " is not in list");
      }
      case "count" -> {
        arity(method, args, 1, 1);
        int n = 0;
        for (Object o : list) {
          n += equal(o, args[0]) ? 1 : 0;
        }
        yield n;
      }
      default -> throw unsupported("list", method);
    };
  }

  /** Python's {@code ==} for the values templates compare: numbers by value. */
  static boolean equal(Object a, Object b) {
    a = PyValues.unwrap(a);
    b = PyValues.unwrap(b);
    if (a instanceof Number x && b instanceof Number y) {
      return x.doubleValue() == y.doubleValue();
    }
    return a == null ? b == null : a.equals(b);
  }

  // ---------------------------------------------------------------- arguments

  private static void arity(String method, Object[] args, int min, int max) {
    if (args.length < min || args.length > max) {
      String expected = min == max ? String.valueOf(min) : min + " to " + max;
      throw new ELException(
          method
              + "() takes "
              + expected
              + " argument"
              + (max == 1 ? "" : "s")
              + ", got "
              + args.length);
    }
  }

  private static String string(String method, Object arg) {
    if (arg instanceof String s) {
      return s;
    }
    throw new ELException(method + "(): expected a string argument, got " + PyValues.typeName(arg));
  }

  private static long integer(String method, Object arg) {
    if (PyValues.isInteger(arg)) {
      return ((Number) arg).longValue();
    }
    throw new ELException(
        method + "(): expected an integer argument, got " + PyValues.typeName(arg));
  }

  /** List and dict methods that change their object: Hugging Face's sandbox refuses them too. */
  private static final Set<String> MUTATORS =
      Set.of(
          "append",
          "extend",
          "insert",
          "pop",
          "remove",
          "reverse",
          "sort",
          "clear",
          "update",
          "setdefault",
          "popitem",
          "put",
          "putAll",
          "add",
          "set");

  private static ELException unsupported(String type, String method) {
    if (!type.equals("str") && MUTATORS.contains(method)) {
      return new ELException(
          "'"
              + type
              + "' method '"
              + method
              + "' modifies its object: chat templates cannot"
              + " modify their inputs");
    }
    return new ELException(
        "'" + type + "' object has no method '" + method + "' in chat templates");
  }

  // ---------------------------------------------------------------- not a property resolver

  @Override
  public Object getValue(ELContext context, Object base, Object property) {
    return null;
  }

  @Override
  public Class<?> getType(ELContext context, Object base, Object property) {
    return null;
  }

  @Override
  public void setValue(ELContext context, Object base, Object property, Object value) {}

  @Override
  public boolean isReadOnly(ELContext context, Object base, Object property) {
    return true;
  }

  @Override
  public Iterator<FeatureDescriptor> getFeatureDescriptors(ELContext context, Object base) {
    return null;
  }

  @Override
  public Class<?> getCommonPropertyType(ELContext context, Object base) {
    return null;
  }
}
