package io.tokenspeed.control;

import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.zip.CRC32C;

/** Random valid frames and byte-level surgery on frames, for the codec tests. */
final class Frames {

  static final int MAX = 1 << 16;

  private Frames() {}

  /** Recomputes the checksum of a whole frame in place; returns it. */
  static byte[] withCrc(byte[] frame) {
    CRC32C crc = new CRC32C();
    crc.update(frame, 0, frame.length - 4);
    ByteBuffer.wrap(frame).putInt(frame.length - 4, (int) crc.getValue());
    return frame;
  }

  /** Sets the header's body length to match the array's length. */
  static byte[] withBodyLength(byte[] frame) {
    ByteBuffer.wrap(frame).putInt(8, frame.length - FrameDescriptor.FRAMING_BYTES);
    return frame;
  }

  static byte[] encode(Frame f) {
    return FrameEncoder.encode(f, MAX);
  }

  /**
   * A random valid frame: a hello, a proof, a final, an error report or a report with random
   * records, sometimes a status and sometimes events; reports carry a random plan digest ({@link
   * #randomDigest}).
   */
  static Frame randomFrame(SplittableRandom rnd) {
    int pick = rnd.nextInt(12);
    if (pick == 10) {
      return new Frame.Proof(new Bytes32(rnd.nextLong(), rnd.nextLong(), rnd.nextLong(), 0));
    }
    if (pick == 11) {
      return new Frame.Final(
          rnd.nextInt(ControlConfig.MAX_WORLD_SIZE),
          rnd.nextLong(Long.MAX_VALUE),
          rnd.nextInt(ControlConfig.MAX_WORLD_SIZE + 1) - 1);
    }
    if (pick == 0) {
      int worldSize = 1 + rnd.nextInt(ControlConfig.MAX_WORLD_SIZE);
      return new Frame.Hello(
          rnd.nextLong(Long.MAX_VALUE),
          worldSize,
          rnd.nextInt(worldSize),
          ControlConfig.MIN_MAX_FRAME_BYTES + rnd.nextInt(1 << 24),
          1 + rnd.nextInt(Integer.MAX_VALUE - 1),
          1 + rnd.nextLong(Long.MAX_VALUE - 1),
          new Bytes32(rnd.nextLong(), rnd.nextLong(), rnd.nextLong(), rnd.nextLong()));
    }
    int rank = rnd.nextInt(ControlConfig.MAX_WORLD_SIZE);
    long round = 1 + rnd.nextLong(Long.MAX_VALUE - 1);
    long clock = rnd.nextLong();
    PressureSnapshot p =
        new PressureSnapshot(
            rnd.nextInt(Integer.MAX_VALUE),
            rnd.nextLong(Long.MAX_VALUE),
            rnd.nextLong(Long.MAX_VALUE));
    long digest = randomDigest(rnd);
    if (pick == 1) {
      String reason = randomText(rnd, 1 + rnd.nextInt(60));
      return Frame.Report.ofError(rank, round, clock, p, digest, reason);
    }
    List<FrontendMessage> frontend = new ArrayList<>();
    int numFrontend = rnd.nextInt(3) == 0 ? rnd.nextInt(4) : 0;
    for (int i = 0; i < numFrontend; i++) {
      long id = rnd.nextLong(Long.MAX_VALUE);
      if (rnd.nextBoolean()) {
        frontend.add(FrontendMessage.cancel(id));
      } else {
        byte[] payload = new byte[rnd.nextInt(20)];
        rnd.nextBytes(payload);
        frontend.add(FrontendMessage.newRequest(id, payload));
      }
    }
    List<StorageDone> completions = new ArrayList<>();
    int numCompletions = rnd.nextInt(6);
    for (int i = 0; i < numCompletions; i++) {
      completions.add(randomRecord(rnd, rnd.nextLong(Long.MAX_VALUE)));
    }
    RankStatus status = RankStatus.EMPTY;
    if (rnd.nextInt(4) == 0) {
      byte[] bytes = new byte[1 + rnd.nextInt(rnd.nextBoolean() ? 16 : RankStatus.MAX_BYTES)];
      rnd.nextBytes(bytes);
      status = new RankStatus(bytes);
    }
    return new Frame.Report(
        rank, round, clock, p, digest, null, frontend, completions, status, randomEvents(rnd));
  }

  /**
   * Random events, or none: none a third of the time, else mostly a few bytes, sometimes up to
   * {@link RankEvents#MAX_BYTES} (exactly that one time in four).
   */
  static RankEvents randomEvents(SplittableRandom rnd) {
    int pick = rnd.nextInt(12);
    if (pick < 4) {
      return RankEvents.EMPTY;
    }
    int length =
        pick < 10
            ? 1 + rnd.nextInt(24)
            : rnd.nextInt(4) == 0 ? RankEvents.MAX_BYTES : 1 + rnd.nextInt(RankEvents.MAX_BYTES);
    byte[] bytes = new byte[length];
    rnd.nextBytes(bytes);
    return new RankEvents(bytes);
  }

  /**
   * A random plan digest: often one of 0, -1, {@link Long#MIN_VALUE} and {@link Long#MAX_VALUE},
   * otherwise any long (negative half the time).
   */
  static long randomDigest(SplittableRandom rnd) {
    return switch (rnd.nextInt(8)) {
      case 0 -> 0;
      case 1 -> -1;
      case 2 -> Long.MIN_VALUE;
      case 3 -> Long.MAX_VALUE;
      default -> rnd.nextLong();
    };
  }

  static StorageDone randomRecord(SplittableRandom rnd, long operationId) {
    StorageKind kind = StorageKind.values()[rnd.nextInt(3)];
    int numKeys = 1 + rnd.nextInt(rnd.nextBoolean() ? 8 : 40);
    List<KeyOutcome> outcomes = new ArrayList<>();
    for (int k = 0; k < numKeys; k++) {
      KeyOutcome o = KeyOutcome.values()[rnd.nextInt(4)];
      outcomes.add(kind != StorageKind.GET && o.objectEvidence() ? KeyOutcome.FAILED : o);
    }
    return new StorageDone(
        operationId,
        kind,
        outcomes,
        rnd.nextBoolean(),
        rnd.nextLong(Long.MAX_VALUE),
        rnd.nextBoolean());
  }

  /** Text with ASCII, two-, three- and four-byte UTF-8 characters. */
  static String randomText(SplittableRandom rnd, int codePoints) {
    StringBuilder sb = new StringBuilder();
    int[] sample = {'a', 'Z', ' ', ':', 0xe9, 0x3bb, 0x4e2d, 0x1f600};
    for (int i = 0; i < codePoints; i++) {
      sb.appendCodePoint(sample[rnd.nextInt(sample.length)]);
    }
    return sb.toString();
  }
}
