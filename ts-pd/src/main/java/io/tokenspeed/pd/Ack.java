package io.tokenspeed.pd;

import java.util.Arrays;

/**
 * The decode side's answer to a BOOTSTRAP: how many blocks of each cache group it reserved. The
 * prefill side then sends exactly one DATA frame for each block, {@code (group, index)} with {@code
 * index < numBlocks(group)}.
 *
 * @param blocksPerGroup the reserved blocks of each cache group, each non-negative
 */
public record Ack(int[] blocksPerGroup) {

  public Ack {
    if (blocksPerGroup == null || blocksPerGroup.length == 0) {
      throw new IllegalArgumentException("ack needs the block count of at least one cache group");
    }
    for (int g = 0; g < blocksPerGroup.length; g++) {
      if (blocksPerGroup[g] < 0) {
        throw new IllegalArgumentException(
            "ack blocks of group " + g + "=" + blocksPerGroup[g] + " must be >= 0");
      }
    }
    blocksPerGroup = blocksPerGroup.clone();
  }

  /** A copy of the block counts. */
  @Override
  public int[] blocksPerGroup() {
    return blocksPerGroup.clone();
  }

  /** The number of cache groups. */
  public int numGroups() {
    return blocksPerGroup.length;
  }

  /** The reserved blocks of {@code group}. */
  public int numBlocks(int group) {
    return blocksPerGroup[group];
  }

  /** The reserved blocks of every group together. */
  public long totalBlocks() {
    long n = 0;
    for (int b : blocksPerGroup) {
      n += b;
    }
    return n;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof Ack a && Arrays.equals(blocksPerGroup, a.blocksPerGroup);
  }

  @Override
  public int hashCode() {
    return Arrays.hashCode(blocksPerGroup);
  }

  @Override
  public String toString() {
    return "Ack" + Arrays.toString(blocksPerGroup);
  }
}
