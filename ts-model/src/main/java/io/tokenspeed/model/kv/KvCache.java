package io.tokenspeed.model.kv;

import io.tokenspeed.core.CacheLayout;
import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.List;

/**
 * The pools of every cache group of a {@link CacheLayout}, indexed by group id: what a forward pass
 * reads and writes through block tables. It holds memory, not bookkeeping: which block is free,
 * shared or cached is the cache owner's business.
 */
public record KvCache(CacheLayout layout, List<PagedKvPool> pools) {

  public KvCache {
    if (layout == null || pools == null) {
      throw new IllegalArgumentException("layout=" + layout + " and pools are required");
    }
    pools = List.copyOf(pools);
    if (pools.size() != layout.numGroups()) {
      throw new IllegalArgumentException(
          "pools=" + pools.size() + " but the layout has groups=" + layout.numGroups());
    }
    for (int g = 0; g < pools.size(); g++) {
      if (!pools.get(g).spec().equals(layout.group(g))) {
        throw new IllegalArgumentException(
            "pool "
                + g
                + " spec="
                + pools.get(g).spec()
                + " differs from layout group "
                + layout.group(g));
      }
    }
  }

  /**
   * Allocates zeroed pools of {@code numBlocks} blocks (block 0 included) for every group in {@code
   * arena}.
   */
  public static KvCache allocate(CacheLayout layout, int numBlocks, Arena arena) {
    List<PagedKvPool> pools = new ArrayList<>();
    for (int g = 0; g < layout.numGroups(); g++) {
      var spec = layout.group(g);
      long bytes = Math.multiplyExact(spec.bytesPerBlock(), (long) numBlocks);
      pools.add(new PagedKvPool(spec, numBlocks, arena.allocate(bytes, 64)));
    }
    return new KvCache(layout, pools);
  }

  /** The pool of group {@code groupId}. */
  public PagedKvPool pool(int groupId) {
    return pools.get(groupId);
  }
}
