package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.tokenspeed.server.router.KvEventDecoder.Batch;
import io.tokenspeed.server.router.KvEventDecoder.Cleared;
import io.tokenspeed.server.router.KvEventDecoder.KvEventFormatException;
import io.tokenspeed.server.router.KvEventDecoder.Medium;
import io.tokenspeed.server.router.KvEventDecoder.Removed;
import io.tokenspeed.server.router.KvEventDecoder.Stored;
import java.io.IOException;
import java.math.BigInteger;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/** The KV event batch format: the contract's shapes, the shorter and longer ones, and refusals. */
class KvEventDecoderTest {

  interface Body {
    void write(MessageBufferPacker p) throws IOException;
  }

  private static byte[] pack(Body body) throws IOException {
    try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
      body.write(p);
      return p.toByteArray();
    }
  }

  @Test
  void shouldReadTheContractsThreeEventsWithEveryMedium() throws Exception {
    byte[] payload =
        EventPublisherStub.batch(
            List.of(
                new EventPublisherStub.Stored(new long[] {1, -1L, Long.MIN_VALUE}, "GPU"),
                new EventPublisherStub.Stored(new long[] {2}, "CPU"),
                new EventPublisherStub.Stored(new long[] {3}, "L3"),
                new EventPublisherStub.Removed(new long[] {4, 5}, "cpu"),
                new EventPublisherStub.Cleared()),
            7);
    Batch b = KvEventDecoder.decode(payload);
    assertEquals(7, b.dpRank());
    assertEquals(0, b.unknown());
    assertEquals(5, b.events().size());
    Stored s = assertInstanceOf(Stored.class, b.events().get(0));
    assertArrayEquals(new long[] {1, -1L, Long.MIN_VALUE}, s.hashes(), "u64s above 2^63");
    assertEquals(Medium.DEVICE, s.medium());
    assertEquals(Medium.HOST, ((Stored) b.events().get(1)).medium());
    assertEquals(Medium.STORE, ((Stored) b.events().get(2)).medium());
    Removed r = assertInstanceOf(Removed.class, b.events().get(3));
    assertArrayEquals(new long[] {4, 5}, r.hashes());
    assertEquals(Medium.HOST, r.medium(), "the medium's case does not matter");
    assertInstanceOf(Cleared.class, b.events().get(4));
  }

  @Test
  void shouldTakeShorterEventsTrailingFieldsBinaryHashesAndUnknownTypes() throws Exception {
    byte[] payload =
        pack(
            p -> {
              p.packArrayHeader(4); // a field after dp_rank
              p.packLong(1_700_000_000L); // an integer timestamp
              p.packArrayHeader(5);
              // BlockStored with hashes and parent only: medium GPU
              p.packArrayHeader(3);
              p.packString("BlockStored");
              p.packArrayHeader(1);
              p.packBigInteger(new BigInteger("18446744073709551615"));
              p.packNil();
              // BlockRemoved without a medium
              p.packArrayHeader(2);
              p.packString("BlockRemoved");
              p.packArrayHeader(1);
              p.packLong(9);
              // BlockStored with two more fields than the contract's, a binary hash
              p.packArrayHeader(9);
              p.packString("BlockStored");
              p.packArrayHeader(1);
              p.packBinaryHeader(32);
              byte[] digest = new byte[32];
              digest[0] = (byte) 0x80;
              digest[7] = 1;
              p.writePayload(digest);
              p.packLong(5);
              p.packArrayHeader(2);
              p.packInt(10);
              p.packInt(11);
              p.packInt(2);
              p.packNil();
              p.packNil(); // medium nil: GPU
              p.packString("extra");
              p.packMapHeader(0);
              // an event of a type not known yet
              p.packArrayHeader(2);
              p.packString("BlockPinned");
              p.packArrayHeader(1);
              p.packLong(3);
              // AllBlocksCleared with a field
              p.packArrayHeader(2);
              p.packString("AllBlocksCleared");
              p.packInt(0);
              p.packInt(2);
              p.packString("future");
            });
    Batch b = KvEventDecoder.decode(payload);
    assertEquals(2, b.dpRank());
    assertEquals(1, b.unknown());
    assertEquals(4, b.events().size());
    assertEquals(-1L, ((Stored) b.events().get(0)).hashes()[0]);
    assertEquals(Medium.DEVICE, ((Stored) b.events().get(0)).medium());
    assertEquals(Medium.DEVICE, ((Removed) b.events().get(1)).medium());
    assertEquals(0x8000000000000001L, ((Stored) b.events().get(2)).hashes()[0]);
    assertEquals(Medium.DEVICE, ((Stored) b.events().get(2)).medium());
    assertInstanceOf(Cleared.class, b.events().get(3));
    // a batch of two fields: no dp_rank
    Batch two =
        KvEventDecoder.decode(
            pack(
                p -> {
                  p.packArrayHeader(2);
                  p.packDouble(1.5);
                  p.packArrayHeader(0);
                }));
    assertEquals(-1, two.dpRank());
  }

  @Test
  void shouldRefuseWhatIsNotABatch() throws Exception {
    List<byte[]> bad =
        List.of(
            new byte[0],
            new byte[] {(byte) 0x93, 1},
            pack(p -> p.packString("batch")),
            pack(
                p -> {
                  p.packArrayHeader(1);
                  p.packDouble(1);
                }),
            pack(
                p -> {
                  p.packArrayHeader(3);
                  p.packString("ts");
                  p.packArrayHeader(0);
                  p.packInt(0);
                }),
            pack(
                p -> { // an event that is not an array
                  p.packArrayHeader(3);
                  p.packDouble(1);
                  p.packArrayHeader(1);
                  p.packString("BlockStored");
                  p.packInt(0);
                }),
            pack(
                p -> { // hashes that are not hashes
                  p.packArrayHeader(3);
                  p.packDouble(1);
                  p.packArrayHeader(1);
                  p.packArrayHeader(2);
                  p.packString("BlockRemoved");
                  p.packArrayHeader(1);
                  p.packString("h");
                  p.packInt(0);
                }),
            pack(
                p -> { // a medium that is not a string
                  p.packArrayHeader(3);
                  p.packDouble(1);
                  p.packArrayHeader(1);
                  p.packArrayHeader(3);
                  p.packString("BlockRemoved");
                  p.packArrayHeader(0);
                  p.packInt(1);
                  p.packInt(0);
                }),
            pack(
                p -> { // bytes after the batch
                  p.packArrayHeader(2);
                  p.packDouble(1);
                  p.packArrayHeader(0);
                  p.packInt(1);
                }));
    for (byte[] payload : bad) {
      assertThrows(KvEventFormatException.class, () -> KvEventDecoder.decode(payload));
    }
  }
}
