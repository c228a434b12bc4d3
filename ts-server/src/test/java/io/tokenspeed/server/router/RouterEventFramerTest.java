package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.server.http.WebFront;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link EventFramer} over seeded random event streams (LF, CRLF and CR line ends, events of one or
 * more lines) cut into random pieces, against the event boundaries the generator knows: the framer
 * passes on every byte unchanged, only ever up to an event's end, and as soon as that end arrived.
 */
class RouterEventFramerTest {

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 40);
  }

  /** A random stream and the offsets just after each of its events. */
  private record Generated(byte[] bytes, List<Integer> ends) {}

  private static Generated generate(SplittableRandom r) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    List<Integer> ends = new ArrayList<>();
    String[] terminators = {"\n", "\r\n", "\r"};
    for (int e = 1 + r.nextInt(12); e > 0; e--) {
      String eol = terminators[r.nextInt(terminators.length)];
      for (int line = 1 + r.nextInt(3); line > 0; line--) {
        StringBuilder text = new StringBuilder("data: ");
        for (int c = r.nextInt(40); c > 0; c--) {
          text.append((char) (' ' + 1 + r.nextInt(94)));
        }
        out.writeBytes((text + eol).getBytes(StandardCharsets.US_ASCII));
      }
      out.writeBytes(eol.getBytes(StandardCharsets.US_ASCII));
      ends.add(out.size());
    }
    if (r.nextBoolean()) {
      out.writeBytes("data: unfinished".getBytes(StandardCharsets.US_ASCII)); // cut off
    }
    return new Generated(out.toByteArray(), ends);
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldPassEveryByteOnOnlyUpToACompleteEventAndAsSoonAsItArrives(long seed) {
    SplittableRandom r = new SplittableRandom(seed);
    Generated g = generate(r);
    EventFramer framer = new EventFramer();
    ByteArrayOutputStream passed = new ByteArrayOutputStream();
    int fed = 0;
    while (fed < g.bytes().length) {
      int n = Math.min(g.bytes().length - fed, 1 + r.nextInt(r.nextBoolean() ? 4 : 120));
      framer.append(Arrays.copyOfRange(g.bytes(), fed, fed + n));
      fed += n;
      passed.writeBytes(framer.takeComplete());
      int at = passed.size();
      byte[] bytes = g.bytes();
      // only up to an event's end (or the CR of its last CRLF, whose LF has not come yet)
      boolean atEnd = at == 0 || g.ends().contains(at);
      boolean beforeLf =
          g.ends().contains(at + 1) && bytes[at - 1] == '\r' && bytes[at] == '\n' && at == fed;
      assertTrue(atEnd || beforeLf, "seed " + seed + ": passed " + at + " of " + fed);
      // every event that arrived whole was passed on
      for (int end : g.ends()) {
        if (end <= fed) {
          assertTrue(end <= at || (end == at + 1 && beforeLf), "event ending at " + end);
        }
      }
    }
    passed.writeBytes(framer.takeAll());
    assertArrayEquals(g.bytes(), passed.toByteArray(), "seed " + seed + ": every byte, in order");
  }

  @Test
  void shouldHoldAnEventUntilItsBlankLineArrives() {
    EventFramer framer = new EventFramer();
    framer.append("data: {\"a\":1}\n".getBytes(StandardCharsets.US_ASCII));
    assertEquals(0, framer.takeComplete().length);
    framer.append("\ndata: {\"b\"".getBytes(StandardCharsets.US_ASCII));
    assertEquals(
        "data: {\"a\":1}\n\n", new String(framer.takeComplete(), StandardCharsets.US_ASCII));
    assertEquals("data: {\"b\"", new String(framer.takeAll(), StandardCharsets.US_ASCII));
    assertEquals(0, framer.takeAll().length);
  }

  @Test
  void shouldFindServesErrorEventAndNoOther() {
    byte[] serves = WebFront.errorEvent("the KV transfer failed", "upstream_error", 502);
    assertTrue(EventFramer.hasErrorEvent(serves), new String(serves, StandardCharsets.UTF_8));
    byte[] stream =
        ("data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"x\"}]}\n\n"
                + new String(serves, StandardCharsets.UTF_8)
                + "data: [DONE]\n\n")
            .getBytes(StandardCharsets.UTF_8);
    assertTrue(EventFramer.hasErrorEvent(stream));
    // the SSE forms: no space after the colon, CRLF and CR line ends
    for (String form :
        List.of(
            "data:{\"error\":{}}\n\n",
            "data:  {\"error\":{}}\n\n",
            ": comment\r\ndata: {\"error\":{}}\r\n\r\n",
            "data: [x]\rdata: {\"error\":{}}\r\r")) {
      assertTrue(EventFramer.hasErrorEvent(form.getBytes(StandardCharsets.US_ASCII)), form);
    }
    // a chunk whose text or fields merely mention an error is not an error event
    for (String form :
        List.of(
            "data: {\"choices\":[{\"text\":\"{\\\"error\\\"\"}]}\n\n",
            "data: {\"id\":1,\"error\":null}\n\n",
            "id: {\"error\"\n\n",
            "data: [DONE]\n\n",
            "")) {
      assertFalse(EventFramer.hasErrorEvent(form.getBytes(StandardCharsets.US_ASCII)), form);
    }
  }
}
