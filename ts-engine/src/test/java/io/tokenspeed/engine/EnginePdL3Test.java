package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import io.tokenspeed.scheduler.RequestState;
import io.tokenspeed.scheduler.StorageConfig;
import java.lang.foreign.MemorySegment;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * L3 in the prefill role, as the specification has it: a prefill request waits for its decode
 * engine's ACK in Bootstrapping and may prepare an L3 hit meanwhile (Prefetching with a
 * Bootstrapping continuation); the ACK updates the continuation without ending the L3 wait, and the
 * restore then enters the ordinary forward and the transfer. Here the store's queries are held
 * until the loop has seen the ACK arrive during the wait, so the overlap is certain, not a matter
 * of timing; the decode engine's output equals a fused engine's recomputation.
 */
class EnginePdL3Test extends WithContextLlama {

  /** A shared store whose key queries wait, after {@link #hold}, until {@link #open}. */
  private static final class GatedStore extends ForwardingStore {
    private volatile CountDownLatch gate;
    final AtomicInteger puts = new AtomicInteger();

    GatedStore() {
      super(new MemoryStore());
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      puts.incrementAndGet();
      return super.put(keys, sources);
    }

    @Override
    public void close() {} // shared by the engines of the test

    final AtomicInteger gets = new AtomicInteger();
    final AtomicInteger queries = new AtomicInteger();

    @Override
    public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
      gets.incrementAndGet();
      return super.get(keys, destinations);
    }

    @Override
    public StoreResult exists(List<String> keys) throws Exception {
      queries.incrementAndGet();
      CountDownLatch g = gate;
      if (g != null && !g.await(30, TimeUnit.SECONDS)) {
        throw new IllegalStateException("the gate never opened");
      }
      return super.exists(keys);
    }

    void hold() {
      gate = new CountDownLatch(1);
    }

    void open() {
      CountDownLatch g = gate;
      if (g != null) {
        g.countDown();
      }
    }
  }

  /** Records each request's states; opens the gate once a request's ACK came in Prefetching. */
  private static final class States extends Checked {
    final Set<String> seen = ConcurrentHashMap.newKeySet();
    volatile GatedStore store;

    @Override
    public void afterRound(EngineView e) {
      super.afterRound(e);
      for (long id : e.activeIds()) {
        RequestState s = e.scheduler().state(id);
        if (s instanceof RequestState.Prefetching p) {
          seen.add("Prefetching/" + p.continuation());
          if (p.continuation() == RequestState.Continuation.SUBMITTED && store != null) {
            store.open(); // the ACK came while L3 was queried: let the query answer
          }
        } else if (s != null) {
          seen.add(s.getClass().getSimpleName());
        }
      }
    }
  }

  @Test
  void shouldOverlapTheBootstrapWithTheL3WaitAndLandTheRestoredPrefix() throws Exception {
    SplittableRandom rnd = new SplittableRandom(31);
    int[] prompt = rnd.ints(40, 0, model.vocabSize()).toArray();
    SamplingParams params = SamplingParams.greedy(12);
    GatedStore store = new GatedStore();
    StorageConfig scheduling =
        StorageConfig.defaults().withMinExtensionTokens(4).withSoftDeadlineMs(20_000);
    // a fused engine computes the prompt and writes it through to the store
    Checked fusedChecks = new Checked();
    EngineTest.Run fused;
    try (Engine e =
        Engine.start(
            EngineSettings.of(model, EngineTest.small(256))
                .observer(fusedChecks)
                .l3(EngineL3Test.l3(store, scheduling))
                .conclude())) {
      fused = fusedChecks.await(e.submit(prompt, params));
    } // close drains the write-through
    assertTrue(store.puts.get() > 0, "the fused engine wrote nothing to the store");

    GatedStore gated = store;
    gated.hold();
    PdSecret secret = PdSecret.generate();
    States states = new States();
    states.store = gated;
    Checked dc = new Checked();
    // the decode engine has L3 too (for its own recovery): a landing must never read it
    GatedStore decodeStore = new GatedStore();
    try (Engine d =
            Engine.start(
                EngineSettings.of(model, EngineTest.small(256))
                    .observer(dc)
                    .l3(EngineL3Test.l3(decodeStore, scheduling))
                    .pd(
                        PdOptions.decode(
                            secret,
                            PdSettings.defaults(),
                            new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)))
                    .conclude());
        Engine p =
            Engine.start(
                EngineSettings.of(model, EngineTest.small(256))
                    .observer(states)
                    .l3(EngineL3Test.l3(gated, scheduling))
                    .pd(PdOptions.prefill(secret, PdSettings.defaults()))
                    .conclude())) {
      long room = 0x5eed_0001L;
      RequestHandle pre =
          p.submit(prompt, params, -1, new PdTicket.Prefill(room, d.pdEndpoint().orElseThrow()));
      // the decode half comes later: the prefill half is in its L3 wait, Bootstrapping
      Thread.sleep(50);
      RequestHandle dec = d.submit(prompt, params, -1, new PdTicket.Decode(room));
      EngineTest.Run pr = states.await(pre);
      EngineTest.Run dr = dc.await(dec);
      assertTrue(
          states.seen.contains("Prefetching/BOOTSTRAPPING"),
          () -> "never waited for L3 while bootstrapping: " + states.seen);
      assertTrue(
          states.seen.contains("Prefetching/SUBMITTED"),
          () -> "the ACK did not update the continuation during the L3 wait: " + states.seen);
      assertArrayEquals(fused.tokens(), dr.tokens(), "decode output against recomputation");
      RequestMetrics pm = pr.result().metrics();
      assertTrue(pm.reusedStorageTokens() > 0, () -> "nothing restored from L3: " + pm);
      assertEquals(pm.reusedStorageTokens(), dr.result().metrics().reusedStorageTokens());
      assertEquals(0, decodeStore.gets.get(), "the decode engine read L3 for a remote landing");
      assertEquals(0, decodeStore.queries.get(), "the decode engine queried L3 for a landing");
      assertTrue(states.broken.isEmpty(), () -> states.broken.toString());
      assertTrue(dc.broken.isEmpty(), () -> dc.broken.toString());
    }
  }
}
