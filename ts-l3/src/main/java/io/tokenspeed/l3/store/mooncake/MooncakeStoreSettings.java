package io.tokenspeed.l3.store.mooncake;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.regex.Pattern;

/**
 * How one rank's {@link MooncakeStore} reaches Mooncake: the shared library that implements {@code
 * store_c.h}, the arguments of {@code mooncake_store_setup}, and this rank's segment share.
 * Validated once, at startup; a bad value names the field, the value and what is allowed.
 *
 * <pre>
 *   field                      setup argument         allowed
 *   library_path               (dlopen)               any path; loaded by {@link MooncakeStore#open}
 *   local_hostname             local_hostname         non-blank, no whitespace or NUL
 *   metadata_server            metadata_server        non-blank, no whitespace or NUL
 *   master_server_address      master_server_addr     non-blank, no whitespace or NUL
 *   protocol                   protocol               [a-z][a-z0-9_]{0,31}  (tcp, rdma, ...)
 *   device_name                device_name            may be empty; no whitespace or NUL
 *   global_segment_size_bytes  global_segment_size    [0, 2^44]; 0 = pure client
 *   local_buffer_size_bytes    local_buffer_size      [0, 2^44]
 *   max_key_bytes              (adapter)              [1, 4096]
 *   lease_ttl_ms               (adapter)              [0, 3600000]; the master's default_kv_lease_ttl
 *   namespace_delete_wait_ms   (adapter)              [0, 600000]
 * </pre>
 *
 * <p><b>{@code global_segment_size_bytes = 0} makes this rank a pure client</b>: it mounts no
 * storage of its own, so the objects it writes live in segments mounted by independent storage
 * owners and outlive this inference process. That is the intended deployment for inference workers
 * (specification, "Write transaction"); a non-zero value mounts that many bytes of this process's
 * memory into the shared pool, and the objects placed there vanish when the process exits.
 *
 * <p>The record holds no secrets and may be logged.
 *
 * @param libraryPath the shared library implementing {@code store_c.h} (for example {@code
 *     libmooncake_store.so})
 * @param localHostname this client's address as other Mooncake nodes reach it ({@code host} or
 *     {@code host:port})
 * @param metadataServer the transfer engine's metadata service ({@code P2PHANDSHAKE}, an etcd or
 *     HTTP URL)
 * @param masterServerAddress the Mooncake master ({@code host:port})
 * @param protocol the transfer protocol
 * @param deviceName the transfer devices (for example RDMA NICs), empty for TCP or auto-detection
 * @param globalSegmentSizeBytes bytes this rank mounts into the shared pool; 0 = pure client
 * @param localBufferSizeBytes the client's own staging buffer; the zero-copy path of this adapter
 *     does not use it
 * @param maxKeyBytes longest object key accepted, in UTF-8 bytes, checked before any native call
 * @param leaseTtlMs the read lease the master grants on every GET and existence query that finds an
 *     object: its {@code default_kv_lease_ttl} flag, which this setting must equal. A namespace
 *     deletion waits for leases to end before and between removal passes
 * @param namespaceDeleteWaitMs the most a namespace deletion waits in all for read leases to end
 *     ({@link MooncakeStore#purgeNamespace}); 0 = one pass at once, leased objects stay
 */
public record MooncakeStoreSettings(
    Path libraryPath,
    String localHostname,
    String metadataServer,
    String masterServerAddress,
    String protocol,
    String deviceName,
    long globalSegmentSizeBytes,
    long localBufferSizeBytes,
    int maxKeyBytes,
    long leaseTtlMs,
    long namespaceDeleteWaitMs) {

  /** Default metadata service: the transfer engine's peer handshake, which needs no etcd. */
  public static final String DEFAULT_METADATA_SERVER = "P2PHANDSHAKE";

  /** Default transfer protocol. */
  public static final String DEFAULT_PROTOCOL = "tcp";

  /** Default device list: none (TCP, or the SDK's own detection). */
  public static final String DEFAULT_DEVICE_NAME = "";

  /** Default segment share: 0, a pure client that mounts nothing. */
  public static final long DEFAULT_GLOBAL_SEGMENT_SIZE_BYTES = 0;

  /** Default local staging buffer: 16 MiB. */
  public static final long DEFAULT_LOCAL_BUFFER_SIZE_BYTES = 16L << 20;

  /**
   * Default key limit: 512 bytes, well above the longest key the namespace and key format produce
   * (about 170 bytes: architecture §7).
   */
  public static final int DEFAULT_MAX_KEY_BYTES = 512;

  /** Default read lease: 10,000 ms, the master's default {@code default_kv_lease_ttl}. */
  public static final long DEFAULT_LEASE_TTL_MS = 10_000;

  /**
   * Default bound of a namespace deletion's waiting: 25,000 ms, enough for this client's own leases
   * to end before the first pass (one lease) and for one more pass a lease later.
   */
  public static final long DEFAULT_NAMESPACE_DELETE_WAIT_MS = 25_000;

  /** Largest accepted {@code lease_ttl_ms}: one hour. */
  public static final long MAX_LEASE_TTL_MS = 3_600_000;

  /** Largest accepted {@code namespace_delete_wait_ms}: ten minutes. */
  public static final long MAX_NAMESPACE_DELETE_WAIT_MS = 600_000;

  /** Largest accepted segment or buffer size: 2^44 bytes (16 TiB), far above any host. */
  public static final long MAX_SIZE_BYTES = 1L << 44;

  /** Largest accepted {@code max_key_bytes}. */
  public static final int MAX_KEY_BYTES_LIMIT = 4096;

  private static final Pattern PROTOCOL = Pattern.compile("[a-z][a-z0-9_]{0,31}");

  public MooncakeStoreSettings {
    if (libraryPath == null) {
      throw new IllegalArgumentException(
          "mooncake library_path=null must name the shared library implementing store_c.h");
    }
    requireToken("local_hostname", localHostname, false);
    requireToken("metadata_server", metadataServer, false);
    requireToken("master_server_address", masterServerAddress, false);
    requireToken("device_name", deviceName, true);
    if (protocol == null || !PROTOCOL.matcher(protocol).matches()) {
      throw new IllegalArgumentException(
          "mooncake protocol=" + protocol + " must match [a-z][a-z0-9_]{0,31} (tcp, rdma, ...)");
    }
    requireSize("global_segment_size_bytes", globalSegmentSizeBytes);
    requireSize("local_buffer_size_bytes", localBufferSizeBytes);
    if (maxKeyBytes < 1 || maxKeyBytes > MAX_KEY_BYTES_LIMIT) {
      throw new IllegalArgumentException(
          "mooncake max_key_bytes=" + maxKeyBytes + " must be in [1, " + MAX_KEY_BYTES_LIMIT + "]");
    }
    if (leaseTtlMs < 0 || leaseTtlMs > MAX_LEASE_TTL_MS) {
      throw new IllegalArgumentException(
          "mooncake lease_ttl_ms=" + leaseTtlMs + " must be in [0, " + MAX_LEASE_TTL_MS + "]");
    }
    if (namespaceDeleteWaitMs < 0 || namespaceDeleteWaitMs > MAX_NAMESPACE_DELETE_WAIT_MS) {
      throw new IllegalArgumentException(
          "mooncake namespace_delete_wait_ms="
              + namespaceDeleteWaitMs
              + " must be in [0, "
              + MAX_NAMESPACE_DELETE_WAIT_MS
              + "]");
    }
  }

  /**
   * A pure client ({@code global_segment_size_bytes = 0}) with every other setting at its default.
   */
  public static MooncakeStoreSettings pureClient(
      Path libraryPath, String localHostname, String masterServerAddress) {
    return new MooncakeStoreSettings(
        libraryPath,
        localHostname,
        DEFAULT_METADATA_SERVER,
        masterServerAddress,
        DEFAULT_PROTOCOL,
        DEFAULT_DEVICE_NAME,
        DEFAULT_GLOBAL_SEGMENT_SIZE_BYTES,
        DEFAULT_LOCAL_BUFFER_SIZE_BYTES,
        DEFAULT_MAX_KEY_BYTES,
        DEFAULT_LEASE_TTL_MS,
        DEFAULT_NAMESPACE_DELETE_WAIT_MS);
  }

  /** Whether this rank mounts no storage of its own. */
  public boolean pureClientMode() {
    return globalSegmentSizeBytes == 0;
  }

  /** A copy with another segment share. */
  public MooncakeStoreSettings withGlobalSegmentSizeBytes(long bytes) {
    return new MooncakeStoreSettings(
        libraryPath,
        localHostname,
        metadataServer,
        masterServerAddress,
        protocol,
        deviceName,
        bytes,
        localBufferSizeBytes,
        maxKeyBytes,
        leaseTtlMs,
        namespaceDeleteWaitMs);
  }

  /** A copy with another key limit. */
  public MooncakeStoreSettings withMaxKeyBytes(int bytes) {
    return new MooncakeStoreSettings(
        libraryPath,
        localHostname,
        metadataServer,
        masterServerAddress,
        protocol,
        deviceName,
        globalSegmentSizeBytes,
        localBufferSizeBytes,
        bytes,
        leaseTtlMs,
        namespaceDeleteWaitMs);
  }

  /** A copy with another lease and namespace-deletion bound. */
  public MooncakeStoreSettings withLease(long ttlMs, long deleteWaitMs) {
    return new MooncakeStoreSettings(
        libraryPath,
        localHostname,
        metadataServer,
        masterServerAddress,
        protocol,
        deviceName,
        globalSegmentSizeBytes,
        localBufferSizeBytes,
        maxKeyBytes,
        ttlMs,
        deleteWaitMs);
  }

  private static void requireToken(String field, String value, boolean emptyAllowed) {
    String allowed =
        emptyAllowed
            ? "may be empty but must not contain whitespace or NUL"
            : "must be non-blank without whitespace or NUL";
    if (value == null || (!emptyAllowed && value.isEmpty())) {
      throw new IllegalArgumentException("mooncake " + field + "=" + value + " " + allowed);
    }
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (c == 0 || Character.isWhitespace(c)) {
        throw new IllegalArgumentException(
            "mooncake " + field + "='" + value.replace("\0", "\\0") + "' " + allowed);
      }
    }
    if (value.getBytes(StandardCharsets.UTF_8).length > 1024) {
      throw new IllegalArgumentException(
          "mooncake "
              + field
              + " of "
              + value.length()
              + " chars must be at most 1024 UTF-8 bytes");
    }
  }

  private static void requireSize(String field, long value) {
    if (value < 0 || value > MAX_SIZE_BYTES) {
      throw new IllegalArgumentException(
          "mooncake " + field + "=" + value + " must be in [0, " + MAX_SIZE_BYTES + "]");
    }
  }
}
