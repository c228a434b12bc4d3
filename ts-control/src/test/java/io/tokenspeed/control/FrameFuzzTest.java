package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * Feeds the decoder at least 100,000 malformed or random inputs. Every input must come back as a
 * value — a frame or a {@link Decoded.Malformed} — and never as an exception; every input it
 * accepts must re-encode to exactly the same bytes (so acceptance is canonical, and a frame that
 * decodes differently on two ranks cannot exist).
 *
 * <p>Mutations that keep the checksum valid (the checksum is recomputed after the damage) are the
 * point: they get past the header and checksum checks and exercise every body field.
 */
class FrameFuzzTest {

  private static final long SEED = 20261130L;
  private static final int INPUTS = 120_000;

  private enum Mutation {
    RANDOM_BYTES,
    RANDOM_BODY_VALID_HEADER,
    TRUNCATED,
    BIT_FLIPS,
    BIT_FLIPS_CRC_FIXED,
    BYTE_OVERWRITE_CRC_FIXED,
    LENGTH_CHANGED_CRC_FIXED,
    BYTES_INSERTED_OR_REMOVED_CRC_FIXED,
    VALID
  }

  @Test
  void shouldReturnAValueForEveryInputWhenFuzzedWithMalformedFrames() {
    FrameDecoder decoder = new FrameDecoder(Frames.MAX);
    SplittableRandom rnd = new SplittableRandom(SEED);
    List<byte[]> corpus = new ArrayList<>();
    for (int i = 0; i < 500; i++) {
      corpus.add(Frames.encode(Frames.randomFrame(rnd)));
    }
    Map<Mutation, int[]> counts = new EnumMap<>(Mutation.class); // [accepted, rejected]
    Mutation[] mutations = Mutation.values();
    for (int i = 0; i < INPUTS; i++) {
      Mutation m = mutations[rnd.nextInt(mutations.length)];
      byte[] input = mutate(m, corpus.get(rnd.nextInt(corpus.size())), rnd);
      Decoded d;
      try {
        d = decoder.decode(input);
      } catch (RuntimeException e) {
        throw new AssertionError(
            "input " + i + " (" + m + ") threw; bytes=" + Arrays.toString(input), e);
      }
      assertNotNull(d);
      int[] c = counts.computeIfAbsent(m, k -> new int[2]);
      if (d instanceof Decoded.Ok(Frame f)) {
        c[0]++;
        assertArrayEquals(input, FrameEncoder.encode(f, Frames.MAX), "input " + i + " " + m);
      } else {
        c[1]++;
      }
      byte[] header = Arrays.copyOf(input, Math.max(input.length, FrameDescriptor.HEADER_BYTES));
      if (decoder.checkHeader(header, 0, input.length) == null) {
        int length = FrameDecoder.frameLength(header, 0);
        assertTrue(length >= FrameDescriptor.FRAMING_BYTES && length <= Frames.MAX, "" + length);
      }
    }
    int total = counts.values().stream().mapToInt(c -> c[0] + c[1]).sum();
    assertTrue(total >= 100_000, "" + total);
    for (Mutation m : mutations) {
      int[] c = counts.get(m);
      assertTrue(m == Mutation.VALID ? c[1] == 0 : c[1] > 0, m + " " + Arrays.toString(c));
    }
    // Damage behind a recomputed checksum must be caught by the body checks, not only by luck.
    assertTrue(counts.get(Mutation.BIT_FLIPS_CRC_FIXED)[1] > 1_000, "body checks ran");
  }

  private static byte[] mutate(Mutation m, byte[] valid, SplittableRandom rnd) {
    switch (m) {
      case RANDOM_BYTES -> {
        byte[] b = new byte[rnd.nextInt(200)];
        rnd.nextBytes(b);
        return b;
      }
      case RANDOM_BODY_VALID_HEADER -> {
        byte[] b = new byte[FrameDescriptor.FRAMING_BYTES + rnd.nextInt(200)];
        rnd.nextBytes(b);
        System.arraycopy(valid, 0, b, 0, 8);
        return Frames.withCrc(Frames.withBodyLength(b));
      }
      case TRUNCATED -> {
        return Arrays.copyOf(valid, rnd.nextInt(valid.length));
      }
      case BIT_FLIPS -> {
        return flip(valid.clone(), rnd);
      }
      case BIT_FLIPS_CRC_FIXED -> {
        return Frames.withCrc(flip(valid.clone(), rnd));
      }
      case BYTE_OVERWRITE_CRC_FIXED -> {
        byte[] b = valid.clone();
        int at =
            FrameDescriptor.HEADER_BYTES + rnd.nextInt(b.length - FrameDescriptor.FRAMING_BYTES);
        byte[] values = {0, -1, 1, 2, 3, 0x7f, (byte) 0x80};
        b[at] = rnd.nextBoolean() ? values[rnd.nextInt(values.length)] : (byte) rnd.nextInt();
        return Frames.withCrc(b);
      }
      case LENGTH_CHANGED_CRC_FIXED -> {
        byte[] b = valid.clone();
        java.nio.ByteBuffer.wrap(b).putInt(8, b.length - 16 + rnd.nextInt(-8, 9));
        return Frames.withCrc(b);
      }
      case BYTES_INSERTED_OR_REMOVED_CRC_FIXED -> {
        int bodyLength = valid.length - FrameDescriptor.FRAMING_BYTES;
        int at = FrameDescriptor.HEADER_BYTES + rnd.nextInt(bodyLength + 1);
        int delta = rnd.nextInt(1, 9);
        byte[] b;
        if (rnd.nextBoolean() && at + delta <= valid.length - 4) {
          b = new byte[valid.length - delta];
          System.arraycopy(valid, 0, b, 0, at);
          System.arraycopy(valid, at + delta, b, at, valid.length - at - delta);
        } else {
          b = new byte[valid.length + delta];
          System.arraycopy(valid, 0, b, 0, at);
          for (int i = 0; i < delta; i++) {
            b[at + i] = (byte) rnd.nextInt();
          }
          System.arraycopy(valid, at, b, at + delta, valid.length - at);
        }
        return Frames.withCrc(Frames.withBodyLength(b));
      }
      case VALID -> {
        return valid.clone();
      }
    }
    throw new AssertionError(m);
  }

  private static byte[] flip(byte[] b, SplittableRandom rnd) {
    int flips = 1 + rnd.nextInt(4);
    for (int i = 0; i < flips; i++) {
      int bit = rnd.nextInt(b.length * 8);
      b[bit >>> 3] ^= (byte) (1 << (bit & 7));
    }
    return b;
  }
}
