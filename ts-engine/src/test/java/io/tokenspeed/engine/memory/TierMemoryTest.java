package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.junit.jupiter.api.Test;

class TierMemoryTest {

  private static final BlockGeometry HYBRID = BlockGeometry.of(MemoryFixtures.hybrid());

  @Test
  void shouldSliceEachBlockAtItsGeometryOffset() {
    try (TierMemory tier = TierMemory.allocate("Host", HYBRID, 3)) {
      assertEquals("Host", tier.tierName());
      assertEquals(HYBRID, tier.geometry());
      assertEquals(3, tier.numParents());
      assertEquals(3 * 1920, tier.byteSize());
      assertEquals(tier.byteSize(), tier.segment().byteSize());
      assertEquals(1 + 3 * 20, tier.blockIdLimit());
      assertEquals(0, tier.segment().address() % 64, "64-byte aligned");
      for (int g = 0; g < HYBRID.numGroups(); g++) {
        for (int p = 0; p < 3; p++) {
          for (int c = 0; c < HYBRID.childrenPerParent(g); c++) {
            int id = 1 + p * HYBRID.maxChildren() + c;
            MemorySegment block = tier.block(g, id);
            assertEquals(HYBRID.bytesPerBlock(g), block.byteSize());
            assertEquals(
                HYBRID.byteOffset(g, id), block.address() - tier.segment().address(), "id " + id);
          }
        }
      }
    }
  }

  @Test
  void shouldNameTheTierInEveryAllocationError() {
    var noParents =
        assertThrows(IllegalArgumentException.class, () -> TierMemory.allocate("Host", HYBRID, 0));
    assertEquals("Host tier num_parents=0 must be at least 1", noParents.getMessage());

    BlockGeometry huge = BlockGeometry.of(MemoryFixtures.single(1L << 32));
    var overflow =
        assertThrows(
            IllegalArgumentException.class,
            () -> TierMemory.allocate("Device", huge, Integer.MAX_VALUE, 1L << 32));
    assertTrue(
        overflow.getMessage().startsWith("Device tier num_parents=2147483647 x parent_bytes="),
        overflow.getMessage());
    assertTrue(overflow.getMessage().contains("overflows a byte size"), overflow.getMessage());

    var idSpace =
        assertThrows(
            IllegalArgumentException.class,
            () -> TierMemory.allocate("Host", HYBRID, Integer.MAX_VALUE / 10));
    assertTrue(idSpace.getMessage().startsWith("Host tier num_parents="), idSpace.getMessage());
    assertTrue(idSpace.getMessage().contains("block id space"), idSpace.getMessage());

    // 2^18 parents of 4 GiB: 1 PiB, beyond any address space.
    var tooBig =
        assertThrows(OutOfMemoryError.class, () -> TierMemory.allocate("Host", huge, 1 << 18));
    assertTrue(tooBig.getMessage().startsWith("Host tier cannot reserve"), tooBig.getMessage());
  }

  @Test
  void shouldRejectIdsBeyondTheTierOrOfAnotherGroup() {
    try (TierMemory tier = TierMemory.allocate("Host", HYBRID, 2)) {
      var beyond = assertThrows(IllegalArgumentException.class, () -> tier.block(0, 41));
      assertTrue(
          beyond.getMessage().contains("Host tier block id=41 of group 0 is beyond the tier"),
          beyond.getMessage());
      assertTrue(beyond.getMessage().contains("2 parents hold ids below 41"), beyond.getMessage());
      var nullBlock = assertThrows(IllegalArgumentException.class, () -> tier.block(1, 0));
      assertTrue(nullBlock.getMessage().startsWith("Host tier block id=0"), nullBlock.getMessage());
      var foreign = assertThrows(IllegalArgumentException.class, () -> tier.block(1, 13));
      assertTrue(foreign.getMessage().contains("is not a block of group 1"), foreign.getMessage());
      assertEquals(1920 + 19 * 96, tier.block(0, 40).address() - tier.segment().address());
    }
  }

  @Test
  void shouldFreeOnceAndStayClosed() {
    TierMemory tier = TierMemory.allocate("Host", HYBRID, 1);
    MemorySegment block = tier.block(2, 1);
    block.fill((byte) 7);
    tier.close();
    assertFalse(tier.segment().scope().isAlive());
    assertThrows(IllegalStateException.class, () -> block.get(ValueLayout.JAVA_BYTE, 0));
    tier.close();
    assertFalse(tier.segment().scope().isAlive());
  }
}
