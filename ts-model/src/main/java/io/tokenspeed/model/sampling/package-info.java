/**
 * Sampling: how the next token is chosen and when a sequence ends. {@link
 * io.tokenspeed.model.sampling.SamplingParams} holds a request's settings, {@link
 * io.tokenspeed.model.sampling.Sampler} picks a token from a row of logits, {@link
 * io.tokenspeed.model.sampling.StopChecker} decides when a sequence finishes and why ({@link
 * io.tokenspeed.model.sampling.FinishReason}), and {@link
 * io.tokenspeed.model.sampling.SamplingState} ties them together for one sequence. {@link
 * io.tokenspeed.model.sampling.LogSoftmax} computes a sampled token's {@link
 * io.tokenspeed.model.sampling.TokenLogprobs}; {@link io.tokenspeed.model.sampling.RowSampling} and
 * {@link io.tokenspeed.model.sampling.SampledRow} carry one request's draw to a sampler elsewhere
 * (a device model's) and its token back.
 *
 * <p>Reproducibility is the invariant: a token depends only on its row of logits, the params, the
 * seed and the step. The draw is counter-based (keyed by seed and step) rather than a generator
 * that advances, and the sampler's sums are sums of integers, so batching, thread count, retraction
 * and the device that samples cannot change a sequence's tokens; a request that gave no seed is
 * assigned one, which the engine reports.
 */
package io.tokenspeed.model.sampling;
