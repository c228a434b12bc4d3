package io.tokenspeed.server.router;

import java.net.URI;
import java.net.URISyntaxException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * Everything {@code tokenspeed router} is configured with, validated once: each error names the
 * setting (by its flag), the value and what is allowed.
 *
 * <p>Two deployments: disaggregated ({@code prefill} and {@code decode}, each at least one backend,
 * {@code replicas} empty) or fused replicas ({@code replicas} at least one, the others empty).
 *
 * @param prefill the prefill backends' base URLs ({@code http://HOST:PORT})
 * @param decode the decode backends' base URLs, none of them a prefill backend too
 * @param replicas the fused replicas' base URLs (docs/serving.md "Data-parallel replicas")
 * @param host the address to listen on
 * @param port the port to listen on (0: any free one)
 * @param pollMs how often each backend's {@code /ready} and {@code /pd} are polled
 * @param connectTimeoutMs how long connecting to a backend may take; also how long a poll's answers
 *     may take
 * @param upstreamTimeoutMs how long a backend may take to start its answer, and how long its body
 *     may stall once started
 * @param maxBodyBytes the largest request body taken (413 beyond), as {@code serve}'s
 * @param headerTimeoutMs how long a request's head may take, and an idle connection stay open, as
 *     {@code serve}'s
 * @param routing how the prefill backends, or the replicas, are chosen (decode: round robin)
 * @param kvIndexBlocks the most block hashes the router keeps per backend (its Device and Host
 *     tiers together), and for the shared store
 * @param loadTokens the prefill tokens one request a backend runs or holds waiting is priced at
 */
public record RouterSettings(
    List<String> prefill,
    List<String> decode,
    List<String> replicas,
    String host,
    int port,
    long pollMs,
    long connectTimeoutMs,
    long upstreamTimeoutMs,
    long maxBodyBytes,
    long headerTimeoutMs,
    Routing routing,
    int kvIndexBlocks,
    int loadTokens) {

  /** The default of {@code --kv-index-blocks}: 2^20 hashes, 18 to 36 MiB a backend when full. */
  public static final int DEFAULT_KV_INDEX_BLOCKS = 1 << 20;

  /** The largest {@code --kv-index-blocks}. */
  public static final int MAX_KV_INDEX_BLOCKS = 1 << 26;

  /** The default of {@code --load-tokens}. */
  public static final int DEFAULT_LOAD_TOKENS = PrefixChooser.DEFAULT_LOAD_TOKENS;

  /** The default of {@code --poll-ms}. */
  public static final long DEFAULT_POLL_MS = 1000;

  /** The default of {@code --connect-timeout-ms}. */
  public static final long DEFAULT_CONNECT_TIMEOUT_MS = 2000;

  /**
   * The default of {@code --upstream-timeout-ms}: ten minutes, since a non-streamed completion's
   * answer starts only once it is generated whole.
   */
  public static final long DEFAULT_UPSTREAM_TIMEOUT_MS = 600_000;

  /** A disaggregated deployment's settings, routed by prefix with the default bounds. */
  public RouterSettings(
      List<String> prefill,
      List<String> decode,
      String host,
      int port,
      long pollMs,
      long connectTimeoutMs,
      long upstreamTimeoutMs,
      long maxBodyBytes,
      long headerTimeoutMs) {
    this(
        prefill,
        decode,
        List.of(),
        host,
        port,
        pollMs,
        connectTimeoutMs,
        upstreamTimeoutMs,
        maxBodyBytes,
        headerTimeoutMs,
        Routing.PREFIX,
        DEFAULT_KV_INDEX_BLOCKS,
        DEFAULT_LOAD_TOKENS);
  }

  public RouterSettings {
    replicas = replicas == null ? List.of() : replicas;
    prefill = prefill == null ? List.of() : prefill;
    decode = decode == null ? List.of() : decode;
    if (!replicas.isEmpty()) {
      if (!prefill.isEmpty() || !decode.isEmpty()) {
        throw new IllegalArgumentException(
            "--replicas routes fused replicas; it cannot be combined with --prefill or --decode");
      }
      replicas = urls("--replicas", replicas);
    } else {
      if (prefill.isEmpty() && decode.isEmpty()) {
        throw new IllegalArgumentException(
            "--prefill and --decode (a disaggregated deployment) or --replicas (fused replicas)"
                + " must name the backends");
      }
      prefill = urls("--prefill", prefill);
      decode = urls("--decode", decode);
    }
    for (String url : decode) {
      if (prefill.contains(url)) {
        throw new IllegalArgumentException(
            "--decode=" + url + " is a --prefill backend too; a backend has one role");
      }
    }
    if (host == null || host.isBlank()) {
      throw new IllegalArgumentException("--host must not be blank");
    }
    range("--port", port, 0, 65535);
    range("--poll-ms", pollMs, 10, 3_600_000);
    range("--connect-timeout-ms", connectTimeoutMs, 1, 3_600_000);
    range("--upstream-timeout-ms", upstreamTimeoutMs, 1, 86_400_000);
    range("--max-body-bytes", maxBodyBytes, 1024, 1L << 30);
    range("header_timeout_ms", headerTimeoutMs, 1, 3_600_000);
    if (routing == null) {
      throw new IllegalArgumentException("--routing must be prefix or round-robin");
    }
    range("--kv-index-blocks", kvIndexBlocks, 1, MAX_KV_INDEX_BLOCKS);
    range("--load-tokens", loadTokens, 0, 1 << 20);
  }

  /** Whether the backends are fused replicas ({@code --replicas}) rather than PD roles. */
  public boolean fused() {
    return !replicas.isEmpty();
  }

  /** The roles configured, each with its backends' URLs, in {@link Role} order. */
  java.util.Map<Role, List<String>> roles() {
    java.util.Map<Role, List<String>> out = new java.util.EnumMap<>(Role.class);
    if (fused()) {
      out.put(Role.FUSED, replicas);
    } else {
      out.put(Role.PREFILL, prefill);
      out.put(Role.DECODE, decode);
    }
    return out;
  }

  /** The role whose backends are chosen by {@link #routing}: the replicas, or prefill. */
  Role routedRole() {
    return fused() ? Role.FUSED : Role.PREFILL;
  }

  /** The role that answers the client: the replicas, or decode. */
  Role answeringRole() {
    return fused() ? Role.FUSED : Role.DECODE;
  }

  private static void range(String name, long value, long min, long max) {
    if (value < min || value > max) {
      throw new IllegalArgumentException(
          name + "=" + value + " must be in [" + min + ", " + max + "]");
    }
  }

  private static List<String> urls(String name, List<String> given) {
    if (given == null || given.isEmpty()) {
      throw new IllegalArgumentException(name + " must name at least one backend URL");
    }
    List<String> out = new ArrayList<>();
    Set<String> seen = new HashSet<>();
    for (String text : given) {
      String url = backendUrl(name, text);
      if (!seen.add(url)) {
        throw new IllegalArgumentException(name + "=" + text + " is named twice");
      }
      out.add(url);
    }
    return List.copyOf(out);
  }

  /**
   * A backend's base URL, {@code http://HOST:PORT} (a trailing {@code /} is dropped; without a
   * port, 80), in the form the router names it by (lower-case scheme and host, explicit port);
   * anything else (another scheme, a path, a query, user information) is refused naming {@code
   * name}.
   */
  static String backendUrl(String name, String text) {
    String why = "must be http://HOST:PORT";
    if (text == null || text.isBlank()) {
      throw new IllegalArgumentException(name + "=\"\" " + why);
    }
    URI uri;
    try {
      uri = new URI(text.strip());
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException(name + "=" + text + " " + why + ": " + e.getReason());
    }
    if (uri.getScheme() == null || !uri.getScheme().equalsIgnoreCase("http")) {
      throw new IllegalArgumentException(name + "=" + text + " " + why + " (scheme http)");
    }
    if (uri.getHost() == null) {
      throw new IllegalArgumentException(name + "=" + text + " " + why + " (no host)");
    }
    if (uri.getRawUserInfo() != null
        || uri.getRawQuery() != null
        || uri.getRawFragment() != null
        || !(uri.getRawPath() == null
            || uri.getRawPath().isEmpty()
            || uri.getRawPath().equals("/"))) {
      throw new IllegalArgumentException(
          name + "=" + text + " " + why + " (no path, query or user information)");
    }
    int port = uri.getPort() < 0 ? 80 : uri.getPort();
    if (port < 1 || port > 65535) {
      throw new IllegalArgumentException(name + "=" + text + " " + why + " (port 1..65535)");
    }
    return "http://" + uri.getHost().toLowerCase(Locale.ROOT) + ":" + port;
  }
}
