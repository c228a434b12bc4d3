package io.tokenspeed.pd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class PdSecretTest {

  @Test
  void shouldReadTheSecretFromItsOwnVariablesWhenHexOrFileIsSet(@TempDir Path dir)
      throws Exception {
    PdSecret s = PdSecret.generate();
    assertEquals(s, PdSecret.fromEnvironment(Map.of(PdSecret.ENV, s.toHex())));
    Path file = dir.resolve("pd.secret");
    s.writeTo(file);
    assertEquals(s, PdSecret.fromEnvironment(Map.of(PdSecret.FILE_ENV, file.toString())));
    // The control plane's variables are not the PD secret's.
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                PdSecret.fromEnvironment(
                    Map.of(io.tokenspeed.control.ReplicaSecret.ENV, s.toHex())));
    assertTrue(e.getMessage().contains(PdSecret.ENV), e::getMessage);
    assertTrue(e.getMessage().contains(PdSecret.FILE_ENV), e::getMessage);
    assertTrue(e.getMessage().startsWith("no PD secret"), e::getMessage);
  }

  @Test
  void shouldNeverShowTheBytesWhenPrinted() {
    PdSecret s = PdSecret.generate();
    assertFalse(s.toString().contains(s.toHex()));
    assertFalse(s.toString().contains(s.toHex().substring(0, 8)));
  }

  @Test
  void shouldBindTheMacToLabelAndPartsWhenProving() {
    PdSecret s = PdSecret.ofHex("00112233445566778899aabbccddeeff");
    byte[] a = {1, 2, 3};
    byte[] b = {4, 5};
    assertEquals(32, s.mac("x", a, b).length);
    assertEquals(
        java.util.HexFormat.of().formatHex(s.mac("x", a, b)),
        java.util.HexFormat.of().formatHex(s.mac("x", a, b)));
    assertNotEquals(
        java.util.HexFormat.of().formatHex(s.mac(PdFrameDescriptor.DIALER_LABEL, a, b)),
        java.util.HexFormat.of().formatHex(s.mac(PdFrameDescriptor.ACCEPTOR_LABEL, a, b)));
    assertNotEquals(
        java.util.HexFormat.of().formatHex(s.mac("x", a, b)),
        java.util.HexFormat.of().formatHex(PdSecret.generate().mac("x", a, b)));
    assertThrows(IllegalArgumentException.class, () -> PdSecret.ofHex("0011"));
  }
}
