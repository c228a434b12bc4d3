package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.GatheringByteChannel;
import java.nio.charset.StandardCharsets;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The commands of the direct path, byte for byte, through a channel that accepts random partial
 * writes (seeded), against the RESP2 encoding written out by hand.
 */
class CommandEncoderTest {

  /** Takes at most a random number of bytes per write, as a full socket buffer would. */
  private static final class StingyChannel implements GatheringByteChannel {
    final ByteArrayOutputStream taken = new ByteArrayOutputStream();
    private final SplittableRandom random;

    StingyChannel(long seed) {
      this.random = new SplittableRandom(seed);
    }

    @Override
    public long write(ByteBuffer[] srcs, int offset, int length) {
      int budget = 1 + random.nextInt(5000);
      long n = 0;
      for (int i = offset; i < offset + length && budget > 0; i++) {
        while (srcs[i].hasRemaining() && budget > 0) {
          taken.write(srcs[i].get());
          budget--;
          n++;
        }
      }
      return n;
    }

    @Override
    public long write(ByteBuffer[] srcs) {
      return write(srcs, 0, srcs.length);
    }

    @Override
    public int write(ByteBuffer src) {
      return (int) write(new ByteBuffer[] {src});
    }

    @Override
    public boolean isOpen() {
      return true;
    }

    @Override
    public void close() {}
  }

  static Stream<Long> seeds() {
    return LongStream.rangeClosed(1, 16).boxed();
  }

  private static String bulk(String s) {
    return "$" + s.getBytes(StandardCharsets.UTF_8).length + "\r\n" + s + "\r\n";
  }

  private static String randomKey(SplittableRandom random) {
    StringBuilder b = new StringBuilder("tsl3-");
    for (int i = random.nextInt(0, 200); i > 0; i--) {
      b.append(random.nextInt(10) == 0 ? 'é' : (char) ('a' + random.nextInt(26)));
    }
    return b.toString();
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldWriteTheCommandsByteForByteWhenTheChannelTakesLittleAtATime(long seed)
      throws IOException {
    SplittableRandom random = new SplittableRandom(seed);
    CommandEncoder encoder = new CommandEncoder();
    StingyChannel channel = new StingyChannel(seed);
    ByteArrayOutputStream expected = new ByteArrayOutputStream();
    for (int i = 0; i < 50; i++) {
      String key = randomKey(random);
      switch (random.nextInt(4)) {
        case 0 -> {
          encoder.get(key);
          expected.writeBytes(utf8("*2\r\n$3\r\nGET\r\n" + bulk(key)));
        }
        case 1 -> {
          encoder.strlen(key);
          expected.writeBytes(utf8("*2\r\n$6\r\nSTRLEN\r\n" + bulk(key)));
        }
        case 2 -> {
          encoder.asking();
          encoder.get(key);
          expected.writeBytes(utf8("*1\r\n$6\r\nASKING\r\n*2\r\n$3\r\nGET\r\n" + bulk(key)));
        }
        default -> {
          byte[] value = new byte[random.nextInt(1, 70_000)];
          random.nextBytes(value);
          encoder.send(channel); // what came before, then the SET with its value
          encoder.setHeader(key, value.length);
          encoder.sendWithValue(channel, MemorySegment.ofArray(value).asByteBuffer());
          expected.writeBytes(
              utf8("*4\r\n$3\r\nSET\r\n" + bulk(key) + "$" + value.length + "\r\n"));
          expected.writeBytes(value);
          expected.writeBytes(utf8("\r\n$2\r\nNX\r\n"));
        }
      }
    }
    encoder.send(channel);
    assertEquals(0, encoder.pendingBytes());
    assertArrayEquals(expected.toByteArray(), channel.taken.toByteArray());
  }

  @Test
  void shouldWriteAuthWithAndWithoutAUser() throws IOException {
    CommandEncoder encoder = new CommandEncoder();
    StingyChannel channel = new StingyChannel(1);
    encoder.auth("", "pw");
    encoder.auth("tenant", "p w");
    encoder.send(channel);
    assertEquals(
        "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*3\r\n$4\r\nAUTH\r\n$6\r\ntenant\r\n$3\r\np w\r\n",
        channel.taken.toString(StandardCharsets.UTF_8));
  }

  private static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
