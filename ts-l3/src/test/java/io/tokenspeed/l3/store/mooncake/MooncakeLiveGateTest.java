package io.tokenspeed.l3.store.mooncake;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class MooncakeLiveGateTest {

  @Test
  void shouldRequestNoLiveTestWhenNothingIsSet() {
    assertEquals(Optional.empty(), MooncakeLiveGate.check(Map.of()));
    assertEquals(
        Optional.empty(),
        MooncakeLiveGate.check(Map.of("MOONCAKE_MASTER", " ", "MOONCAKE_REQUIRE_MASTER", "0")));
  }

  @Test
  void shouldFailWhenMasterIsRequiredButUnset() {
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> MooncakeLiveGate.check(Map.of("MOONCAKE_REQUIRE_MASTER", "1")));

    assertTrue(e.getMessage().contains("MOONCAKE_REQUIRE_MASTER=1"), e.getMessage());
    assertTrue(e.getMessage().contains("MOONCAKE_MASTER is unset"), e.getMessage());
  }

  @Test
  void shouldFailWhenMasterIsSetWithoutTheLibrary() {
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> MooncakeLiveGate.check(Map.of("MOONCAKE_MASTER", "10.0.0.1:50051")));

    assertTrue(e.getMessage().contains("MOONCAKE_LIB is unset"), e.getMessage());
  }

  @Test
  void shouldBuildPureClientSettingsWhenMasterAndLibraryAreSet() {
    MooncakeStoreSettings settings =
        MooncakeLiveGate.check(
                Map.of(
                    "MOONCAKE_MASTER", "10.0.0.1:50051",
                    "MOONCAKE_LIB", "/opt/mooncake/libmooncake_store.so",
                    "MOONCAKE_REQUIRE_MASTER", "1"))
            .orElseThrow();

    assertEquals("10.0.0.1:50051", settings.masterServerAddress());
    assertEquals(Path.of("/opt/mooncake/libmooncake_store.so"), settings.libraryPath());
    assertTrue(settings.pureClientMode());
  }
}
