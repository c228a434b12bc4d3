package io.tokenspeed.l3.redis;

import java.net.URI;
import java.net.URISyntaxException;
import java.util.List;
import java.util.Locale;

/**
 * How a {@link RedisStore} reaches Redis or Valkey. Validated once, in the constructor; a bad value
 * names the field, the value and what is allowed.
 *
 * <pre>
 *   field               allowed                                            default
 *   uris                standalone: exactly one; cluster: 1..64 seeds       (required)
 *                       host:port, redis://host:port or rediss://host:port;
 *                       no credentials, path or query in the URI
 *   cluster             true = Redis Cluster (slots routed by the client)   false
 *   username            ACL user; empty = the default user                  ""
 *   password            required with a username; null = no AUTH            null
 *   tls                 TLS with full peer verification (JDK trust store);  false
 *                       must agree with a rediss:// scheme
 *   connect_timeout_ms  [10, 600000]: TCP connect, handshake, startup check  5000
 *   command_timeout_ms  [10, 600000]: one whole store call                  2000
 *   connections         [1, 64] connections one call spreads its keys over,  4
 *                       per server (see RedisStore)
 *   pipeline_depth      [1, 1024] GET/SET commands in flight per connection  4
 *   max_value_bytes     [1, 512 MiB] (Redis's proto-max-bulk-len default)    64 MiB
 *   max_key_bytes       [1, 4096]                                            512
 * </pre>
 *
 * <p>The password never appears in {@link #toString()}; everything else may be logged.
 *
 * @param uris the server (standalone) or the cluster's seed nodes
 * @param cluster whether the URIs name Redis Cluster nodes
 * @param username the ACL user, or empty for the default user
 * @param password the ACL password, or null when the server needs none
 * @param tls whether connections use TLS
 * @param connectTimeoutMs bound on connecting and on every startup check
 * @param commandTimeoutMs bound on one store call, from its first command to its last reply
 * @param connections how many connections to each server one call spreads its keys over
 * @param pipelineDepth how many GET or SET commands one call keeps in flight per connection
 * @param maxValueBytes the largest object a PUT may create or a GET may read
 * @param maxKeyBytes the longest key, in UTF-8 bytes
 */
public record RedisStoreSettings(
    List<String> uris,
    boolean cluster,
    String username,
    String password,
    boolean tls,
    long connectTimeoutMs,
    long commandTimeoutMs,
    int connections,
    int pipelineDepth,
    long maxValueBytes,
    int maxKeyBytes) {

  /**
   * Default startup bound: 5 s for connecting, the handshake and the startup checks together. The
   * first store of a JVM also loads and warms up the client (about a second on a small machine),
   * which counts against it.
   */
  public static final long DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

  /** Default bound on one store call: 2 s, far above a 1 MiB round trip on any network. */
  public static final long DEFAULT_COMMAND_TIMEOUT_MS = 2_000;

  /**
   * Default connections per call and server: 4. A call of many keys (the pages of one prefix)
   * spreads them over up to this many connections to each server, so that several values stream at
   * once and one large value does not hold up every other reply.
   */
  public static final int DEFAULT_CONNECTIONS = 4;

  /**
   * Default pipeline depth: 4 GET or SET commands in flight per connection of a call. With the
   * default 4 connections, a call keeps up to 16 values moving; more only adds server memory for
   * replies waiting to be read.
   */
  public static final int DEFAULT_PIPELINE_DEPTH = 4;

  /** Largest accepted pipeline depth. */
  public static final int MAX_PIPELINE_DEPTH = 1024;

  /** Default value limit: 64 MiB, above any KV block of one page on one rank. */
  public static final long DEFAULT_MAX_VALUE_BYTES = 64L << 20;

  /** Default key limit: 512 bytes, well above the ~170 bytes of a tsl3 object key. */
  public static final int DEFAULT_MAX_KEY_BYTES = 512;

  /** Largest accepted {@code max_value_bytes}: Redis's default {@code proto-max-bulk-len}. */
  public static final long MAX_VALUE_BYTES_LIMIT = 512L << 20;

  /** Largest accepted {@code max_key_bytes}. */
  public static final int MAX_KEY_BYTES_LIMIT = 4096;

  /** Largest accepted timeout: 10 minutes. */
  public static final long MAX_TIMEOUT_MS = 600_000;

  /** Largest accepted connection count and seed count. */
  public static final int MAX_CONNECTIONS = 64;

  public RedisStoreSettings {
    if (uris == null || uris.isEmpty()) {
      throw new IllegalArgumentException(
          "redis uris=" + uris + " must name the server (or, with cluster=true, its seed nodes)");
    }
    uris = List.copyOf(uris);
    if (!cluster && uris.size() != 1) {
      throw new IllegalArgumentException(
          "redis uris="
              + uris
              + " must name exactly one server when cluster=false (several are cluster seeds)");
    }
    if (uris.size() > MAX_CONNECTIONS) {
      throw new IllegalArgumentException(
          "redis uris has " + uris.size() + " entries; at most " + MAX_CONNECTIONS + " allowed");
    }
    for (String uri : uris) {
      Endpoint.parse(uri, tls);
    }
    if (username == null) {
      username = "";
    }
    if (!username.isEmpty() && (password == null || password.isEmpty())) {
      throw new IllegalArgumentException(
          "redis username=" + username + " needs a password (ACL users authenticate with one)");
    }
    if (password != null && password.isEmpty()) {
      throw new IllegalArgumentException(
          "redis password is empty; leave it null when the server needs no AUTH");
    }
    for (int i = 0; i < username.length(); i++) {
      char c = username.charAt(i);
      if (c == 0 || Character.isWhitespace(c)) {
        throw new IllegalArgumentException(
            "redis username='" + username.replace("\0", "\\0") + "' must not contain whitespace");
      }
    }
    range("connect_timeout_ms", connectTimeoutMs, 10, MAX_TIMEOUT_MS);
    range("command_timeout_ms", commandTimeoutMs, 10, MAX_TIMEOUT_MS);
    range("connections", connections, 1, MAX_CONNECTIONS);
    range("pipeline_depth", pipelineDepth, 1, MAX_PIPELINE_DEPTH);
    range("max_value_bytes", maxValueBytes, 1, MAX_VALUE_BYTES_LIMIT);
    range("max_key_bytes", maxKeyBytes, 1, MAX_KEY_BYTES_LIMIT);
  }

  /** One standalone server with every other setting at its default. */
  public static RedisStoreSettings standalone(String uri) {
    return new RedisStoreSettings(
        List.of(uri),
        false,
        "",
        null,
        false,
        DEFAULT_CONNECT_TIMEOUT_MS,
        DEFAULT_COMMAND_TIMEOUT_MS,
        DEFAULT_CONNECTIONS,
        DEFAULT_PIPELINE_DEPTH,
        DEFAULT_MAX_VALUE_BYTES,
        DEFAULT_MAX_KEY_BYTES);
  }

  /** A Redis Cluster reached through {@code seeds}, every other setting at its default. */
  public static RedisStoreSettings cluster(List<String> seeds) {
    return new RedisStoreSettings(
        seeds,
        true,
        "",
        null,
        false,
        DEFAULT_CONNECT_TIMEOUT_MS,
        DEFAULT_COMMAND_TIMEOUT_MS,
        DEFAULT_CONNECTIONS,
        DEFAULT_PIPELINE_DEPTH,
        DEFAULT_MAX_VALUE_BYTES,
        DEFAULT_MAX_KEY_BYTES);
  }

  /** A copy that authenticates as {@code username} (empty: the default user). */
  public RedisStoreSettings withCredentials(String username, String password) {
    return new RedisStoreSettings(
        uris,
        cluster,
        username,
        password,
        tls,
        connectTimeoutMs,
        commandTimeoutMs,
        connections,
        pipelineDepth,
        maxValueBytes,
        maxKeyBytes);
  }

  /** A copy with other timeouts. */
  public RedisStoreSettings withTimeouts(long connectTimeoutMs, long commandTimeoutMs) {
    return new RedisStoreSettings(
        uris,
        cluster,
        username,
        password,
        tls,
        connectTimeoutMs,
        commandTimeoutMs,
        connections,
        pipelineDepth,
        maxValueBytes,
        maxKeyBytes);
  }

  /** A copy with another connection count. */
  public RedisStoreSettings withConnections(int connections) {
    return new RedisStoreSettings(
        uris,
        cluster,
        username,
        password,
        tls,
        connectTimeoutMs,
        commandTimeoutMs,
        connections,
        pipelineDepth,
        maxValueBytes,
        maxKeyBytes);
  }

  /** A copy with another pipeline depth. */
  public RedisStoreSettings withPipelineDepth(int pipelineDepth) {
    return new RedisStoreSettings(
        uris,
        cluster,
        username,
        password,
        tls,
        connectTimeoutMs,
        commandTimeoutMs,
        connections,
        pipelineDepth,
        maxValueBytes,
        maxKeyBytes);
  }

  /** A copy with other key and value limits. */
  public RedisStoreSettings withLimits(int maxKeyBytes, long maxValueBytes) {
    return new RedisStoreSettings(
        uris,
        cluster,
        username,
        password,
        tls,
        connectTimeoutMs,
        commandTimeoutMs,
        connections,
        pipelineDepth,
        maxValueBytes,
        maxKeyBytes);
  }

  /** A copy with TLS on or off. */
  public RedisStoreSettings withTls(boolean tls) {
    return new RedisStoreSettings(
        uris,
        cluster,
        username,
        password,
        tls,
        connectTimeoutMs,
        commandTimeoutMs,
        connections,
        pipelineDepth,
        maxValueBytes,
        maxKeyBytes);
  }

  /** The parsed URIs. */
  List<Endpoint> endpoints() {
    return uris.stream().map(u -> Endpoint.parse(u, tls)).toList();
  }

  @Override
  public String toString() {
    return "RedisStoreSettings[uris="
        + uris
        + ", cluster="
        + cluster
        + ", username="
        + username
        + ", password="
        + (password == null ? "none" : "(set)")
        + ", tls="
        + tls
        + ", connect_timeout_ms="
        + connectTimeoutMs
        + ", command_timeout_ms="
        + commandTimeoutMs
        + ", connections="
        + connections
        + ", pipeline_depth="
        + pipelineDepth
        + ", max_value_bytes="
        + maxValueBytes
        + ", max_key_bytes="
        + maxKeyBytes
        + "]";
  }

  private static void range(String field, long value, long min, long max) {
    if (value < min || value > max) {
      throw new IllegalArgumentException(
          "redis " + field + "=" + value + " must be in [" + min + ", " + max + "]");
    }
  }

  /** One server address as the settings name it. */
  record Endpoint(String text, String host, int port) {

    static Endpoint parse(String text, boolean tls) {
      if (text == null || text.isBlank()) {
        throw new IllegalArgumentException("redis uri=" + text + " must be host:port");
      }
      String lower = text.toLowerCase(Locale.ROOT);
      boolean secure = lower.startsWith("rediss://");
      boolean schemed = secure || lower.startsWith("redis://");
      if (!schemed && text.contains("://")) {
        throw new IllegalArgumentException(
            "redis uri=" + text + " must use redis:// or rediss:// (or be a bare host:port)");
      }
      if (secure && !tls) {
        throw new IllegalArgumentException(
            "redis uri=" + text + " uses rediss:// but tls=false; set tls=true or use redis://");
      }
      if (schemed && !secure && tls) {
        throw new IllegalArgumentException(
            "redis uri=" + text + " uses redis:// but tls=true; use rediss:// or a bare host:port");
      }
      URI uri;
      try {
        uri = new URI(schemed ? text : "redis://" + text);
      } catch (URISyntaxException e) {
        throw new IllegalArgumentException(
            "redis uri=" + text + " is not host:port (" + e.getMessage() + ")");
      }
      if (uri.getRawUserInfo() != null) {
        throw new IllegalArgumentException(
            "redis uri="
                + uri.getHost()
                + ":"
                + uri.getPort()
                + " carries credentials; set username/password instead, so that they are never"
                + " logged");
      }
      if ((uri.getRawPath() != null && !uri.getRawPath().isEmpty())
          || uri.getRawQuery() != null
          || uri.getRawFragment() != null) {
        throw new IllegalArgumentException(
            "redis uri=" + text + " must be host:port only (no database, path or options)");
      }
      if (uri.getHost() == null || uri.getHost().isEmpty()) {
        throw new IllegalArgumentException("redis uri=" + text + " has no host");
      }
      if (uri.getPort() < 1 || uri.getPort() > 65535) {
        throw new IllegalArgumentException(
            "redis uri=" + text + " needs a port in [1, 65535] (Redis's default is 6379)");
      }
      String host = uri.getHost();
      if (host.startsWith("[") && host.endsWith("]")) {
        host = host.substring(1, host.length() - 1);
      }
      return new Endpoint(text, host, uri.getPort());
    }
  }
}
