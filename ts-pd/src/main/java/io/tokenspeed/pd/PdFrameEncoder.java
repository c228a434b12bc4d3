package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdFrameDescriptor.*;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/** Writes the frames of {@link PdFrameDescriptor}; each control frame is a fresh heap buffer. */
final class PdFrameEncoder {

  private PdFrameEncoder() {}

  static ByteBuffer hello(int role, byte[] nonce) {
    ByteBuffer b = start(HELLO_LENGTH, TYPE_HELLO);
    b.putInt(MAGIC).putShort((short) VERSION).put((byte) role).put(nonce);
    return b.flip();
  }

  static ByteBuffer proof(byte[] mac) {
    return start(PROOF_LENGTH, TYPE_PROOF).put(mac).flip();
  }

  static ByteBuffer bootstrap(long room, Bootstrap bs) {
    int n = BOOTSTRAP_FIXED_LENGTH + 4 * bs.numTokens() + 4 * bs.numGroups();
    ByteBuffer b = start(n, TYPE_BOOTSTRAP).putLong(room).putInt(bs.numTokens());
    for (int i = 0; i < bs.numTokens(); i++) {
      b.putInt(bs.token(i));
    }
    b.put(bs.identityDigest()).putShort((short) bs.numGroups());
    for (int g = 0; g < bs.numGroups(); g++) {
      b.putInt(bs.blockBytes(g));
    }
    return b.flip();
  }

  static ByteBuffer ack(long room, Ack ack) {
    ByteBuffer b = start(ACK_FIXED_LENGTH + 4 * ack.numGroups(), TYPE_ACK).putLong(room);
    b.putShort((short) ack.numGroups());
    for (int g = 0; g < ack.numGroups(); g++) {
      b.putInt(ack.numBlocks(g));
    }
    return b.flip();
  }

  static ByteBuffer refuse(long room, String reason) {
    return withReason(TYPE_REFUSE, room, reason);
  }

  static ByteBuffer cancel(long room, String reason) {
    return withReason(TYPE_CANCEL, room, reason);
  }

  /** The 19 bytes before a DATA frame's block, written into {@code dst} from its position. */
  static void dataPrefix(ByteBuffer dst, long room, int group, int index, int blockBytes) {
    dst.putInt(DATA_FIXED_LENGTH + blockBytes)
        .put((byte) TYPE_DATA)
        .putLong(room)
        .putShort((short) group)
        .putInt(index);
  }

  static ByteBuffer done(long room, DoneInfo info, int crc32c) {
    CachedTokens c = info.cachedTokens();
    FirstLogprobs lp = info.logprobs();
    int k = lp == null ? 0 : lp.topTokens().length;
    ByteBuffer b =
        start(lp == null ? DONE_LENGTH : DONE_LOGPROBS_LENGTH + 8 * k, TYPE_DONE)
            .putLong(room)
            .putInt(info.firstToken())
            .putLong(c.device())
            .putLong(c.host())
            .putLong(c.storage())
            .putInt(crc32c);
    if (lp != null) {
      b.putFloat(lp.logprob()).put((byte) k);
      int[] tokens = lp.topTokens();
      float[] logprobs = lp.topLogprobs();
      for (int i = 0; i < k; i++) {
        b.putInt(tokens[i]).putFloat(logprobs[i]);
      }
    }
    return b.flip();
  }

  static ByteBuffer received(long room) {
    return start(RECEIVED_LENGTH, TYPE_RECEIVED).putLong(room).flip();
  }

  static ByteBuffer ping() {
    return start(PING_LENGTH, TYPE_PING).flip();
  }

  /** {@code reason} as UTF-8, cut to at most {@value PdFrameDescriptor#MAX_REASON_BYTES} bytes. */
  static byte[] reasonBytes(String reason) {
    String r = reason == null || reason.isEmpty() ? "(no reason)" : reason;
    byte[] b = r.getBytes(StandardCharsets.UTF_8);
    while (b.length > MAX_REASON_BYTES) {
      r = r.substring(0, Math.max(0, r.length() - 1 - (b.length - MAX_REASON_BYTES) / 4));
      b = r.getBytes(StandardCharsets.UTF_8);
    }
    return b;
  }

  private static ByteBuffer withReason(int type, long room, String reason) {
    byte[] r = reasonBytes(reason);
    return start(REASON_FIXED_LENGTH + r.length, type).putLong(room).put(r).flip();
  }

  private static ByteBuffer start(int length, int type) {
    return ByteBuffer.allocate(HEADER_BYTES - 1 + length).putInt(length).put((byte) type);
  }
}
