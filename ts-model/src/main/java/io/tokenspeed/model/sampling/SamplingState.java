package io.tokenspeed.model.sampling;

import java.util.Arrays;
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
 * <p>When the params have penalties, the state also keeps what they need: the distinct ids of the
 * prompt (sorted once) and the distinct generated ids with their counts, kept sorted as {@link
 * #onToken} adds them (an insertion into a sorted array is a shift of at most a few thousand ints,
 * and a request rarely generates that many distinct tokens). Each step's {@link Penalties} is the
 * merge of the two. Without penalties none of this exists and {@link #onToken} only counts.
 *
 * <p>Single-threaded: owned by whoever owns the request.
 */
public final class SamplingState {

  private final SamplingParams params;
  private final long seed;
  private final StopChecker stopChecker;
  private int numGeneratedTokens;
  private FinishReason finishReason;

  /** The prompt's distinct ids, ascending; {@code null} without penalties. */
  private final int[] promptIds;

  /** The generated distinct ids, ascending, in {@code [0, numOutputIds)}; {@code null} without. */
  private int[] outputIds;

  /** How many times each of {@link #outputIds} was generated. */
  private int[] outputCounts;

  private int numOutputIds;

  /**
   * A sequence whose prompt the penalties do not see: as {@link #SamplingState(SamplingParams,
   * OptionalInt, int[])} with an empty prompt, so a repetition penalty touches only generated
   * tokens.
   */
  public SamplingState(SamplingParams params, OptionalInt eosId) {
    this(params, eosId, new int[0]);
  }

  /**
   * @param params the request's params; the seed must be resolved ({@link
   *     SamplingParams#withSeedIfAbsent})
   * @param eosId the tokenizer's end-of-sequence id, if it has one
   * @param prompt the request's prompt tokens, each {@code >= 0}; read here, never kept, and not
   *     read at all when the params have no penalties
   */
  public SamplingState(SamplingParams params, OptionalInt eosId, int[] prompt) {
    if (params.seed().isEmpty()) {
      throw new IllegalArgumentException(
          "seed=empty: resolve it with withSeedIfAbsent before the sequence starts");
    }
    this.params = params;
    this.seed = params.seed().getAsLong();
    this.stopChecker = new StopChecker(params, eosId);
    if (params.hasPenalties()) {
      this.promptIds = distinctSorted(prompt);
      this.outputIds = new int[16];
      this.outputCounts = new int[16];
    } else {
      this.promptIds = null;
    }
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
    return sampler.sample(logits, offset, params, seed, numGeneratedTokens, penalties());
  }

  /**
   * What choosing the next token needs, for a sampler elsewhere (a device model's, or the host's
   * behind {@code DeviceModel.forwardAndSample}): the params, the seed and the step of the next
   * draw, and the penalties of that step when the params have any. The token it gives is the one
   * {@link #sample} would give from the same row; hand it to {@link #onToken}. Does not advance the
   * step.
   *
   * @param topLogprobs {@link TokenLogprobs#NO_LOGPROBS} for none, else the number of most likely
   *     alternatives to report with the token, {@code 0} to {@link TokenLogprobs#MAX_TOP_LOGPROBS}
   */
  public RowSampling rowSampling(int topLogprobs) {
    checkNotFinished();
    return new RowSampling(params, seed, numGeneratedTokens, topLogprobs, penalties());
  }

  /**
   * The penalties of the next draw: the distinct ids of the prompt and the generated tokens, with
   * how many times each was generated; {@code null} when the params have none.
   */
  public Penalties penalties() {
    if (promptIds == null) {
      return null;
    }
    int[] ids = new int[promptIds.length + numOutputIds];
    int[] counts = new int[ids.length];
    int n = 0;
    int p = 0;
    int o = 0;
    while (p < promptIds.length || o < numOutputIds) {
      int fromPrompt = p < promptIds.length ? promptIds[p] : Integer.MAX_VALUE;
      int fromOutput = o < numOutputIds ? outputIds[o] : Integer.MAX_VALUE;
      if (fromOutput <= fromPrompt) {
        ids[n] = fromOutput;
        counts[n] = outputCounts[o++];
        if (fromOutput == fromPrompt) {
          p++;
        }
      } else {
        ids[n] = fromPrompt;
        p++;
      }
      n++;
    }
    return new Penalties(
        (float) params.presencePenalty(),
        (float) params.frequencyPenalty(),
        (float) params.repetitionPenalty(),
        Arrays.copyOf(ids, n),
        Arrays.copyOf(counts, n));
  }

  /**
   * Appends the generated token and checks the stop conditions. The token may have been sampled
   * anywhere, by {@link #sample} or from {@link #rowSampling}, as long as it was for this step.
   */
  public Optional<FinishReason> onToken(int tokenId) {
    checkNotFinished();
    if (promptIds != null) {
      countOutput(tokenId);
    }
    numGeneratedTokens++;
    Optional<FinishReason> finished = stopChecker.check(tokenId, numGeneratedTokens);
    finishReason = finished.orElse(null);
    return finished;
  }

  private void countOutput(int tokenId) {
    if (tokenId < 0) {
      throw new IllegalArgumentException("tokenId=" + tokenId + " must be >= 0");
    }
    int at = Arrays.binarySearch(outputIds, 0, numOutputIds, tokenId);
    if (at >= 0) {
      outputCounts[at]++;
      return;
    }
    int insert = -at - 1;
    if (numOutputIds == outputIds.length) {
      outputIds = Arrays.copyOf(outputIds, 2 * numOutputIds);
      outputCounts = Arrays.copyOf(outputCounts, 2 * numOutputIds);
    }
    System.arraycopy(outputIds, insert, outputIds, insert + 1, numOutputIds - insert);
    System.arraycopy(outputCounts, insert, outputCounts, insert + 1, numOutputIds - insert);
    outputIds[insert] = tokenId;
    outputCounts[insert] = 1;
    numOutputIds++;
  }

  private static int[] distinctSorted(int[] tokens) {
    int[] sorted = tokens.clone();
    Arrays.sort(sorted);
    int n = 0;
    for (int i = 0; i < sorted.length; i++) {
      if (i == 0 || sorted[i] != sorted[i - 1]) {
        sorted[n++] = sorted[i];
      }
    }
    return Arrays.copyOf(sorted, n);
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
