package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.ReplicaSecret;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.LocalCollective;
import io.tokenspeed.model.sampling.SamplingParams;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Engines of a tensor-parallel replica as ranks in one JVM (threads, a collective of threads, the
 * real control-plane mesh over loopback TCP): the leader takes the requests, every rank runs the
 * same rounds, and the outputs equal a single-rank engine's — greedy and seeded sampling, requests
 * arriving together and one by one with idle gaps between them, a cache clear in between. Closing
 * the leader stops every rank.
 */
class EngineTensorParallelTest {
  @TempDir Path dir;

  /** The requests of one run: prompts and their sampling parameters, seeded. */
  private record Workload(List<int[]> prompts, List<SamplingParams> params) {
    static Workload of(long seed, int vocab, int n) {
      SplittableRandom r = new SplittableRandom(seed);
      List<int[]> prompts = new ArrayList<>();
      List<SamplingParams> params = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        prompts.add(r.ints(5 + r.nextInt(40), 0, vocab).toArray());
        SamplingParams p = SamplingParams.greedy(4 + r.nextInt(8)).withIgnoreEos(true);
        if (i % 2 == 1) {
          p = p.withTemperature(0.8).withTopK(20).withSeed(r.nextLong());
        }
        params.add(p);
      }
      return new Workload(prompts, params);
    }
  }

  /** Every request at once, then each again alone after an idle gap, then all after a clear. */
  private static List<int[]> serve(Engine leader, Workload w) throws Exception {
    List<int[]> out = new ArrayList<>();
    List<RequestHandle> handles = new ArrayList<>();
    for (int i = 0; i < w.prompts().size(); i++) {
      handles.add(leader.submit(w.prompts().get(i), w.params().get(i)));
    }
    for (RequestHandle h : handles) {
      out.add(tokens(h));
    }
    for (int i = 0; i < w.prompts().size(); i++) {
      Thread.sleep(i % 3 == 0 ? 150 : 5); // past the heartbeat, and not
      out.add(tokens(leader.submit(w.prompts().get(i), w.params().get(i))));
    }
    leader.clearCache().get(30, TimeUnit.SECONDS);
    handles.clear();
    for (int i = 0; i < w.prompts().size(); i++) {
      handles.add(leader.submit(w.prompts().get(i), w.params().get(i)));
    }
    for (RequestHandle h : handles) {
      out.add(tokens(h));
    }
    return out;
  }

  static int[] tokens(RequestHandle h) throws Exception {
    GenerationResult r = h.result().get(60, TimeUnit.SECONDS);
    assertEquals(null, r.error(), () -> "request " + h.id() + ": " + r.error());
    return r.tokens();
  }

  /**
   * A request the leader sent is admitted in the round that agrees on it, which the leader runs at
   * once, not at its next heartbeat: each request, submitted to an idle replica right after the
   * previous one ended (the heartbeat a full period away), waits far less than a heartbeat period.
   */
  @org.junit.jupiter.api.Test
  void shouldAdmitARequestWithoutWaitingForTheHeartbeat() throws Exception {
    Path folder = Fixtures.extract("llama", dir);
    try (TpReplica replica = TpReplica.start(folder, 2, EngineTest.small(256), null)) {
      List<Long> queueMs = new ArrayList<>();
      for (int i = 0; i < 7; i++) {
        GenerationResult r =
            replica
                .leader()
                .submit(new int[] {5 + i, 6, 7, 8, 9}, SamplingParams.greedy(2))
                .result()
                .get(60, TimeUnit.SECONDS);
        queueMs.add(TimeUnit.NANOSECONDS.toMillis(r.metrics().queueNs()));
      }
      List<Long> sorted = new ArrayList<>(queueMs);
      sorted.sort(null);
      assertTrue(
          sorted.get(sorted.size() / 2) < LoopRunner.HEARTBEAT_MS / 2,
          "median wait before admission (ms) " + queueMs);
    }
  }

  @ParameterizedTest(name = "{0} TP={1}")
  @CsvSource({"llama, 2", "qwen2, 2", "gemma3, 4", "jamba, 2"})
  void shouldServeAsTheSingleRankEngineDoes(String fixture, int tp) throws Exception {
    Path folder = Fixtures.extract(fixture, dir);
    Workload w;
    List<int[]> want;
    try (CausalLm model = CausalLm.load(folder)) {
      w = Workload.of(fixture.hashCode(), model.vocabSize(), 6);
      try (Engine single =
          Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude())) {
        want = serve(single, w);
      }
    }
    Collective[] collectives = LocalCollective.group(tp);
    List<ControlConfig> controls = controls(tp);
    List<CausalLm> models = new ArrayList<>();
    List<Engine> engines = new ArrayList<>();
    ExecutorService starts = Executors.newFixedThreadPool(tp);
    try {
      for (int r = 0; r < tp; r++) {
        models.add(
            CausalLm.load(folder, fixture, ModelIdentity.DEFAULT_WEIGHT_VERSION, collectives[r]));
      }
      List<Future<Engine>> started = new ArrayList<>();
      for (int r = 0; r < tp; r++) {
        int rank = r;
        started.add(
            starts.submit(
                () ->
                    Engine.start(
                        EngineSettings.of(models.get(rank), EngineTest.small(256))
                            .control(controls.get(rank))
                            .conclude())));
      }
      for (Future<Engine> f : started) {
        engines.add(f.get(60, TimeUnit.SECONDS));
      }
      Engine leader = engines.get(0);
      assertThrows(
          IllegalStateException.class,
          () -> engines.get(1).submit(w.prompts().get(0), w.params().get(0)),
          "a follower takes no requests");

      List<int[]> got = serve(leader, w);
      assertEquals(want.size(), got.size());
      for (int i = 0; i < want.size(); i++) {
        assertArrayEquals(want.get(i), got.get(i), fixture + " TP=" + tp + " request " + i);
      }
      long ended = want.size(); // every request of the three passes
      for (int r = 0; r < tp; r++) {
        Engine follower = engines.get(r);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (follower.stats().endedRequests() < ended && System.nanoTime() < deadline) {
          Thread.sleep(5); // stats are published when the round that ended them is over
        }
        assertEquals(ended, follower.stats().endedRequests(), "rank " + r + " ended them too");
      }

      leader.close(); // stops every rank in the round that agrees on it
      for (int r = 1; r < tp; r++) {
        Engine follower = engines.get(r);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!follower.stopped() && System.nanoTime() < deadline) {
          Thread.sleep(10);
        }
        int rank = r;
        assertTrue(follower.stopped(), "rank " + r + " stopped with the leader");
        assertTrue(
            follower.failure().isEmpty(), () -> "rank " + rank + ": " + follower.failure().get());
      }
    } finally {
      starts.shutdownNow();
      for (Engine e : engines) {
        e.close();
      }
      for (CausalLm m : models) {
        m.close();
      }
    }
  }

  @org.junit.jupiter.api.Test
  void shouldStopEveryRankNamingTheRoundWhenTheirPlansDiverge() throws Exception {
    Path folder = Fixtures.extract("llama", dir);
    // rank 1 demotes every cached block at once, rank 0 keeps them: the forward batches agree,
    // the plans do not
    try (TpReplica r =
        TpReplica.start(
            folder,
            2,
            rank -> rank == 0 ? EngineTest.small(256) : EngineTest.alwaysDemote(256),
            null)) {
      int[] prompt = new SplittableRandom(61).ints(40, 0, 512).toArray();
      GenerationResult g =
          r.leader().submit(prompt, SamplingParams.greedy(6)).result().get(60, TimeUnit.SECONDS);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      for (Engine e : r.engines) {
        while (!e.stopped() && System.nanoTime() < deadline) {
          Thread.sleep(10);
        }
        assertTrue(e.stopped(), "rank " + e.tpRank() + " stopped");
        String why = String.valueOf(e.failure().map(Throwable::getMessage).orElse(null));
        assertTrue(why.contains("diverged"), "rank " + e.tpRank() + ": " + why);
      }
      assertTrue(
          g.error() == null || g.error().contains("diverged") || g.error().contains("failed"),
          String.valueOf(g.error()));
    }
  }

  /** Every rank's control-plane settings: a mesh on free loopback ports, one secret. */
  static List<ControlConfig> controls(int tp) throws IOException {
    List<InetSocketAddress> addresses = new ArrayList<>();
    for (int r = 0; r < tp; r++) {
      try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
        addresses.add(new InetSocketAddress(InetAddress.getLoopbackAddress(), s.getLocalPort()));
      }
    }
    ReplicaSecret secret = ReplicaSecret.generate();
    List<ControlConfig> out = new ArrayList<>();
    for (int r = 0; r < tp; r++) {
      out.add(ControlConfig.of(0, r, addresses, secret).withTimeouts(10_000, 30_000));
    }
    return out;
  }
}
