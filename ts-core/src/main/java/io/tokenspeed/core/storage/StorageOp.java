package io.tokenspeed.core.storage;

import io.tokenspeed.core.CacheKey;
import java.util.List;

/**
 * The four Host-only storage commands a plan carries beside its Device copies. They are the same on
 * every rank (every rank runs the same plan); each rank's data plane translates one into its own
 * {@link StorageJob} once, with its rank in the object keys and its own Host byte ranges.
 *
 * <pre>
 *   Query(op, keys)               existence check; reserves nothing
 *   Get(op, keys, hostBlocks,     read each key into its Host destination block and, where
 *       deviceBlocks)             deviceBlocks names one, copy it on to that Device block as it lands
 *   Put(op, keys, hostBlocks)     create-only write of each Host source block
 *   Cancel(op)                    names an existing operation; creates no ticket
 * </pre>
 */
public sealed interface StorageOp
    permits StorageOp.Query, StorageOp.Get, StorageOp.Put, StorageOp.Cancel {

  /** The operation id (for Cancel: the id of the operation it cancels). */
  long operationId();

  /** Existence check of {@code keys}. */
  record Query(long operationId, List<CacheKey> keys) implements StorageOp {
    public Query {
      keys = checkedKeys(operationId, keys);
    }
  }

  /**
   * Read {@code keys.get(i)} into Host block {@code hostBlocks.get(i)}. Where {@code deviceBlocks}
   * is not empty, {@code deviceBlocks.get(i)} (0: none) is the Device block the row is copied on to
   * as soon as it has landed on the Host, while the rest of the read runs: the block is private to
   * the operation, and its rank reports the operation only after that copy is done.
   */
  record Get(
      long operationId, List<CacheKey> keys, List<Integer> hostBlocks, List<Integer> deviceBlocks)
      implements StorageOp {
    public Get {
      keys = checkedKeys(operationId, keys);
      hostBlocks = checkedBlocks(operationId, keys, hostBlocks, "Host", 1);
      deviceBlocks =
          deviceBlocks == null || deviceBlocks.isEmpty()
              ? List.of()
              : checkedBlocks(operationId, keys, deviceBlocks, "Device", 0);
    }

    /** A read into the Host only. */
    public Get(long operationId, List<CacheKey> keys, List<Integer> hostBlocks) {
      this(operationId, keys, hostBlocks, List.of());
    }

    /** The Device block row {@code i} is copied on to, or 0. */
    public int deviceBlock(int i) {
      return deviceBlocks.isEmpty() ? 0 : deviceBlocks.get(i);
    }
  }

  /** Create-only write of Host block {@code hostBlocks.get(i)} under {@code keys.get(i)}. */
  record Put(long operationId, List<CacheKey> keys, List<Integer> hostBlocks) implements StorageOp {
    public Put {
      keys = checkedKeys(operationId, keys);
      hostBlocks = checkedBlocks(operationId, keys, hostBlocks, "Host", 1);
    }
  }

  /** Cancel the operation {@code operationId}. */
  record Cancel(long operationId) implements StorageOp {
    public Cancel {
      if (operationId < 0) {
        throw new IllegalArgumentException("operation_id=" + operationId + " must be >= 0");
      }
    }
  }

  private static List<CacheKey> checkedKeys(long operationId, List<CacheKey> keys) {
    if (operationId < 0) {
      throw new IllegalArgumentException("operation_id=" + operationId + " must be >= 0");
    }
    if (keys == null || keys.isEmpty()) {
      throw new IllegalArgumentException("operation " + operationId + " has no keys");
    }
    return List.copyOf(keys);
  }

  /**
   * {@code blocks}, one per key, each at least {@code min} (a Host block is never 0, the null
   * block; an early Device destination may be 0, for none).
   */
  private static List<Integer> checkedBlocks(
      long operationId, List<CacheKey> keys, List<Integer> blocks, String tier, int min) {
    if (blocks == null || blocks.size() != keys.size()) {
      throw new IllegalArgumentException(
          "operation "
              + operationId
              + " has "
              + keys.size()
              + " keys but "
              + (blocks == null ? 0 : blocks.size())
              + " "
              + tier
              + " blocks");
    }
    for (int b : blocks) {
      if (b < min) {
        throw new IllegalArgumentException(
            "operation "
                + operationId
                + " names "
                + tier
                + " block "
                + b
                + (min == 1 ? " (0 is the null block)" : ""));
      }
    }
    return List.copyOf(blocks);
  }
}
