package io.tokenspeed.l3.spi;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.l3.store.memory.MemoryStoreSettings;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Every call of a {@link ForwardingStore} reaches the store it wraps, unchanged. */
class ForwardingStoreTest {

  @Test
  void shouldForwardEveryCall() throws Exception {
    MemoryStore memory = new MemoryStore(new MemoryStoreSettings(200, 4096, 1 << 20));
    ForwardingStore f = new ForwardingStore(memory);
    assertSame(memory, f.inner());
    assertEquals(memory.name(), f.name());
    assertEquals(memory.failuresRetire(), f.failuresRetire());
    assertEquals(200, f.maxKeyBytes());
    assertEquals(4096, f.maxValueBytes());
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment src = arena.allocate(64);
      for (int i = 0; i < 64; i++) {
        src.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 7));
      }
      f.registerHostBuffer(src);
      assertInstanceOf(RowResult.Ok.class, f.put(List.of("ns_a"), List.of(src)).rows().get(0));
      assertInstanceOf(RowResult.Ok.class, memory.exists(List.of("ns_a")).rows().get(0));
      assertInstanceOf(RowResult.Ok.class, f.exists(List.of("ns_a")).rows().get(0));
      MemorySegment dst = arena.allocate(64);
      assertInstanceOf(RowResult.Ok.class, f.get(List.of("ns_a"), List.of(dst)).rows().get(0));
      assertArrayEquals(src.toArray(ValueLayout.JAVA_BYTE), dst.toArray(ValueLayout.JAVA_BYTE));
      assertEquals(1, f.deleteNamespace("ns"));
      assertInstanceOf(RowResult.Missing.class, memory.exists(List.of("ns_a")).rows().get(0));
    }
    f.close();
    assertThrows(IllegalArgumentException.class, () -> new ForwardingStore(null));
  }
}
