package io.tokenspeed.server.kvevents;

import io.tokenspeed.engine.kvevents.KvEvent;
import io.tokenspeed.engine.kvevents.KvMedium;
import io.tokenspeed.engine.kvevents.KvPage;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessagePacker;
import org.msgpack.core.MessageUnpacker;

/**
 * The payload of one batch, in vLLM's array form (msgspec structs with {@code array_like=True},
 * which every consumer decodes: docs/kv-events.md has the evidence):
 *
 * <pre>
 *   [ts, [event, ...], dp_rank]          ts: float64, seconds since the epoch; dp_rank: int
 *   ["BlockStored", [hash, ...], parent, [token_id, ...], block_size, nil, medium]
 *   ["BlockRemoved", [hash, ...], medium]
 *   ["AllBlocksCleared"]
 * </pre>
 *
 * A hash is the first 8 bytes of the page's SHA-256 page hash, big-endian, as a msgpack uint64
 * (always the 9-byte form); {@code parent} is the parent page's hash or nil; {@code token_ids}
 * holds each page's P tokens in order; {@code block_size} is P; the sixth field ({@code lora_id})
 * is always nil; {@code medium} names the tier ({@link #medium}).
 */
public final class KvEventCodec {

  static {
    // msgpack-core reads its buffers through sun.misc.Unsafe unless told otherwise, which JDK 24+
    // warns about on stderr; its portable buffers are enough for batches this size
    if (System.getProperty("msgpack.universal-buffer") == null) {
      System.setProperty("msgpack.universal-buffer", "true");
    }
  }

  /** The medium of the Device tier, as vLLM names its GPU cache. */
  public static final String GPU = "GPU";

  /** The medium of the Host tier, as vLLM's CPU offloading names it. */
  public static final String CPU = "CPU";

  /** The medium of the shared L3 store (Dynamo's name for its external tier). */
  public static final String EXTERNAL = "EXTERNAL";

  private KvEventCodec() {}

  /** The wire name of {@code medium}. */
  public static String medium(KvMedium medium) {
    return switch (medium) {
      case DEVICE -> GPU;
      case HOST -> CPU;
      case STORAGE -> EXTERNAL;
    };
  }

  /** A packer whose buffers need no {@code sun.misc.Unsafe} (see the class's initializer). */
  public static MessageBufferPacker packer() {
    return MessagePack.newDefaultBufferPacker();
  }

  /** An unpacker over {@code bytes}, likewise. */
  public static MessageUnpacker unpacker(byte[] bytes) {
    return MessagePack.newDefaultUnpacker(bytes);
  }

  /** The payload of a batch: {@code [ts, [event, ...], dp_rank]}. */
  public static byte[] encode(double ts, List<KvEvent> events, int dpRank, int blockSize) {
    try (MessageBufferPacker p = packer()) {
      p.packArrayHeader(3);
      p.packDouble(ts);
      p.packArrayHeader(events.size());
      byte[] scratch = new byte[9];
      for (KvEvent e : events) {
        switch (e) {
          case KvEvent.BlockStored s -> {
            p.packArrayHeader(7);
            p.packString("BlockStored");
            List<KvPage> pages = s.pages();
            p.packArrayHeader(pages.size());
            for (KvPage page : pages) {
              packU64(p, page.hash(), scratch);
            }
            KvPage first = pages.getFirst();
            if (first.hasParent()) {
              packU64(p, first.parentHash(), scratch);
            } else {
              p.packNil();
            }
            p.packArrayHeader(pages.size() * blockSize);
            for (KvPage page : pages) {
              if (page.numTokens() != blockSize) {
                throw new IllegalArgumentException(
                    "a page of " + page.numTokens() + " tokens, block_size=" + blockSize);
              }
              for (int i = 0; i < blockSize; i++) {
                p.packInt(page.token(i));
              }
            }
            p.packInt(blockSize);
            p.packNil(); // lora_id
            p.packString(medium(s.medium()));
          }
          case KvEvent.BlockRemoved r -> {
            p.packArrayHeader(3);
            p.packString("BlockRemoved");
            p.packArrayHeader(r.size());
            for (int i = 0; i < r.size(); i++) {
              packU64(p, r.hash(i), scratch);
            }
            p.packString(medium(r.medium()));
          }
          case KvEvent.AllBlocksCleared c -> {
            p.packArrayHeader(1);
            p.packString("AllBlocksCleared");
          }
        }
      }
      p.packInt(dpRank);
      return p.toByteArray();
    } catch (IOException e) {
      throw new UncheckedIOException("a msgpack buffer in memory failed", e);
    }
  }

  /**
   * {@code v} read as an unsigned 64-bit integer, always as a msgpack uint64 ({@code 0xcf} and 8
   * big-endian bytes): a signed packing would make the upper half negative, and a shorter one would
   * give llm-d's decoder, which takes a hash as a uint64 or an int64 only, a uint32 or smaller for
   * the rare hash below 2^32.
   */
  static void packU64(MessagePacker p, long v, byte[] scratch) throws IOException {
    scratch[0] = (byte) 0xcf;
    for (int i = 0; i < 8; i++) {
      scratch[1 + i] = (byte) (v >>> (56 - 8 * i));
    }
    p.writePayload(scratch, 0, 9);
  }
}
