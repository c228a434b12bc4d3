package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

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
    assertEquals(0, c.maxPendingOperations(), "sized from the storage credits");
    assertEquals(0, c.maxPendingKeys(), "sized from the storage credits");
    assertEquals(65_536, c.windowOperations(), "unsized");
    assertEquals(4L << 20, c.windowKeys(), "unsized");
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
    assertRejected("max_frame_bytes=100 must be >= 32768", () -> c.withMaxFrameBytes(100));
    assertRejected("max_frame_bytes=32767 must be >= 32768", () -> c.withMaxFrameBytes(32767));
    assertEquals(32768, c.withMaxFrameBytes(32768).maxFrameBytes());
    assertRejected("max_pending_operations=-1 must be >= 0", () -> c.withWindow(-1, 1));
    assertRejected("max_pending_keys=-1 must be >= 0", () -> c.withWindow(1, -1));
  }

  /** What the credits of {@code operations} operations and {@code keys} keys let be in flight. */
  private static InFlightBound credits(int operations, long keys) {
    return new InFlightBound(
        operations, "async.max_operations=" + operations, keys, "the keys=" + keys);
  }

  static Stream<Arguments> creditSettings() {
    // Operation credits up to the 1 Mi async.max_operations accepts, all above the 65,536 the
    // window used to hold; keys up to 1 Mi x 16 Mi query keys + 2^31 - 1 Host credits.
    return Stream.of(
        Arguments.of(1, 1L),
        Arguments.of(64, 64L * 4096 + 8192),
        Arguments.of(65_537, 65_537L * 4096 + 8192),
        Arguments.of(100_000, 4L << 20 | 1),
        Arguments.of(1 << 20, (1L << 20) * (1 << 24) + Integer.MAX_VALUE));
  }

  @ParameterizedTest(name = "operations={0} keys={1}")
  @MethodSource("creditSettings")
  void shouldSizeTheWindowFromTheCreditsWhenItIsLeftAtItsDefault(int operations, long keys) {
    ControlConfig c = ControlConfig.of(0, 0, TWO, SECRET).withWindowFor(credits(operations, keys));
    assertEquals(operations, c.maxPendingOperations());
    assertEquals(keys, c.maxPendingKeys());
    assertEquals(operations, c.windowOperations());
    assertEquals(keys, c.windowKeys());
    // An explicit window that holds the credits is kept, also above them.
    ControlConfig wide =
        ControlConfig.of(0, 0, TWO, SECRET)
            .withWindow(Integer.MAX_VALUE, Long.MAX_VALUE)
            .withWindowFor(credits(operations, keys));
    assertEquals(Integer.MAX_VALUE, wide.windowOperations());
    assertEquals(Long.MAX_VALUE, wide.windowKeys());
    ControlConfig exact =
        ControlConfig.of(0, 0, TWO, SECRET)
            .withWindow(operations, keys)
            .withWindowFor(credits(operations, keys));
    assertEquals(operations, exact.windowOperations());
    assertEquals(keys, exact.windowKeys());
  }

  @Test
  void shouldRejectAnExplicitWindowSmallerThanTheCreditsNamingBothNumbers() {
    ControlConfig c = ControlConfig.of(0, 0, TWO, SECRET);
    InFlightBound need = credits(100_000, 5_000_000);
    assertRejected(
        "async.max_operations=100000 needs an agreement window of at least 100000 operations,"
            + " control max_pending_operations=65536",
        () -> c.withWindow(65_536, 0).withWindowFor(need));
    assertRejected(
        "the keys=5000000 needs an agreement window of at least 5000000 keys,"
            + " control max_pending_keys=4999999",
        () -> c.withWindow(0, 4_999_999).withWindowFor(need));
    // Each bound left at 0 follows the credits while the other is explicit.
    assertEquals(100_000, c.withWindow(0, 6_000_000).withWindowFor(need).windowOperations());
    assertEquals(6_000_000, c.withWindow(0, 6_000_000).withWindowFor(need).windowKeys());
    assertEquals(5_000_000, c.withWindow(200_000, 0).withWindowFor(need).windowKeys());
    assertRejected("operations=0 keys=1 must both be >= 1", () -> credits(0, 1));
    assertRejected("needs the settings that set it", () -> new InFlightBound(1, "a=1", 1, " "));
  }
}
