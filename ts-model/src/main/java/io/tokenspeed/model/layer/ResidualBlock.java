package io.tokenspeed.model.layer;

/**
 * One block of a model's residual stack: it reads and updates the batch's residual rows in place
 * and owns one cached mixer (attention or a recurrent mixer) whose state the cache layout derives.
 */
public interface ResidualBlock {

  /** Position of the block in the stack. */
  int index();

  /** The block's layer that keeps cache state. */
  CachedLayer mixer();

  /** Runs the block over the residual rows {@code x} ({@code [T][hidden]}) in place. */
  void forward(BatchMetadata batch, float[] x, int hidden);
}
