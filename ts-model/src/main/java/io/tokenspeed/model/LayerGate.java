package io.tokenspeed.model;

/**
 * What a forward pass waits for before it computes a layer: the KV (or State) of that layer that
 * the batch reads and that is still being copied into the cache when the pass starts. The engine
 * copies a round's Host→Device loads layer by layer and hands the pass a gate, so that layer {@code
 * l} starts as soon as layer {@code l}'s rows are in place, not after every layer's.
 *
 * <pre>
 *   ts-copy:   [layers 0-3][layers 4-7][layers 8-11] ...
 *   forward:        [emb][0][1][2][3][4][5][6][7][8] ...     each layer after its gate
 * </pre>
 *
 * <p>A model calls {@link #awaitLayer} with each layer's index, in increasing order, before it
 * reads or writes that layer's cache; a model that cannot (a replayed CUDA graph) calls it with its
 * last layer first. A gate is used by one forward pass, on the thread that runs it.
 */
@FunctionalInterface
public interface LayerGate {

  /** The gate of a batch whose cache is all in place: never waits. */
  LayerGate OPEN = layer -> {};

  /**
   * Returns once layer {@code layer}'s cache, and every earlier layer's, is in place.
   *
   * @throws IllegalStateException when a copy of that layer failed (the pass must not compute on
   *     it), or the waiting thread was interrupted (its interrupt status is set again)
   */
  void awaitLayer(int layer);
}
