package io.tokenspeed.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import org.junit.jupiter.api.Test;

class OneLineTest {
  @Test
  void shouldEscapeControlCharactersAndLineSeparatorsOnly() {
    assertEquals(
        "name \\u000a\\u000dx\\u0085\\u2028\\u2029\\u007f\\u0000 é",
        OneLine.of("name \n\rx\u0085\u2028\u2029\u007f\u0000 é"));
    assertEquals(
        "a\\u0080b\\u008dc\\u009f\u00a0d",
        OneLine.of("a\u0080b\u008dc\u009f\u00a0d"),
        "every C1 control (U+0080..U+009F) is escaped; U+00A0 is not a control");
    String plain = "tensor model.layers.0 dtype=F32";
    assertSame(plain, OneLine.of(plain), "a message without control characters is kept as is");
    assertNull(OneLine.of(null));
  }
}
