package io.tokenspeed.pd;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * Test destinations: {@code blocksPerGroup[g]} blocks of each cache group, each of the group's
 * bytes per block, in a shared arena of their own that {@link #release} closes.
 */
class ArenaDestinations implements Destinations {
  final Arena arena = Arena.ofShared();
  final MemorySegment[][] blocks;

  ArenaDestinations(Bootstrap b, int[] blocksPerGroup) {
    blocks = new MemorySegment[b.numGroups()][];
    for (int g = 0; g < blocks.length; g++) {
      blocks[g] = new MemorySegment[blocksPerGroup[g]];
      for (int i = 0; i < blocks[g].length; i++) {
        blocks[g][i] = arena.allocate(b.blockBytes(g));
      }
    }
  }

  @Override
  public int numGroups() {
    return blocks.length;
  }

  @Override
  public int numBlocks(int group) {
    return blocks[group].length;
  }

  @Override
  public MemorySegment block(int group, int index) {
    return blocks[group][index];
  }

  @Override
  public void release() {
    arena.close();
  }
}
