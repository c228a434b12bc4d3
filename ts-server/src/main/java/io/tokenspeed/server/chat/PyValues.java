package io.tokenspeed.server.chat;

import com.hubspot.jinjava.objects.SafeString;
import com.hubspot.jinjava.objects.collections.PyList;
import com.hubspot.jinjava.objects.collections.PyMap;
import com.hubspot.jinjava.objects.serialization.PyishObjectMapper;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Collection;
import java.util.Map;

/** Python's view of the values a template handles: type names, float text, string order. */
final class PyValues {

  /** The deepest nesting of lists and maps that {@code tojson} walks. */
  static final int MAX_NESTING = 256;

  private PyValues() {}

  /** The plain value behind Jinjava's wrappers ({@code SafeString}, its null marker). */
  static Object unwrap(Object value) {
    if (value instanceof SafeString s) {
      return s.toString();
    }
    if (value != null && "NullValue".equals(value.getClass().getSimpleName())) {
      return null;
    }
    return value;
  }

  /** The name Python gives the type of {@code value}, for messages. */
  static String typeName(Object value) {
    value = unwrap(value);
    if (value == null) {
      return "NoneType";
    }
    if (value instanceof CharSequence) {
      return "str";
    }
    if (value instanceof Boolean) {
      return "bool";
    }
    if (value instanceof Double || value instanceof Float || value instanceof BigDecimal) {
      return "float";
    }
    if (value instanceof Number) {
      return "int";
    }
    if (value instanceof Map<?, ?> || value instanceof PyMap) {
      return "dict";
    }
    if (value instanceof Collection<?> || value instanceof PyList || value instanceof Object[]) {
      return "list";
    }
    return value.getClass().getSimpleName();
  }

  /** Whether {@code value} is an integer in Python's sense (not a bool). */
  static boolean isInteger(Object value) {
    return value instanceof Long
        || value instanceof Integer
        || value instanceof Short
        || value instanceof Byte
        || value instanceof BigInteger;
  }

  /** Python's {@code str.isspace} for one code point. */
  static boolean isWhitespace(int cp) {
    return Character.isWhitespace(cp) || Character.isSpaceChar(cp) || cp == 0x85;
  }

  /** Compares strings by code point, as Python does (Java's order differs above U+FFFF). */
  static int compareStrings(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int ca = a.codePointAt(i);
      int cb = b.codePointAt(j);
      if (ca != cb) {
        return Integer.compare(ca, cb);
      }
      i += Character.charCount(ca);
      j += Character.charCount(cb);
    }
    return Boolean.compare(i < a.length(), j < b.length());
  }

  /**
   * Python's {@code repr} of a float: the shortest text that reads back as the same double, in
   * fixed notation when the decimal point falls between 4 places before the first digit and 16
   * after it ({@code 0.0001}, {@code 1e-05}, {@code 1000000000000000.0}, {@code 1e+16}).
   */
  static String floatRepr(double d) {
    if (Double.isNaN(d)) {
      return "nan";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "inf" : "-inf";
    }
    String sign = (d < 0 || (d == 0 && 1 / d < 0)) ? "-" : "";
    // Double.toString gives the shortest round-trip digits (JDK 19 and later), as repr does.
    BigDecimal exact = new BigDecimal(Double.toString(Math.abs(d))).stripTrailingZeros();
    String digits = exact.unscaledValue().toString();
    int n = digits.length();
    int decimalPoint = n - exact.scale();
    if (exact.signum() == 0) {
      return sign + "0.0";
    }
    if (decimalPoint > -4 && decimalPoint <= 16) {
      if (decimalPoint <= 0) {
        return sign + "0." + "0".repeat(-decimalPoint) + digits;
      }
      if (decimalPoint >= n) {
        return sign + digits + "0".repeat(decimalPoint - n) + ".0";
      }
      return sign + digits.substring(0, decimalPoint) + "." + digits.substring(decimalPoint);
    }
    int exponent = decimalPoint - 1;
    String mantissa = n == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
    String exponentText = Integer.toString(Math.abs(exponent));
    return sign
        + mantissa
        + "e"
        + (exponent < 0 ? "-" : "+")
        + (exponentText.length() < 2 ? "0" : "")
        + exponentText;
  }

  /** Text of a value the way Jinjava prints it (Python-like for lists and maps). */
  static String print(Object value) {
    return PyishObjectMapper.getAsPyishString(value);
  }
}
