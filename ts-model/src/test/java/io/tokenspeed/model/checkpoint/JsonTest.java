package io.tokenspeed.model.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

class JsonTest {

  @Test
  void shouldParseEveryValueKind() {
    Object v =
        Json.parse(
            " {\"a\": [1, -2.5e1, true, false, null], \"b\": {\"c\": \"x\\u00e9\\ud83d\\ude00\\n\"},"
                + " \"big\": 12345678901234567890} ");
    Map<String, Object> want = new LinkedHashMap<>();
    want.put("a", Arrays.asList(1L, -25.0, true, false, null));
    want.put("b", Map.of("c", "xé😀\n"));
    want.put("big", 1.2345678901234567e19);
    assertEquals(want, v);
  }

  @ParameterizedTest(name = "{0}")
  @CsvSource(
      delimiter = '|',
      value = {
        "{\"a\": 1,}| expected a string key",
        "[1, 2,]| expected a value",
        "{\"a\": 1, \"a\": 2}| duplicate key \"a\"",
        "{'a': 1}| expected a string key",
        "[01]| leading zero",
        "[1.]| after the decimal point",
        "\"\\x\"| invalid escape",
        "\"\\ud800\"| lone high surrogate",
        "[1] x| after the value",
        "{\"a\" 1}| expected ':'",
        "tru| expected true",
        "// c| expected a value",
      })
  void shouldRejectMalformedText(String text, String message) {
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> Json.parse(text));
    assertTrue(e.getMessage().contains(message.strip()), e.getMessage());
    assertTrue(e.getMessage().startsWith("malformed JSON at offset "), e.getMessage());
  }

  @Test
  void shouldRejectControlCharactersAndDeepNesting() {
    assertThrows(IllegalArgumentException.class, () -> Json.parse("\"a\u0001\""));
    assertThrows(
        IllegalArgumentException.class, () -> Json.parse("[".repeat(100) + "]".repeat(100)));
    assertEquals(List.of(List.of()), Json.parse("[[]]"));
  }

  /** Seeded integers and doubles survive a print-and-parse round trip exactly. */
  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3})
  void shouldReadNumbersExactly(long seed) {
    Random rnd = new Random(seed);
    for (int i = 0; i < 200; i++) {
      long l = rnd.nextLong();
      double d = Double.longBitsToDouble(rnd.nextLong() >>> 2);
      assertEquals(l, Json.parse(Long.toString(l)));
      assertEquals(d, Json.parse("[" + d + "]") instanceof List<?> list ? list.get(0) : null);
    }
  }
}
