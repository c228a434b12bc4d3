package io.tokenspeed.engine.memory;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.stream.LongStream;

/** Layouts and byte helpers for the memory tests. */
final class MemoryFixtures {
  private MemoryFixtures() {}

  static LongStream seeds(int n) {
    return LongStream.range(0, n).map(i -> 0x5EED_0000L + i * 7919);
  }

  /**
   * P=64: full history (bg 16, 96 bytes), sliding window 80 (bg 32, 160 bytes) and state
   * checkpoints (bg 64, 384 bytes). parentBytes = 1920; 20, 12 and 5 children per parent.
   */
  static CacheLayout hybrid() {
    return new CacheLayout(
        64,
        "bf16",
        List.of(
            new CacheGroupSpec(
                0,
                new GroupKind.FullHistory(),
                16,
                List.of(new CacheField("k", 48), new CacheField("v", 48)),
                null),
            new CacheGroupSpec(
                1,
                new GroupKind.SlidingWindow(80),
                32,
                List.of(new CacheField("k", 80), new CacheField("v", 80)),
                null),
            new CacheGroupSpec(
                2,
                new GroupKind.StateCheckpoints(),
                64,
                List.of(new CacheField("ssm", 384)),
                null)));
  }

  /** A single group whose block is {@code bytes} long. */
  static CacheLayout single(long bytes) {
    return new CacheLayout(
        16,
        "bf16",
        List.of(
            new CacheGroupSpec(
                0, new GroupKind.FullHistory(), 16, List.of(new CacheField("kv", bytes)), null)));
  }

  /**
   * One to four groups of random kinds and granularities, each of one or two fields whose block
   * sizes are small multiples of a unit, so parents stay small but the LCM is rarely a power of 2.
   */
  static CacheLayout randomLayout(Random rnd) {
    int p = 1 << (1 + rnd.nextInt(6));
    int numGroups = 1 + rnd.nextInt(4);
    long unit = new long[] {1, 4, 8}[rnd.nextInt(3)];
    List<CacheGroupSpec> groups = new ArrayList<>();
    for (int g = 0; g < numGroups; g++) {
      int bg = p >> rnd.nextInt(Integer.numberOfTrailingZeros(p) + 1);
      GroupKind kind =
          switch (rnd.nextInt(3)) {
            case 0 -> new GroupKind.FullHistory();
            case 1 -> new GroupKind.SlidingWindow(1 + rnd.nextInt(3 * p));
            default -> new GroupKind.StateCheckpoints();
          };
      List<CacheField> fields = new ArrayList<>();
      int numFields = 1 + rnd.nextInt(2);
      long k = 1 + rnd.nextInt(12);
      for (int f = 0; f < numFields; f++) {
        fields.add(new CacheField("f" + f, k * unit));
      }
      groups.add(new CacheGroupSpec(g, kind, bg, fields, null));
    }
    return new CacheLayout(p, "bf16", groups);
  }

  /** A random block id of {@code groupId} in a tier of {@code numParents} parents. */
  static int randomBlock(Random rnd, BlockGeometry geo, int groupId, int numParents) {
    int parent = rnd.nextInt(numParents);
    return 1 + parent * geo.maxChildren() + rnd.nextInt(geo.childrenPerParent(groupId));
  }

  /** Overwrites {@code segment} with random bytes and returns a heap copy of them. */
  static byte[] fill(MemorySegment segment, Random rnd) {
    byte[] bytes = new byte[Math.toIntExact(segment.byteSize())];
    rnd.nextBytes(bytes);
    MemorySegment.copy(MemorySegment.ofArray(bytes), 0, segment, 0, bytes.length);
    return bytes;
  }

  /** A heap copy of {@code segment}. */
  static byte[] bytes(MemorySegment segment) {
    return segment.toArray(ValueLayout.JAVA_BYTE);
  }
}
