package io.tokenspeed.engine.memory;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.model.device.DeviceBytes;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.kv.KvCache;
import io.tokenspeed.model.kv.PagedKvPool;
import java.util.ArrayList;
import java.util.List;

/**
 * The Device tier: the cache's LCM parents as one allocation on the device the model computes on,
 * and the model's pools as a view of the same bytes. For the CPU backend that is one host {@link
 * TierMemory} and a {@link KvCache}; a GPU backend ({@link DeviceModel#allocate}) lays its memory
 * out the same way, so block ids, offsets and copies are the same whichever device holds them.
 *
 * <p>The model's pool of group {@code g} reads block {@code i} at {@code i * bpb(g)} of its segment
 * and never touches block 0. Each pool's segment therefore starts {@code bpb(g)} bytes before the
 * tier's blocks, inside a leading pad of the largest block size (rounded up to the alignment), so
 * that model block {@code i >= 1} lies at tier offset {@code (i - 1) * bpb(g)}:
 *
 * <pre>
 *   allocation:  [ pad ............ | parent 0 | parent 1 | ... ]
 *   pool g:              [ null (0) | 1 | 2 | ...               ]    numBlocks_g = 1 + numParents * k_g
 *   cache block b of g at tier offset off(b) = byteOffset(g, b)  ↦  model block 1 + off(b) / bpb(g)
 * </pre>
 *
 * <p>Since {@code parentBytes} is a multiple of every {@code bpb(g)}, that index is {@code 1 + p *
 * k_g + child}: exactly the cache block's bytes, and 0 stays the null block.
 */
public final class DevicePools implements AutoCloseable {

  /** The tier name errors give. */
  public static final String TIER_NAME = "Device";

  private final CacheLayout layout;
  private final BlockGeometry geometry;
  private final int numParents;
  private final int blockIdLimit;
  private final TierMemory memory;
  private final KvCache kvCache;
  private final DeviceBytes bytes;
  private final int rank;

  /**
   * Allocates {@code numParents} parents of {@code layout}'s geometry in host memory and binds the
   * CPU model's pools to them.
   *
   * @throws IllegalArgumentException when the layout's LCM is too large, {@code numParents < 1}, or
   *     the tier does not fit the block id space
   */
  public DevicePools(CacheLayout layout, int numParents) {
    this(layout, numParents, 0);
  }

  /**
   * The pools of attention-TP rank {@code rank}: the model's block tables of a page-cyclic group
   * name only the pages this rank owns ({@link #modelTables}).
   */
  public DevicePools(CacheLayout layout, int numParents, int rank) {
    this(layout, numParents, rank, null);
  }

  /**
   * The pools on {@code backend}'s device: host memory when it {@link DeviceModel#computesOnHost
   * computes on the host} (or is null), else the memory its {@link DeviceModel#allocate} returns.
   */
  public DevicePools(CacheLayout layout, int numParents, int rank, DeviceModel backend) {
    BlockGeometry geometry = BlockGeometry.of(layout);
    long pad =
        Math.ceilDiv(geometry.maxBytesPerBlock(), TierMemory.ALIGNMENT) * TierMemory.ALIGNMENT;
    int[] poolBlocks = new int[layout.numGroups()];
    for (int g = 0; g < layout.numGroups(); g++) {
      poolBlocks[g] = 1 + numParents * geometry.childrenPerParent(g);
    }
    if (backend == null || backend.computesOnHost()) {
      TierMemory tier = TierMemory.allocate(TIER_NAME, geometry, numParents, pad);
      try {
        List<PagedKvPool> pools = new ArrayList<>();
        for (int g = 0; g < layout.numGroups(); g++) {
          long bpb = geometry.bytesPerBlock(g);
          pools.add(
              new PagedKvPool(
                  layout.group(g),
                  poolBlocks[g],
                  tier.allocation().asSlice(pad - bpb, bpb + tier.byteSize())));
        }
        this.kvCache = new KvCache(layout, pools);
      } catch (RuntimeException e) {
        tier.close();
        throw e;
      }
      this.memory = tier;
      this.bytes = new HostDeviceBytes(tier.segment(), kvCache);
      this.blockIdLimit = tier.blockIdLimit();
    } else {
      int limit;
      try {
        limit = geometry.blockIdLimit(numParents);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(TIER_NAME + " tier " + e.getMessage(), e);
      }
      if (numParents < 1) {
        throw new IllegalArgumentException(
            TIER_NAME + " tier num_parents=" + numParents + " must be at least 1");
      }
      this.memory = null;
      this.kvCache = null;
      this.bytes =
          backend.allocate(
              layout,
              pad,
              Math.multiplyExact(geometry.parentBytes(), (long) numParents),
              poolBlocks);
      this.blockIdLimit = limit;
    }
    this.layout = layout;
    this.geometry = geometry;
    this.numParents = numParents;
    this.rank = rank;
  }

  /** The layout the pools serve. */
  public CacheLayout layout() {
    return layout;
  }

  /** The tier's geometry. */
  public BlockGeometry geometry() {
    return geometry;
  }

  /** Number of LCM parents. */
  public int numParents() {
    return numParents;
  }

  /**
   * The tier's host memory, addressed by cache block ids, when the Device is host memory (the CPU
   * backend); null on a GPU.
   */
  public TierMemory memory() {
    return memory;
  }

  /** The model's view of host memory (the CPU backend); null on a GPU. */
  public KvCache kvCache() {
    return kvCache;
  }

  /** The tier's bytes on its device, which copies and the forward pass go through. */
  public DeviceBytes bytes() {
    return bytes;
  }

  /** The tier's name, as errors give it. */
  public String tierName() {
    return TIER_NAME;
  }

  /**
   * Byte offset of a block from the tier's first block.
   *
   * @throws IllegalArgumentException naming the tier when the id is no block of the group here
   */
  public long offsetOf(int groupId, int blockId) {
    return memory != null
        ? memory.offsetOf(groupId, blockId)
        : TierMemory.offsetOf(TIER_NAME, geometry, numParents, blockIdLimit, groupId, blockId);
  }

  /**
   * The model's block index of cache block {@code blockId} of group {@code groupId}; 0 (the null
   * block) stays 0.
   *
   * @throws IllegalArgumentException when the id is no block of the group in this tier
   */
  public int modelBlock(int groupId, int blockId) {
    long bpb = geometry.bytesPerBlock(groupId);
    if (blockId == 0) {
      return 0;
    }
    return (int) (1 + offsetOf(groupId, blockId) / bpb);
  }

  /**
   * Per group, the cache block table {@code cacheTables[g]} translated entry by entry through
   * {@link #modelBlock}, into new arrays. In a page-cyclic group of several owners an entry whose
   * block another rank owns ({@link Sharding.PageCyclic#ownerOf}) becomes 0: the model neither
   * writes nor reads that page here, its owner does.
   *
   * @throws IllegalArgumentException when there is not one table per group or an entry is no block
   *     of its group
   */
  public int[][] modelTables(int[][] cacheTables) {
    int groups = geometry.numGroups();
    if (cacheTables == null || cacheTables.length != groups) {
      throw new IllegalArgumentException(
          "block tables for "
              + (cacheTables == null ? "no" : String.valueOf(cacheTables.length))
              + " groups, but the layout has groups="
              + groups);
    }
    int[][] out = new int[groups][];
    for (int g = 0; g < groups; g++) {
      if (cacheTables[g] == null) {
        throw new IllegalArgumentException("block table of group " + g + " is missing");
      }
      out[g] = modelTable(g, cacheTables[g]);
    }
    return out;
  }

  /** One group's table of {@link #modelTables}: {@code table} translated into a new array. */
  public int[] modelTable(int g, int[] table) {
    int[] out = new int[table.length];
    Sharding.PageCyclic cyclic =
        layout.group(g).sharding() instanceof Sharding.PageCyclic pc && pc.shardCount() > 1
            ? pc
            : null;
    for (int i = 0; i < table.length; i++) {
      boolean others = cyclic != null && table[i] != 0 && cyclic.ownerOf(table[i]) != rank;
      out[i] = others ? 0 : modelBlock(g, table[i]);
    }
    return out;
  }

  /** Frees the tier; the model's pools become inaccessible. Later calls do nothing. */
  @Override
  public void close() {
    if (memory != null) {
      memory.close();
    } else {
      bytes.close();
    }
  }
}
