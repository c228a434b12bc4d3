package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.sampling.SamplingParams;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A seeded random workload on a Device small enough to retract and a Host that takes demotions:
 * arrivals in bursts, prompts that share prefixes of various lengths (so Device and Host hits
 * happen), cancellations right after submission and after a few streamed tokens. After every round
 * the scheduler's and the cache's invariants hold; at the end every request ended exactly once (its
 * stream's end marker, one result), the engine serves nothing and holds no block, and every request
 * that was not cancelled produced exactly the tokens it produces alone on a fresh engine.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineWorkloadTest {
  private CausalLm model;

  @BeforeAll
  void load(@TempDir Path dir) {
    model = CausalLm.load(Fixtures.extract("qwen2", dir));
  }

  @AfterAll
  void close() {
    model.close();
  }

  static Stream<Arguments> seeds() {
    return LongStream.range(1, 9).mapToObj(Arguments::of);
  }

  private record Job(int[] prompt, int maxTokens, int cancelAfter) {}

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldKeepEveryInvariantAndEveryOutputUnderARandomWorkload(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    int vocab = model.vocabSize();
    int[] shared = rnd.ints(96, 0, vocab).toArray();
    List<Job> jobs = new ArrayList<>();
    for (int i = 0; i < 14; i++) {
      int keep = rnd.nextInt(shared.length);
      int[] tail = rnd.ints(1 + rnd.nextInt(40), 0, vocab).toArray();
      int[] prompt = Arrays.copyOf(shared, keep + tail.length);
      System.arraycopy(tail, 0, prompt, keep, tail.length);
      int cancelAfter = rnd.nextInt(5) == 0 ? rnd.nextInt(4) : -1; // -1: never
      jobs.add(new Job(prompt, 1 + rnd.nextInt(24), cancelAfter));
    }
    EngineConfig base = EngineTest.small(2);
    int parents = EngineTest.parentsFor(model, base, 170) * 3 / 2;
    EngineConfig config =
        new EngineConfig(4, 2, parents, 2.0, 8 + rnd.nextInt(64), 6, parents / 4, 2, 64);
    EngineTest.Recorder rec = new EngineTest.Recorder();
    List<RequestHandle> handles = new ArrayList<>();
    List<List<Integer>> streamed = new ArrayList<>();
    try (Engine e = Engine.start(EngineSettings.of(model, config).observer(rec).conclude())) {
      for (int i = 0; i < jobs.size(); i++) {
        Job j = jobs.get(i);
        RequestHandle h = e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens()));
        handles.add(h);
        streamed.add(new ArrayList<>());
        if (j.cancelAfter() == 0) {
          h.cancel();
        }
        if (rnd.nextInt(3) == 0) {
          Thread.sleep(rnd.nextInt(20)); // arrivals in bursts
        }
      }
      for (int i = 0; i < jobs.size(); i++) {
        Job j = jobs.get(i);
        RequestHandle h = handles.get(i);
        for (OptionalInt t; (t = h.nextToken(60, TimeUnit.SECONDS)) != null && t.isPresent(); ) {
          streamed.get(i).add(t.getAsInt());
          if (j.cancelAfter() > 0 && streamed.get(i).size() == j.cancelAfter()) {
            h.cancel();
          }
        }
      }
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (e.activeCount() > 0 && System.nanoTime() < deadline) {
        Thread.sleep(5);
      }
      assertEquals(0, e.activeCount(), "requests still served");
      while (e.stats().endedRequests() < jobs.size() && System.nanoTime() < deadline) {
        Thread.sleep(5); // the last round publishes its stats after it ends its requests
      }
      assertEquals(jobs.size(), e.stats().endedRequests(), "the loop ended each request once");
      EngineStats s = e.stats();
      assertTrue(
          s.forwardNanos() > 0 && s.roundNanos() >= s.forwardNanos(),
          "the forward is timed inside the rounds: " + s);
      assertTrue(rec.broken.isEmpty(), () -> "seed=" + seed + " " + rec.broken);
    }
    Map<Integer, int[]> alone = new HashMap<>();
    for (int i = 0; i < jobs.size(); i++) {
      Job j = jobs.get(i);
      GenerationResult r = handles.get(i).result().get(1, TimeUnit.SECONDS);
      int[] got = streamed.get(i).stream().mapToInt(Integer::intValue).toArray();
      assertArrayEquals(r.tokens(), got, "seed=" + seed + " request " + i + ": stream vs result");
      assertEquals(
          OptionalInt.empty(),
          handles.get(i).nextToken(1, TimeUnit.SECONDS),
          "the end marker stays");
      if ("cancelled".equals(r.finishReason())) {
        assertTrue(j.cancelAfter() >= 0, "seed=" + seed + " request " + i + " cancelled itself");
        continue;
      }
      assertEquals("length", r.finishReason(), "seed=" + seed + " request " + i + " " + r);
      int[] want = alone.computeIfAbsent(i, k -> aloneRun(j));
      assertArrayEquals(want, r.tokens(), "seed=" + seed + " request " + i + " vs alone");
    }
  }

  private int[] aloneRun(Job j) {
    try (Engine e = Engine.start(EngineSettings.of(model, EngineTest.small(512)).conclude())) {
      return e.submit(j.prompt(), SamplingParams.greedy(j.maxTokens()))
          .result()
          .get(60, TimeUnit.SECONDS)
          .tokens();
    } catch (Exception ex) {
      throw new AssertionError(ex);
    }
  }
}
