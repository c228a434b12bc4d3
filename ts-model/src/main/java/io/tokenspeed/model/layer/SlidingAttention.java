package io.tokenspeed.model.layer;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.GroupKind;
import java.util.List;

/**
 * Sliding-window attention: the projections, QK-norm, RoPE and K/V fields of an {@link Attention},
 * but a token at position p reads only the last {@code windowTokens} positions, {@code [p - W + 1,
 * p]}. It states the SWA cache group with this window.
 *
 * <pre>
 *   window W, block granularity bg, chunk starting at position s:
 *
 *   rows:  0      1      ...    r0 = max(0, s - W + 1) / bg   ...   row(s)  ...
 *          | hole | hole | ... | needed ...                         | written now |
 *
 *   rows entirely left of r0 are never read: the cache may have dropped them (block id 0)
 * </pre>
 *
 * <p>Exactness is that of {@link io.tokenspeed.model.kernel.PagedAttention}: the window only cuts
 * the left end of the ascending walk, so the logits do not depend on what (if anything) the rows
 * left of the window hold.
 *
 * @param windowTokens W, the tokens one query sees (its own included)
 * @param attention the attention computed within the window; its cache group is this layer's
 */
public record SlidingAttention(int windowTokens, Attention attention)
    implements Layer, CachedLayer {

  public SlidingAttention {
    if (windowTokens < 1) {
      throw new IllegalArgumentException("window_tokens=" + windowTokens + " must be at least 1");
    }
    if (attention == null) {
      throw new IllegalArgumentException("attention is missing");
    }
  }

  public int layerIndex() {
    return attention.layerIndex();
  }

  @Override
  public GroupKind cacheKind() {
    return new GroupKind.SlidingWindow(windowTokens);
  }

  @Override
  public int cacheGroup() {
    return attention.cacheGroup();
  }

  @Override
  public List<CacheField> cacheFields(int blockTokens) {
    return attention.cacheFields(blockTokens);
  }

  /**
   * Attention of the batch's rows {@code h} ({@code [T][hidden]}) within the window into {@code
   * out}, storing the rows' K/V on the way.
   */
  public void forward(BatchMetadata batch, float[] h, float[] out) {
    attention.forwardWithin(batch, h, out, windowTokens);
  }
}
