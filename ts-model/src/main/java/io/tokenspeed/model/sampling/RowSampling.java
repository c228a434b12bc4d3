package io.tokenspeed.model.sampling;

import java.util.Objects;

/**
 * What choosing one request's next token needs, wherever the sampler runs: the request's params,
 * the seed and step of the draw, and how many log probabilities to report with the token. Because
 * the token is a pure function of (logits row, params, seed, step) ({@link Sampler}), a device that
 * samples from this gives the token the host would. A request with penalties carries them, with the
 * token counts they need ({@link Penalties}): the device penalizes its copy of the row the way
 * {@link Penalties#apply} does before it samples.
 *
 * @param params the request's sampling params; when they carry a seed it must be {@code seed}
 * @param seed the seed of the request's draws (the resolved one)
 * @param step the draw's step: the number of tokens the request generated so far; {@code >= 0}
 * @param topLogprobs {@link TokenLogprobs#NO_LOGPROBS} for no log probabilities, else the number of
 *     most likely alternatives to report with the token, {@code 0} to {@link
 *     TokenLogprobs#MAX_TOP_LOGPROBS}
 * @param penalties the penalties of this step, or {@code null} when the params have none; non-null
 *     exactly when {@link SamplingParams#hasPenalties()}, with the params' penalties as floats
 */
public record RowSampling(
    SamplingParams params, long seed, int step, int topLogprobs, Penalties penalties) {

  public RowSampling {
    Objects.requireNonNull(params, "params");
    if (params.seed().isPresent() && params.seed().getAsLong() != seed) {
      throw new IllegalArgumentException(
          "seed=" + seed + " must equal the params' seed=" + params.seed().getAsLong());
    }
    if (step < 0) {
      throw new IllegalArgumentException("step=" + step + " must be >= 0");
    }
    if (topLogprobs < TokenLogprobs.NO_LOGPROBS || topLogprobs > TokenLogprobs.MAX_TOP_LOGPROBS) {
      throw new IllegalArgumentException(
          "topLogprobs="
              + topLogprobs
              + " must be in ["
              + TokenLogprobs.NO_LOGPROBS
              + ", "
              + TokenLogprobs.MAX_TOP_LOGPROBS
              + "] ("
              + TokenLogprobs.NO_LOGPROBS
              + " = none)");
    }
    if (params.hasPenalties() != (penalties != null)) {
      throw new IllegalArgumentException(
          "penalties="
              + penalties
              + " must be given exactly when the params have penalties (hasPenalties="
              + params.hasPenalties()
              + ")");
    }
    if (penalties != null
        && (penalties.presence() != (float) params.presencePenalty()
            || penalties.frequency() != (float) params.frequencyPenalty()
            || penalties.repetition() != (float) params.repetitionPenalty())) {
      throw new IllegalArgumentException(
          "penalties="
              + penalties
              + " must carry the params' presencePenalty="
              + params.presencePenalty()
              + " frequencyPenalty="
              + params.frequencyPenalty()
              + " repetitionPenalty="
              + params.repetitionPenalty());
    }
  }

  /** A row without penalties; the params must have none. */
  public RowSampling(SamplingParams params, long seed, int step, int topLogprobs) {
    this(params, seed, step, topLogprobs, null);
  }

  /** Whether the token's log probabilities are asked for. */
  public boolean wantsLogprobs() {
    return topLogprobs != TokenLogprobs.NO_LOGPROBS;
  }
}
