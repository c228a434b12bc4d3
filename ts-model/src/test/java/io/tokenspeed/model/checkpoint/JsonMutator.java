package io.tokenspeed.model.checkpoint;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Seeded damage to JSON documents, for the fuzz tests of decoders that read JSON from outside: on
 * the text (truncation, stray characters, a token swapped for another, deep nesting) and on the
 * tree ({@link Json}'s maps and lists: a member dropped, a value of another type or out of range, a
 * subtree copied elsewhere, an unknown key). A tree mutation reports the path it touched, so that a
 * test can require the decoder's message to name the field.
 */
public final class JsonMutator {

  /** Values that decoders tend to mishandle: wrong types, bounds of int and long, empties. */
  private static final String[] VALUE_TOKENS = {
    "null",
    "true",
    "false",
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "64",
    "255",
    "256",
    "65535",
    "2147483646",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "99999999999999999999999999",
    "1.5",
    "-0.0",
    "1e3",
    "1E400",
    "\"\"",
    "\" \"",
    "\"x\"",
    "\"0\"",
    "\"null\"",
    "\"\\u0000\"",
    "\"\\ud83d\\ude00\"",
    "\"a b\"",
    "[]",
    "[0]",
    "[0,0]",
    "[1,0]",
    "[-1,1]",
    "[0,1,2]",
    "[\"a\",\"b\"]",
    "[null]",
    "[[]]",
    "{}",
    "{\"\":0}",
    "{\"type\":null}",
  };

  /** Single characters that change a JSON document's structure. */
  private static final String STRUCTURAL = "{}[]\":,\\ \n\t0123456789-+.eEtfnul";

  private static final Pattern TOKEN =
      Pattern.compile("\"(?:[^\"\\\\]|\\\\.)*\"|-?[0-9][0-9.eE+-]*|true|false|null|\\[\\]|\\{\\}");

  /** The damage done by {@link #mutateText}. */
  public enum TextMutation {
    TRUNCATED,
    CHARS_REPLACED,
    CHARS_INSERTED,
    RANGE_DELETED,
    RANGE_DUPLICATED,
    TOKEN_REPLACED,
    RANDOM_TEXT,
    DEEP_NESTING
  }

  /** The damage done by {@link #mutateTree}. */
  public enum TreeMutation {
    MEMBER_REMOVED,
    VALUE_REPLACED,
    NUMBER_CHANGED,
    STRING_CHANGED,
    SUBTREE_COPIED,
    KEY_ADDED,
    ELEMENT_DUPLICATED
  }

  /** A mutated tree and the keys (object members, outermost first) on the path it touched. */
  public record Mutated(Object root, TreeMutation mutation, List<String> keys) {}

  private JsonMutator() {}

  // ---------------------------------------------------------------- text

  /** {@code text} damaged by {@code m}. */
  public static String mutateText(TextMutation m, String text, SplittableRandom rnd) {
    int n = text.length();
    switch (m) {
      case TRUNCATED -> {
        return text.substring(0, n == 0 ? 0 : rnd.nextInt(n));
      }
      case CHARS_REPLACED -> {
        char[] c = text.toCharArray();
        int count = 1 + rnd.nextInt(3);
        for (int i = 0; i < count && c.length > 0; i++) {
          c[rnd.nextInt(c.length)] = randomChar(rnd);
        }
        return new String(c);
      }
      case CHARS_INSERTED -> {
        int at = rnd.nextInt(n + 1);
        StringBuilder sb = new StringBuilder(text.substring(0, at));
        int count = 1 + rnd.nextInt(4);
        for (int i = 0; i < count; i++) {
          sb.append(randomChar(rnd));
        }
        return sb.append(text, at, n).toString();
      }
      case RANGE_DELETED -> {
        int at = rnd.nextInt(n + 1);
        int end = Math.min(n, at + 1 + rnd.nextInt(12));
        return text.substring(0, at) + text.substring(end);
      }
      case RANGE_DUPLICATED -> {
        int at = rnd.nextInt(n + 1);
        int end = Math.min(n, at + 1 + rnd.nextInt(40));
        return text.substring(0, end) + text.substring(at);
      }
      case TOKEN_REPLACED -> {
        List<int[]> tokens = new ArrayList<>();
        Matcher matcher = TOKEN.matcher(text);
        while (matcher.find()) {
          tokens.add(new int[] {matcher.start(), matcher.end()});
        }
        if (tokens.isEmpty()) {
          return text + randomToken(rnd);
        }
        int[] t = tokens.get(rnd.nextInt(tokens.size()));
        String replacement = rnd.nextInt(4) == 0 ? pick(tokens, text, rnd) : randomToken(rnd);
        return text.substring(0, t[0]) + replacement + text.substring(t[1]);
      }
      case RANDOM_TEXT -> {
        StringBuilder sb = new StringBuilder();
        int length = rnd.nextInt(120);
        for (int i = 0; i < length; i++) {
          sb.append(rnd.nextBoolean() ? randomChar(rnd) : (char) rnd.nextInt(0x3000));
        }
        return sb.toString();
      }
      case DEEP_NESTING -> {
        int depth = rnd.nextBoolean() ? 30 + rnd.nextInt(60) : 1_000 + rnd.nextInt(20_000);
        boolean objects = rnd.nextBoolean();
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < depth; i++) {
          sb.append(objects ? "{\"a\":" : "[");
        }
        sb.append(text.isEmpty() ? "0" : text);
        if (rnd.nextBoolean()) {
          for (int i = 0; i < depth; i++) {
            sb.append(objects ? '}' : ']');
          }
        }
        return sb.toString();
      }
    }
    throw new AssertionError(m);
  }

  private static String pick(List<int[]> tokens, String text, SplittableRandom rnd) {
    int[] t = tokens.get(rnd.nextInt(tokens.size()));
    return text.substring(t[0], t[1]);
  }

  private static char randomChar(SplittableRandom rnd) {
    return switch (rnd.nextInt(4)) {
      case 0 -> (char) rnd.nextInt(0x20, 0x7f);
      case 1 -> (char) rnd.nextInt(0x20);
      case 2 -> (char) rnd.nextInt(0x80, 0xD800); // no lone surrogates: they are their own test
      default -> STRUCTURAL.charAt(rnd.nextInt(STRUCTURAL.length()));
    };
  }

  /** One of the {@link #VALUE_TOKENS}, as JSON text. */
  public static String randomToken(SplittableRandom rnd) {
    return VALUE_TOKENS[rnd.nextInt(VALUE_TOKENS.length)];
  }

  // ---------------------------------------------------------------- tree

  /**
   * A deep copy of {@code root} (a tree as {@link Json#parse} returns it) with one mutation
   * applied. The root itself is never removed or replaced, so the result is still an object when
   * the input was.
   */
  public static Mutated mutateTree(TreeMutation m, Object root, SplittableRandom rnd) {
    Object copy = copy(root);
    List<Slot> slots = new ArrayList<>();
    collect(copy, new ArrayList<>(), slots);
    if (slots.isEmpty()) {
      return new Mutated(copy, m, List.of());
    }
    // A container first, then a member of it: a vocabulary of thousands of entries gets no more
    // attention than a small object next to it.
    Map<Object, List<Slot>> groups = new IdentityHashMap<>();
    List<List<Slot>> byParent = new ArrayList<>();
    for (Slot slot : slots) {
      groups
          .computeIfAbsent(
              slot.parent,
              p -> {
                byParent.add(new ArrayList<>());
                return byParent.getLast();
              })
          .add(slot);
    }
    List<Slot> siblings = byParent.get(rnd.nextInt(byParent.size()));
    Slot s = siblings.get(rnd.nextInt(siblings.size()));
    switch (m) {
      case MEMBER_REMOVED -> s.remove();
      case VALUE_REPLACED -> s.set(Json.parse(randomToken(rnd)));
      case NUMBER_CHANGED -> s.set(changedNumber(s.get(), rnd));
      case STRING_CHANGED -> s.set(changedString(s.get(), rnd));
      case SUBTREE_COPIED -> s.set(copy(slots.get(rnd.nextInt(slots.size())).get()));
      case KEY_ADDED -> {
        Object target = s.get() instanceof Map<?, ?> ? s.get() : s.parent;
        if (target instanceof Map<?, ?> map) {
          @SuppressWarnings("unchecked")
          Map<String, Object> members = (Map<String, Object>) map;
          String key =
              rnd.nextBoolean()
                  ? "unknown_" + rnd.nextInt(100)
                  : slots.get(rnd.nextInt(slots.size())).keys.stream()
                      .reduce((a, b) -> b)
                      .orElse("x");
          members.put(key, Json.parse(randomToken(rnd)));
          List<String> keys = new ArrayList<>(target == s.get() ? s.keys : s.parentKeys());
          keys.add(key);
          return new Mutated(copy, m, keys);
        }
        s.set(Json.parse(randomToken(rnd)));
      }
      case ELEMENT_DUPLICATED -> {
        if (s.parent instanceof List<?> list) {
          @SuppressWarnings("unchecked")
          List<Object> elements = (List<Object>) list;
          elements.add((Integer) s.at, copy(s.get()));
        } else {
          s.set(Arrays.asList(copy(s.get()), copy(s.get())));
        }
      }
    }
    return new Mutated(copy, m, s.keys);
  }

  private static Object changedNumber(Object value, SplittableRandom rnd) {
    long v = value instanceof Long l ? l : rnd.nextInt(-3, 1000);
    if (rnd.nextInt(8) == 0) {
      return Double.valueOf(v + 0.5);
    }
    return Long.valueOf(
        switch (rnd.nextInt(7)) {
          case 0 -> v + 1;
          case 1 -> v - 1;
          case 2 -> -v;
          case 3 -> v * (1L << rnd.nextInt(1, 40));
          case 4 -> v + rnd.nextInt(-10, 10);
          case 5 -> v ^ (1L << rnd.nextInt(63));
          default -> Long.MAX_VALUE - rnd.nextInt(3);
        });
  }

  private static Object changedString(Object value, SplittableRandom rnd) {
    String s = value instanceof String str ? str : String.valueOf(value);
    return switch (rnd.nextInt(7)) {
      case 0 -> "";
      case 1 -> s.isEmpty() ? "x" : s.substring(0, rnd.nextInt(s.length()));
      case 2 -> s + s;
      case 3 -> s + randomChar(rnd);
      case 4 -> " " + s;
      case 5 ->
          s.toLowerCase(Locale.ROOT).equals(s)
              ? s.toUpperCase(Locale.ROOT)
              : s.toLowerCase(Locale.ROOT);
      default -> randomChar(rnd) + s;
    };
  }

  /** A deep copy of a tree. */
  public static Object copy(Object v) {
    if (v instanceof Map<?, ?> m) {
      Map<String, Object> out = new LinkedHashMap<>();
      for (Map.Entry<?, ?> e : m.entrySet()) {
        out.put((String) e.getKey(), copy(e.getValue()));
      }
      return out;
    }
    if (v instanceof List<?> l) {
      List<Object> out = new ArrayList<>(l.size());
      for (Object o : l) {
        out.add(copy(o));
      }
      return out;
    }
    return v;
  }

  /** Where a value sits: in {@code parent} under a key or an index. */
  private static final class Slot {
    final Object parent;
    final Object at;
    final List<String> keys;

    Slot(Object parent, Object at, List<String> keys) {
      this.parent = parent;
      this.at = at;
      this.keys = List.copyOf(keys);
    }

    List<String> parentKeys() {
      return at instanceof String ? keys.subList(0, keys.size() - 1) : keys;
    }

    @SuppressWarnings("unchecked")
    Object get() {
      return parent instanceof Map<?, ?> m ? m.get(at) : ((List<Object>) parent).get((Integer) at);
    }

    @SuppressWarnings("unchecked")
    void set(Object value) {
      if (parent instanceof Map<?, ?> m) {
        ((Map<String, Object>) m).put((String) at, value);
      } else {
        ((List<Object>) parent).set((Integer) at, value);
      }
    }

    @SuppressWarnings("unchecked")
    void remove() {
      if (parent instanceof Map<?, ?> m) {
        m.remove(at);
      } else {
        ((List<Object>) parent).remove((int) (Integer) at);
      }
    }
  }

  private static void collect(Object v, List<String> keys, List<Slot> out) {
    if (v instanceof Map<?, ?> m) {
      for (Map.Entry<?, ?> e : m.entrySet()) {
        keys.add((String) e.getKey());
        out.add(new Slot(m, e.getKey(), keys));
        collect(e.getValue(), keys, out);
        keys.removeLast();
      }
    } else if (v instanceof List<?> l) {
      for (int i = 0; i < l.size(); i++) {
        out.add(new Slot(l, i, keys));
        collect(l.get(i), keys, out);
      }
    }
  }

  // ---------------------------------------------------------------- writing

  /** {@code v} as JSON text: maps, lists, strings, numbers, booleans and null. */
  public static String write(Object v) {
    StringBuilder sb = new StringBuilder();
    write(v, sb);
    return sb.toString();
  }

  private static void write(Object v, StringBuilder sb) {
    switch (v) {
      case null -> sb.append("null");
      case Map<?, ?> m -> {
        sb.append('{');
        boolean first = true;
        for (Map.Entry<?, ?> e : m.entrySet()) {
          sb.append(first ? "" : ",");
          first = false;
          quote(String.valueOf(e.getKey()), sb);
          sb.append(':');
          write(e.getValue(), sb);
        }
        sb.append('}');
      }
      case List<?> l -> {
        sb.append('[');
        for (int i = 0; i < l.size(); i++) {
          sb.append(i > 0 ? "," : "");
          write(l.get(i), sb);
        }
        sb.append(']');
      }
      case String s -> quote(s, sb);
      case Double d when d.isInfinite() || d.isNaN() -> sb.append("1e999");
      default -> sb.append(v);
    }
  }

  /** {@code s} as a JSON string literal. */
  public static String quote(String s) {
    StringBuilder sb = new StringBuilder();
    quote(s, sb);
    return sb.toString();
  }

  private static void quote(String s, StringBuilder sb) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        sb.append('\\').append(c);
      } else if (c < 0x20 || Character.isSurrogate(c)) {
        sb.append(String.format("\\u%04x", (int) c));
      } else {
        sb.append(c);
      }
    }
    sb.append('"');
  }
}
