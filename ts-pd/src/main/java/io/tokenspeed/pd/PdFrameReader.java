package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdFrameDescriptor.*;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;
import java.nio.charset.StandardCharsets;

/**
 * Reads the frames of {@link PdFrameDescriptor} from a blocking channel, one at a time, never past
 * the frame it is reading, and never allocating what the header has not been checked for.
 *
 * <p>Each frame's 5-byte header is read first and its length checked against its type's bounds (and
 * the type against what this side may read now) before anything else: a control frame's body is
 * then read into a buffer of exactly the checked length, and a DATA frame's 14-byte prefix into a
 * fixed buffer, after which the caller looks up the destination and calls {@link #readBlock} to
 * read the block's bytes straight into it. A DATA frame's exact length is checked by the caller,
 * which alone knows the room's layout.
 *
 * <p>One reader per connection, used by one thread; {@link #lastReadNs} is the only field other
 * threads read.
 */
final class PdFrameReader {

  /** Which side reads: the frames each may receive differ. */
  enum Side {
    /** The prefill side reads ACK, REFUSE, RECEIVED, CANCEL and PING. */
    PREFILL,
    /** The decode side reads BOOTSTRAP, DATA, DONE, CANCEL and PING. */
    DECODE
  }

  private final ReadableByteChannel channel;
  private final Side side;
  private final PdSettings settings;
  private final ByteBuffer header = ByteBuffer.allocate(HEADER_BYTES);
  private final ByteBuffer dataPrefix = ByteBuffer.allocate(DATA_FIXED_LENGTH - 1);

  /** {@link System#nanoTime} when bytes last arrived. */
  volatile long lastReadNs = System.nanoTime();

  PdFrameReader(ReadableByteChannel channel, Side side, PdSettings settings) {
    this.channel = channel;
    this.side = side;
    this.settings = settings;
  }

  /**
   * Reads the next frame.
   *
   * @param handshake true while the handshake runs: only HELLO and PROOF may come
   * @throws EOFException when the peer closed the connection (at or inside a frame)
   * @throws PdProtocolException when the frame is not one this side accepts now
   */
  PdFrame next(boolean handshake) throws IOException, PdProtocolException {
    header.clear();
    readFully(header, true);
    int length = header.getInt(0);
    int type = header.get(4) & 0xFF;
    checkType(type, handshake);
    checkLength(type, Integer.toUnsignedLong(length));
    if (type == TYPE_DATA) {
      dataPrefix.clear();
      readFully(dataPrefix, false);
      dataPrefix.flip();
      long room = dataPrefix.getLong();
      int group = dataPrefix.getShort() & 0xFFFF;
      int index = dataPrefix.getInt();
      return new PdFrame.Data(room, group, index, length - DATA_FIXED_LENGTH);
    }
    ByteBuffer body = ByteBuffer.allocate(length - 1);
    readFully(body, false);
    body.flip();
    return switch (type) {
      case TYPE_HELLO -> hello(body);
      case TYPE_PROOF -> new PdFrame.Proof(bytes(body, DIGEST_BYTES));
      case TYPE_BOOTSTRAP -> bootstrap(body);
      case TYPE_ACK -> ack(body);
      case TYPE_REFUSE -> new PdFrame.Refuse(body.getLong(), reason(body));
      case TYPE_DONE -> done(body);
      case TYPE_RECEIVED -> new PdFrame.Received(body.getLong());
      case TYPE_CANCEL -> new PdFrame.Cancel(body.getLong(), reason(body));
      case TYPE_PING -> new PdFrame.Ping();
      default -> throw new IllegalStateException("type " + type + " passed checkType");
    };
  }

  /** Reads a DATA frame's block, whose prefix {@link #next} returned, into {@code block}. */
  void readBlock(MemorySegment block) throws IOException {
    readFully(block.asByteBuffer(), false);
  }

  private void checkType(int type, boolean handshake) throws PdProtocolException {
    boolean ok =
        handshake
            ? type == TYPE_HELLO || type == TYPE_PROOF
            : switch (side) {
              case PREFILL ->
                  type == TYPE_ACK
                      || type == TYPE_REFUSE
                      || type == TYPE_RECEIVED
                      || type == TYPE_CANCEL
                      || type == TYPE_PING;
              case DECODE ->
                  type == TYPE_BOOTSTRAP
                      || type == TYPE_DATA
                      || type == TYPE_DONE
                      || type == TYPE_CANCEL
                      || type == TYPE_PING;
            };
    if (!ok) {
      throw new PdProtocolException(
          "sent a "
              + typeName(type)
              + " frame, which the "
              + (side == Side.PREFILL ? "prefill" : "decode")
              + " side never reads"
              + (handshake ? " during the handshake" : " after the handshake"));
    }
  }

  private void checkLength(int type, long n) throws PdProtocolException {
    long min;
    long max;
    switch (type) {
      case TYPE_HELLO -> min = max = HELLO_LENGTH;
      case TYPE_PROOF -> min = max = PROOF_LENGTH;
      case TYPE_BOOTSTRAP -> {
        min = BOOTSTRAP_FIXED_LENGTH + 8;
        max = settings.maxBootstrapLength();
      }
      case TYPE_ACK -> {
        min = ACK_FIXED_LENGTH + 4;
        max = ACK_FIXED_LENGTH + 4L * settings.maxCacheGroups();
      }
      case TYPE_REFUSE, TYPE_CANCEL -> {
        min = REASON_FIXED_LENGTH;
        max = REASON_FIXED_LENGTH + MAX_REASON_BYTES;
      }
      case TYPE_DATA -> {
        min = DATA_FIXED_LENGTH + 1;
        max = DATA_FIXED_LENGTH + (long) settings.maxBlockBytes();
      }
      case TYPE_DONE -> {
        min = DONE_LENGTH;
        max = DONE_LOGPROBS_LENGTH + 8L * FirstLogprobs.MAX_TOP;
      }
      case TYPE_RECEIVED -> min = max = RECEIVED_LENGTH;
      case TYPE_PING -> min = max = PING_LENGTH;
      default -> throw new PdProtocolException("sent a frame of unknown " + typeName(type));
    }
    if (n < min || n > max) {
      throw new PdProtocolException(
          "sent a "
              + typeName(type)
              + " frame of length "
              + n
              + (min == max ? " where it is " + min : " outside [" + min + ", " + max + "]"));
    }
  }

  private static PdFrame hello(ByteBuffer body) throws PdProtocolException {
    int magic = body.getInt();
    if (magic != MAGIC) {
      throw new PdProtocolException(
          "sent a HELLO without the magic TSPD (0x" + Integer.toHexString(magic) + ")");
    }
    int version = body.getShort() & 0xFFFF;
    int role = body.get() & 0xFF;
    ByteBuffer frame = ByteBuffer.allocate(HEADER_BYTES - 1 + HELLO_LENGTH);
    frame.putInt(HELLO_LENGTH).put((byte) TYPE_HELLO).put(body.rewind());
    return new PdFrame.Hello(version, role, frame.array());
  }

  private PdFrame bootstrap(ByteBuffer body) throws PdProtocolException {
    long room = body.getLong();
    long tokens = Integer.toUnsignedLong(body.getInt());
    if (tokens < 1 || tokens > settings.maxPromptTokens()) {
      throw new PdProtocolException(
          "sent a BOOTSTRAP of room "
              + room
              + " with "
              + tokens
              + " prompt tokens (max_prompt_tokens="
              + settings.maxPromptTokens()
              + ")");
    }
    // Every count is checked against what is left before anything is sized by it.
    if (body.remaining() < 4 * tokens + DIGEST_BYTES + 2) {
      throw new PdProtocolException(
          "sent a BOOTSTRAP of room " + room + " shorter than its " + tokens + " prompt tokens");
    }
    int[] prompt = new int[(int) tokens];
    body.asIntBuffer().get(prompt);
    body.position(body.position() + 4 * prompt.length);
    byte[] identity = bytes(body, DIGEST_BYTES);
    int groups = body.getShort() & 0xFFFF;
    if (groups < 1 || groups > settings.maxCacheGroups() || body.remaining() != 4 * groups) {
      throw new PdProtocolException(
          "sent a BOOTSTRAP of room "
              + room
              + " with "
              + groups
              + " cache groups in "
              + body.remaining()
              + " remaining bytes (max_cache_groups="
              + settings.maxCacheGroups()
              + ")");
    }
    int[] blockBytes = new int[groups];
    for (int g = 0; g < groups; g++) {
      blockBytes[g] = body.getInt();
      if (blockBytes[g] < 1 || blockBytes[g] > settings.maxBlockBytes()) {
        throw new PdProtocolException(
            "sent a BOOTSTRAP of room "
                + room
                + " whose group "
                + g
                + " has "
                + Integer.toUnsignedString(blockBytes[g])
                + " bytes per block (max_block_bytes="
                + settings.maxBlockBytes()
                + ")");
      }
    }
    return new PdFrame.Open(room, new Bootstrap(prompt, identity, blockBytes));
  }

  private PdFrame ack(ByteBuffer body) throws PdProtocolException {
    long room = body.getLong();
    int groups = body.getShort() & 0xFFFF;
    if (groups < 1 || body.remaining() != 4 * groups) {
      throw new PdProtocolException(
          "sent an ACK of room "
              + room
              + " with "
              + groups
              + " cache groups in "
              + body.remaining()
              + " remaining bytes");
    }
    int[] blocks = new int[groups];
    for (int g = 0; g < groups; g++) {
      blocks[g] = body.getInt();
      if (blocks[g] < 0 || blocks[g] > settings.maxBlocksPerGroup()) {
        throw new PdProtocolException(
            "sent an ACK of room "
                + room
                + " reserving "
                + Integer.toUnsignedString(blocks[g])
                + " blocks of group "
                + g
                + " (max_blocks_per_group="
                + settings.maxBlocksPerGroup()
                + ")");
      }
    }
    return new PdFrame.Accepted(room, new Ack(blocks));
  }

  private static PdFrame done(ByteBuffer body) throws PdProtocolException {
    long room = body.getLong();
    int firstToken = body.getInt();
    long device = body.getLong();
    long host = body.getLong();
    long storage = body.getLong();
    int crc = body.getInt();
    if (device < 0 || host < 0 || storage < 0) {
      throw new PdProtocolException(
          "sent a DONE of room "
              + room
              + " with negative cached tokens (device="
              + device
              + " host="
              + host
              + " storage="
              + storage
              + ")");
    }
    FirstLogprobs logprobs = null;
    if (body.hasRemaining()) {
      logprobs = logprobs(room, body);
    }
    return new PdFrame.Done(
        room, new DoneInfo(firstToken, new CachedTokens(device, host, storage), logprobs), crc);
  }

  /** DONE's optional tail: the first token's log probabilities, exactly as long as K says. */
  private static FirstLogprobs logprobs(long room, ByteBuffer body) throws PdProtocolException {
    if (body.remaining() < DONE_LOGPROBS_LENGTH - DONE_LENGTH) {
      throw new PdProtocolException(
          "sent a DONE of room " + room + " with a cut log-probability tail");
    }
    float logprob = body.getFloat();
    int k = Byte.toUnsignedInt(body.get());
    if (body.remaining() != 8 * k) {
      throw new PdProtocolException(
          "sent a DONE of room "
              + room
              + " whose log-probability tail names "
              + k
              + " alternatives in "
              + body.remaining()
              + " bytes");
    }
    int[] tokens = new int[k];
    float[] logprobs = new float[k];
    for (int i = 0; i < k; i++) {
      tokens[i] = body.getInt();
      logprobs[i] = body.getFloat();
    }
    try {
      return new FirstLogprobs(logprob, tokens, logprobs);
    } catch (IllegalArgumentException e) {
      throw new PdProtocolException(
          "sent a DONE of room " + room + " with invalid log probabilities: " + e.getMessage());
    }
  }

  private static String reason(ByteBuffer body) {
    return new String(
        body.array(),
        body.arrayOffset() + body.position(),
        body.remaining(),
        StandardCharsets.UTF_8);
  }

  private static byte[] bytes(ByteBuffer body, int n) {
    byte[] b = new byte[n];
    body.get(b);
    return b;
  }

  private void readFully(ByteBuffer dst, boolean atFrameStart) throws IOException {
    while (dst.hasRemaining()) {
      int n = channel.read(dst);
      if (n < 0) {
        throw new EOFException(
            atFrameStart && dst.position() == 0 ? "end of stream" : "end of stream inside a frame");
      }
      lastReadNs = System.nanoTime();
    }
  }
}
