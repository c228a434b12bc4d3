package io.tokenspeed.l3.store.mooncake;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.function.Function;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class MooncakeStoreSettingsTest {

  private static final Path LIB = Path.of("/opt/mooncake/lib/libmooncake_store.so");

  private static MooncakeStoreSettings valid() {
    return MooncakeStoreSettings.pureClient(LIB, "10.0.0.7", "10.0.0.1:50051");
  }

  private record Change(Function<MooncakeStoreSettings, MooncakeStoreSettings> apply) {}

  private static MooncakeStoreSettings with(
      MooncakeStoreSettings s,
      String host,
      String metadata,
      String master,
      String protocol,
      String device) {
    return new MooncakeStoreSettings(
        s.libraryPath(),
        host,
        metadata,
        master,
        protocol,
        device,
        s.globalSegmentSizeBytes(),
        s.localBufferSizeBytes(),
        s.maxKeyBytes(),
        s.leaseTtlMs(),
        s.namespaceDeleteWaitMs());
  }

  static Stream<Arguments> invalid() {
    return Stream.of(
        Arguments.of(
            "library_path=null",
            new Change(
                s ->
                    new MooncakeStoreSettings(
                        null,
                        "h",
                        "m",
                        "a:1",
                        "tcp",
                        "",
                        0,
                        0,
                        MooncakeStoreSettings.DEFAULT_MAX_KEY_BYTES,
                        MooncakeStoreSettings.DEFAULT_LEASE_TTL_MS,
                        MooncakeStoreSettings.DEFAULT_NAMESPACE_DELETE_WAIT_MS))),
        Arguments.of(
            "local_hostname=", new Change(s -> with(s, "", s.metadataServer(), "a:1", "tcp", ""))),
        Arguments.of(
            "local_hostname='a b'",
            new Change(s -> with(s, "a b", s.metadataServer(), "a:1", "tcp", ""))),
        Arguments.of("metadata_server=null", new Change(s -> with(s, "h", null, "a:1", "tcp", ""))),
        Arguments.of(
            "master_server_address='a:1\\0'",
            new Change(s -> with(s, "h", "m", "a:1\0", "tcp", ""))),
        Arguments.of(
            "protocol=TCP must match [a-z][a-z0-9_]{0,31}",
            new Change(s -> with(s, "h", "m", "a:1", "TCP", ""))),
        Arguments.of(
            "device_name='mlx5_0 mlx5_1' may be empty",
            new Change(s -> with(s, "h", "m", "a:1", "rdma", "mlx5_0 mlx5_1"))),
        Arguments.of(
            "global_segment_size_bytes=-1 must be in [0, 17592186044416]",
            new Change(s -> s.withGlobalSegmentSizeBytes(-1))),
        Arguments.of(
            "global_segment_size_bytes=17592186044417 must be in [0, 17592186044416]",
            new Change(
                s -> s.withGlobalSegmentSizeBytes(MooncakeStoreSettings.MAX_SIZE_BYTES + 1))),
        Arguments.of("max_key_bytes=0 must be in [1, 4096]", new Change(s -> s.withMaxKeyBytes(0))),
        Arguments.of(
            "max_key_bytes=4097 must be in [1, 4096]", new Change(s -> s.withMaxKeyBytes(4097))));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("invalid")
  void shouldNameFieldValueAndRangeWhenInvalid(String expected, Change change) {
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> change.apply().apply(valid()));

    assertTrue(e.getMessage().contains(expected), e.getMessage());
  }

  @Test
  void shouldDefaultToAPureClientOverTcp() {
    MooncakeStoreSettings s = valid();

    assertTrue(s.pureClientMode());
    assertEquals(0, s.globalSegmentSizeBytes());
    assertEquals("tcp", s.protocol());
    assertEquals("P2PHANDSHAKE", s.metadataServer());
    assertEquals("", s.deviceName());
    assertEquals(512, s.maxKeyBytes());
  }

  @Test
  void shouldAcceptASegmentShareAndTheLimits() {
    MooncakeStoreSettings s =
        valid()
            .withGlobalSegmentSizeBytes(MooncakeStoreSettings.MAX_SIZE_BYTES)
            .withMaxKeyBytes(MooncakeStoreSettings.MAX_KEY_BYTES_LIMIT);

    assertEquals(false, s.pureClientMode());
    assertEquals(4096, s.maxKeyBytes());
  }
}
