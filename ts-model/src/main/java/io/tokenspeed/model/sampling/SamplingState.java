package io.tokenspeed.model.sampling;

import java.util.Optional;
import java.util.OptionalInt;

/**
 * One sequence's sampling: its params with the seed resolved, the number of tokens generated (the
 * step of the next draw) and, once it ends, why. The only random state is (seed, step), so a
 * retracted sequence that is recomputed and resumes at the same step draws the same tokens.
 *
 * <pre>
 *   sample(step = n) ───────────────────┬──► onToken(id) ──► n + 1 ──► ... ──► Stop(id)
 *   rowSampling ──► sampled elsewhere ──┘                                  | Length(max_tokens)
 * </pre>
 *
 * <p>Single-threaded: owned by whoever owns the request.
 */
public final class SamplingState {

  private final SamplingParams params;
  private final long seed;
  private final StopChecker stopChecker;
  private int numGeneratedTokens;
  private FinishReason finishReason;

  /**
   * @param params the request's params; the seed must be resolved ({@link
   *     SamplingParams#withSeedIfAbsent})
   * @param eosId the tokenizer's end-of-sequence id, if it has one
   */
  public SamplingState(SamplingParams params, OptionalInt eosId) {
    if (params.seed().isEmpty()) {
      throw new IllegalArgumentException(
          "seed=empty: resolve it with withSeedIfAbsent before the sequence starts");
    }
    this.params = params;
    this.seed = params.seed().getAsLong();
    this.stopChecker = new StopChecker(params, eosId);
  }

  public SamplingParams params() {
    return params;
  }

  /** The seed of this sequence's draws, to report with the response. */
  public long seed() {
    return seed;
  }

  /** The tokens generated so far; also the step of the next draw. */
  public int numGeneratedTokens() {
    return numGeneratedTokens;
  }

  public boolean isFinished() {
    return finishReason != null;
  }

  /** Why the sequence finished, or empty while it goes on. */
  public Optional<FinishReason> finishReason() {
    return Optional.ofNullable(finishReason);
  }

  /** Samples the next token from the row at {@code offset}; does not advance the step. */
  public int sample(Sampler sampler, float[] logits, int offset) {
    checkNotFinished();
    return sampler.sample(logits, offset, params, seed, numGeneratedTokens);
  }

  /**
   * What choosing the next token needs, for a sampler elsewhere (a device model's, or the host's
   * behind {@code DeviceModel.forwardAndSample}): the params, the seed and the step of the next
   * draw. The token it gives is the one {@link #sample} would give from the same row; hand it to
   * {@link #onToken}. Does not advance the step.
   *
   * @param topLogprobs {@link TokenLogprobs#NO_LOGPROBS} for none, else the number of most likely
   *     alternatives to report with the token, {@code 0} to {@link TokenLogprobs#MAX_TOP_LOGPROBS}
   */
  public RowSampling rowSampling(int topLogprobs) {
    checkNotFinished();
    return new RowSampling(params, seed, numGeneratedTokens, topLogprobs);
  }

  /**
   * Appends the generated token and checks the stop conditions. The token may have been sampled
   * anywhere, by {@link #sample} or from {@link #rowSampling}, as long as it was for this step.
   */
  public Optional<FinishReason> onToken(int tokenId) {
    checkNotFinished();
    numGeneratedTokens++;
    Optional<FinishReason> finished = stopChecker.check(tokenId, numGeneratedTokens);
    finishReason = finished.orElse(null);
    return finished;
  }

  private void checkNotFinished() {
    if (finishReason != null) {
      throw new IllegalStateException(
          "sequence finished: reason="
              + finishReason
              + " numGeneratedTokens="
              + numGeneratedTokens);
    }
  }
}
