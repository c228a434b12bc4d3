package io.tokenspeed.engine.memory;

import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.scheduler.ExecutionPlan;

/**
 * One block copy between or inside the tiers, of {@code bytesPerBlock(groupId)} bytes. Block ids
 * are cache block ids of the group in their tier; none is the null block.
 */
public sealed interface BlockTransfer
    permits BlockTransfer.Load, BlockTransfer.Store, BlockTransfer.DeviceCopy {

  /** The cache group of both blocks. */
  int groupId();

  /**
   * The transfer a planned {@link BlockCopy} asks for: a {@link Load} from the Host tier, or a
   * {@link DeviceCopy} (copy-on-write) inside the Device tier.
   */
  static BlockTransfer of(BlockCopy copy) {
    return copy.srcTier() == Tier.HOST
        ? new Load(copy.groupId(), copy.srcBlock(), copy.dstBlock())
        : new DeviceCopy(copy.groupId(), copy.srcBlock(), copy.dstBlock());
  }

  /** The {@link Store} a planned demotion asks for. */
  static Store of(ExecutionPlan.Demotion demotion) {
    return new Store(demotion.key().groupId(), demotion.deviceBlock(), demotion.hostBlock());
  }

  /** Host→Device (H2D): Host block {@code hostBlock} into Device block {@code deviceBlock}. */
  record Load(int groupId, int hostBlock, int deviceBlock) implements BlockTransfer {
    public Load {
      check("Load", groupId, "host_block", hostBlock, "device_block", deviceBlock);
    }
  }

  /** Device→Host (D2H): Device block {@code deviceBlock} into Host block {@code hostBlock}. */
  record Store(int groupId, int deviceBlock, int hostBlock) implements BlockTransfer {
    public Store {
      check("Store", groupId, "device_block", deviceBlock, "host_block", hostBlock);
    }
  }

  /** Device→Device (D2D), for copy-on-write: {@code srcBlock} into {@code dstBlock}. */
  record DeviceCopy(int groupId, int srcBlock, int dstBlock) implements BlockTransfer {
    public DeviceCopy {
      check("DeviceCopy", groupId, "src_block", srcBlock, "dst_block", dstBlock);
    }
  }

  private static void check(
      String op, int groupId, String srcName, int src, String dstName, int dst) {
    if (groupId < 0) {
      throw new IllegalArgumentException(op + " group_id=" + groupId + " must be non-negative");
    }
    checkBlock(op, srcName, src);
    checkBlock(op, dstName, dst);
  }

  private static void checkBlock(String op, String name, int block) {
    if (block < 1) {
      throw new IllegalArgumentException(
          op + " " + name + "=" + block + " must be at least 1: block 0 is the null block");
    }
  }
}
