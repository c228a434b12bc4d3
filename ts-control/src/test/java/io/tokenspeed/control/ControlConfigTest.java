package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class ControlConfigTest {

  private static final List<InetSocketAddress> TWO =
      List.of(new InetSocketAddress("127.0.0.1", 7001), new InetSocketAddress("127.0.0.1", 7002));

  private static final ReplicaSecret SECRET = ReplicaSecret.generate();

  private static void assertRejected(String field, Runnable build) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build::run);
    assertTrue(e.getMessage().contains(field), e.getMessage());
  }

  @Test
  void shouldUseTheDocumentedDefaultsWhenBuiltFromAddresses() {
    ControlConfig c = ControlConfig.of(3, 1, TWO, SECRET);
    assertEquals(2, c.worldSize());
    assertEquals(false, c.leader());
    assertEquals(ControlConfig.DEFAULT_ROUND_TIMEOUT_MS, c.roundTimeoutMs());
    assertEquals(ControlConfig.DEFAULT_CONNECT_TIMEOUT_MS, c.connectTimeoutMs());
    assertEquals(16 << 20, c.maxFrameBytes());
    assertEquals(65_536, c.maxPendingOperations());
    assertEquals(4L << 20, c.maxPendingKeys());
    assertEquals(ControlConfig.DEFAULT_HANDSHAKE_TIMEOUT_MS, c.handshakeTimeoutMs());
    assertEquals(SECRET, c.secret());
  }

  @Test
  void shouldRequireTheReplicaSecretAndNeverPrintIt() {
    assertRejected("secret is missing", () -> ControlConfig.of(0, 0, TWO, null).worldSize());
    ReplicaSecret s = ReplicaSecret.ofHex("00112233445566778899aabbccddeeff");
    ControlConfig c = ControlConfig.of(0, 0, TWO, s);
    assertTrue(!c.toString().contains("00112233"), c.toString());
    assertTrue(c.toString().contains("redacted"), c.toString());
    assertRejected("handshake_timeout_ms=0", () -> c.withHandshakeTimeout(0));
  }

  @Test
  void shouldReadTheSecretFromTheEnvironmentOrAnOwnerOnlyFile(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
    ReplicaSecret s = ReplicaSecret.generate();
    assertEquals(s, ReplicaSecret.fromEnvironment(java.util.Map.of(ReplicaSecret.ENV, s.toHex())));
    java.nio.file.Path file = dir.resolve("secret");
    s.writeTo(file);
    assertEquals(
        "rw-------",
        java.nio.file.attribute.PosixFilePermissions.toString(
            java.nio.file.Files.getPosixFilePermissions(file)));
    assertEquals(
        s,
        ReplicaSecret.fromEnvironment(java.util.Map.of(ReplicaSecret.FILE_ENV, file.toString())));
    IllegalArgumentException none =
        assertThrows(
            IllegalArgumentException.class,
            () -> ReplicaSecret.fromEnvironment(java.util.Map.of()));
    assertTrue(none.getMessage().contains(ReplicaSecret.FILE_ENV), none.getMessage());
    assertRejected("must have >= 16", () -> ReplicaSecret.ofHex("0011"));
    assertRejected("must be hex digits", () -> ReplicaSecret.ofHex("not hex at all, no"));
  }

  @Test
  void shouldNameTheFieldAndValueWhenASettingIsOutOfRange() {
    assertRejected("rank=2 must be in [0, 2)", () -> ControlConfig.of(0, 2, TWO, SECRET));
    assertRejected("replica_id=-1", () -> ControlConfig.of(-1, 0, TWO, SECRET));
    assertRejected("addresses has 0 entries", () -> ControlConfig.of(0, 0, List.of(), SECRET));
    List<InetSocketAddress> holes = new ArrayList<>(TWO);
    holes.set(1, null);
    assertRejected("addresses[1] is missing", () -> ControlConfig.of(0, 0, holes, SECRET));
    ControlConfig c = ControlConfig.of(0, 0, TWO, SECRET);
    assertRejected("round_timeout_ms=0", () -> c.withTimeouts(0, 1));
    assertRejected("connect_timeout_ms=0", () -> c.withTimeouts(1, 0));
    assertRejected("max_frame_bytes=100 must be >= 4096", () -> c.withMaxFrameBytes(100));
    assertRejected("max_pending_operations=0", () -> c.withWindow(0, 1));
    assertRejected("max_pending_keys=0", () -> c.withWindow(1, 0));
  }
}
