package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.EngineRole;
import io.tokenspeed.engine.PdTicket;
import java.math.BigInteger;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.Iterator;
import java.util.Optional;
import java.util.regex.Pattern;

/**
 * The serving side of prefill/decode disaggregation (docs/pd.md): the {@code pd} field a router
 * adds to each completion it sends an engine, and the {@code GET /pd} answer it polls.
 *
 * <p><b>The field.</b> {@code "pd": {"room": R, "decode": "host:port"}} to a prefill engine, {@code
 * "pd": {"room": R}} to a decode engine. R is the room both halves share: the decimal string of an
 * unsigned 64-bit value, never 0 ({@code "13260572831089785859"}; a JSON number loses precision
 * above 2^53 in many parsers, so the router writes a string), or a JSON integer in the same range.
 * The string is canonical: digits only, no sign, no leading zero, no white space. Every refusal is
 * a 400 naming the field: a fused engine takes no {@code pd} at all (it would silently serve the
 * whole request), a prefill engine needs {@code decode}, a decode engine takes none, and unknown
 * keys are refused (a newer router's field must not be dropped unread). One room is one choice:
 * {@code n} above 1, {@code best_of} above 1 or a batch of prompts is refused.
 */
public final class PdServing {
  private PdServing() {}

  /** The request field. */
  static final String FIELD = "pd";

  /** The largest room: 2^64 - 1. */
  static final BigInteger MAX_ROOM = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);

  /** A canonical room string: 1 to 20 digits without a leading zero. */
  private static final Pattern ROOM = Pattern.compile("[1-9][0-9]{0,19}");

  /** The most characters of a refused value a message quotes. */
  private static final int QUOTED = 40;

  /**
   * The ticket {@code body}'s {@code pd} field gives an engine of {@code role}, or null when the
   * body has none ({@code null} counts as none).
   *
   * @param choices the choices the request asks for ({@link GenerationRequest#choices})
   * @throws ApiException 400 naming the field
   */
  static PdTicket ticket(JsonNode body, EngineRole role, int choices) {
    JsonNode pd = body.get(FIELD);
    if (pd == null || pd.isNull()) {
      return null;
    }
    if (role == EngineRole.FUSED) {
      throw ApiException.invalid(
          FIELD,
          "pd is for an engine serving half of a disaggregated request (serve --engine-role"
              + " prefill or decode); this engine's role is fused");
    }
    if (!pd.isObject()) {
      throw ApiException.invalid(
          FIELD, "pd must be an object {\"room\": ..., \"decode\": ...}; got " + describe(pd));
    }
    for (Iterator<String> keys = pd.fieldNames(); keys.hasNext(); ) {
      String key = keys.next();
      if (!key.equals("room") && !key.equals("decode")) {
        throw ApiException.invalid(
            FIELD, "pd." + quote(key) + " is not a field of pd; its fields are room and decode");
      }
    }
    long room = room(pd.get("room"));
    JsonNode decode = pd.get("decode");
    boolean hasDecode = decode != null && !decode.isNull();
    if (choices > 1) {
      throw ApiException.invalid(
          FIELD,
          "a disaggregated request is one choice (one room); this one asks for "
              + choices
              + " (n, best_of or a batch of prompts)");
    }
    if (role == EngineRole.DECODE) {
      if (hasDecode) {
        throw ApiException.invalid(
            FIELD, "pd.decode is for a prefill engine; this engine's role is decode");
      }
      return new PdTicket.Decode(room);
    }
    if (!hasDecode) {
      throw ApiException.invalid(
          FIELD,
          "pd.decode (the decode engine's KV endpoint, host:port) is required by a prefill"
              + " engine");
    }
    return new PdTicket.Prefill(room, decode(decode));
  }

  /**
   * A room: the canonical decimal string of an unsigned 64-bit value, or a JSON integer in [1,
   * 2^64-1].
   */
  static long room(JsonNode v) {
    String range = "[1, " + MAX_ROOM + "]";
    if (v == null || v.isNull()) {
      throw ApiException.invalid(FIELD, "pd.room is required");
    }
    if (v.isTextual()) {
      String text = v.asText();
      if (!ROOM.matcher(text).matches()) {
        throw ApiException.invalid(
            FIELD,
            "pd.room must be the decimal string of an unsigned 64-bit number in "
                + range
                + " (digits only, no sign or leading zero); got \""
                + quote(text)
                + "\"");
      }
      try {
        return Long.parseUnsignedLong(text);
      } catch (NumberFormatException e) {
        throw ApiException.invalid(
            FIELD, "pd.room=" + text + " is out of range " + range + " (64 bits, unsigned)");
      }
    }
    if (v.isIntegralNumber()) {
      BigInteger b = v.bigIntegerValue();
      if (b.signum() <= 0 || b.compareTo(MAX_ROOM) > 0) {
        throw ApiException.invalid(
            FIELD, "pd.room=" + quote(b.toString()) + " is out of range " + range);
      }
      return b.longValue(); // the low 64 bits: the unsigned value's two's complement
    }
    throw ApiException.invalid(
        FIELD,
        "pd.room must be the decimal string of an unsigned 64-bit number in "
            + range
            + "; got "
            + describe(v));
  }

  /** The decode engine's KV endpoint, {@code host:port} (an IPv6 literal in brackets), resolved. */
  static InetSocketAddress decode(JsonNode v) {
    if (!v.isTextual()) {
      throw ApiException.invalid(FIELD, "pd.decode must be a host:port string; got " + describe(v));
    }
    String text = v.asText();
    String bad = "pd.decode=\"" + quote(text) + "\" is not host:port";
    int colon = text.lastIndexOf(':');
    if (colon <= 0 || colon == text.length() - 1) {
      throw ApiException.invalid(FIELD, bad);
    }
    String host = text.substring(0, colon);
    String portText = text.substring(colon + 1);
    if (host.startsWith("[") && host.endsWith("]") && host.length() > 2) {
      host = host.substring(1, host.length() - 1);
      if (host.indexOf(':') < 0) {
        throw ApiException.invalid(FIELD, bad + " (brackets hold an IPv6 address)");
      }
    } else if (host.indexOf(':') >= 0) {
      throw ApiException.invalid(FIELD, bad + " (an IPv6 address goes in brackets)");
    }
    if (host.chars().anyMatch(c -> c <= ' ' || c == '/' || c == '@' || c == '[' || c == ']')) {
      throw ApiException.invalid(FIELD, bad);
    }
    if (!portText.matches("[0-9]{1,5}")
        || Integer.parseInt(portText) < 1
        || Integer.parseInt(portText) > 65535) {
      throw ApiException.invalid(FIELD, bad + " (the port must be in [1, 65535])");
    }
    InetSocketAddress address = new InetSocketAddress(host, Integer.parseInt(portText));
    if (address.isUnresolved()) {
      throw ApiException.invalid(
          FIELD, "pd.decode=\"" + quote(text) + "\": the host does not resolve to an address");
    }
    return address;
  }

  /**
   * The answer of {@code GET /pd}: {@code {"role", "kv_endpoint" (decode only), "model"}}, what the
   * router's poller reads (it chooses a backend whose role is the one it was given, and sends a
   * decode engine's {@code kv_endpoint} to prefill engines).
   *
   * <p>A KV listener bound to a wildcard address (0.0.0.0, ::) has no address of its own to name:
   * the answer names the address this {@code /pd} request reached ({@code reached}), which the
   * router just dialed, with the listener's port. A deployment whose prefill engines reach the
   * decode host at another address than the router does binds {@code --pd-host} to that address.
   *
   * @param endpoint the decode engine's bound KV address ({@code Engine#pdEndpoint})
   * @param reached the local address of the connection the request came on (null if unknown)
   */
  static ObjectNode answer(
      EngineRole role, Optional<InetSocketAddress> endpoint, String model, InetAddress reached) {
    ObjectNode out = Completions.JSON.createObjectNode();
    out.put("role", role.wireName());
    if (role == EngineRole.DECODE && endpoint.isPresent()) {
      out.put("kv_endpoint", kvEndpoint(endpoint.get(), reached));
    }
    out.put("model", model);
    return out;
  }

  /** What {@code /pd} names as the KV endpoint bound at {@code bound} ({@link #answer}). */
  static String kvEndpoint(InetSocketAddress bound, InetAddress reached) {
    InetAddress a = bound.getAddress();
    if ((a == null || a.isAnyLocalAddress()) && reached != null) {
      return hostPort(reached, bound.getPort());
    }
    return hostPort(bound);
  }

  /** {@code host:port} of {@code a}: its address literal (an IPv6 one in brackets), or its name. */
  public static String hostPort(InetSocketAddress a) {
    if (a.getAddress() != null) {
      return hostPort(a.getAddress(), a.getPort());
    }
    String host = a.getHostString();
    return (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + a.getPort();
  }

  static String hostPort(InetAddress a, int port) {
    String literal = a.getHostAddress();
    return (a instanceof Inet6Address ? "[" + literal + "]" : literal) + ":" + port;
  }

  /** At most {@value #QUOTED} characters of a refused value. */
  private static String quote(String text) {
    return text.length() <= QUOTED ? text : text.substring(0, QUOTED) + "...";
  }

  private static String describe(JsonNode v) {
    return switch (v.getNodeType()) {
      case STRING -> "the string \"" + quote(v.asText()) + "\"";
      case NUMBER -> "the number " + quote(v.asText());
      case BOOLEAN -> v.asText();
      case ARRAY -> "an array";
      case OBJECT -> "an object";
      default -> v.getNodeType().name().toLowerCase(java.util.Locale.ROOT);
    };
  }
}
