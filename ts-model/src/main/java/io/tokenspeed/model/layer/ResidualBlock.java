package io.tokenspeed.model.layer;

/**
 * One block of a model's residual stack: it reads the batch's residual rows {@code x} and adds its
 * layers' outputs to them in place, and owns exactly one cached mixer (attention, sliding-window
 * attention or a recurrent mixer) whose state the cache layout derives. A model is an embedding, a
 * list of these and a head; each architecture's arrangement of norms and mixers is one
 * implementation.
 */
public sealed interface ResidualBlock permits DecoderBlock, SandwichBlock, MambaBlock, HybridBlock {

  /** Position of the block in the stack (the decoder layer index). */
  int index();

  /** The block's layer that keeps cache state. */
  CachedLayer mixer();

  /** Runs the block over the residual rows {@code x} ({@code [T][hidden]}) in place. */
  void forward(BatchMetadata batch, float[] x, int hidden);
}
