package io.tokenspeed.server.router;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.ValueType;

/**
 * Decodes one KV event batch, the MessagePack payload of the third frame of a backend's events
 * (docs/serving.md "Prefix-aware routing"; vLLM's KV event format, array-encoded):
 *
 * <pre>
 *   batch  = [ts float64, [event, …], dp_rank int]
 *   event  = ["BlockStored",  [hash u64, …], parent u64|nil, [token_id, …], block_size, lora|nil, medium]
 *          | ["BlockRemoved", [hash u64, …], medium]
 *          | ["AllBlocksCleared"]
 *   medium = "GPU" (the Device tier) | "CPU" (the Host tier) | any other string (the shared L3 store)
 * </pre>
 *
 * <p>Lenient where publishers differ, strict where the meaning would change: an event may stop
 * after its hashes (a missing or nil medium means {@code GPU}, as in vLLM's events before it named
 * the medium) and may carry fields after the last one known, which are skipped; a batch may stop
 * after its events (no {@code dp_rank}: -1) or carry more; an event of an unknown type is skipped
 * and counted; a timestamp may be an integer. A hash is an unsigned 64-bit integer (read as its
 * bits: {@code long}), or a binary of at least 8 bytes (its first 8, big-endian). Anything else (a
 * batch that is not an array, an event that is not an array or has no string type, hashes that are
 * not an array of hashes, trailing bytes) fails the whole batch with {@link
 * KvEventFormatException}: a batch read in part would leave the index neither before nor after it.
 *
 * <p>Stateless and thread-safe.
 */
final class KvEventDecoder {

  /** Where a block was stored or removed. */
  enum Medium {
    /** {@code GPU}: the backend's Device tier. */
    DEVICE,
    /** {@code CPU}: the backend's Host tier. */
    HOST,
    /** Any other medium: the shared L3 store. */
    STORE;

    static Medium of(String wire) {
      if (wire == null || wire.equalsIgnoreCase("GPU")) {
        return DEVICE;
      }
      return wire.equalsIgnoreCase("CPU") ? HOST : STORE;
    }
  }

  /** One event of a batch. */
  sealed interface Event permits Stored, Removed, Cleared {}

  /** {@code BlockStored}: the blocks of {@code hashes} are now held on {@code medium}. */
  record Stored(long[] hashes, Medium medium) implements Event {}

  /** {@code BlockRemoved}: the blocks of {@code hashes} left {@code medium}. */
  record Removed(long[] hashes, Medium medium) implements Event {}

  /** {@code AllBlocksCleared}: every block left the backend's Device and Host tiers. */
  record Cleared() implements Event {}

  /**
   * One batch.
   *
   * @param timestamp the publisher's clock, seconds
   * @param events the events known, in order
   * @param dpRank the publisher's data-parallel rank, -1 when the batch names none
   * @param unknown events of an unknown type, skipped
   */
  record Batch(double timestamp, List<Event> events, int dpRank, int unknown) {}

  /** A payload that is not a KV event batch. */
  static final class KvEventFormatException extends Exception {
    KvEventFormatException(String message) {
      super(message);
    }
  }

  private KvEventDecoder() {}

  /** Decodes {@code payload}. */
  static Batch decode(byte[] payload) throws KvEventFormatException {
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(payload)) {
      int fields = arrayHeader(u, "the batch");
      if (fields < 2) {
        throw new KvEventFormatException(
            "the batch has " + fields + " fields, at least 2 expected");
      }
      double ts = number(u, "the batch's timestamp");
      int n = arrayHeader(u, "the batch's events");
      List<Event> events = new ArrayList<>(n);
      int unknown = 0;
      for (int i = 0; i < n; i++) {
        Event e = event(u, i);
        if (e == null) {
          unknown++;
        } else {
          events.add(e);
        }
      }
      int dpRank = -1;
      if (fields >= 3 && !u.tryUnpackNil()) {
        if (u.getNextFormat().getValueType() != ValueType.INTEGER) {
          throw new KvEventFormatException(
              "the batch's dp_rank is " + u.getNextFormat() + ", not an integer");
        }
        dpRank = (int) Math.max(-1, Math.min(Integer.MAX_VALUE, u.unpackLong()));
      }
      for (int k = 3; k < fields; k++) {
        u.skipValue();
      }
      if (u.hasNext()) {
        throw new KvEventFormatException("bytes follow the batch");
      }
      return new Batch(ts, List.copyOf(events), dpRank, unknown);
    } catch (IOException | RuntimeException e) {
      // msgpack-core reports truncated or mistyped input as IOExceptions and runtime exceptions
      throw new KvEventFormatException("not a KV event batch: " + Upstream.describe(e));
    }
  }

  /** Event {@code i}, or null when its type is unknown (skipped whole). */
  private static Event event(MessageUnpacker u, int i) throws IOException, KvEventFormatException {
    String where = "event " + i;
    int fields = arrayHeader(u, where);
    if (fields < 1) {
      throw new KvEventFormatException(where + " is an empty array");
    }
    if (u.getNextFormat().getValueType() != ValueType.STRING) {
      throw new KvEventFormatException(
          where + "'s type is " + u.getNextFormat() + ", not a string");
    }
    String type = u.unpackString();
    int read = 1;
    Event e;
    switch (type) {
      case "BlockStored" -> {
        long[] hashes = fields > 1 ? hashes(u, where) : new long[0];
        read = Math.min(fields, 2);
        // parent, token ids, block size, lora: not needed (the router hashes the request itself)
        for (; read < Math.min(fields, 6); read++) {
          u.skipValue();
        }
        String medium = null;
        if (fields > 6) {
          medium = medium(u, where);
          read = 7;
        }
        e = new Stored(hashes, Medium.of(medium));
      }
      case "BlockRemoved" -> {
        long[] hashes = fields > 1 ? hashes(u, where) : new long[0];
        read = Math.min(fields, 2);
        String medium = null;
        if (fields > 2) {
          medium = medium(u, where);
          read = 3;
        }
        e = new Removed(hashes, Medium.of(medium));
      }
      case "AllBlocksCleared" -> e = new Cleared();
      default -> e = null;
    }
    for (; read < fields; read++) {
      u.skipValue();
    }
    return e;
  }

  private static String medium(MessageUnpacker u, String where)
      throws IOException, KvEventFormatException {
    if (u.tryUnpackNil()) {
      return null;
    }
    if (u.getNextFormat().getValueType() != ValueType.STRING) {
      throw new KvEventFormatException(
          where + "'s medium is " + u.getNextFormat() + ", not a string");
    }
    return u.unpackString().toUpperCase(Locale.ROOT);
  }

  private static long[] hashes(MessageUnpacker u, String where)
      throws IOException, KvEventFormatException {
    int n = arrayHeader(u, where + "'s hashes");
    long[] out = new long[n];
    for (int k = 0; k < n; k++) {
      out[k] = hash(u, where + "'s hash " + k);
    }
    return out;
  }

  /** A block hash: a u64 (its bits), or the first 8 bytes of a binary, big-endian. */
  private static long hash(MessageUnpacker u, String where)
      throws IOException, KvEventFormatException {
    MessageFormat f = u.getNextFormat();
    if (f == MessageFormat.UINT64) {
      return u.unpackBigInteger().longValue(); // the low 64 bits: the value's bits as a long
    }
    if (f.getValueType() == ValueType.INTEGER) {
      return u.unpackLong();
    }
    if (f.getValueType() == ValueType.BINARY) {
      int length = u.unpackBinaryHeader();
      if (length < 8) {
        throw new KvEventFormatException(where + " is a binary of " + length + " bytes, not 8+");
      }
      byte[] bytes = u.readPayload(length);
      long h = 0;
      for (int b = 0; b < 8; b++) {
        h = (h << 8) | (bytes[b] & 0xff);
      }
      return h;
    }
    throw new KvEventFormatException(where + " is " + f + ", not an unsigned 64-bit integer");
  }

  private static int arrayHeader(MessageUnpacker u, String what)
      throws IOException, KvEventFormatException {
    MessageFormat f = u.getNextFormat();
    if (f.getValueType() != ValueType.ARRAY) {
      throw new KvEventFormatException(what + " is " + f + ", not an array");
    }
    return u.unpackArrayHeader();
  }

  private static double number(MessageUnpacker u, String what)
      throws IOException, KvEventFormatException {
    MessageFormat f = u.getNextFormat();
    return switch (f.getValueType()) {
      case FLOAT -> u.unpackDouble();
      case INTEGER -> (double) u.unpackLong();
      default -> throw new KvEventFormatException(what + " is " + f + ", not a number");
    };
  }
}
