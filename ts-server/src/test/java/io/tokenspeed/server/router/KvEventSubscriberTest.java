package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.server.router.EventPublisherStub.Cleared;
import io.tokenspeed.server.router.EventPublisherStub.Ev;
import io.tokenspeed.server.router.EventPublisherStub.Removed;
import io.tokenspeed.server.router.EventPublisherStub.Stored;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.zeromq.ZContext;

/**
 * The subscriber against a publisher of the events contract ({@link EventPublisherStub}) over real
 * ZeroMQ sockets on loopback: seeded random streams of stored, removed and cleared blocks on every
 * medium, with batches kept from the PUB socket (gaps), a bounded replay (gaps it cannot fill), a
 * restarted publisher and payloads that do not decode. The index is compared with a model of the
 * backend's tiers fed every batch.
 */
class KvEventSubscriberTest {
  private static final long WAIT_MS = 20_000;

  private final ZContext context = new ZContext(1);
  private final List<AutoCloseable> open = new ArrayList<>();

  @AfterEach
  void stop() throws Exception {
    for (AutoCloseable c : open.reversed()) {
      c.close();
    }
    context.close();
  }

  /** The backend's tiers and the store as the batches published so far leave them. */
  private static final class Model {
    final Map<Long, Integer> tiers = new HashMap<>();
    final Set<Long> store = new HashSet<>();

    void apply(List<Ev> events) {
      for (Ev e : events) {
        switch (e) {
          case Stored s -> {
            for (long h : s.hashes()) {
              switch (s.medium()) {
                case "GPU" -> tiers.merge(h, PrefixIndex.DEVICE, (a, b) -> a | b);
                case "CPU" -> tiers.merge(h, PrefixIndex.HOST, (a, b) -> a | b);
                default -> store.add(h);
              }
            }
          }
          case Removed r -> {
            for (long h : r.hashes()) {
              switch (r.medium()) {
                case "GPU" -> drop(h, PrefixIndex.DEVICE);
                case "CPU" -> drop(h, PrefixIndex.HOST);
                default -> store.remove(h);
              }
            }
          }
          case Cleared c -> {
            tiers.clear();
            store.clear(); // what it wrote to the store is out of its reach after a full clear
          }
        }
      }
    }

    private void drop(long h, int bit) {
      Integer b = tiers.get(h);
      if (b != null) {
        int after = b & ~bit;
        if (after == 0) {
          tiers.remove(h);
        } else {
          tiers.put(h, after);
        }
      }
    }
  }

  private record Rig(
      EventPublisherStub publisher,
      PrefixIndex index,
      StoreIndex store,
      KvEventSubscriber subscriber,
      AtomicInteger replayed,
      AtomicInteger lost,
      AtomicInteger malformed) {}

  private Rig rig(boolean withReplay, int dpRank) {
    EventPublisherStub publisher = new EventPublisherStub("kv@test", dpRank);
    open.add(publisher);
    PrefixIndex index = new PrefixIndex(1 << 16, System::nanoTime, 10_000);
    StoreIndex store = new StoreIndex(List.of(index));
    AtomicInteger replayed = new AtomicInteger();
    AtomicInteger lost = new AtomicInteger();
    AtomicInteger malformed = new AtomicInteger();
    KvEventSource source =
        new KvEventSource(
            publisher.endpoint(),
            withReplay ? publisher.replayEndpoint() : null,
            "kv@test",
            16,
            dpRank);
    KvEventSubscriber subscriber =
        new KvEventSubscriber(
            context,
            source,
            "stub",
            index,
            store,
            new KvEventSubscriber.Listener() {
              @Override
              public void onBatch() {}

              @Override
              public void onGap(boolean r) {
                (r ? replayed : lost).incrementAndGet();
              }

              @Override
              public void onMalformed() {
                malformed.incrementAndGet();
              }
            });
    open.add(subscriber);
    subscriber.start();
    Rig rig = new Rig(publisher, index, store, subscriber, replayed, lost, malformed);
    try {
      awaitLive(rig);
    } catch (InterruptedException e) {
      throw new IllegalStateException(e);
    }
    return rig;
  }

  /**
   * Publishes empty batches until the subscriber takes three in a row within 100 ms each: its SUB
   * socket is live, so batches kept from it later make gaps.
   */
  private static void awaitLive(Rig rig) throws InterruptedException {
    long deadline = System.nanoTime() + WAIT_MS * 1_000_000L;
    int inRow = 0;
    while (inRow < 3) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("the subscriber never took batches as they came");
      }
      long seq = rig.publisher().publish(List.of(), false);
      long until = System.nanoTime() + 100_000_000L;
      while (rig.subscriber().lastApplied() < seq && System.nanoTime() - until < 0) {
        Thread.sleep(2);
      }
      inRow = rig.subscriber().lastApplied() >= seq ? inRow + 1 : 0;
    }
  }

  /** {@code n} seeded random hashes, u64s above 2^63 (negative longs) and 0 among them. */
  private static long[] universe(SplittableRandom r, int n) {
    long[] out = new long[n];
    for (int i = 0; i < n; i++) {
      out[i] = i == 0 ? 0 : r.nextLong();
    }
    return out;
  }

  private static List<Ev> randomBatch(SplittableRandom r, long[] universe, boolean clears) {
    List<Ev> events = new ArrayList<>();
    for (int k = 1 + r.nextInt(4); k > 0; k--) {
      int pick = r.nextInt(100);
      String medium =
          switch (r.nextInt(4)) {
            case 0, 1 -> "GPU";
            case 2 -> "CPU";
            default -> r.nextBoolean() ? "L3" : "REDIS";
          };
      long[] hashes = new long[1 + r.nextInt(6)];
      for (int i = 0; i < hashes.length; i++) {
        hashes[i] = universe[r.nextInt(universe.length)];
      }
      if (clears && pick < 2) {
        events.add(new Cleared());
      } else if (pick < 60) {
        events.add(new Stored(hashes, medium));
      } else {
        events.add(new Removed(hashes, medium));
      }
    }
    return events;
  }

  /** Waits until the subscriber applied every batch published. */
  private static void awaitApplied(Rig rig) throws InterruptedException {
    long last = rig.publisher().next() - 1;
    long deadline = System.nanoTime() + WAIT_MS * 1_000_000L;
    while (rig.subscriber().lastApplied() != last) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError(
            "applied through " + rig.subscriber().lastApplied() + ", published through " + last);
      }
      Thread.sleep(5);
    }
  }

  private static void assertMirrors(Model model, long[] universe, Rig rig, String why) {
    for (long h : universe) {
      assertEquals(
          model.tiers.getOrDefault(h, 0).intValue(),
          rig.index().tiersOf(h) & (PrefixIndex.DEVICE | PrefixIndex.HOST),
          why + ": the tiers of " + Long.toUnsignedString(h));
      assertEquals(
          model.store.contains(h),
          rig.store().contains(h),
          why + ": the store's " + Long.toUnsignedString(h));
    }
  }

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3, 4, 5})
  void shouldMirrorEveryBatchInOrderFillingEachGapFromTheReplay(long seed) throws Exception {
    SplittableRandom r = new SplittableRandom(seed);
    Rig rig = rig(true, 3);
    long[] universe = universe(r, 120);
    Model model = new Model();
    int dropped = 0;
    for (int b = 0; b < 400; b++) {
      List<Ev> events = randomBatch(r, universe, true);
      model.apply(events);
      boolean drop = r.nextInt(100) < 8;
      dropped += drop ? 1 : 0;
      rig.publisher().publish(events, drop);
      if (r.nextInt(50) == 0) {
        Thread.sleep(2); // let the subscriber catch up now and then: gaps at both ends
      }
    }
    rig.publisher().publish(List.of(), false); // the last word on the PUB socket
    awaitApplied(rig);
    assertTrue(dropped > 10, "the seed drops batches: " + dropped);
    assertEquals(0, rig.lost().get(), "every gap could be filled");
    assertTrue(rig.replayed().get() > 0, "gaps were filled from the replay");
    assertEquals(0, rig.malformed().get());
    assertMirrors(model, universe, rig, "seed " + seed);
  }

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {11, 12, 13})
  void shouldClearTheTiersWhenAGapCannotBeFilledAndKeepOnlyWhatLaterBatchesSay(long seed)
      throws Exception {
    SplittableRandom r = new SplittableRandom(seed);
    Rig rig = rig(true, 0);
    long[] universe = universe(r, 80);
    Model model = new Model();
    for (int b = 0; b < 60; b++) {
      List<Ev> events = randomBatch(r, universe, false);
      model.apply(events);
      rig.publisher().publish(events, false);
    }
    awaitApplied(rig);
    assertMirrors(model, universe, rig, "before the loss");
    // the replay keeps 3 batches; 10 never reach the SUB socket: the gap is lost
    rig.publisher().retain(3);
    for (int b = 0; b < 10; b++) {
      List<Ev> events = randomBatch(r, universe, false);
      model.apply(events);
      rig.publisher().publish(events, true);
    }
    List<Ev> after = List.of(new Stored(new long[] {universe[1], universe[2]}, "GPU"));
    model.apply(after);
    rig.publisher().publish(after, false);
    awaitApplied(rig);
    assertEquals(1, rig.lost().get(), "one gap, lost");
    for (long h : universe) {
      int held = rig.index().tiersOf(h) & (PrefixIndex.DEVICE | PrefixIndex.HOST);
      int truth = model.tiers.getOrDefault(h, 0);
      assertEquals(held, held & truth, "nothing the backend no longer holds: " + h);
    }
    assertEquals(PrefixIndex.DEVICE, rig.index().tiersOf(universe[1]) & PrefixIndex.DEVICE);
    assertEquals(PrefixIndex.DEVICE, rig.index().tiersOf(universe[2]) & PrefixIndex.DEVICE);
    // without a replay socket every gap is lost as well
    Rig bare = rig(false, 0);
    bare.publisher().publish(List.of(new Stored(new long[] {7}, "GPU")), false);
    awaitAppliedSome(bare);
    bare.publisher().publish(List.of(new Stored(new long[] {8}, "GPU")), true);
    bare.publisher().publish(List.of(new Stored(new long[] {9}, "CPU")), false);
    awaitApplied(bare);
    assertEquals(1, bare.lost().get());
    assertEquals(0, bare.index().tiersOf(7), "cleared by the lost gap");
    assertEquals(0, bare.index().tiersOf(8));
    assertEquals(PrefixIndex.HOST, bare.index().tiersOf(9));
  }

  /** A subscriber without replay misses what went out before it joined: waits for its first. */
  private static void awaitAppliedSome(Rig rig) throws InterruptedException {
    long deadline = System.nanoTime() + WAIT_MS * 1_000_000L;
    while (rig.subscriber().lastApplied() < 0) {
      // the slow joiner: publish again until one arrives
      rig.publisher().publish(List.of(new Stored(new long[] {7}, "GPU")), false);
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("nothing arrived");
      }
      Thread.sleep(20);
    }
    awaitApplied(rig);
  }

  @Test
  void shouldStartAgainFromTheReplayWhenThePublishersSequenceStartsAgain() throws Exception {
    SplittableRandom r = new SplittableRandom(21);
    Rig rig = rig(true, 0);
    long[] universe = universe(r, 60);
    Model model = new Model();
    for (int b = 0; b < 50; b++) {
      List<Ev> events = randomBatch(r, universe, false);
      model.apply(events);
      rig.publisher().publish(events, false);
    }
    awaitApplied(rig);
    assertMirrors(model, universe, rig, "the first run");
    // the engine restarted: its caches are empty, the store is not
    rig.publisher().restart();
    model.tiers.clear();
    for (int b = 0; b < 20; b++) {
      List<Ev> events = randomBatch(r, universe, false);
      model.apply(events);
      rig.publisher().publish(events, b == 3); // a gap in the new run too
    }
    awaitApplied(rig);
    assertMirrors(model, universe, rig, "after the restart");
  }

  @Test
  void shouldStartOverWhenItReconnectsToAnEngineRestartedOnTheSamePorts() throws Exception {
    SplittableRandom r = new SplittableRandom(41);
    Rig rig = rig(true, 0);
    long[] universe = universe(r, 60);
    Model model = new Model();
    for (int b = 0; b < 40; b++) {
      List<Ev> events = randomBatch(r, universe, false);
      model.apply(events);
      rig.publisher().publish(events, false);
    }
    awaitApplied(rig);
    assertMirrors(model, universe, rig, "the first run");
    // the engine goes down and comes back on the same ports with empty caches, and is busy at once:
    // its new run passes the old one's last number before the subscriber reconnects
    int pubPort = rig.publisher().pubPort();
    int replayPort = rig.publisher().replayPort();
    rig.publisher().close();
    open.remove(rig.publisher());
    EventPublisherStub again = new EventPublisherStub("kv@test", 0, pubPort, replayPort);
    open.add(again);
    model.tiers.clear();
    for (int b = 0; b < 60; b++) {
      List<Ev> events = randomBatch(r, universe, false);
      model.apply(events);
      again.publish(events, false);
    }
    Rig after =
        new Rig(
            again,
            rig.index(),
            rig.store(),
            rig.subscriber(),
            rig.replayed(),
            rig.lost(),
            rig.malformed());
    awaitApplied(after);
    assertMirrors(model, universe, after, "after the restart on the same ports");
  }

  @Test
  void shouldLearnWhatWasPublishedBeforeItStartedFromTheReplay() throws Exception {
    EventPublisherStub publisher = new EventPublisherStub("", 0);
    open.add(publisher);
    Model model = new Model();
    SplittableRandom r = new SplittableRandom(31);
    long[] universe = universe(r, 40);
    for (int b = 0; b < 30; b++) {
      List<Ev> events = randomBatch(r, universe, true);
      model.apply(events);
      publisher.publish(events, false); // nobody listens yet
    }
    PrefixIndex index = new PrefixIndex(1 << 10, System::nanoTime, 10_000);
    StoreIndex store = new StoreIndex(List.of(index));
    KvEventSubscriber s =
        new KvEventSubscriber(
            context,
            new KvEventSource(publisher.endpoint(), publisher.replayEndpoint(), "", 16, 0),
            "late",
            index,
            store,
            KvEventSubscriber.Listener.NONE);
    open.add(s);
    s.start();
    Rig rig =
        new Rig(
            publisher,
            index,
            store,
            s,
            new AtomicInteger(),
            new AtomicInteger(),
            new AtomicInteger());
    awaitApplied(rig);
    assertMirrors(model, universe, rig, "replayed at the start");
  }

  @Test
  void shouldClearOnABatchThatDoesNotDecodeAndSkipAnotherRanksBatches() throws Exception {
    Rig rig = rig(true, 2);
    rig.publisher().publish(List.of(new Stored(new long[] {1, 2}, "GPU")), false);
    awaitAppliedSome(rig);
    assertEquals(PrefixIndex.DEVICE, rig.index().tiersOf(1));
    rig.publisher().publishPayload(new byte[] {(byte) 0x93, 1}, false); // truncated
    rig.publisher().publish(List.of(new Stored(new long[] {3}, "CPU")), false);
    awaitApplied(rig);
    assertEquals(1, rig.malformed().get());
    assertEquals(0, rig.index().tiersOf(1), "cleared: the bad batch's effect is unknown");
    assertEquals(PrefixIndex.HOST, rig.index().tiersOf(3));
    // a batch of dp_rank 5 on the same socket is another replica's
    rig.publisher()
        .publishPayload(
            EventPublisherStub.batch(List.of(new Stored(new long[] {4}, "GPU")), 5), false);
    rig.publisher().publish(List.of(), false);
    awaitApplied(rig);
    assertEquals(0, rig.index().tiersOf(4));
  }
}
