package io.tokenspeed.model.layer;

import java.util.List;

/**
 * One step of the residual stream: reads the batch's rows {@code x}, adds its layers' outputs to
 * them in place. A model is an embedding, a list of these and a head; each architecture's
 * arrangement of norms and mixers is one implementation.
 */
public sealed interface ResidualBlock permits DecoderBlock, SandwichBlock {

  /** The decoder layer index. */
  int index();

  /** Runs the block over the batch's residual rows {@code x} ({@code [T][hidden]}) in place. */
  void forward(BatchMetadata batch, float[] x, int hidden);

  /** The layers of this block that keep cache state, in order. */
  List<CachedLayer> cachedLayers();
}
