package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.EngineRole;
import io.tokenspeed.engine.PdTicket;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatTemplate;
import java.math.BigInteger;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.SplittableRandom;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The {@code pd} field of a completion request ({@link PdServing#ticket}, through {@link
 * RequestParser}) and the {@code GET /pd} answer ({@link PdServing#answer}), without an engine.
 */
class PdFieldTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Tokenizer TOKENIZER = ByteTokenizer.plain();
  private static final BigInteger TWO_64 = BigInteger.ONE.shiftLeft(64);

  private static RequestParser parser(EngineRole role) {
    return new RequestParser(
        "tiny",
        TOKENIZER,
        TOKENIZER.vocabSize(),
        4096,
        Serving.chatPrompt(ChatTemplate.plain(), TOKENIZER),
        role);
  }

  private static JsonNode body(String json) {
    try {
      return JSON.readTree(json);
    } catch (Exception e) {
      throw new AssertionError(json, e);
    }
  }

  private static PdTicket parse(EngineRole role, String json) {
    return parser(role).parse(body(json), false).pd();
  }

  private static ApiException refused(EngineRole role, String json) {
    return assertThrows(ApiException.class, () -> parser(role).parse(body(json), false), json);
  }

  @Test
  void shouldGiveADecodeTicketWithTheRoomOfTheDecimalString() {
    PdTicket t =
        parse(EngineRole.DECODE, "{\"prompt\":\"hi\",\"pd\":{\"room\":\"13260572831089785859\"}}");
    assertEquals(new PdTicket.Decode(Long.parseUnsignedLong("13260572831089785859")), t);
    // the largest room and the smallest, as strings and as JSON integers
    assertEquals(
        -1L,
        parse(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":\"18446744073709551615\"}}")
            .room());
    assertEquals(
        -1L,
        parse(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":18446744073709551615}}")
            .room());
    assertEquals(1L, parse(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":1}}").room());
    assertEquals(1L, parse(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":\"1\"}}").room());
  }

  @Test
  void shouldGiveAPrefillTicketWithTheResolvedDecodeEndpoint() {
    PdTicket t =
        parse(
            EngineRole.PREFILL,
            "{\"prompt\":\"hi\",\"pd\":{\"room\":\"7\",\"decode\":\"127.0.0.1:9100\"}}");
    PdTicket.Prefill p = assertInstanceOf(PdTicket.Prefill.class, t);
    assertEquals(7, p.room());
    assertEquals(new InetSocketAddress("127.0.0.1", 9100), p.decodeRanks().getFirst());
    assertFalse(p.decodeRanks().getFirst().isUnresolved());
    PdTicket.Prefill v6 =
        assertInstanceOf(
            PdTicket.Prefill.class,
            parse(
                EngineRole.PREFILL,
                "{\"prompt\":\"hi\",\"pd\":{\"room\":\"7\",\"decode\":\"[::1]:9\"}}"));
    assertEquals(new InetSocketAddress("::1", 9), v6.decodeRanks().getFirst());
    PdTicket.Prefill named =
        assertInstanceOf(
            PdTicket.Prefill.class,
            parse(
                EngineRole.PREFILL,
                "{\"prompt\":\"hi\",\"pd\":{\"room\":\"7\",\"decode\":\"localhost:9\"}}"));
    assertFalse(named.decodeRanks().getFirst().isUnresolved());
  }

  @Test
  void shouldTakeNoTicketWithoutTheFieldOrWithNull() {
    for (EngineRole role : EngineRole.values()) {
      assertNull(parse(role, "{\"prompt\":\"hi\"}"));
      assertNull(parse(role, "{\"prompt\":\"hi\",\"pd\":null}"));
    }
  }

  @Test
  void shouldRefuseAnyPdFieldOnAFusedEngine() {
    ApiException e = refused(EngineRole.FUSED, "{\"prompt\":\"hi\",\"pd\":{\"room\":\"5\"}}");
    assertEquals(400, e.status());
    assertEquals("pd", e.param());
    assertTrue(e.getMessage().contains("fused"), e.getMessage());
    assertEquals("pd", refused(EngineRole.FUSED, "{\"prompt\":\"hi\",\"pd\":{}}").param());
    assertEquals("pd", refused(EngineRole.FUSED, "{\"prompt\":\"hi\",\"pd\":3}").param());
  }

  @Test
  void shouldRefuseWhatTheRoleDoesNotTake() {
    ApiException noDecode =
        refused(EngineRole.PREFILL, "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\"}}");
    assertTrue(noDecode.getMessage().contains("pd.decode"), noDecode.getMessage());
    ApiException extraDecode =
        refused(
            EngineRole.DECODE,
            "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\",\"decode\":\"127.0.0.1:9\"}}");
    assertTrue(extraDecode.getMessage().contains("pd.decode"), extraDecode.getMessage());
    ApiException unknown =
        refused(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\",\"rooms\":1}}");
    assertTrue(unknown.getMessage().contains("pd.rooms"), unknown.getMessage());
    ApiException noRoom = refused(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{}}");
    assertTrue(noRoom.getMessage().contains("pd.room is required"), noRoom.getMessage());
    ApiException notObject = refused(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":\"5\"}");
    assertTrue(notObject.getMessage().contains("must be an object"), notObject.getMessage());
    for (ApiException e : List.of(noDecode, extraDecode, unknown, noRoom, notObject)) {
      assertEquals(400, e.status());
      assertEquals("pd", e.param());
    }
  }

  @Test
  void shouldRefuseSeveralChoicesOnePerRoom() {
    for (String json :
        List.of(
            "{\"prompt\":\"a\",\"n\":2,\"pd\":{\"room\":\"5\"}}",
            "{\"prompt\":\"a\",\"n\":2,\"best_of\":2,\"pd\":{\"room\":\"5\"}}",
            "{\"prompt\":[\"a\",\"b\"],\"pd\":{\"room\":\"5\"}}")) {
      ApiException e = refused(EngineRole.DECODE, json);
      assertEquals("pd", e.param(), json);
      assertTrue(e.getMessage().contains("one choice"), e.getMessage());
    }
  }

  @Test
  void shouldPassLogprobsOfADecodeTicketOn() {
    // the prefill engine sends the first token's log probabilities in DONE: both halves ask
    GenerationRequest completion =
        parser(EngineRole.DECODE)
            .parse(body("{\"prompt\":\"a\",\"logprobs\":3,\"pd\":{\"room\":\"5\"}}"), false);
    assertEquals(3, completion.topLogprobs());
    GenerationRequest chat =
        parser(EngineRole.DECODE)
            .parse(
                body(
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                        + "\"logprobs\":true,\"top_logprobs\":2,\"pd\":{\"room\":\"5\"}}"),
                true);
    assertEquals(2, chat.topLogprobs());
  }

  @Test
  void shouldRefuseMalformedDecodeEndpoints() {
    for (String bad :
        List.of(
            "127.0.0.1",
            "127.0.0.1:",
            ":9",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:-1",
            "127.0.0.1:+9",
            "127.0.0.1:9x",
            "::1:9",
            "[127.0.0.1]:9",
            "[]:9",
            "a b:9",
            "user@host:9",
            "http://host:9",
            "host.invalid:9")) {
      String json =
          "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\",\"decode\":" + JSON.valueToTree(bad) + "}}";
      ApiException e = refused(EngineRole.PREFILL, json);
      assertEquals(400, e.status(), bad);
      assertEquals("pd", e.param(), bad);
      assertTrue(e.getMessage().contains("pd.decode"), e.getMessage());
    }
    ApiException number =
        refused(EngineRole.PREFILL, "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\",\"decode\":9}}");
    assertTrue(number.getMessage().contains("host:port string"), number.getMessage());
  }

  /**
   * Seeded random room values, strings and numbers, against an oracle written apart from the
   * parser: a string is a room when it is canonical decimal (a digit 1-9, then digits) of a value
   * below 2^64; a JSON number when it is an integer in [1, 2^64 - 1]. Everything else is a 400
   * naming {@code pd} with {@code pd.room} in a one-line message.
   */
  @Test
  void shouldTakeExactlyTheRoomsTheOracleTakesAmongRandomValues() {
    SplittableRandom random = new SplittableRandom(20261207);
    String alphabet = "0123456789012345678901234567890123456789 -+.eExX_,\t\n٣\u0000a";
    int accepted = 0;
    int refused = 0;
    for (int i = 0; i < 4000; i++) {
      JsonNode room = randomRoom(random, alphabet);
      ObjectNode body = JsonNodeFactory.instance.objectNode();
      body.put("prompt", "a");
      body.putObject("pd").set("room", room);
      BigInteger expected = oracle(room);
      if (expected != null) {
        PdTicket t = parser(EngineRole.DECODE).parse(body, false).pd();
        assertEquals(expected.longValue(), t.room(), room::toString);
        assertEquals(expected.toString(), Long.toUnsignedString(t.room()), room::toString);
        accepted++;
      } else {
        ApiException e =
            assertThrows(
                ApiException.class,
                () -> parser(EngineRole.DECODE).parse(body, false),
                room::toString);
        assertEquals(400, e.status(), room::toString);
        assertEquals("pd", e.param(), room::toString);
        assertTrue(e.getMessage().startsWith("pd.room"), e.getMessage());
        assertFalse(e.getMessage().contains("\n"), e.getMessage());
        refused++;
      }
    }
    assertTrue(accepted > 400 && refused > 400, accepted + " accepted, " + refused + " refused");
  }

  private static final Pattern CANONICAL = Pattern.compile("[1-9][0-9]*");

  private static BigInteger oracle(JsonNode room) {
    BigInteger value;
    if (room.isTextual()) {
      if (!CANONICAL.matcher(room.asText()).matches()) {
        return null;
      }
      value = new BigInteger(room.asText());
    } else if (room.isIntegralNumber()) {
      value = room.bigIntegerValue();
    } else {
      return null;
    }
    return value.signum() > 0 && value.compareTo(TWO_64) < 0 ? value : null;
  }

  private static JsonNode randomRoom(SplittableRandom r, String alphabet) {
    JsonNodeFactory f = JsonNodeFactory.instance;
    BigInteger near = TWO_64.add(BigInteger.valueOf(r.nextInt(-3, 4)));
    BigInteger any = new BigInteger(r.nextInt(1, 70), new java.util.Random(r.nextLong()));
    return switch (r.nextInt(12)) {
      case 0 -> f.textNode(any.toString()); // a room unless 0 or too large
      case 1 -> f.textNode(near.toString()); // around 2^64
      case 2 -> f.textNode("0".repeat(r.nextInt(1, 3)) + any); // a leading zero
      case 3 -> f.textNode((r.nextBoolean() ? "-" : "+") + any);
      case 4 -> {
        StringBuilder sb = new StringBuilder();
        int n = r.nextInt(0, 24);
        for (int k = 0; k < n; k++) {
          sb.append(alphabet.charAt(r.nextInt(alphabet.length())));
        }
        yield f.textNode(sb.toString());
      }
      case 5 -> f.numberNode(any.negate());
      case 6 -> f.numberNode(any);
      case 7 -> f.numberNode(near);
      case 8 -> f.numberNode(r.nextDouble() * 1e20);
      case 9 -> f.numberNode(new java.math.BigDecimal(any).add(new java.math.BigDecimal("0.5")));
      case 10 -> r.nextBoolean() ? f.booleanNode(true) : f.arrayNode().add(any.toString());
      default -> {
        String s = any.toString();
        int at = r.nextInt(s.length() + 1);
        yield f.textNode(
            s.substring(0, at) + alphabet.charAt(r.nextInt(alphabet.length())) + s.substring(at));
      }
    };
  }

  @Test
  void shouldAnswerPdWithTheRoleTheSizeTheEndpointsAndTheModel() throws Exception {
    InetAddress loopback = InetAddress.getByName("127.0.0.1");
    assertEquals(
        "{\"role\":\"fused\",\"tp\":1,\"model\":\"m\"}",
        PdServing.answer(EngineRole.FUSED, 1, Optional.empty(), List.of(), "m", loopback)
            .toString());
    assertEquals(
        "{\"role\":\"prefill\",\"tp\":2,\"model\":\"m\"}",
        PdServing.answer(EngineRole.PREFILL, 2, Optional.empty(), List.of(), "m", loopback)
            .toString());
    InetSocketAddress rank0 = new InetSocketAddress(loopback, 9100);
    InetSocketAddress rank1 = new InetSocketAddress(loopback, 9101);
    assertEquals(
        "{\"role\":\"decode\",\"tp\":1,\"kv_endpoint\":\"127.0.0.1:9100\","
            + "\"kv_endpoints\":[\"127.0.0.1:9100\"],\"model\":\"m\"}",
        PdServing.answer(EngineRole.DECODE, 1, Optional.of(rank0), List.of(rank0), "m", null)
            .toString());
    assertEquals(
        "{\"role\":\"decode\",\"tp\":2,\"kv_endpoint\":\"127.0.0.1:9100\","
            + "\"kv_endpoints\":[\"127.0.0.1:9100\",\"127.0.0.1:9101\"],\"model\":\"m\"}",
        PdServing.answer(EngineRole.DECODE, 2, Optional.of(rank0), List.of(rank0, rank1), "m", null)
            .toString());
    // before every rank's endpoint is known: no kv_endpoints, which a router reads as incomplete
    assertEquals(
        "{\"role\":\"decode\",\"tp\":2,\"kv_endpoint\":\"127.0.0.1:9100\",\"model\":\"m\"}",
        PdServing.answer(EngineRole.DECODE, 2, Optional.of(rank0), List.of(), "m", null)
            .toString());
    // every rank's wildcard listener is named by the address the request reached
    InetAddress reached = InetAddress.getByName("10.1.2.3");
    assertEquals(
        "[\"10.1.2.3:9100\",\"10.1.2.3:9101\"]",
        PdServing.answer(
                EngineRole.DECODE,
                2,
                Optional.of(new InetSocketAddress("0.0.0.0", 9100)),
                List.of(
                    new InetSocketAddress("0.0.0.0", 9100), new InetSocketAddress("0.0.0.0", 9101)),
                "m",
                reached)
            .get("kv_endpoints")
            .toString());
  }

  @Test
  void shouldNameTheAddressTheRequestReachedForAWildcardListener() throws Exception {
    InetAddress reached = InetAddress.getByName("10.1.2.3");
    assertEquals(
        "10.1.2.3:9100", PdServing.kvEndpoint(new InetSocketAddress("0.0.0.0", 9100), reached));
    assertEquals(
        "[fe80:0:0:0:0:0:0:1]:9100",
        PdServing.kvEndpoint(new InetSocketAddress("::", 9100), InetAddress.getByName("fe80::1")));
    // a listener bound to an address of its own names it, whatever the request reached
    assertEquals(
        "127.0.0.2:9100", PdServing.kvEndpoint(new InetSocketAddress("127.0.0.2", 9100), reached));
    assertEquals("[0:0:0:0:0:0:0:1]:7", PdServing.hostPort(new InetSocketAddress("::1", 7)));
  }

  @Test
  void shouldKeepRefusalsOfLongValuesShort() {
    String longRoom = "9".repeat(5000);
    ApiException e =
        refused(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":\"" + longRoom + "\"}}");
    assertTrue(e.getMessage().length() < 300, e.getMessage());
    List<String> keys = new ArrayList<>();
    keys.add("k".repeat(5000));
    ApiException key =
        refused(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"" + keys.getFirst() + "\":1}}");
    assertTrue(key.getMessage().length() < 300, key.getMessage());
  }

  @Test
  void shouldGiveAPrefillTicketWithEveryDecodeRanksEndpointOfAnArray() {
    PdTicket.Prefill p =
        assertInstanceOf(
            PdTicket.Prefill.class,
            parse(
                EngineRole.PREFILL,
                "{\"prompt\":\"hi\",\"pd\":{\"room\":\"7\",\"decode\":"
                    + "[\"127.0.0.1:9100\",\"[::1]:9101\",\"localhost:9102\"]}}"));
    assertEquals(7, p.room());
    assertEquals(
        List.of(
            new InetSocketAddress("127.0.0.1", 9100),
            new InetSocketAddress("::1", 9101),
            new InetSocketAddress("localhost", 9102)),
        p.decodeRanks());
    // one entry is a decode replica of one rank, as the plain string is
    assertEquals(
        parse(
            EngineRole.PREFILL,
            "{\"prompt\":\"hi\",\"pd\":{\"room\":\"7\",\"decode\":\"127.0.0.1:9\"}}"),
        parse(
            EngineRole.PREFILL,
            "{\"prompt\":\"hi\",\"pd\":{\"room\":\"7\",\"decode\":[\"127.0.0.1:9\"]}}"));
  }

  @Test
  void shouldGiveADecodeTicketWithThePrefillReplicasRanks() {
    assertEquals(
        new PdTicket.Decode(5, 2),
        parse(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\",\"prefill_ranks\":2}}"));
    assertEquals(
        new PdTicket.Decode(5, 1),
        parse(EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\"}}"));
    assertEquals(
        new PdTicket.Decode(5, 1),
        parse(
            EngineRole.DECODE,
            "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\",\"prefill_ranks\":null}}"));
    assertEquals(
        new PdTicket.Decode(5, PdServing.MAX_RANKS),
        parse(
            EngineRole.DECODE, "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\",\"prefill_ranks\":256}}"));
    ApiException onPrefill =
        refused(
            EngineRole.PREFILL,
            "{\"prompt\":\"a\",\"pd\":{\"room\":\"5\",\"decode\":\"127.0.0.1:9\","
                + "\"prefill_ranks\":1}}");
    assertEquals("pd", onPrefill.param());
    assertTrue(onPrefill.getMessage().startsWith("pd.prefill_ranks"), onPrefill.getMessage());
  }

  /**
   * Seeded random {@code pd.decode} arrays against an oracle written apart from the parser: an
   * array is taken when it has 1 to 256 entries, each a {@code host:port} string of a literal
   * address (IPv6 in brackets) and a port in [1, 65535], no two alike; the ticket then lists them
   * in order. Everything else is a 400 naming {@code pd}, its message about {@code pd.decode}.
   */
  @Test
  void shouldTakeExactlyTheDecodeArraysTheOracleTakesAmongRandomOnes() {
    SplittableRandom random = new SplittableRandom(20261208);
    int accepted = 0;
    int refused = 0;
    for (int i = 0; i < 600; i++) {
      List<Object> entries = randomDecodeArray(random);
      ObjectNode body = JsonNodeFactory.instance.objectNode();
      body.put("prompt", "a");
      ObjectNode pd = body.putObject("pd");
      pd.put("room", "9");
      var array = pd.putArray("decode");
      for (Object e : entries) {
        array.add(e instanceof JsonNode n ? n : JsonNodeFactory.instance.textNode((String) e));
      }
      List<InetSocketAddress> expected = decodeOracle(entries);
      if (expected != null) {
        PdTicket.Prefill t =
            assertInstanceOf(
                PdTicket.Prefill.class, parser(EngineRole.PREFILL).parse(body, false).pd());
        assertEquals(expected, t.decodeRanks(), array::toString);
        accepted++;
      } else {
        ApiException e =
            assertThrows(
                ApiException.class,
                () -> parser(EngineRole.PREFILL).parse(body, false),
                array::toString);
        assertEquals(400, e.status(), array::toString);
        assertEquals("pd", e.param(), array::toString);
        assertTrue(e.getMessage().startsWith("pd.decode"), e.getMessage());
        assertFalse(e.getMessage().contains("\n"), e.getMessage());
        assertTrue(e.getMessage().length() < 300, e.getMessage());
        refused++;
      }
    }
    assertTrue(accepted > 100 && refused > 100, accepted + " accepted, " + refused + " refused");
  }

  private static final Pattern V4 =
      Pattern.compile("(\\d{1,3})\\.(\\d{1,3})\\.(\\d{1,3})\\.(\\d{1,3})");

  /** The endpoints a {@code pd.decode} array names, or null when it must be refused. */
  private static List<InetSocketAddress> decodeOracle(List<Object> entries) {
    if (entries.isEmpty() || entries.size() > 256) {
      return null;
    }
    List<InetSocketAddress> out = new ArrayList<>();
    for (Object e : entries) {
      if (!(e instanceof String text)) {
        return null;
      }
      int colon = text.lastIndexOf(':');
      if (colon < 0) {
        return null;
      }
      String host = text.substring(0, colon);
      String port = text.substring(colon + 1);
      if (!port.matches("[0-9]{1,5}")
          || Integer.parseInt(port) < 1
          || Integer.parseInt(port) > 65535) {
        return null;
      }
      String literal;
      if (host.equals("[::1]")) {
        literal = "::1";
      } else if (V4.matcher(host).matches()) {
        literal = host;
      } else {
        return null;
      }
      InetSocketAddress a = new InetSocketAddress(literal, Integer.parseInt(port));
      if (out.contains(a)) {
        return null;
      }
      out.add(a);
    }
    return out;
  }

  /** Entries: mostly good endpoints, sometimes a bad one, a duplicate, or a wrong length. */
  private static List<Object> randomDecodeArray(SplittableRandom r) {
    JsonNodeFactory f = JsonNodeFactory.instance;
    int n =
        switch (r.nextInt(10)) {
          case 0 -> 0;
          case 1 -> 256 + r.nextInt(1, 3);
          case 2 -> 256;
          default -> r.nextInt(1, 9);
        };
    List<Object> out = new ArrayList<>();
    for (int k = 0; k < n; k++) {
      out.add(
          r.nextInt(8) == 0
              ? "[::1]:" + (1000 + k)
              : "127.0." + r.nextInt(0, 3) + "." + r.nextInt(1, 4) + ":" + (9000 + k));
    }
    if (n > 0 && r.nextInt(3) == 0) {
      int at = r.nextInt(n);
      Object bad =
          switch (r.nextInt(11)) {
            case 0 -> f.numberNode(9100);
            case 1 -> f.nullNode();
            case 2 -> f.objectNode().put("host", "127.0.0.1");
            case 3 -> f.arrayNode().add("127.0.0.1:9");
            case 4 -> "127.0.0.1";
            case 5 -> "127.0.0.1:0";
            case 6 -> "127.0.0.1:" + (65536 + r.nextInt(1000));
            case 7 -> "::1:9";
            case 8 -> "host.invalid:9";
            case 9 -> f.booleanNode(true);
            default -> out.get(r.nextInt(n)); // a duplicate (or the entry itself)
          };
      out.set(at, bad);
    }
    return out;
  }

  /**
   * Seeded random {@code pd.prefill_ranks} values: a JSON integer in [1, 256] is the ticket's
   * prefill ranks; anything else (0, negatives, above 256, fractions, strings, booleans, arrays,
   * objects) is a 400 naming {@code pd}, its message about {@code pd.prefill_ranks}.
   */
  @Test
  void shouldTakeExactlyThePrefillRanksTheOracleTakesAmongRandomValues() {
    SplittableRandom random = new SplittableRandom(20261209);
    JsonNodeFactory f = JsonNodeFactory.instance;
    int accepted = 0;
    int refused = 0;
    for (int i = 0; i < 2000; i++) {
      long v = random.nextInt(3) == 0 ? random.nextLong() : random.nextInt(-3, 300);
      JsonNode value =
          switch (random.nextInt(8)) {
            case 0 -> f.textNode(Long.toString(v));
            case 1 -> f.numberNode(v + 0.5);
            case 2 -> f.numberNode((double) v);
            case 3 -> random.nextBoolean() ? f.booleanNode(true) : f.arrayNode().add(v);
            case 4 -> f.numberNode(BigInteger.valueOf(v).shiftLeft(64).add(BigInteger.valueOf(v)));
            default -> f.numberNode(v);
          };
      ObjectNode body = JsonNodeFactory.instance.objectNode();
      body.put("prompt", "a");
      body.putObject("pd").put("room", "5").set("prefill_ranks", value);
      Integer expected =
          value.isIntegralNumber()
                  && value.bigIntegerValue().compareTo(BigInteger.ONE) >= 0
                  && value.bigIntegerValue().compareTo(BigInteger.valueOf(256)) <= 0
              ? value.intValue()
              : null;
      if (expected != null) {
        PdTicket t = parser(EngineRole.DECODE).parse(body, false).pd();
        assertEquals(new PdTicket.Decode(5, expected), t, value::toString);
        accepted++;
      } else {
        ApiException e =
            assertThrows(
                ApiException.class,
                () -> parser(EngineRole.DECODE).parse(body, false),
                value::toString);
        assertEquals(400, e.status(), value::toString);
        assertEquals("pd", e.param(), value::toString);
        assertTrue(e.getMessage().startsWith("pd.prefill_ranks"), e.getMessage());
        assertTrue(e.getMessage().length() < 300, e.getMessage());
        refused++;
      }
    }
    assertTrue(accepted > 200 && refused > 200, accepted + " accepted, " + refused + " refused");
  }
}
