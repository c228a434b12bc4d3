package io.tokenspeed.model.sampling;

import java.util.Objects;
import java.util.OptionalLong;
import java.util.Set;
import java.util.function.Consumer;
import java.util.function.LongSupplier;

/**
 * How a request's tokens are chosen and when its sequence ends. The names follow vLLM's and the
 * OpenAI API's request fields ({@code temperature}, {@code top_k}, {@code top_p}, {@code min_p},
 * {@code seed}, {@code max_tokens}, {@code stop_token_ids}, {@code ignore_eos}); {@link Sampler}
 * says in which order the filters apply.
 *
 * <p>A request without a seed is given one by the engine at admission ({@link #withSeedIfAbsent}),
 * and the engine reports it: replaying the request with that seed gives the same tokens.
 *
 * <p>The three penalties change the logits row before the sampler sees it, from the tokens of the
 * request's prompt and those it generated so far; {@link Penalties} states their exact arithmetic.
 * At their neutral values ({@code 0, 0, 1}) nothing is computed for them.
 *
 * @param temperature divides the logits before the softmax; {@code 0} is greedy (argmax, lowest id
 *     on ties) and ignores the filters; finite and {@code >= 0}
 * @param topK keep the {@code topK} most likely tokens; {@code 0} or {@code -1} is off; {@code >=
 *     -1}
 * @param topP keep the smallest set of most likely tokens whose probability reaches {@code topP}
 *     (at least one); {@code 1} is off; in {@code (0, 1]}
 * @param minP keep tokens whose probability is at least {@code minP} times the most likely token's;
 *     {@code 0} is off; in {@code [0, 1]}
 * @param seed the seed of the request's draws; empty until the engine assigns one
 * @param maxTokens the most tokens to generate, the stop token included; {@code >= 1}
 * @param stopTokenIds ids that end the sequence when sampled; each {@code >= 0}
 * @param ignoreEos if {@code false}, the tokenizer's end-of-sequence id also ends the sequence
 * @param presencePenalty subtracted once from the logit of every token the request has generated at
 *     least once (OpenAI's {@code presence_penalty}); {@code 0} is off; in {@code [-2, 2]}
 * @param frequencyPenalty subtracted from the logit of every generated token as many times as it
 *     was generated (OpenAI's {@code frequency_penalty}); {@code 0} is off; in {@code [-2, 2]}
 * @param repetitionPenalty divides the positive logits and multiplies the negative logits of every
 *     token in the prompt or generated (vLLM's {@code repetition_penalty}); {@code 1} is off; in
 *     {@code (0, 10]}
 */
public record SamplingParams(
    double temperature,
    int topK,
    double topP,
    double minP,
    OptionalLong seed,
    int maxTokens,
    Set<Integer> stopTokenIds,
    boolean ignoreEos,
    double presencePenalty,
    double frequencyPenalty,
    double repetitionPenalty) {

  /** Default {@code temperature}: sample from the model's distribution unchanged. */
  public static final double DEFAULT_TEMPERATURE = 1.0;

  /** Default {@code top_k}: off. */
  public static final int DEFAULT_TOP_K = 0;

  /** Default {@code top_p}: off. */
  public static final double DEFAULT_TOP_P = 1.0;

  /** Default {@code min_p}: off. */
  public static final double DEFAULT_MIN_P = 0.0;

  /** Default {@code max_tokens}, as vLLM's {@code SamplingParams}. */
  public static final int DEFAULT_MAX_TOKENS = 16;

  /** Default {@code ignore_eos}: the end-of-sequence token ends the sequence. */
  public static final boolean DEFAULT_IGNORE_EOS = false;

  /** Default {@code presence_penalty}: off. */
  public static final double DEFAULT_PRESENCE_PENALTY = 0.0;

  /** Default {@code frequency_penalty}: off. */
  public static final double DEFAULT_FREQUENCY_PENALTY = 0.0;

  /** Default {@code repetition_penalty}: off. */
  public static final double DEFAULT_REPETITION_PENALTY = 1.0;

  /** The bound of OpenAI's range for {@code presence_penalty} and {@code frequency_penalty}. */
  public static final double MAX_ABS_PRESENCE_FREQUENCY_PENALTY = 2.0;

  /** The upper bound of {@code repetition_penalty}, as vLLM's range. */
  public static final double MAX_REPETITION_PENALTY = 10.0;

  public SamplingParams {
    if (!(temperature >= 0) || !Double.isFinite(temperature)) {
      throw new IllegalArgumentException(
          "temperature=" + temperature + " must be finite and >= 0 (0 = greedy)");
    }
    if (topK < -1) {
      throw new IllegalArgumentException("topK=" + topK + " must be >= -1 (0 or -1 = off)");
    }
    if (!(topP > 0 && topP <= 1)) {
      throw new IllegalArgumentException("topP=" + topP + " must be in (0, 1] (1 = off)");
    }
    if (!(minP >= 0 && minP <= 1)) {
      throw new IllegalArgumentException("minP=" + minP + " must be in [0, 1] (0 = off)");
    }
    Objects.requireNonNull(seed, "seed");
    if (maxTokens < 1) {
      throw new IllegalArgumentException("maxTokens=" + maxTokens + " must be >= 1");
    }
    Objects.requireNonNull(stopTokenIds, "stopTokenIds");
    for (Integer id : stopTokenIds) {
      if (id == null || id < 0) {
        throw new IllegalArgumentException("stopTokenIds contains " + id + ": each must be >= 0");
      }
    }
    stopTokenIds = Set.copyOf(stopTokenIds);
    if (!(Math.abs(presencePenalty) <= MAX_ABS_PRESENCE_FREQUENCY_PENALTY)) {
      throw new IllegalArgumentException(
          "presencePenalty=" + presencePenalty + " must be in [-2, 2] (0 = off)");
    }
    if (!(Math.abs(frequencyPenalty) <= MAX_ABS_PRESENCE_FREQUENCY_PENALTY)) {
      throw new IllegalArgumentException(
          "frequencyPenalty=" + frequencyPenalty + " must be in [-2, 2] (0 = off)");
    }
    if (!(repetitionPenalty > 0 && repetitionPenalty <= MAX_REPETITION_PENALTY)) {
      throw new IllegalArgumentException(
          "repetitionPenalty=" + repetitionPenalty + " must be in (0, 10] (1 = off)");
    }
  }

  /** The params without penalties, as before the penalties existed: each penalty is off. */
  public SamplingParams(
      double temperature,
      int topK,
      double topP,
      double minP,
      OptionalLong seed,
      int maxTokens,
      Set<Integer> stopTokenIds,
      boolean ignoreEos) {
    this(
        temperature,
        topK,
        topP,
        minP,
        seed,
        maxTokens,
        stopTokenIds,
        ignoreEos,
        DEFAULT_PRESENCE_PENALTY,
        DEFAULT_FREQUENCY_PENALTY,
        DEFAULT_REPETITION_PENALTY);
  }

  /** Every setting at its default, no seed, no stop token ids. */
  public static SamplingParams defaults() {
    return new SamplingParams(
        DEFAULT_TEMPERATURE,
        DEFAULT_TOP_K,
        DEFAULT_TOP_P,
        DEFAULT_MIN_P,
        OptionalLong.empty(),
        DEFAULT_MAX_TOKENS,
        Set.of(),
        DEFAULT_IGNORE_EOS);
  }

  /** Greedy decoding of at most {@code maxTokens} tokens. */
  public static SamplingParams greedy(int maxTokens) {
    return defaults().withTemperature(0).withMaxTokens(maxTokens);
  }

  /** Whether this is greedy decoding ({@code temperature == 0}). */
  public boolean isGreedy() {
    return temperature == 0;
  }

  /** Whether top-k is on ({@code topK > 0}). */
  public boolean isTopKOn() {
    return topK > 0;
  }

  /** Whether top-p is on ({@code topP < 1}). */
  public boolean isTopPOn() {
    return topP < 1;
  }

  /** Whether min-p is on ({@code minP > 0}). */
  public boolean isMinPOn() {
    return minP > 0;
  }

  /**
   * Whether any penalty is on: a presence or frequency penalty other than {@code 0}, or a
   * repetition penalty other than {@code 1}. Without one, sampling never looks at the request's
   * earlier tokens.
   */
  public boolean hasPenalties() {
    return presencePenalty != 0 || frequencyPenalty != 0 || repetitionPenalty != 1;
  }

  /** These params with the seed the request gave, or else one drawn from {@code engineSeeds}. */
  public SamplingParams withSeedIfAbsent(LongSupplier engineSeeds) {
    return seed.isPresent() ? this : withSeed(engineSeeds.getAsLong());
  }

  public SamplingParams withSeed(long newSeed) {
    return with(f -> f.seed = OptionalLong.of(newSeed));
  }

  public SamplingParams withTemperature(double newTemperature) {
    return with(f -> f.temperature = newTemperature);
  }

  public SamplingParams withTopK(int newTopK) {
    return with(f -> f.topK = newTopK);
  }

  public SamplingParams withTopP(double newTopP) {
    return with(f -> f.topP = newTopP);
  }

  public SamplingParams withMinP(double newMinP) {
    return with(f -> f.minP = newMinP);
  }

  public SamplingParams withMaxTokens(int newMaxTokens) {
    return with(f -> f.maxTokens = newMaxTokens);
  }

  public SamplingParams withStopTokenIds(Set<Integer> newStopTokenIds) {
    return with(f -> f.stopTokenIds = newStopTokenIds);
  }

  public SamplingParams withIgnoreEos(boolean newIgnoreEos) {
    return with(f -> f.ignoreEos = newIgnoreEos);
  }

  public SamplingParams withPenalties(double presence, double frequency, double repetition) {
    return with(
        f -> {
          f.presencePenalty = presence;
          f.frequencyPenalty = frequency;
          f.repetitionPenalty = repetition;
        });
  }

  /**
   * These params with {@code change} applied to a copy of their fields, checked again by the
   * canonical constructor: one place that lists every component, whichever one a {@code with}
   * method changes.
   */
  private SamplingParams with(Consumer<Fields> change) {
    Fields f = new Fields(this);
    change.accept(f);
    return new SamplingParams(
        f.temperature,
        f.topK,
        f.topP,
        f.minP,
        f.seed,
        f.maxTokens,
        f.stopTokenIds,
        f.ignoreEos,
        f.presencePenalty,
        f.frequencyPenalty,
        f.repetitionPenalty);
  }

  /** The components as a mutable copy, for {@link #with}. */
  private static final class Fields {
    double temperature;
    int topK;
    double topP;
    double minP;
    OptionalLong seed;
    int maxTokens;
    Set<Integer> stopTokenIds;
    boolean ignoreEos;
    double presencePenalty;
    double frequencyPenalty;
    double repetitionPenalty;

    Fields(SamplingParams p) {
      temperature = p.temperature;
      topK = p.topK;
      topP = p.topP;
      minP = p.minP;
      seed = p.seed;
      maxTokens = p.maxTokens;
      stopTokenIds = p.stopTokenIds;
      ignoreEos = p.ignoreEos;
      presencePenalty = p.presencePenalty;
      frequencyPenalty = p.frequencyPenalty;
      repetitionPenalty = p.repetitionPenalty;
    }
  }
}
