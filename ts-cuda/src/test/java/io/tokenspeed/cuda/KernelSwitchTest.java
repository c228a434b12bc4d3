package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/** The kernel switches' values: either name, in any case; anything else refused by name. */
class KernelSwitchTest {

  @ParameterizedTest
  @ValueSource(strings = {"on", "ON", " On ", "\ton\n"})
  void shouldReadTheSecondValueInAnyCase(String value) {
    assertTrue(KernelSwitch.read("tokenspeed.cuda.x", value, "off", "on"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"off", "OFF", " Off "})
  void shouldReadTheFirstValueInAnyCase(String value) {
    assertFalse(KernelSwitch.read("tokenspeed.cuda.x", value, "off", "on"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"", "true", "1", "o n", "v3", "onn"})
  void shouldRefuseAnythingElseNamingThePropertyAndBothValues(String value) {
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () -> KernelSwitch.read("tokenspeed.cuda.x", value, "v1", "v2"));
    assertEquals("tokenspeed.cuda.x must be v1 or v2, not \"" + value + "\"", e.getMessage());
  }

  @org.junit.jupiter.api.Test
  void shouldReadNoValueAsTheFirst() {
    assertFalse(KernelSwitch.read("tokenspeed.cuda.x", null, "off", "on"));
  }

  @ParameterizedTest
  @CsvSource({"v1, 0", "V1, 0", "v2, 1", "' V2', 1", "wgmma, 2", "' WGMMA ', 2"})
  void shouldPickAmongMoreThanTwoValuesInAnyCase(String value, int index) {
    assertEquals(index, KernelSwitch.pick("tokenspeed.cuda.x", value, "v1", "v2", "wgmma"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"", "v3", "wgmm", "wgmma v2", "true"})
  void shouldRefuseAnythingElseNamingEveryValue(String value) {
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () -> KernelSwitch.pick("tokenspeed.cuda.x", value, "v1", "v2", "wgmma"));
    assertEquals(
        "tokenspeed.cuda.x must be v1, v2 or wgmma, not \"" + value + "\"", e.getMessage());
  }

  @org.junit.jupiter.api.Test
  void shouldPickTheFirstForNoValueAndAgreeWithReadForTwoValues() {
    assertEquals(0, KernelSwitch.pick("tokenspeed.cuda.x", null, "v1", "v2", "wgmma"));
    for (String v : new String[] {"off", "on", " ON "}) {
      assertEquals(
          KernelSwitch.read("tokenspeed.cuda.x", v, "off", "on") ? 1 : 0,
          KernelSwitch.pick("tokenspeed.cuda.x", v, "off", "on"));
    }
    assertThrows(
        IllegalArgumentException.class, () -> KernelSwitch.pick("tokenspeed.cuda.x", "a", "a"));
  }
}
