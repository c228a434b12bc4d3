package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A backend's index: the longest prefixes it reports against a brute force over seeded random
 * tiers, pending pages on a manual clock, the two clears, the store's runs over several backends,
 * and the discovery answer the index's source comes from.
 */
class PrefixIndexTest {

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3, 4, 5, 6})
  void shouldFindTheLongestDeviceAndLocalPrefixesAsABruteForceDoes(long seed) {
    SplittableRandom r = new SplittableRandom(seed);
    AtomicLong now = new AtomicLong();
    PrefixIndex index = new PrefixIndex(1 << 12, now::get, 1000);
    StoreIndex store = new StoreIndex(List.of(index));
    long[] hashes = new long[40];
    int[] bits = new int[hashes.length];
    for (int i = 0; i < hashes.length; i++) {
      hashes[i] = r.nextLong();
      // long runs of held pages, then holes: prefixes of every length
      int pick = r.nextInt(10);
      bits[i] = pick < 4 ? PrefixIndex.DEVICE : pick < 6 ? PrefixIndex.HOST : pick < 8 ? 3 : 0;
      if (r.nextInt(3) == 0) {
        bits[i] |= PrefixIndex.STORE;
      }
      if (bits[i] != 0) {
        index.onStored(new long[] {hashes[i]}, bits[i]);
      }
    }
    for (int from = 0; from < 8; from++) {
      long[] prompt = java.util.Arrays.copyOfRange(hashes, from, hashes.length);
      PrefixIndex.Match m = index.match(prompt, prompt.length);
      int device = 0;
      while (device < prompt.length && (bits[from + device] & PrefixIndex.DEVICE) != 0) {
        device++;
      }
      int local = 0;
      while (local < prompt.length && (bits[from + local] & 3) != 0) {
        local++;
      }
      assertEquals(device, m.devicePages(), "device from " + from);
      assertEquals(local, m.localPages(), "local from " + from);
      int[] runs = store.runs(prompt);
      for (int i = 0; i <= prompt.length; i++) {
        int run = 0;
        while (i + run < prompt.length && (bits[from + i + run] & PrefixIndex.STORE) != 0) {
          run++;
        }
        assertEquals(run, runs[i], "store run at " + i);
      }
    }
  }

  @Test
  void shouldCountPendingPagesAsDeviceUntilTheyExpireOrAnEventNamesThem() {
    AtomicLong now = new AtomicLong();
    PrefixIndex index = new PrefixIndex(1 << 10, now::get, 1000);
    long[] h = {11, 12, 13, 14};
    index.notePending(h);
    assertEquals(new PrefixIndex.Match(4, 4), index.match(h, 4));
    assertEquals(4, index.pending());
    assertEquals(0, index.size(), "pending pages are not blocks");
    // an event names two of them: stored on the Host, they are the Host's now
    index.onStored(new long[] {11, 12}, PrefixIndex.HOST);
    assertEquals(new PrefixIndex.Match(0, 4), index.match(h, 4));
    // one removed from the Device: no longer pending either
    index.onRemoved(new long[] {13}, PrefixIndex.DEVICE);
    assertEquals(new PrefixIndex.Match(0, 2), index.match(h, 4));
    now.addAndGet(999_999_999L);
    assertEquals(1, index.pending(), "14 still pending a nanosecond before its deadline");
    now.addAndGet(2);
    assertEquals(new PrefixIndex.Match(0, 2), index.match(h, 4));
    assertEquals(0, index.pending(), "expired at the lookup");
  }

  @Test
  void shouldKeepTheStoreReportsWhenAGapIsLostAndDropThemOnAFullClear() {
    AtomicLong now = new AtomicLong();
    PrefixIndex a = new PrefixIndex(1 << 10, now::get, 1000);
    PrefixIndex b = new PrefixIndex(1 << 10, now::get, 1000);
    StoreIndex store = new StoreIndex(List.of(a, b));
    a.onStored(new long[] {1, 2, 3}, PrefixIndex.DEVICE);
    a.onStored(new long[] {1, 2, 3}, PrefixIndex.STORE);
    b.onStored(new long[] {3}, PrefixIndex.STORE);
    assertArrayEquals(new int[] {3, 2, 1, 0}, store.runs(new long[] {1, 2, 3}));
    a.clear(); // events lost: Device and Host forgotten, the store's blocks stay
    assertEquals(0, a.blocks(PrefixIndex.DEVICE));
    assertArrayEquals(new int[] {3, 2, 1, 0}, store.runs(new long[] {1, 2, 3}));
    a.clearAll(); // AllBlocksCleared: what it wrote is out of its reach; b's report stays
    assertArrayEquals(new int[] {0, 0, 1, 0}, store.runs(new long[] {1, 2, 3}));
    store.onRemoved(new long[] {3}); // a removal from the store goes for every reporter
    assertArrayEquals(new int[] {0, 0, 0, 0}, store.runs(new long[] {1, 2, 3}));
  }

  @Test
  void shouldReadTheDiscoveryAnswerAndNameAWildcardByTheBackendsHost() throws Exception {
    ObjectMapper json = new ObjectMapper();
    Backend b = new Backend(Role.FUSED, "http://10.1.2.3:8000");
    KvEventSource s =
        Backends.source(
            b,
            json.readTree(
                "{\"endpoint\":\"tcp://*:5557\",\"replay_endpoint\":\"tcp://0.0.0.0:5558\","
                    + "\"topic\":\"kv\",\"block_size\":64,\"dp_rank\":2,"
                    + "\"hash\":\"sha256-page-prefix-u64\",\"extra\":1}"));
    assertEquals(new KvEventSource("tcp://10.1.2.3:5557", "tcp://10.1.2.3:5558", "kv", 64, 2), s);
    KvEventSource minimal =
        Backends.source(
            new Backend(Role.FUSED, "http://[::1]:8000"),
            json.readTree("{\"endpoint\":\"tcp://[::]:5557\",\"block_size\":16}"));
    assertEquals(new KvEventSource("tcp://[::1]:5557", null, "", 16, -1), minimal);
    for (String bad :
        List.of(
            "[]",
            "{\"block_size\":16}",
            "{\"endpoint\":\"ipc:///tmp/x\",\"block_size\":16}",
            "{\"endpoint\":\"tcp://h:0x\",\"block_size\":16}",
            "{\"endpoint\":\"tcp://h:1\",\"block_size\":\"16\"}",
            "{\"endpoint\":\"tcp://h:1\",\"block_size\":0}",
            "{\"endpoint\":\"tcp://h:1\",\"block_size\":16,\"hash\":\"xxhash64\"}",
            "{\"endpoint\":\"tcp://h:1\",\"replay_endpoint\":5,\"block_size\":16}")) {
      assertThrows(
          IllegalArgumentException.class, () -> Backends.source(b, json.readTree(bad)), bad);
    }
  }
}
