package io.tokenspeed.server.kvevents;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.engine.kvevents.KvEvent;
import io.tokenspeed.engine.kvevents.KvMedium;
import io.tokenspeed.engine.kvevents.KvPage;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.ValueType;

/**
 * The payload encoding against the format, read back by msgpack-java's unpacker, value by value and
 * type by type: seeded random batches of every event kind, pages of random prompts (their hashes
 * spread over the whole unsigned 64-bit range, so about half need uint64), random parents, media,
 * times and data-parallel ranks.
 */
class KvEventCodecTest {

  private static final int P = 16;
  private static final CacheLayout LAYOUT =
      new CacheLayout(
          P,
          "f32",
          List.of(
              new CacheGroupSpec(
                  0, new GroupKind.FullHistory(), 4, List.of(new CacheField("kv", 64)), null)));

  /** A random run of consecutive pages of a random prompt (page 0 has no parent). */
  private static List<KvPage> chain(SplittableRandom r) {
    int pages = 1 + r.nextInt(4);
    int first = r.nextInt(3);
    int[] tokens = r.ints((first + pages) * P + r.nextInt(P), 0, 1 << 20).toArray();
    PromptKeys keys = PromptKeys.of(LAYOUT, tokens, List.of());
    List<KvPage> out = new ArrayList<>();
    for (int i = first; i < first + pages; i++) {
      out.add(new KvPage(keys, i));
    }
    return out;
  }

  private static KvEvent randomEvent(SplittableRandom r) {
    KvMedium medium = KvMedium.values()[r.nextInt(3)];
    return switch (r.nextInt(5)) {
      case 0, 1, 2 -> new KvEvent.BlockStored(medium, chain(r));
      case 3 -> new KvEvent.BlockRemoved(medium, r.longs(1 + r.nextInt(5)).toArray());
      default -> KvEvent.AllBlocksCleared.INSTANCE;
    };
  }

  /** Reads an unsigned 64-bit integer, checking the encoding a consumer needs. */
  private static long readU64(MessageUnpacker u) throws Exception {
    MessageFormat f = u.getNextFormat();
    assertEquals(ValueType.INTEGER, f.getValueType());
    assertEquals(MessageFormat.UINT64, f, "a hash is always a uint64");
    BigInteger v = u.unpackBigInteger();
    assertTrue(v.signum() >= 0 && v.bitLength() <= 64, v::toString);
    return v.longValue();
  }

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
  void shouldDecodeBackToTheEventsUnderMsgpackJava(long seed) throws Exception {
    SplittableRandom r = new SplittableRandom(seed);
    List<KvEvent> events = new ArrayList<>();
    int n = r.nextInt(12);
    for (int i = 0; i < n; i++) {
      events.add(randomEvent(r));
    }
    double ts = 1.7e9 + r.nextDouble() * 1e8;
    int dpRank = r.nextInt(4);
    byte[] payload = KvEventCodec.encode(ts, events, dpRank, P);
    boolean sawUint64 = false;
    try (MessageUnpacker u = KvEventCodec.unpacker(payload)) {
      assertEquals(3, u.unpackArrayHeader());
      assertEquals(MessageFormat.FLOAT64, u.getNextFormat());
      assertEquals(ts, u.unpackDouble());
      assertEquals(events.size(), u.unpackArrayHeader());
      for (KvEvent e : events) {
        switch (e) {
          case KvEvent.BlockStored s -> {
            assertEquals(7, u.unpackArrayHeader());
            assertEquals("BlockStored", u.unpackString());
            assertEquals(s.pages().size(), u.unpackArrayHeader());
            for (KvPage page : s.pages()) {
              sawUint64 |= page.hash() < 0;
              assertEquals(page.hash(), readU64(u));
              assertEquals(page.pageHash().w0(), page.hash());
            }
            KvPage first = s.pages().getFirst();
            if (first.hasParent()) {
              assertEquals(first.parentPageHash().w0(), readU64(u));
            } else {
              assertEquals(MessageFormat.NIL, u.getNextFormat());
              u.unpackNil();
            }
            assertEquals(s.pages().size() * P, u.unpackArrayHeader());
            for (KvPage page : s.pages()) {
              for (int i = 0; i < P; i++) {
                assertEquals(page.token(i), u.unpackInt());
              }
            }
            assertEquals(P, u.unpackInt());
            assertEquals(MessageFormat.NIL, u.getNextFormat(), "lora_id");
            u.unpackNil();
            assertEquals(KvEventCodec.medium(s.medium()), u.unpackString());
          }
          case KvEvent.BlockRemoved rm -> {
            assertEquals(3, u.unpackArrayHeader());
            assertEquals("BlockRemoved", u.unpackString());
            assertEquals(rm.size(), u.unpackArrayHeader());
            for (int i = 0; i < rm.size(); i++) {
              sawUint64 |= rm.hash(i) < 0;
              assertEquals(rm.hash(i), readU64(u));
            }
            assertEquals(KvEventCodec.medium(rm.medium()), u.unpackString());
          }
          case KvEvent.AllBlocksCleared c -> {
            assertEquals(1, u.unpackArrayHeader());
            assertEquals("AllBlocksCleared", u.unpackString());
          }
        }
      }
      assertEquals(dpRank, u.unpackInt());
      assertFalse(u.hasNext(), "nothing after the batch");
    }
    if (events.size() > 6) {
      assertTrue(sawUint64, "seed " + seed + " drew no hash of 2^63 or more");
    }
  }

  @org.junit.jupiter.api.Test
  void shouldWriteEvenSmallHashesAsUint64() throws Exception {
    byte[] payload =
        KvEventCodec.encode(
            0.5,
            List.of(new KvEvent.BlockRemoved(KvMedium.HOST, new long[] {0, 7, 1L << 40, -1})),
            0,
            P);
    try (MessageUnpacker u = KvEventCodec.unpacker(payload)) {
      u.unpackArrayHeader();
      u.unpackDouble();
      u.unpackArrayHeader();
      u.unpackArrayHeader();
      u.unpackString();
      assertEquals(4, u.unpackArrayHeader());
      assertEquals(0, readU64(u));
      assertEquals(7, readU64(u));
      assertEquals(1L << 40, readU64(u));
      assertEquals(-1L, readU64(u), "2^64 - 1");
    }
  }

  @ParameterizedTest(name = "medium {0}")
  @ValueSource(strings = {"DEVICE", "HOST", "STORAGE"})
  void shouldNameTheMediaAsRoutersDo(String medium) {
    String expected =
        switch (medium) {
          case "DEVICE" -> "GPU";
          case "HOST" -> "CPU";
          default -> "EXTERNAL";
        };
    assertEquals(expected, KvEventCodec.medium(KvMedium.valueOf(medium)));
  }
}
