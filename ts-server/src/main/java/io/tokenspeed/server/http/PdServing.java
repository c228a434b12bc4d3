package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.EngineRole;
import io.tokenspeed.engine.PdTicket;
import java.math.BigInteger;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Optional;
import java.util.regex.Pattern;

/**
 * The serving side of prefill/decode disaggregation (docs/pd.md): the {@code pd} field a router
 * adds to each completion it sends an engine, and the {@code GET /pd} answer it polls.
 *
 * <p><b>The field.</b> {@code "pd": {"room": R, "decode": D}} to a prefill engine, where D is the
 * decode replica's KV endpoints: one {@code "host:port"} string (a decode replica of one rank) or a
 * JSON array of 1 to {@value #MAX_RANKS} of them, in the decode replica's rank order. {@code "pd":
 * {"room": R}} or {@code {"room": R, "prefill_ranks": K}} to a decode engine, K the prefill
 * replica's size (a JSON integer in [1, {@value #MAX_RANKS}]; 1 when absent). R is the room both
 * halves share: the decimal string of an unsigned 64-bit value, never 0 ({@code
 * "13260572831089785859"}; a JSON number loses precision above 2^53 in many parsers, so the router
 * writes a string), or a JSON integer in the same range. The string is canonical: digits only, no
 * sign, no leading zero, no white space. Every refusal is a 400 naming the field: a fused engine
 * takes no {@code pd} at all (it would silently serve the whole request), a prefill engine needs
 * {@code decode} and takes no {@code prefill_ranks}, a decode engine takes no {@code decode}, and
 * unknown keys are refused (a newer router's field must not be dropped unread). One room is one
 * choice: {@code n} above 1, {@code best_of} above 1 or a batch of prompts is refused.
 */
public final class PdServing {
  private PdServing() {}

  /** The request field. */
  static final String FIELD = "pd";

  /** The largest room: 2^64 - 1. */
  static final BigInteger MAX_ROOM = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);

  /** A canonical room string: 1 to 20 digits without a leading zero. */
  private static final Pattern ROOM = Pattern.compile("[1-9][0-9]{0,19}");

  /**
   * The most ranks a replica on either side of a disaggregated request has: the entries of {@code
   * pd.decode}, the value of {@code pd.prefill_ranks}.
   */
  public static final int MAX_RANKS = 256;

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
      if (!key.equals("room") && !key.equals("decode") && !key.equals("prefill_ranks")) {
        throw ApiException.invalid(
            FIELD,
            "pd."
                + quote(key)
                + " is not a field of pd; its fields are room, decode and prefill_ranks");
      }
    }
    long room = room(pd.get("room"));
    JsonNode decode = pd.get("decode");
    boolean hasDecode = decode != null && !decode.isNull();
    JsonNode prefillRanks = pd.get("prefill_ranks");
    boolean hasPrefillRanks = prefillRanks != null && !prefillRanks.isNull();
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
      return new PdTicket.Decode(room, hasPrefillRanks ? prefillRanks(prefillRanks) : 1);
    }
    if (hasPrefillRanks) {
      throw ApiException.invalid(
          FIELD, "pd.prefill_ranks is for a decode engine; this engine's role is prefill");
    }
    if (!hasDecode) {
      throw ApiException.invalid(
          FIELD,
          "pd.decode (the decode replica's KV endpoints: host:port, or an array of them by"
              + " rank) is required by a prefill engine");
    }
    return new PdTicket.Prefill(room, decodeRanks(decode));
  }

  /**
   * A prefill replica's size: a JSON integer in [1, {@value #MAX_RANKS}] (not a string, not a
   * fraction).
   */
  static int prefillRanks(JsonNode v) {
    if (v.isIntegralNumber()) {
      BigInteger b = v.bigIntegerValue();
      if (b.signum() > 0 && b.compareTo(BigInteger.valueOf(MAX_RANKS)) <= 0) {
        return b.intValue();
      }
      throw ApiException.invalid(
          FIELD,
          "pd.prefill_ranks="
              + quote(b.toString())
              + " is out of range [1, "
              + MAX_RANKS
              + "] (the prefill replica's ranks)");
    }
    throw ApiException.invalid(
        FIELD,
        "pd.prefill_ranks must be an integer in [1, "
            + MAX_RANKS
            + "] (the prefill replica's ranks); got "
            + describe(v));
  }

  /**
   * The decode replica's KV endpoints by rank: one {@code host:port} string, or an array of 1 to
   * {@value #MAX_RANKS} of them, each resolved; no endpoint twice.
   */
  static List<InetSocketAddress> decodeRanks(JsonNode v) {
    if (v.isTextual()) {
      return List.of(decode(v, "pd.decode"));
    }
    if (!v.isArray()) {
      throw ApiException.invalid(
          FIELD,
          "pd.decode must be a host:port string or an array of them (one per decode rank); got "
              + describe(v));
    }
    if (v.isEmpty() || v.size() > MAX_RANKS) {
      throw ApiException.invalid(
          FIELD,
          "pd.decode must list 1 to "
              + MAX_RANKS
              + " KV endpoints (one per decode rank); got "
              + v.size());
    }
    List<InetSocketAddress> out = new ArrayList<>(v.size());
    for (int i = 0; i < v.size(); i++) {
      InetSocketAddress a = decode(v.get(i), "pd.decode[" + i + "]");
      int same = out.indexOf(a);
      if (same >= 0) {
        throw ApiException.invalid(
            FIELD,
            "pd.decode["
                + i
                + "] names the KV endpoint of pd.decode["
                + same
                + "] again; each decode rank has its own");
      }
      out.add(a);
    }
    return out;
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

  /** A decode rank's KV endpoint, {@code host:port} (an IPv6 literal in brackets), resolved. */
  static InetSocketAddress decode(JsonNode v, String name) {
    if (!v.isTextual()) {
      throw ApiException.invalid(FIELD, name + " must be a host:port string; got " + describe(v));
    }
    String text = v.asText();
    String bad = name + "=\"" + quote(text) + "\" is not host:port";
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
          FIELD, name + "=\"" + quote(text) + "\": the host does not resolve to an address");
    }
    return address;
  }

  /**
   * The answer of {@code GET /pd}: {@code {"role", "tp", "kv_endpoint" and "kv_endpoints" (decode
   * only), "model"}}, what the router's poller reads (it chooses a backend whose role is the one it
   * was given, sends a decode replica's {@code kv_endpoints} to prefill engines and a prefill
   * replica's {@code tp} to decode engines).
   *
   * <p>{@code kv_endpoint} is this rank's (rank 0's) KV endpoint, kept for routers that read one
   * address; {@code kv_endpoints} every rank's, in rank order, and only once every rank's is known
   * ({@code Engine#pdEndpoints} complete): a decode answer whose {@code tp} is above 1 and that has
   * no {@code kv_endpoints} is not complete yet, and a router does not choose it.
   *
   * <p>A KV listener bound to a wildcard address (0.0.0.0, ::) has no address of its own to name:
   * the answer names the address this {@code /pd} request reached ({@code reached}), which the
   * router just dialed, with the listener's port. A deployment whose prefill engines reach the
   * decode host at another address than the router does binds {@code --pd-host} to that address.
   *
   * @param tp the replica's ranks
   * @param endpoint the decode engine's bound KV address ({@code Engine#pdEndpoint})
   * @param endpoints every decode rank's bound KV address by rank ({@code Engine#pdEndpoints}):
   *     empty until every rank's is known
   * @param reached the local address of the connection the request came on (null if unknown)
   */
  static ObjectNode answer(
      EngineRole role,
      int tp,
      Optional<InetSocketAddress> endpoint,
      List<InetSocketAddress> endpoints,
      String model,
      InetAddress reached) {
    ObjectNode out = Completions.JSON.createObjectNode();
    out.put("role", role.wireName());
    out.put("tp", tp);
    if (role == EngineRole.DECODE && endpoint.isPresent()) {
      out.put("kv_endpoint", kvEndpoint(endpoint.get(), reached));
    }
    if (role == EngineRole.DECODE && !endpoints.isEmpty() && endpoints.size() == tp) {
      ArrayNode all = out.putArray("kv_endpoints");
      for (InetSocketAddress a : endpoints) {
        all.add(kvEndpoint(a, reached));
      }
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
