package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** {@link BlockTable} against a {@link HashMap} fed the same seeded random operations. */
class BlockTableTest {

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6, 7, 8})
  void shouldHoldExactlyWhatAMapHoldsWhileWithinItsBound(long seed) {
    SplittableRandom r = new SplittableRandom(seed);
    int bound = 5000;
    BlockTable t = new BlockTable(bound);
    Map<Long, Integer> model = new HashMap<>();
    // few distinct keys (so adds and removes meet), clustered low bits (so runs form and shift)
    long[] keys = new long[3000];
    for (int i = 0; i < keys.length; i++) {
      keys[i] = i == 0 ? 0 : (r.nextInt(4) == 0 ? r.nextLong() : ((long) r.nextInt(64) << 40));
      if (i > 0 && r.nextInt(4) != 0) {
        keys[i] = keys[i] ^ i; // distinct, but all in few slots' neighbourhoods
      }
    }
    for (int op = 0; op < 200_000; op++) {
      long k = keys[r.nextInt(keys.length)];
      int bits = 1 + r.nextInt(3);
      switch (r.nextInt(10)) {
        case 0, 1, 2, 3, 4 -> {
          int before = t.add(k, bits);
          assertEquals(model.getOrDefault(k, 0).intValue(), before, "add " + k);
          model.merge(k, bits, (a, b) -> a | b);
        }
        case 5, 6, 7, 8 -> {
          int before = t.remove(k, bits);
          assertEquals(model.getOrDefault(k, 0).intValue(), before, "remove " + k);
          int after = model.getOrDefault(k, 0) & ~bits;
          if (after == 0) {
            model.remove(k);
          } else {
            model.put(k, after);
          }
        }
        default -> {
          if (r.nextInt(200) == 0) {
            int clear = 1 + r.nextInt(3);
            t.removeAll(clear);
            model.replaceAll((key, b) -> b & ~clear);
            model.values().removeIf(b -> b == 0);
          }
        }
      }
      if (op % 997 == 0) {
        assertSame(model, t, keys);
      }
    }
    assertSame(model, t, keys);
    assertEquals(0, t.evicted(), "within the bound nothing is evicted");
  }

  private static void assertSame(Map<Long, Integer> model, BlockTable t, long[] keys) {
    assertEquals(model.size(), t.size());
    for (long k : keys) {
      assertEquals(model.getOrDefault(k, 0).intValue(), t.get(k), "key " + k);
    }
    assertEquals(
        model.values().stream().filter(b -> (b & 1) != 0).count(), (long) t.count(1), "count(1)");
  }

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {21, 22, 23})
  void shouldNeverHoldMoreThanItsBoundAndEvictOnlyToStayWithinIt(long seed) {
    SplittableRandom r = new SplittableRandom(seed);
    int bound = 1000;
    BlockTable t = new BlockTable(bound);
    Map<Long, Integer> model = new HashMap<>();
    long added = 0;
    for (int op = 0; op < 50_000; op++) {
      long k = r.nextLong() & 0xffff; // 65,536 keys: far more than the bound
      if (r.nextInt(4) == 0) {
        t.remove(k, 3);
        model.remove(k);
      } else {
        if (t.get(k) == 0) {
          added++;
        }
        t.add(k, 1);
        model.merge(k, 1, (a, b) -> a | b);
      }
      assertTrue(t.size() <= bound, "size " + t.size());
    }
    assertTrue(t.evicted() > 0);
    // whatever it holds, it holds rightly: a subset of the model with the same bits
    int held = 0;
    for (long k = 0; k <= 0xffff; k++) {
      int b = t.get(k);
      if (b != 0) {
        held++;
        assertEquals(model.get(k).intValue(), b, "key " + k);
      }
    }
    assertEquals(t.size(), held);
    assertTrue(added > bound);
  }

  @Test
  void shouldRefuseABadBoundOrBits() {
    assertThrows(IllegalArgumentException.class, () -> new BlockTable(0));
    BlockTable t = new BlockTable(1);
    assertThrows(IllegalArgumentException.class, () -> t.add(5, 0));
    assertThrows(IllegalArgumentException.class, () -> t.add(5, 256));
    t.add(0, 1);
    t.add(9, 1); // the bound of one: the zero key goes
    assertEquals(1, t.size());
    assertEquals(1, t.get(9));
    assertEquals(0, t.get(0));
  }
}
