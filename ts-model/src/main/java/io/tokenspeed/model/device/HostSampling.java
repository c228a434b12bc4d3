package io.tokenspeed.model.device;

import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.sampling.LogSoftmax;
import io.tokenspeed.model.sampling.RowSampling;
import io.tokenspeed.model.sampling.SampledRow;
import io.tokenspeed.model.sampling.Sampler;
import io.tokenspeed.model.sampling.TokenLogprobs;
import java.util.ArrayList;
import java.util.List;

/**
 * The default {@link DeviceModel#forwardAndSample}: the forward pass brings the logits to the host,
 * and each request that has a {@link RowSampling} is sampled there from its last row, through the
 * same {@link Sampler} path as every host sampler (the request's penalties on a copy of the row,
 * check the row, then the argmax or the tempered draw), with {@link LogSoftmax} for the log
 * probabilities it asks for, which are those of the raw row. A device model that samples on the
 * device must return the same tokens: the sampler's arithmetic is order-independent for that
 * reason.
 *
 * <p>The scratch (a sampler's vocabulary-sized arrays, the log-softmax heap) lives in a
 * thread-local, not in the model: an interface's default method has no instance state, and a
 * sampler is not thread-safe. The engine's loop thread is the only caller of a model, so each loop
 * thread allocates its scratch once, at its first round, and reuses it every round after: sampling
 * allocates nothing but the results. A thread that switches between models of different vocabulary
 * sizes replaces its scratch at each switch (tests do; an engine never does).
 */
final class HostSampling {

  /** A thread's sampler and log-softmax, for one vocabulary size. */
  private record Scratch(Sampler sampler, LogSoftmax logSoftmax) {}

  private static final ThreadLocal<Scratch> SCRATCH = new ThreadLocal<>();

  private HostSampling() {}

  static SampledForward sample(
      DeviceModel model,
      ForwardBatch batch,
      DeviceBytes kv,
      List<RowSampling> rows,
      boolean keepLogits) {
    if (rows.size() != batch.requests().size()) {
      throw new IllegalArgumentException(
          "rows.size="
              + rows.size()
              + " must equal the batch's number of requests="
              + batch.requests().size());
    }
    ForwardResult out = model.forward(batch, kv);
    int vocabSize = out.vocabSize();
    Scratch scratch = scratch(vocabSize);
    List<SampledRow> sampled = new ArrayList<>(rows.size());
    for (int i = 0; i < rows.size(); i++) {
      RowSampling row = rows.get(i);
      if (row == null) {
        sampled.add(null);
        continue;
      }
      float[] logits = out.logits(i);
      int offset = logits.length - vocabSize; // the last row picks the next token
      int token =
          scratch
              .sampler()
              .sample(logits, offset, row.params(), row.seed(), row.step(), row.penalties());
      TokenLogprobs logprobs =
          row.wantsLogprobs()
              ? scratch.logSoftmax().of(logits, offset, vocabSize, token, row.topLogprobs())
              : null;
      sampled.add(new SampledRow(token, logprobs));
    }
    return new SampledForward(sampled, out); // on the host anyway: kept whatever keepLogits says
  }

  private static Scratch scratch(int vocabSize) {
    Scratch s = SCRATCH.get();
    if (s == null || s.sampler().vocabSize() != vocabSize) {
      s = new Scratch(new Sampler(vocabSize), new LogSoftmax());
      SCRATCH.set(s);
    }
    return s;
  }
}
