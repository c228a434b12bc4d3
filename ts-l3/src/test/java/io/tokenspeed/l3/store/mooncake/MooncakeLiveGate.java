package io.tokenspeed.l3.store.mooncake;

import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;

/**
 * Decides from the environment whether the live Mooncake test runs, and with which settings.
 *
 * <pre>
 *   MOONCAKE_MASTER   MOONCAKE_REQUIRE_MASTER   MOONCAKE_LIB   answer
 *   unset / blank     unset or not "1"          any            empty: no live test requested
 *   unset / blank     "1"                       any            throws: a master was required
 *   set               any                       unset / blank  throws: the library is needed
 *   set               any                       set            the settings below
 * </pre>
 *
 * <p>Optional variables, with their defaults: {@code MOONCAKE_METADATA} ({@code P2PHANDSHAKE}),
 * {@code MOONCAKE_LOCAL_HOSTNAME} ({@code 127.0.0.1}), {@code MOONCAKE_PROTOCOL} ({@code tcp}),
 * {@code MOONCAKE_DEVICE} (empty), {@code MOONCAKE_SEGMENT_BYTES} ({@code 0}: a pure client, so a
 * storage owner must already be mounted on the master), {@code MOONCAKE_LEASE_TTL_MS} ({@code
 * 10000}: the master's {@code default_kv_lease_ttl}; the namespace-deletion bound is twice that
 * plus 5.1 s).
 */
final class MooncakeLiveGate {

  static final String MASTER = "MOONCAKE_MASTER";
  static final String REQUIRE_MASTER = "MOONCAKE_REQUIRE_MASTER";
  static final String LIB = "MOONCAKE_LIB";

  private MooncakeLiveGate() {}

  /**
   * The live settings, or empty when no live test was requested.
   *
   * @throws IllegalStateException when a master is required but unset, or the library is unset
   */
  static Optional<MooncakeStoreSettings> check(Map<String, String> env) {
    String master = value(env, MASTER);
    if (master == null) {
      if ("1".equals(value(env, REQUIRE_MASTER))) {
        throw new IllegalStateException(
            REQUIRE_MASTER
                + "=1 but "
                + MASTER
                + " is unset: set it to the Mooncake master's host:port (and "
                + LIB
                + " to libmooncake_store.so), or unset "
                + REQUIRE_MASTER);
      }
      return Optional.empty();
    }
    String lib = value(env, LIB);
    if (lib == null) {
      throw new IllegalStateException(
          MASTER
              + "="
              + master
              + " but "
              + LIB
              + " is unset: set it to the path of the shared library implementing store_c.h");
    }
    long leaseTtlMs =
        Long.parseLong(
            orDefault(
                env,
                "MOONCAKE_LEASE_TTL_MS",
                Long.toString(MooncakeStoreSettings.DEFAULT_LEASE_TTL_MS)));
    return Optional.of(
        new MooncakeStoreSettings(
            Path.of(lib),
            orDefault(env, "MOONCAKE_LOCAL_HOSTNAME", "127.0.0.1"),
            orDefault(env, "MOONCAKE_METADATA", MooncakeStoreSettings.DEFAULT_METADATA_SERVER),
            master,
            orDefault(env, "MOONCAKE_PROTOCOL", MooncakeStoreSettings.DEFAULT_PROTOCOL),
            orDefault(env, "MOONCAKE_DEVICE", MooncakeStoreSettings.DEFAULT_DEVICE_NAME),
            Long.parseLong(orDefault(env, "MOONCAKE_SEGMENT_BYTES", "0")),
            MooncakeStoreSettings.DEFAULT_LOCAL_BUFFER_SIZE_BYTES,
            MooncakeStoreSettings.DEFAULT_MAX_KEY_BYTES,
            leaseTtlMs,
            Math.min(
                MooncakeStoreSettings.MAX_NAMESPACE_DELETE_WAIT_MS,
                2 * leaseTtlMs + MooncakeStore.LEASE_MARGIN_MS + 5_000)));
  }

  private static String value(Map<String, String> env, String name) {
    String value = env.get(name);
    return value == null || value.isBlank() ? null : value.strip();
  }

  private static String orDefault(Map<String, String> env, String name, String fallback) {
    String value = value(env, name);
    return value == null ? fallback : value;
  }
}
