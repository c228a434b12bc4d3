package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.ScatteringByteChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The RESP2 reply decoder against a reference model: seeded random reply sequences (status, error,
 * integer, nil, bulk values read into a destination or skipped), delivered by a scripted channel
 * that cuts the byte stream at chosen points: at every single byte boundary, one byte per read, and
 * in random pieces. Malformed replies and an end of stream mid-value throw.
 */
class ReplyDecoderTest {

  /** One reply of the model, and what the test does with it. */
  private sealed interface Reply {
    void encode(ByteArrayOutputStream out);
  }

  private record Simple(String text) implements Reply {
    public void encode(ByteArrayOutputStream out) {
      out.writeBytes(ascii("+" + text + "\r\n"));
    }
  }

  private record Error(String text) implements Reply {
    public void encode(ByteArrayOutputStream out) {
      out.writeBytes(ascii("-" + text + "\r\n"));
    }
  }

  private record Integer(long value) implements Reply {
    public void encode(ByteArrayOutputStream out) {
      out.writeBytes(ascii(":" + value + "\r\n"));
    }
  }

  private record Nil(String wire) implements Reply {
    public void encode(ByteArrayOutputStream out) {
      out.writeBytes(ascii(wire));
    }
  }

  private record Bulk(byte[] value, boolean read) implements Reply {
    public void encode(ByteArrayOutputStream out) {
      out.writeBytes(FakeRedisServer.bulk(value));
    }
  }

  /** A channel that returns the script's bytes, never more at once than up to the next cut. */
  private static final class ScriptedChannel implements ScatteringByteChannel {
    private final byte[] bytes;
    private final int[] cuts; // ascending positions where one read must stop
    private int at;
    private int nextCut;
    int reads;

    ScriptedChannel(byte[] bytes, int... cuts) {
      this.bytes = bytes;
      this.cuts = cuts;
    }

    @Override
    public int read(ByteBuffer dst) {
      if (at == bytes.length) {
        return -1;
      }
      while (nextCut < cuts.length && cuts[nextCut] <= at) {
        nextCut++;
      }
      int end = nextCut < cuts.length ? Math.min(cuts[nextCut], bytes.length) : bytes.length;
      int n = Math.min(dst.remaining(), end - at);
      dst.put(bytes, at, n);
      at += n;
      reads++;
      return n;
    }

    @Override
    public long read(ByteBuffer[] dsts, int offset, int length) {
      if (at == bytes.length) {
        return -1;
      }
      while (nextCut < cuts.length && cuts[nextCut] <= at) {
        nextCut++;
      }
      int end = nextCut < cuts.length ? Math.min(cuts[nextCut], bytes.length) : bytes.length;
      long n = 0;
      for (int i = offset; i < offset + length && at < end; i++) {
        int take = Math.min(dsts[i].remaining(), end - at);
        dsts[i].put(bytes, at, take);
        at += take;
        n += take;
      }
      reads++;
      return n;
    }

    @Override
    public long read(ByteBuffer[] dsts) {
      return read(dsts, 0, dsts.length);
    }

    @Override
    public boolean isOpen() {
      return true;
    }

    @Override
    public void close() {}
  }

  static Stream<Long> seeds() {
    return LongStream.rangeClosed(1, 24).boxed();
  }

  private static List<Reply> randomReplies(SplittableRandom random, int count, int maxValueBytes) {
    List<Reply> replies = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      replies.add(
          switch (random.nextInt(7)) {
            case 0 -> new Simple(random.nextBoolean() ? "OK" : word(random));
            case 1 -> new Error(random.nextBoolean() ? "WRONGTYPE x" : "MOVED 12 h:1");
            case 2 -> new Integer(random.nextLong(-1_000_000_000_000L, 1_000_000_000_000L));
            case 3 -> new Nil(List.of("$-1\r\n", "*-1\r\n", "_\r\n").get(random.nextInt(3)));
            default -> {
              byte[] value = new byte[random.nextInt(maxValueBytes + 1)];
              random.nextBytes(value);
              yield new Bulk(value, random.nextInt(4) != 0);
            }
          });
    }
    return replies;
  }

  private static String word(SplittableRandom random) {
    StringBuilder b = new StringBuilder();
    for (int i = random.nextInt(1, 12); i > 0; i--) {
      b.append((char) ('a' + random.nextInt(26)));
    }
    return b.toString();
  }

  private static byte[] encode(List<Reply> replies) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    replies.forEach(r -> r.encode(out));
    return out.toByteArray();
  }

  /** Decodes {@code replies} from {@code channel} and checks each against the model. */
  private static void decodeAndCheck(List<Reply> replies, ScatteringByteChannel channel)
      throws IOException {
    ReplyDecoder decoder = new ReplyDecoder(channel, "test");
    try (Arena arena = Arena.ofConfined()) {
      for (int i = 0; i < replies.size(); i++) {
        Reply want = replies.get(i);
        ReplyDecoder.Kind kind = decoder.next();
        String where = "reply #" + i + " " + want;
        switch (want) {
          case Simple s -> {
            assertEquals(ReplyDecoder.Kind.SIMPLE, kind, where);
            assertEquals(s.text(), decoder.text(), where);
          }
          case Error e -> {
            assertEquals(ReplyDecoder.Kind.ERROR, kind, where);
            assertEquals(e.text(), decoder.text(), where);
          }
          case Integer n -> {
            assertEquals(ReplyDecoder.Kind.INTEGER, kind, where);
            assertEquals(n.value(), decoder.integer(), where);
          }
          case Nil n -> assertEquals(ReplyDecoder.Kind.NIL, kind, where);
          case Bulk b -> {
            assertEquals(ReplyDecoder.Kind.BULK, kind, where);
            assertEquals(b.value().length, decoder.length(), where);
            if (b.read()) {
              // a confined segment: the calling thread is the only one that touches it
              MemorySegment destination = arena.allocate(Math.max(1, b.value().length));
              destination = destination.asSlice(0, b.value().length);
              decoder.readBulk(destination);
              assertArrayEquals(b.value(), destination.toArray(ValueLayout.JAVA_BYTE), where);
            } else {
              decoder.skipBulk();
            }
          }
        }
      }
    }
    assertTrue(!decoder.hasBuffered(), "nothing left over");
    assertThrows(EOFException.class, decoder::next);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldDecodeLikeTheModelWhenTheStreamIsCutAtEveryByteBoundary(long seed) throws Exception {
    SplittableRandom random = new SplittableRandom(seed);
    List<Reply> replies = randomReplies(random, 6, 48);
    byte[] bytes = encode(replies);
    for (int cut = 1; cut < bytes.length; cut++) {
      decodeAndCheck(replies, new ScriptedChannel(bytes, cut));
    }
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldDecodeLikeTheModelWhenEveryReadReturnsOneByte(long seed) throws Exception {
    List<Reply> replies = randomReplies(new SplittableRandom(seed), 12, 600);
    byte[] bytes = encode(replies);
    int[] cuts = new int[bytes.length];
    for (int i = 0; i < cuts.length; i++) {
      cuts[i] = i + 1;
    }
    decodeAndCheck(replies, new ScriptedChannel(bytes, cuts));
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldDecodeLikeTheModelWhenLargeValuesArriveInRandomPieces(long seed) throws Exception {
    SplittableRandom random = new SplittableRandom(seed);
    List<Reply> replies = randomReplies(random, 20, 200_000);
    byte[] bytes = encode(replies);
    List<java.lang.Integer> cuts = new ArrayList<>();
    for (int at = 0; at < bytes.length; ) {
      at += 1 + random.nextInt(random.nextBoolean() ? 16 : 70_000);
      cuts.add(at);
    }
    decodeAndCheck(replies, new ScriptedChannel(bytes, cuts.stream().mapToInt(i -> i).toArray()));
  }

  @Test
  void shouldReadALargeValueStraightIntoTheDestinationWhenItFollowsItsHeader() throws Exception {
    byte[] value = new byte[1 << 20];
    new SplittableRandom(7).nextBytes(value);
    ScriptedChannel channel = new ScriptedChannel(FakeRedisServer.bulk(value));
    ReplyDecoder decoder = new ReplyDecoder(channel, "test");
    assertEquals(ReplyDecoder.Kind.BULK, decoder.next());
    MemorySegment destination = MemorySegment.ofArray(new byte[value.length]);
    int readsBefore = channel.reads;
    decoder.readBulk(destination);
    // the header read took at most HEADER_READ_BYTES; the rest came in one read, not in pieces
    // of a buffer's size
    assertTrue(channel.reads - readsBefore <= 2, "reads for the value: " + channel.reads);
    assertArrayEquals(value, destination.toArray(ValueLayout.JAVA_BYTE));
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(
      strings = {
        "?x\r\n",
        "$-2\r\n",
        ":12a\r\n",
        ":\r\n",
        ":-\r\n",
        "+OK\rX",
        "*2\r\n",
        "\r\n",
        "$3\r\nabcXY",
        "_x\r\n",
        ":99999999999999999999\r\n"
      })
  void shouldRefuseTheStreamWhenAReplyIsMalformed(String wire) {
    ReplyDecoder decoder = new ReplyDecoder(new ScriptedChannel(ascii(wire + "+OK\r\n")), "test");
    assertThrows(
        ReplyDecoder.ProtocolException.class,
        () -> {
          if (decoder.next() == ReplyDecoder.Kind.BULK) {
            decoder.readBulk(MemorySegment.ofArray(new byte[(int) decoder.length()]));
          }
        });
  }

  @Test
  void shouldRefuseALineLongerThanTheLimit() {
    byte[] line = new byte[ReplyDecoder.MAX_LINE_BYTES + 10];
    java.util.Arrays.fill(line, (byte) 'e');
    line[0] = '-';
    ReplyDecoder decoder = new ReplyDecoder(new ScriptedChannel(line), "test");
    assertThrows(ReplyDecoder.ProtocolException.class, decoder::next);
  }

  @ParameterizedTest(name = "cut after {0} bytes")
  @ValueSource(ints = {0, 1, 5, 6, 100, 4095, 4096})
  void shouldThrowEndOfStreamWhenTheConnectionClosesMidValue(int valueBytesSent) throws Exception {
    byte[] value = new byte[4096];
    byte[] whole = FakeRedisServer.bulk(value);
    int headerBytes = "$4096\r\n".length();
    byte[] cutShort = java.util.Arrays.copyOf(whole, headerBytes + valueBytesSent);
    ReplyDecoder decoder = new ReplyDecoder(new ScriptedChannel(cutShort), "test");
    assertEquals(ReplyDecoder.Kind.BULK, decoder.next());
    EOFException e =
        assertThrows(
            EOFException.class,
            () -> decoder.readBulk(MemorySegment.ofArray(new byte[value.length])));
    assertTrue(e.getMessage().contains("closed the connection"), e.getMessage());
  }

  private static byte[] ascii(String text) {
    return text.getBytes(StandardCharsets.US_ASCII);
  }
}
