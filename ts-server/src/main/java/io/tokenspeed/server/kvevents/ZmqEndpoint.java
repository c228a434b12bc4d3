package io.tokenspeed.server.kvevents;

import java.net.InetAddress;
import java.net.UnknownHostException;

/**
 * A TCP endpoint of a socket the server binds, {@code tcp://HOST:PORT}: HOST an address literal
 * (IPv6 in brackets), a name, or {@code *} for every interface; PORT in [0, 65535], 0 for any free
 * one.
 *
 * @param host the host as written ({@code *}, a name or a literal, without brackets)
 * @param port the port (0: any free one)
 */
public record ZmqEndpoint(String host, int port) {

  public ZmqEndpoint {
    if (host == null || host.isBlank()) {
      throw new IllegalArgumentException("the host is missing");
    }
    if (port < 0 || port > 65535) {
      throw new IllegalArgumentException("port=" + port + " must be in [0, 65535]");
    }
  }

  /**
   * Parses {@code tcp://HOST:PORT}.
   *
   * @throws IllegalArgumentException saying what is wrong with {@code text}
   */
  public static ZmqEndpoint parse(String text) {
    if (text == null || !text.startsWith("tcp://")) {
      throw new IllegalArgumentException(
          "'" + text + "' is not tcp://HOST:PORT (only TCP endpoints are served)");
    }
    String rest = text.substring("tcp://".length());
    int colon = rest.lastIndexOf(':');
    if (colon <= 0 || colon == rest.length() - 1) {
      throw new IllegalArgumentException("'" + text + "' is not tcp://HOST:PORT");
    }
    String host = rest.substring(0, colon);
    String port = rest.substring(colon + 1);
    if (host.startsWith("[") != host.endsWith("]")) {
      throw new IllegalArgumentException("'" + text + "': an IPv6 host goes in [brackets]");
    }
    if (host.startsWith("[")) {
      host = host.substring(1, host.length() - 1);
    } else if (host.indexOf(':') >= 0) {
      throw new IllegalArgumentException("'" + text + "': an IPv6 host goes in [brackets]");
    }
    int p;
    try {
      p = Integer.parseInt(port);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("'" + text + "': the port '" + port + "' is not a number");
    }
    if (p < 0 || p > 65535) {
      throw new IllegalArgumentException("'" + text + "': the port must be in [0, 65535]");
    }
    return new ZmqEndpoint(host, p);
  }

  /** Whether the host is an IPv6 literal. */
  public boolean ipv6() {
    return host.indexOf(':') >= 0;
  }

  /** Whether the endpoint names every interface ({@code *} or an any-local address). */
  public boolean wildcard() {
    if (host.equals("*")) {
      return true;
    }
    if (!Character.isDigit(host.charAt(0)) && !ipv6()) {
      return false; // a name: never resolved as the wildcard
    }
    try {
      return InetAddress.getByName(host).isAnyLocalAddress();
    } catch (UnknownHostException e) {
      return false;
    }
  }

  /** The text form, {@code tcp://HOST:PORT}. */
  @Override
  public String toString() {
    return "tcp://" + (ipv6() ? "[" + host + "]" : host) + ":" + port;
  }
}
