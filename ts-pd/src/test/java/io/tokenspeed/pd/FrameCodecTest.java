package io.tokenspeed.pd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.ByteArrayInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The encoder and the reader against each other on random frames (one seed per case), and the
 * reader against damaged bytes: every frame reads back equal; a cut frame ends in {@link
 * EOFException}; damaged bytes end in a frame, {@link PdProtocolException} or {@link EOFException},
 * never in another exception.
 */
class FrameCodecTest {

  static Stream<Long> seeds() {
    return LongStream.range(0, 40).boxed();
  }

  private static PdFrameReader reader(byte[] bytes, PdFrameReader.Side side) {
    return new PdFrameReader(
        Channels.newChannel(new ByteArrayInputStream(bytes)), side, PdSettings.defaults());
  }

  private static byte[] bytes(ByteBuffer b) {
    byte[] out = new byte[b.remaining()];
    b.duplicate().get(out);
    return out;
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldReadBackEveryFrameWhenEncodedFromRandomValues(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    long room = rnd.nextLong();
    int groups = 1 + rnd.nextInt(5);
    int[] blockBytes = new int[groups];
    int[] blocks = new int[groups];
    for (int g = 0; g < groups; g++) {
      blockBytes[g] = 1 + rnd.nextInt(1 << 16);
      blocks[g] = rnd.nextInt(1000);
    }
    Bootstrap b = PdTesting.bootstrap(rnd, 1 + rnd.nextInt(5000), blockBytes);
    PdFrame.Open open =
        (PdFrame.Open)
            reader(bytes(PdFrameEncoder.bootstrap(room, b)), PdFrameReader.Side.DECODE).next(false);
    assertEquals(new PdFrame.Open(room, b), open);

    Ack ack = new Ack(blocks);
    assertEquals(
        new PdFrame.Accepted(room, ack),
        reader(bytes(PdFrameEncoder.ack(room, ack)), PdFrameReader.Side.PREFILL).next(false));

    String reason = "reason " + rnd.nextInt() + " \u00e9\u4e2d";
    assertEquals(
        new PdFrame.Refuse(room, reason),
        reader(bytes(PdFrameEncoder.refuse(room, reason)), PdFrameReader.Side.PREFILL).next(false));
    assertEquals(
        new PdFrame.Cancel(room, reason),
        reader(bytes(PdFrameEncoder.cancel(room, reason)), PdFrameReader.Side.DECODE).next(false));

    DoneInfo info =
        new DoneInfo(
            rnd.nextInt(),
            new CachedTokens(rnd.nextLong(1 << 40), rnd.nextLong(1 << 40), rnd.nextLong(1 << 40)));
    int crc = rnd.nextInt();
    assertEquals(
        new PdFrame.Done(room, info, crc),
        reader(bytes(PdFrameEncoder.done(room, info, crc)), PdFrameReader.Side.DECODE).next(false));
    // with the first token's log probabilities, 0 to 20 alternatives
    int k = rnd.nextInt(FirstLogprobs.MAX_TOP + 1);
    int[] top = rnd.ints(k, 0, 1 << 20).toArray();
    float[] topLogprobs = new float[k];
    for (int i = 0; i < k; i++) {
      topLogprobs[i] = i == 0 && rnd.nextInt(4) == 0 ? Float.NEGATIVE_INFINITY : -rnd.nextFloat();
    }
    DoneInfo withLogprobs =
        new DoneInfo(
            rnd.nextInt(1 << 20),
            info.cachedTokens(),
            new FirstLogprobs(-rnd.nextFloat() * 30, top, topLogprobs));
    assertEquals(
        new PdFrame.Done(room, withLogprobs, crc),
        reader(bytes(PdFrameEncoder.done(room, withLogprobs, crc)), PdFrameReader.Side.DECODE)
            .next(false));
    assertEquals(
        new PdFrame.Received(room),
        reader(bytes(PdFrameEncoder.received(room)), PdFrameReader.Side.PREFILL).next(false));
    assertInstanceOf(
        PdFrame.Ping.class,
        reader(bytes(PdFrameEncoder.ping()), PdFrameReader.Side.PREFILL).next(false));

    // DATA: the prefix, then the block straight into a segment.
    int g = rnd.nextInt(groups);
    int index = rnd.nextInt(1 << 20);
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment src = arena.allocate(blockBytes[g]);
      PdTesting.fill(src, seed);
      ByteBuffer frame = ByteBuffer.allocate(PdFrameDescriptor.DATA_PREFIX_BYTES + blockBytes[g]);
      PdFrameEncoder.dataPrefix(frame, room, g, index, blockBytes[g]);
      frame.put(src.asByteBuffer()).flip();
      PdFrameReader r = reader(bytes(frame), PdFrameReader.Side.DECODE);
      assertEquals(new PdFrame.Data(room, g, index, blockBytes[g]), r.next(false));
      MemorySegment dst = arena.allocate(blockBytes[g]);
      r.readBlock(dst);
      assertEquals(-1, src.mismatch(dst));
    }

    // A reason longer than the limit is cut to fit, on a character boundary.
    String longReason = "\u00e9".repeat(3000);
    PdFrame.Cancel cut =
        (PdFrame.Cancel)
            reader(bytes(PdFrameEncoder.cancel(room, longReason)), PdFrameReader.Side.DECODE)
                .next(false);
    assertEquals(longReason.substring(0, cut.reason().length()), cut.reason());
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldEndInEofWhenAFrameIsCutShort(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    byte[] whole =
        bytes(
            PdFrameEncoder.bootstrap(
                rnd.nextLong(), PdTesting.bootstrap(rnd, 1 + rnd.nextInt(100), 64, 128)));
    byte[] cut = java.util.Arrays.copyOf(whole, rnd.nextInt(whole.length));
    assertThrows(EOFException.class, () -> reader(cut, PdFrameReader.Side.DECODE).next(false));
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldRejectDamagedBytesWithAValueOrEofNeverAnotherException(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int trial = 0; trial < 200; trial++) {
      ByteBuffer f =
          switch (rnd.nextInt(6)) {
            case 0 ->
                PdFrameEncoder.bootstrap(
                    rnd.nextLong(), PdTesting.bootstrap(rnd, 1 + rnd.nextInt(50), 64));
            case 1 -> PdFrameEncoder.done(rnd.nextLong(), new DoneInfo(1, CachedTokens.NONE), 7);
            case 5 ->
                PdFrameEncoder.done(
                    rnd.nextLong(),
                    new DoneInfo(
                        1,
                        CachedTokens.NONE,
                        new FirstLogprobs(-1f, new int[] {1, 2, 3}, new float[] {-0.5f, -1f, -2f})),
                    7);
            case 2 -> PdFrameEncoder.cancel(rnd.nextLong(), "x");
            case 3 -> PdFrameEncoder.hello(PdFrameDescriptor.ROLE_PREFILL, new byte[32]);
            default -> PdFrameEncoder.ack(rnd.nextLong(), new Ack(new int[] {1, 2}));
          };
      byte[] b = bytes(f);
      int flips = 1 + rnd.nextInt(4);
      for (int i = 0; i < flips; i++) {
        b[rnd.nextInt(b.length)] = (byte) rnd.nextInt(256);
      }
      for (PdFrameReader.Side side : PdFrameReader.Side.values()) {
        for (boolean handshake : new boolean[] {true, false}) {
          try {
            reader(b, side).next(handshake);
          } catch (PdProtocolException | EOFException expected) {
            // A refusal or a cut frame: the only outcomes besides a frame.
          } catch (IOException | RuntimeException e) {
            throw new AssertionError("damaged bytes threw " + e + " (seed " + seed + ")", e);
          }
        }
      }
    }
  }
}
