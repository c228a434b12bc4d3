package io.tokenspeed.model.tokenizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

class JsonTest {

  @Test
  void shouldReadEveryKindOfValue() {
    Map<String, Object> expected = new LinkedHashMap<>();
    expected.put("s", "a\"\\/\b\f\n\r\t\u00e9😀");
    expected.put("n", -12L);
    expected.put("d", 1.5e3);
    expected.put("l", Arrays.asList(true, false, null));
    expected.put("o", Map.of());
    Object parsed =
        Json.parse(
            " {\"s\":\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\",\"n\":-12,\"d\":1.5e3,"
                + "\"l\":[true,false,null],\"o\":{}} ");
    assertEquals(expected, parsed);
  }

  @Test
  void shouldRejectTrailingCharactersAndBadEscapes() {
    assertThrows(TokenizerFormatException.class, () -> Json.parse("{} x"));
    assertThrows(TokenizerFormatException.class, () -> Json.parse("\"\\q\""));
    assertThrows(TokenizerFormatException.class, () -> Json.parse("[1,]"));
    assertThrows(TokenizerFormatException.class, () -> Json.parse("\"open"));
  }
}
