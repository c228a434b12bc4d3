package io.tokenspeed.scheduler;

import static io.tokenspeed.scheduler.StmFixture.allOk;
import static io.tokenspeed.scheduler.StmFixture.fact;
import static io.tokenspeed.scheduler.StmFixture.only;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A tail's round trip through the storage transfer manager, over a layout without State groups (P =
 * 64: full history in blocks of 16, an 80-token window in blocks of 32): a writer publishes a
 * finished prompt's write-through — the keys of its aligned boundaries and the tail object at its
 * reusable bound — on the Host and offers them for backup; they leave as create-only PUTs. A cold
 * reader asks for the tail keys at the exact reusable bound, restores every reusable token through
 * one GET, and records the tail's hint only once that GET, retired and attached, published it. The
 * hint then makes the tail a candidate of a longer prompt sharing its tokens, which a cold instance
 * never asks for. Seeded; the cache's, manager's and reference invariants are checked after each
 * case.
 */
class StmTailTest {

  private final List<StmFixture> fixtures = new ArrayList<>();

  @AfterEach
  void checkInvariants() {
    for (StmFixture f : fixtures) {
      f.checkInvariants(List.of());
    }
  }

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 8).map(i -> 0x7A11_0000L + i * 104_729);
  }

  private StmFixture fixture() {
    StmFixture f =
        new StmFixture(
            new CacheLayout(
                64,
                "bf16",
                List.of(
                    new CacheGroupSpec(
                        0,
                        new GroupKind.FullHistory(),
                        16,
                        List.of(new CacheField("kv", 64)),
                        null),
                    new CacheGroupSpec(
                        1,
                        new GroupKind.SlidingWindow(80),
                        32,
                        List.of(new CacheField("kv", 128)),
                        null))),
            StmFixture.config(),
            64,
            512);
    fixtures.add(f);
    return f;
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldWriteRestoreAndHintATailOfANonAlignedPrompt(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int length = 2 + rnd.nextInt(5 * 64);
    if ((length - 1) % 64 == 0) {
      length++;
    }
    int[] tokens = rnd.ints(length, 0, 32_000).toArray();
    StmFixture writer = fixture();
    PromptKeys prompt = PromptKeys.of(writer.cache.layout(), tokens, List.of());
    int bound = prompt.reusableBound();
    List<CacheKey> tail = writer.cache.tailKeys(prompt, bound);
    assertFalse(tail.isEmpty(), "a tail object of " + bound + " tokens");

    // the writer: its write-through on the Host, offered for backup, put create-only
    Set<CacheKey> written = new LinkedHashSet<>();
    for (int b = 64; b <= prompt.numFullPages() * 64; b += 64) {
      written.addAll(writer.cache.neededKeys(prompt, b));
    }
    written.addAll(tail);
    writer.put(Tier.HOST, written);
    writer.stm.onTick(0);
    for (CacheKey k : written) {
      writer.stm.offerBackup(k);
    }
    Set<CacheKey> store = new HashSet<>();
    for (int round = 0; writer.stm.queuedCandidates() > 0 || round == 0; round++) {
      assertTrue(round < 100, "the backups drain");
      for (StorageOp op : writer.drain()) {
        StorageOp.Put put = (StorageOp.Put) op;
        store.addAll(put.keys());
        writer.stm.onCompletion(allOk(put));
      }
    }
    assertTrue(store.containsAll(tail), "the tail object was put: " + tail);
    assertEquals(0, writer.stm.hostCreditsInUse(), "the PUTs' source references went back");

    // a cold reader asks for the tail at the exact reusable bound and restores all of it
    StmFixture reader = fixture();
    reader.stm.onTick(0);
    StorageTransferManager.Preparation prep = reader.stm.prepare(1, prompt, true);
    StorageOp.Query q = (StorageOp.Query) only(reader.drain(), StorageOp.Query.class);
    assertTrue(q.keys().containsAll(tail), "the query asks for the tail keys");
    reader.stm.onCompletion(fact(q, store, true));
    StorageOp.Get get = (StorageOp.Get) only(reader.drain(), StorageOp.Get.class);
    assertTrue(get.keys().containsAll(tail), "the GET reads the tail object");
    assertEquals(prep.lease().operationId(), get.operationId());
    assertEquals(0, reader.cache.tails().size(), "no hint before the GET published");
    reader.stm.onCompletion(allOk(get));
    Wakeup w = onlyWakeup(reader.stm.drainWakeups());
    assertEquals(Wakeup.Reason.READ_COMPLETE, w.reason());
    assertEquals(1, reader.cache.tails().size(), "the retired, attached GET recorded the hint");
    assertEquals(bound, reader.cache.probe(prompt, bound).hostHit(), "all but the last token");
    Admission a = reader.cache.admit(prompt, bound, 1);
    assertEquals(bound, a.hit());
    w.ready().close();
    reader.cache.finishCopies(a, true);
    reader.cache.release(a);

    // the hint: a longer prompt sharing the tail's tokens asks for it, a cold instance does not
    int[] longer = Arrays.copyOf(tokens, bound + 64 + rnd.nextInt(128));
    for (int i = bound; i < longer.length; i++) {
      longer[i] = rnd.nextInt(32_000);
    }
    PromptKeys extended = PromptKeys.of(reader.cache.layout(), longer, List.of());
    assertEquals(tail, reader.cache.tailKeys(extended, bound), "the same tail object");
    reader.cache.device().unpublishAll(); // the local copies are gone, the hint stays
    reader.cache.host().unpublishAll();
    StmFixture cold = fixture();
    cold.stm.onTick(0);
    StorageTransferManager.Preparation coldPrep = cold.stm.prepare(2, extended, true);
    StorageOp.Query coldQuery = (StorageOp.Query) only(cold.drain(), StorageOp.Query.class);
    assertTrue(
        tail.stream().noneMatch(coldQuery.keys()::contains),
        "without a hint an older tail is never asked for");
    coldPrep.lease().close();
    cold.drain();
    cold.stm.onCompletion(allOk(coldQuery));

    reader.stm.prepare(2, extended, true);
    StorageOp.Query q2 = (StorageOp.Query) only(reader.drain(), StorageOp.Query.class);
    assertTrue(q2.keys().containsAll(tail), "the hint makes the tail a candidate");
    reader.stm.onCompletion(fact(q2, store, true));
    StorageOp.Get get2 = (StorageOp.Get) only(reader.drain(), StorageOp.Get.class);
    reader.stm.onCompletion(allOk(get2));
    Wakeup w2 = onlyWakeup(reader.stm.drainWakeups());
    assertEquals(2, w2.requestId());
    assertEquals(Wakeup.Reason.READ_COMPLETE, w2.reason());
    assertEquals(
        bound,
        reader.cache.probe(extended, extended.reusableBound()).hostHit(),
        "the longer prompt restores up to the hinted tail");
    w2.ready().close();
  }

  private static Wakeup onlyWakeup(List<Wakeup> wakeups) {
    assertEquals(1, wakeups.size(), () -> "one wakeup: " + wakeups);
    return wakeups.get(0);
  }
}
