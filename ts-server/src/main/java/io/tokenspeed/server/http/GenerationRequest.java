package io.tokenspeed.server.http;

import io.tokenspeed.engine.PdTicket;
import io.tokenspeed.model.sampling.SamplingParams;
import java.util.List;
import java.util.Map;

/**
 * One checked completion or chat request: what to generate, for how many choices, and how to
 * answer.
 *
 * @param chat whether it came to {@code /v1/chat/completions}
 * @param model the model the request named (the served one)
 * @param prompts the prompt ids of each prompt ({@code prompt} may be a batch for completions; one
 *     prompt for chat)
 * @param params the sampling of each choice (seeds are per choice, see {@link #seedOf})
 * @param n choices per prompt
 * @param stop stop strings: the text ends before the first of them, which is not returned
 * @param topLogprobs -1 without logprobs, else how many alternatives each token lists (0..20)
 * @param stream whether to answer with server-sent events
 * @param includeUsage whether a streamed answer ends with a usage chunk
 * @param messages the chat messages as given (role, content), for the chat template; empty for
 *     completions
 * @param pd the disaggregated half the request is ({@link PdServing}), or null for a whole request
 */
public record GenerationRequest(
    boolean chat,
    String model,
    List<int[]> prompts,
    SamplingParams params,
    int n,
    List<String> stop,
    int topLogprobs,
    boolean stream,
    boolean includeUsage,
    List<Map<String, Object>> messages,
    PdTicket pd) {

  public GenerationRequest {
    prompts = List.copyOf(prompts);
    stop = List.copyOf(stop);
    messages = List.copyOf(messages);
  }

  /** Choices in all: {@code n} per prompt. */
  public int choices() {
    return prompts.size() * n;
  }

  /**
   * The sampling of choice {@code index}: the request's seed plus the index when it gave one (so a
   * seeded request replays), else none (the engine draws one).
   */
  public SamplingParams paramsOf(int index) {
    return params.seed().isPresent() ? params.withSeed(seedOf(index)) : params;
  }

  private long seedOf(int index) {
    return params.seed().getAsLong() + index;
  }
}
