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
 * @param prefill the prefill backends' base URLs ({@code http://HOST:PORT}), at least one
 * @param decode the decode backends' base URLs, at least one, none of them a prefill backend too
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
 */
public record RouterSettings(
    List<String> prefill,
    List<String> decode,
    String host,
    int port,
    long pollMs,
    long connectTimeoutMs,
    long upstreamTimeoutMs,
    long maxBodyBytes,
    long headerTimeoutMs) {

  /** The default of {@code --poll-ms}. */
  public static final long DEFAULT_POLL_MS = 1000;

  /** The default of {@code --connect-timeout-ms}. */
  public static final long DEFAULT_CONNECT_TIMEOUT_MS = 2000;

  /**
   * The default of {@code --upstream-timeout-ms}: ten minutes, since a non-streamed completion's
   * answer starts only once it is generated whole.
   */
  public static final long DEFAULT_UPSTREAM_TIMEOUT_MS = 600_000;

  public RouterSettings {
    prefill = urls("--prefill", prefill);
    decode = urls("--decode", decode);
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
