package io.tokenspeed.engine.l3;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.ObjectKey;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.l3.spi.Store;
import java.nio.charset.StandardCharsets;

/**
 * Startup checks of what this rank will store, before the executor starts: every group's objects
 * must mean the same bytes whichever rank owns them, fit the store's value limit, and have keys
 * within its key limit. Each failure names the group and the numbers.
 */
public final class StoragePayloads {
  private StoragePayloads() {}

  /**
   * @param attentionTpSize the replica's attention-TP ranks
   * @throws IllegalArgumentException for a page-sharded group whose fields would be split by heads
   *     (fewer page owners than attention-TP ranks), a block larger than the store's largest value,
   *     or an object key longer than its longest key
   */
  public static void validate(
      CacheLayout layout, int attentionTpSize, Namespace namespace, Store store) {
    for (CacheGroupSpec g : layout.groups()) {
      if (g.sharding() instanceof Sharding.PageCyclic pc && pc.shardCount() != attentionTpSize) {
        throw new IllegalArgumentException(
            "group "
                + g.groupId()
                + " is page_cyclic over "
                + pc.shardCount()
                + " owners among "
                + attentionTpSize
                + " attention-TP ranks: its fields would be head-partitioned inside a page-sharded"
                + " group, so an object's bytes would depend on the rank that owns it; L3 needs"
                + " shard_count = attention_tp_size");
      }
      long payload = g.bytesPerBlock();
      if (payload > store.maxValueBytes()) {
        throw new IllegalArgumentException(
            "group "
                + g.groupId()
                + " stores "
                + payload
                + "-byte objects, over the "
                + store.name()
                + " store's largest value of "
                + store.maxValueBytes()
                + " bytes");
      }
      int lastOffset = Math.max(0, layout.prefixGranularity() / g.blockGranularity() - 1);
      CacheKey sample = new CacheKey(g.groupId(), new ContentHash(-1, -1, -1, -1), lastOffset);
      for (int rank = 0; rank < attentionTpSize; rank++) {
        int keyBytes =
            ObjectKey.forRank(namespace, sample, g, rank)
                .toString()
                .getBytes(StandardCharsets.UTF_8)
                .length;
        if (keyBytes > store.maxKeyBytes()) {
          throw new IllegalArgumentException(
              "group "
                  + g.groupId()
                  + "'s object keys take "
                  + keyBytes
                  + " bytes, over the "
                  + store.name()
                  + " store's longest key of "
                  + store.maxKeyBytes()
                  + " bytes");
        }
      }
    }
  }
}
