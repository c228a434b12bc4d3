package io.tokenspeed.model.layer;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.GroupKind;
import java.util.List;

/**
 * A layer whose tokens leave state in a cache group: full attention keeps all KV (Full history);
 * sliding-window attention and recurrent mixers will state their own kinds. The model derives its
 * cache layout from these statements: layers with equal kinds share a group, and a group's block
 * holds every such layer's fields in layer order.
 */
public sealed interface CachedLayer permits Attention, SlidingAttention, MambaMixer {

  /** What this layer's group keeps. */
  GroupKind cacheKind();

  /** The group id this layer was assigned (position of its kind among the model's groups). */
  int cacheGroup();

  /** This layer's fields in one block of {@code blockTokens} tokens. */
  List<CacheField> cacheFields(int blockTokens);
}
