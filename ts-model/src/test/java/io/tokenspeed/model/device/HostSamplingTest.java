package io.tokenspeed.model.device;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.sampling.LogSoftmax;
import io.tokenspeed.model.sampling.Penalties;
import io.tokenspeed.model.sampling.RowSampling;
import io.tokenspeed.model.sampling.SampledRow;
import io.tokenspeed.model.sampling.Sampler;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The default {@link DeviceModel#forwardAndSample}: against sampling the forward's logits by hand
 * with a {@link Sampler} and a {@link LogSoftmax}, over seeded random batches of prefill chunks (no
 * row), decode steps and chunks with every row's logits, with and without log probabilities.
 */
class HostSamplingTest {

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 12);
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldSampleEachLastRowAsTheHostSamplerWhenRowsAreGiven(long seed) {
    SplittableRandom random = new SplittableRandom(seed);
    int vocab = 1 + random.nextInt(300);
    CannedModel model = new CannedModel(vocab, random);
    for (int round = 0; round < 5; round++) {
      int n = 1 + random.nextInt(6);
      List<ForwardRequest> requests = new ArrayList<>();
      List<RowSampling> rows = new ArrayList<>();
      for (int r = 0; r < n; r++) {
        int numTokens = 1 + random.nextInt(4);
        requests.add(
            new ForwardRequest(new int[numTokens], 0, new int[][] {{1}}, random.nextInt(3) == 0));
        rows.add(random.nextInt(4) == 0 ? null : row(random, vocab));
      }
      ForwardBatch batch = new ForwardBatch(requests);
      SampledForward out = model.forwardAndSample(batch, null, rows, random.nextBoolean());

      ForwardResult logits = model.last;
      assertSame(logits, out.logits(), "the default has the logits on the host: kept");
      assertEquals(n, out.rows().size());
      Sampler sampler = new Sampler(vocab);
      LogSoftmax logSoftmax = new LogSoftmax();
      for (int r = 0; r < n; r++) {
        RowSampling want = rows.get(r);
        SampledRow got = out.row(r);
        if (want == null) {
          assertNull(got, "request " + r + " had nothing to sample");
          continue;
        }
        float[] last = logits.last(r);
        float[] penalized = last.clone();
        if (want.penalties() != null) {
          want.penalties().apply(penalized, 0);
        }
        int token = sampler.sample(penalized, want.params(), want.seed(), want.step());
        assertEquals(token, got.token(), "request " + r);
        // the log probabilities are the raw row's, penalties or not
        if (want.topLogprobs() == TokenLogprobs.NO_LOGPROBS) {
          assertNull(got.logprobs());
        } else {
          assertEquals(logSoftmax.of(last, token, want.topLogprobs()), got.logprobs());
        }
      }
    }
  }

  @Test
  void shouldFailAsTheSamplerDoesWhenARowIsBroken() {
    CannedModel model = new CannedModel(4, new SplittableRandom(1));
    ForwardBatch batch =
        ForwardBatch.of(new ForwardRequest(new int[1], 0, new int[][] {{1}}, false));
    RowSampling greedy = new RowSampling(SamplingParams.greedy(1), 5, 0, 3);
    model.next = new float[] {0f, 1f, Float.NaN, 2f};
    String expected =
        assertThrows(
                IllegalArgumentException.class,
                () -> new Sampler(4).sample(model.next, SamplingParams.greedy(1), 5, 0))
            .getMessage();
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> model.forwardAndSample(batch, null, List.of(greedy), false));
    assertEquals(expected, e.getMessage());
    assertTrue(e.getMessage().contains("token id 2 is NaN"), e.getMessage());

    model.next = new float[4];
    Arrays.fill(model.next, Float.NEGATIVE_INFINITY);
    e =
        assertThrows(
            IllegalArgumentException.class,
            () -> model.forwardAndSample(batch, null, List.of(greedy), false));
    assertTrue(e.getMessage().contains("every logit is -Infinity"), e.getMessage());
  }

  @Test
  void shouldRejectRowsThatDoNotMatchTheBatch() {
    CannedModel model = new CannedModel(4, new SplittableRandom(2));
    ForwardBatch batch =
        ForwardBatch.of(new ForwardRequest(new int[1], 0, new int[][] {{1}}, false));
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> model.forwardAndSample(batch, null, List.of(), false));
    assertTrue(e.getMessage().startsWith("rows.size=0"), e.getMessage());
    assertNull(model.last, "refused before the forward");
    assertFalse(model.samplesOnDevice());
  }

  @Test
  void shouldValidateWhatTheRecordsCarry() {
    SamplingParams p = SamplingParams.defaults();
    assertThrows(IllegalArgumentException.class, () -> new RowSampling(p, 1, -1, -1));
    assertThrows(IllegalArgumentException.class, () -> new RowSampling(p, 1, 0, -2));
    assertThrows(IllegalArgumentException.class, () -> new RowSampling(p, 1, 0, 21));
    assertThrows(IllegalArgumentException.class, () -> new RowSampling(p.withSeed(2), 1, 0, -1));
    assertThrows(NullPointerException.class, () -> new RowSampling(null, 1, 0, -1));
    assertTrue(new RowSampling(p.withSeed(1), 1, 0, 20).wantsLogprobs());
    assertFalse(new RowSampling(p, 1, 0, -1).wantsLogprobs());

    TokenLogprobs lp = new TokenLogprobs(3, -0.5f, new int[0], new float[0]);
    assertThrows(IllegalArgumentException.class, () -> new SampledRow(-1, null));
    assertThrows(IllegalArgumentException.class, () -> new SampledRow(2, lp));
    assertEquals(lp, new SampledRow(3, lp).logprobs());

    List<SampledRow> rows = new ArrayList<>(Arrays.asList(null, new SampledRow(1, null)));
    SampledForward out = new SampledForward(rows, null);
    rows.set(0, new SampledRow(2, null));
    assertNull(out.row(0), "copied in");
    assertThrows(UnsupportedOperationException.class, () -> out.rows().set(0, null));
    assertThrows(
        IllegalArgumentException.class,
        () -> new SampledForward(rows, new ForwardResult(4, List.of(new float[4]))));
    assertNotNull(new SampledForward(List.of(), null).rows());
  }

  private static RowSampling row(SplittableRandom random, int vocab) {
    SamplingParams base =
        switch (random.nextInt(4)) {
          case 0 -> SamplingParams.greedy(1);
          case 1 -> SamplingParams.defaults().withTopK(1 + random.nextInt(20));
          case 2 -> SamplingParams.defaults().withTemperature(0.7).withTopP(0.9);
          default -> SamplingParams.defaults().withMinP(0.05);
        };
    int topLogprobs = random.nextInt(-1, TokenLogprobs.MAX_TOP_LOGPROBS + 1);
    if (random.nextInt(3) != 0) {
      return new RowSampling(base, random.nextLong(), random.nextInt(100), topLogprobs);
    }
    SamplingParams p = base.withPenalties(1.5, 0.5, 1.25);
    int[] ids = random.ints(random.nextInt(8), 0, vocab).distinct().sorted().toArray();
    int[] counts = random.ints(ids.length, 0, 4).toArray();
    Penalties penalties = new Penalties(1.5f, 0.5f, 1.25f, ids, counts);
    return new RowSampling(p, random.nextLong(), random.nextInt(100), topLogprobs, penalties);
  }

  /**
   * A model whose forward returns random logits ({@code next} as every row when set), one row per
   * logit row each request asks for, and remembers its last result.
   */
  private static final class CannedModel implements DeviceModel {
    private final int vocab;
    private final SplittableRandom random;
    float[] next;
    ForwardResult last;

    CannedModel(int vocab, SplittableRandom random) {
      this.vocab = vocab;
      this.random = random;
    }

    @Override
    public ForwardResult forward(ForwardBatch batch, DeviceBytes kv) {
      List<float[]> logits = new ArrayList<>();
      for (ForwardRequest r : batch.requests()) {
        float[] rows = new float[r.numLogitRows() * vocab];
        for (int i = 0; i < rows.length; i++) {
          if (next != null) {
            rows[i] = next[i % vocab];
          } else {
            boolean masked = random.nextInt(8) == 0;
            rows[i] = masked ? Float.NEGATIVE_INFINITY : (float) (random.nextGaussian() * 2);
          }
        }
        if (next == null) {
          rows[rows.length - 1 - random.nextInt(vocab)] = 3f; // the last row has a finite logit
        }
        logits.add(rows);
      }
      last = new ForwardResult(vocab, logits);
      return last;
    }

    @Override
    public String deviceName() {
      return "canned";
    }

    @Override
    public boolean computesOnHost() {
      return true;
    }

    @Override
    public ModelIdentity identity() {
      throw new UnsupportedOperationException();
    }

    @Override
    public String attentionBackend() {
      return "none";
    }

    @Override
    public Collective collective() {
      throw new UnsupportedOperationException();
    }

    @Override
    public Shard shard() {
      throw new UnsupportedOperationException();
    }

    @Override
    public int vocabSize() {
      return vocab;
    }

    @Override
    public CacheLayout cacheLayout(int prefixGranularity, int blockGranularity) {
      throw new UnsupportedOperationException();
    }

    @Override
    public DeviceBytes allocate(
        CacheLayout layout, long leadingPad, long tierBytes, int[] poolBlocks) {
      throw new UnsupportedOperationException();
    }

    @Override
    public void close() {}
  }
}
