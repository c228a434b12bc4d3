package io.tokenspeed.model.layer;

/**
 * The layer kinds a model composes from its config. Each is a small record of weights and
 * hyperparameters with a {@code forward}-style method over a batch of token rows; the math lives in
 * the kernels ({@code io.tokenspeed.model.kernel}), which own the reduction order. Layers that keep
 * state across steps are {@link CachedLayer}s and state the cache group kind they need.
 *
 * <p>Switches over this family have no {@code default}: a new kind (sliding-window attention, a
 * Mamba mixer, a GELU MLP) breaks the build where it must be handled.
 */
public sealed interface Layer
    permits Embedding,
        RmsNorm,
        Attention,
        SwiGluMlp,
        LmHead,
        SlidingAttention,
        GeGluMlp,
        MambaMixer {}
