package io.tokenspeed.server.chat;

import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.interpret.Context;
import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.lib.fn.ELFunctionDefinition;
import java.math.BigInteger;
import java.time.Instant;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The functions Hugging Face adds to a chat template's environment ({@code raise_exception}, {@code
 * strftime_now}), and Jinja's {@code range} with the sandbox's bound.
 *
 * <p>Jinjava resolves a call apart from variables, so {@code strftime_now is defined} (which Llama
 * 3's template asks) would be false; {@link #bindNames} gives each function, and {@code namespace},
 * a variable of its name as well.
 */
final class PyFunctions {

  /** Jinja's sandbox refuses larger ranges; so does this one (Jinjava would cut them short). */
  static final int MAX_RANGE = 100_000;

  /** Names a template may test with {@code is defined}. */
  private static final List<String> NAMES =
      List.of("raise_exception", "strftime_now", "range", "namespace");

  /** The value of a function's name used as a variable. */
  record TemplateFunction(String name) {
    @Override
    public String toString() {
      return "<built-in function " + name + ">";
    }
  }

  /** Thrown by {@code raise_exception}. */
  static final class Raised extends RuntimeException {
    Raised(String message) {
      super(message, null, false, false);
    }
  }

  private PyFunctions() {}

  static void register(Context global) {
    global.registerFunction(
        new ELFunctionDefinition(
            "", "raise_exception", PyFunctions.class, "raiseException", Object.class));
    global.registerFunction(
        new ELFunctionDefinition(
            "", "strftime_now", PyFunctions.class, "strftimeNow", String.class));
    global.registerFunction(
        new ELFunctionDefinition(
            "", "range", PyFunctions.class, "range", Object.class, Object[].class));
  }

  /** Adds a variable for each function name the bindings do not already use. */
  static void bindNames(Map<String, Object> bindings) {
    for (String name : NAMES) {
      bindings.putIfAbsent(name, new TemplateFunction(name));
    }
  }

  /** {@code raise_exception(message)}: fails the render with the template's message. */
  public static Object raiseException(Object message) {
    throw new Raised(String.valueOf(PyValues.unwrap(message)));
  }

  /**
   * {@code range(stop)}, {@code range(start, stop[, step])}: Python's, refusing more than {@value
   * #MAX_RANGE} numbers as Jinja's sandbox does (Jinjava would quietly return fewer).
   */
  public static List<Long> range(Object first, Object... rest) {
    if (rest.length > 2) {
      throw new IllegalArgumentException(
          "range expected at most 3 arguments, got " + (1 + rest.length));
    }
    long start = 0;
    long stop;
    long step = 1;
    if (rest.length == 0) {
      stop = rangeArgument(first);
    } else {
      start = rangeArgument(first);
      stop = rangeArgument(rest[0]);
      if (rest.length == 2) {
        step = rangeArgument(rest[1]);
      }
    }
    if (step == 0) {
      throw new IllegalArgumentException("range() arg 3 must not be zero");
    }
    BigInteger span = BigInteger.valueOf(stop).subtract(BigInteger.valueOf(start));
    BigInteger by = BigInteger.valueOf(step);
    if (step < 0) {
      span = span.negate();
      by = by.negate();
    }
    BigInteger[] quotient = span.max(BigInteger.ZERO).divideAndRemainder(by);
    BigInteger numbers =
        quotient[0].add(quotient[1].signum() > 0 ? BigInteger.ONE : BigInteger.ZERO);
    if (numbers.compareTo(BigInteger.valueOf(MAX_RANGE)) > 0) {
      throw new IllegalArgumentException(
          "range too big: " + numbers + " numbers, at most " + MAX_RANGE + " are allowed");
    }
    int count = numbers.intValue();
    List<Long> out = new ArrayList<>(count);
    for (long i = 0; i < count; i++) {
      out.add(start + i * step);
    }
    return out;
  }

  private static long rangeArgument(Object value) {
    value = PyValues.unwrap(value);
    if (!PyValues.isInteger(value)) {
      throw new IllegalArgumentException(
          "range() arguments must be integers, not " + PyValues.typeName(value));
    }
    return ((Number) value).longValue();
  }

  /** {@code strftime_now(format)}: the configured clock's local time, formatted by strftime. */
  public static String strftimeNow(String format) {
    JinjavaConfig config = JinjavaInterpreter.getCurrent().getConfig();
    long nowMs = config.getDateTimeProvider().getCurrentTimeMillis();
    LocalDateTime now = LocalDateTime.ofInstant(Instant.ofEpochMilli(nowMs), config.getTimeZone());
    return Strftime.format(now, format);
  }
}
