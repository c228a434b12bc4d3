package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cuda.CudaApi;
import io.tokenspeed.cuda.DeviceBuffer;
import io.tokenspeed.cuda.OnTheGpu;
import io.tokenspeed.model.sampling.LogSoftmax;
import io.tokenspeed.model.sampling.Penalties;
import io.tokenspeed.model.sampling.RowSampling;
import io.tokenspeed.model.sampling.SampledRow;
import io.tokenspeed.model.sampling.Sampler;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.OptionalLong;
import java.util.Set;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Sampling on the device against the CPU sampler on the same logits: every method (greedy,
 * temperature, top-k, top-p, min-p and their combinations, per-request seeds and steps) over 10,000
 * rows of seeded random logits — flat and peaked rows, ties, masked tokens, tiny and large
 * temperatures — must give the CPU sampler's token, row for row; the log probabilities those rows
 * ask for must equal {@link LogSoftmax}'s to within an ulp of a float; rows the CPU sampler refuses
 * fail with its message.
 */
class DeviceSamplerGpuTest extends OnTheGpu {
  @ParameterizedTest(name = "vocab={0} rows={1} seed={2}")
  @CsvSource({"32000, 6000, 1", "128256, 2000, 2", "1000, 1500, 3", "3, 500, 4"})
  void shouldChooseTheCpuSamplersTokenOnEveryRow(int vocab, int rows, long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    Sampler cpu = new Sampler(vocab);
    LogSoftmax logSoftmax = new LogSoftmax();
    int batch = Math.max(1, Math.min(rows, (int) (256L * 1024 * 1024 / 4 / vocab)));
    int mismatches = 0;
    int greedyRows = 0;
    int penalizedRows = 0;
    int sortedRows = 0;
    List<String> firstMismatches = new ArrayList<>();
    try (DeviceSampler sampler = new DeviceSampler(device, vocab);
        DeviceBuffer logits = device.allocate((long) batch * vocab * 4);
        Arena arena = Arena.ofConfined()) {
      MemorySegment host = arena.allocate((long) batch * vocab * 4, 64);
      for (int done = 0; done < rows; done += batch) {
        int n = Math.min(batch, rows - done);
        float[][] x = new float[n][];
        List<RowSampling> specs = new ArrayList<>();
        int[] rowOf = new int[n];
        for (int i = 0; i < n; i++) {
          x[i] = randomRow(rnd, vocab);
          MemorySegment.copy(
              x[i], 0, host, ValueLayout.JAVA_FLOAT, (long) (n - 1 - i) * vocab * 4, vocab);
          rowOf[i] = n - 1 - i; // the rows in another order than the specs
          SamplingParams p = randomParams(rnd, vocab);
          greedyRows += p.isGreedy() ? 1 : 0;
          sortedRows += p.isTopPOn() || p.isTopKOn() ? 1 : 0;
          int top = rnd.nextInt(4) == 0 ? rnd.nextInt(-1, 21) : TokenLogprobs.NO_LOGPROBS;
          Penalties penalties = null;
          if (rnd.nextInt(3) == 0) {
            penalties = randomPenalties(rnd, vocab);
            p =
                p.withPenalties(
                    penalties.presence(), penalties.frequency(), penalties.repetition());
            penalizedRows++;
          }
          specs.add(new RowSampling(p, rnd.nextLong(), rnd.nextInt(0, 5000), top, penalties));
        }
        copyUp(logits, host, (long) n * vocab * 4);
        List<SampledRow> got = sampler.sample(logits.pointer(), rowOf, specs);
        for (int i = 0; i < n; i++) {
          RowSampling s = specs.get(i);
          int want = cpu.sample(x[i], 0, s.params(), s.seed(), s.step(), s.penalties());
          SampledRow g = got.get(i);
          if (g.token() != want) {
            mismatches++;
            if (firstMismatches.size() < 5) {
              firstMismatches.add(s + ": device " + g.token() + ", cpu " + want);
            }
            continue;
          }
          if (s.topLogprobs() == TokenLogprobs.NO_LOGPROBS) {
            assertNull(g.logprobs());
            continue;
          }
          TokenLogprobs w = logSoftmax.of(x[i], want, s.topLogprobs());
          TokenLogprobs d = g.logprobs();
          double logZ = LogSoftmax.logNormalizer(x[i]);
          assertEquals(want, d.token());
          assertEquals(w.logprob(), d.logprob(), tolerance(w.logprob(), logZ), s.toString());
          assertArrayEquals(w.topTokens(), d.topTokens(), s.toString());
          for (int k = 0; k < w.topLogprobs().length; k++) {
            assertEquals(
                w.topLogprobs()[k], d.topLogprobs()[k], tolerance(w.topLogprobs()[k], logZ));
          }
        }
      }
    }
    assertEquals(0, mismatches, () -> "rows that differ, the first: " + firstMismatches);
    assertTrue(greedyRows > 0 && sortedRows > 0 && sortedRows < rows - greedyRows);
    assertTrue(penalizedRows > rows / 4, "rows with penalties: " + penalizedRows);
  }

  /**
   * A batch that samples no row (prompt chunks that end no prompt) still returns only once the
   * compute stream has finished: the engine's next copies (a page's Device → Host copy on the copy
   * stream) read what the forward wrote. Work queued on the compute stream (device-to-device copies
   * of 1 GiB, tens of milliseconds) must be done when {@code sample} returns.
   */
  @Test
  void shouldWaitForTheComputeStreamWhenNoRowIsSampled() {
    long bytes = 1L << 30;
    CudaApi api = device.api();
    try (DeviceSampler sampler = new DeviceSampler(device, 1000);
        DeviceBuffer logits = device.allocate(1000L * 4);
        DeviceBuffer a = device.allocate(bytes);
        DeviceBuffer b = device.allocate(bytes)) {
      for (int i = 0; i < 20; i++) {
        api.memcpyAsync(b.pointer(), a.pointer(), bytes, device.stream());
      }
      long queued = api.eventCreate(CudaApi.EVENT_DISABLE_TIMING);
      try {
        api.eventRecord(queued, device.stream());
        List<SampledRow> got =
            sampler.sample(logits.pointer(), new int[] {0, 0}, Arrays.asList(null, null));
        assertEquals(Arrays.asList(null, null), got);
        assertTrue(api.eventDone(queued), "the compute stream's work is done when sample returns");
      } finally {
        api.eventDestroy(queued);
      }
    }
  }

  @Test
  void shouldRefuseTheRowsTheCpuSamplerRefusesWithItsMessage() {
    int vocab = 4096;
    Sampler cpu = new Sampler(vocab);
    SamplingParams greedy = SamplingParams.greedy(4);
    float[] nan = new float[vocab];
    nan[1234] = Float.NaN;
    nan[2000] = Float.POSITIVE_INFINITY;
    float[] inf = new float[vocab];
    inf[77] = Float.POSITIVE_INFINITY;
    float[] masked = new float[vocab];
    Arrays.fill(masked, Float.NEGATIVE_INFINITY);
    try (DeviceSampler sampler = new DeviceSampler(device, vocab);
        DeviceBuffer logits = device.allocate((long) vocab * 4);
        Arena arena = Arena.ofConfined()) {
      MemorySegment host = arena.allocate((long) vocab * 4, 64);
      for (float[] row : List.of(nan, inf, masked)) {
        MemorySegment.copy(row, 0, host, ValueLayout.JAVA_FLOAT, 0, vocab);
        copyUp(logits, host, (long) vocab * 4);
        String want =
            assertThrows(IllegalArgumentException.class, () -> cpu.sample(row, greedy, 1, 0))
                .getMessage();
        String got =
            assertThrows(
                    IllegalArgumentException.class,
                    () ->
                        sampler.sample(
                            logits.pointer(),
                            new int[] {0},
                            List.of(new RowSampling(greedy, 1, 0, TokenLogprobs.NO_LOGPROBS))))
                .getMessage();
        assertEquals(want, got);
      }
    }
  }

  private static void copyUp(DeviceBuffer to, MemorySegment from, long bytes) {
    device.api().memcpyAsync(to.pointer(), from.address(), bytes, device.stream());
    device.synchronize();
  }

  /**
   * How far a device log probability may be from the host's: the normalizer is a sum of doubles
   * taken in another order, so {@code logZ} may differ by about 1e-12 of itself, which is most of a
   * near-zero log probability's float ulps; plus an ulp and a half of the float the value rounds
   * to.
   */
  private static float tolerance(float v, double logZ) {
    if (v == Float.NEGATIVE_INFINITY) {
      return 0;
    }
    return (float) (1.5 * Math.ulp(v) + 1e-12 * Math.max(1, Math.abs(logZ)));
  }

  /**
   * A row of logits: gaussian at a random scale (flat to peaked), sometimes rounded to a coarse
   * grid (ties, the argmax among them), sometimes with masked (-Infinity) tokens.
   */
  private static float[] randomRow(SplittableRandom rnd, int vocab) {
    float[] x = new float[vocab];
    double scale =
        switch (rnd.nextInt(4)) {
          case 0 -> 0.05;
          case 1 -> 1;
          case 2 -> 4;
          default -> 20;
        };
    boolean ties = rnd.nextInt(5) == 0;
    double maskRate = rnd.nextInt(4) == 0 ? rnd.nextDouble(0.9) : 0;
    for (int i = 0; i < vocab; i++) {
      double v = rnd.nextGaussian() * scale;
      if (ties) {
        v = Math.rint(v * 2) / 2;
      }
      x[i] = rnd.nextDouble() < maskRate ? Float.NEGATIVE_INFINITY : (float) v;
    }
    if (maskRate > 0 && Arrays.stream(toDoubles(x)).allMatch(Double::isInfinite)) {
      x[rnd.nextInt(vocab)] = 0;
    }
    return x;
  }

  private static double[] toDoubles(float[] x) {
    double[] d = new double[x.length];
    for (int i = 0; i < x.length; i++) {
      d[i] = x[i];
    }
    return d;
  }

  /**
   * Penalties over a random set of distinct prior ids (some prompt-only, count 0; some repeated in
   * the output), each penalty neutral or not: its float values are those the request would send.
   */
  private static Penalties randomPenalties(SplittableRandom rnd, int vocab) {
    int n = 1 + rnd.nextInt(Math.min(vocab, 400));
    int[] ids = rnd.ints(0, vocab).distinct().limit(n).sorted().toArray();
    int[] counts = new int[ids.length];
    for (int i = 0; i < counts.length; i++) {
      counts[i] = rnd.nextInt(3) == 0 ? 0 : 1 + rnd.nextInt(rnd.nextBoolean() ? 3 : 50);
    }
    float presence = rnd.nextInt(3) == 0 ? 0 : (float) rnd.nextDouble(-2, 2);
    float frequency = rnd.nextInt(3) == 0 ? 0 : (float) rnd.nextDouble(-2, 2);
    float repetition = rnd.nextInt(3) == 0 ? 1 : (float) rnd.nextDouble(0.5, 2);
    if (presence == 0 && frequency == 0 && repetition == 1) {
      frequency = 0.5f;
    }
    return new Penalties(presence, frequency, repetition, ids, counts);
  }

  /** Every method and their combinations, including the edges (k >= candidates, top_p = 1). */
  private static SamplingParams randomParams(SplittableRandom rnd, int vocab) {
    if (rnd.nextInt(6) == 0) {
      return SamplingParams.greedy(16);
    }
    double temperature =
        switch (rnd.nextInt(4)) {
          case 0 -> 0.01 + rnd.nextDouble(0.1);
          case 1 -> 0.5 + rnd.nextDouble();
          case 2 -> 1;
          default -> 1 + rnd.nextDouble(4);
        };
    int topK =
        switch (rnd.nextInt(4)) {
          case 0 -> 0;
          case 1 -> 1 + rnd.nextInt(Math.min(vocab, 50));
          case 2 -> 1 + rnd.nextInt(vocab);
          default -> vocab + rnd.nextInt(10);
        };
    double topP = rnd.nextBoolean() ? 1 : 0.05 + rnd.nextDouble(0.95);
    double minP = rnd.nextInt(3) == 0 ? rnd.nextDouble(0.5) : 0;
    return new SamplingParams(
        temperature, topK, topP, minP, OptionalLong.empty(), 16, Set.of(), false);
  }
}
