package io.tokenspeed.pd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class PdSettingsTest {

  @Test
  void shouldCarryTheDocumentedDefaults() {
    PdSettings d = PdSettings.defaults();
    assertEquals(30_000, d.bootstrapDeadlineMs());
    assertEquals(1_000, d.pingIntervalMs());
    assertEquals(10_000, d.silenceTimeoutMs());
    assertEquals(64, d.maxRoomsPerConnection());
    assertEquals(256, d.maxConnections());
    assertEquals(250, d.tickMs());
  }

  @Test
  void shouldNameTheFieldTheValueAndTheRangeWhenASettingIsOutOfRange() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> PdSettings.defaults().withTimingsMs(1_000, 1_000, 1_000, 1_000));
    assertTrue(e.getMessage().contains("silence_timeout_ms=1000"), e::getMessage);
    assertTrue(e.getMessage().contains("[1001, "), e::getMessage);
    e =
        assertThrows(
            IllegalArgumentException.class,
            () -> PdSettings.defaults().withMaxRoomsPerConnection(0));
    assertTrue(e.getMessage().contains("max_rooms_per_connection=0"), e::getMessage);
    e =
        assertThrows(
            IllegalArgumentException.class, () -> PdSettings.defaults().withLimits(1, 1, 1, 0));
    assertTrue(e.getMessage().contains("max_block_bytes=0"), e::getMessage);
    e =
        assertThrows(
            IllegalArgumentException.class, () -> PdSettings.defaults().withMaxConnections(0));
    assertTrue(e.getMessage().contains("max_connections=0"), e::getMessage);
  }
}
