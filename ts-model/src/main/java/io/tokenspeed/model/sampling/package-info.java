/**
 * Sampling: how the next token is chosen and when a sequence ends. {@link
 * io.tokenspeed.model.sampling.SamplingParams} holds a request's settings, {@link
 * io.tokenspeed.model.sampling.Sampler} picks a token from a row of logits, {@link
 * io.tokenspeed.model.sampling.StopChecker} decides when a sequence finishes and why ({@link
 * io.tokenspeed.model.sampling.FinishReason}), and {@link
 * io.tokenspeed.model.sampling.SamplingState} ties them together for one sequence.
 *
 * <p>Reproducibility is the invariant: a token depends only on its row of logits, the params, the
 * seed and the step. The draw is counter-based (keyed by seed and step) rather than a generator
 * that advances, so batching, thread count and retraction cannot change a sequence's tokens; a
 * request that gave no seed is assigned one, which the engine reports.
 */
package io.tokenspeed.model.sampling;
