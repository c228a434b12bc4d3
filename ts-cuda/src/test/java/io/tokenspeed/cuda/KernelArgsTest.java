package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The launch argument block as the driver reads it: pointer i of the returned array points at a
 * slot holding argument i's value in its own type, whatever the launches packed before.
 */
class KernelArgsTest {

  @ParameterizedTest
  @ValueSource(longs = {1, 2, 3, 4, 5})
  void shouldPointEachArgumentAtItsValueAcrossSuccessiveLaunches(long seed) {
    SplittableRandom random = new SplittableRandom(seed);
    try (Arena arena = Arena.ofConfined()) {
      KernelArgs args = new KernelArgs(arena);
      MemorySegment first = null;
      for (int launch = 0; launch < 200; launch++) {
        Object[] values = new Object[random.nextInt(KernelArgs.MAX_ARGS + 1)];
        int blobs = 0;
        for (int i = 0; i < values.length; i++) {
          int kind = random.nextInt(blobs < KernelArgs.MAX_BLOBS ? 5 : 4);
          values[i] =
              switch (kind) {
                case 0 -> random.nextLong();
                case 1 -> random.nextInt();
                case 2 -> (float) random.nextDouble(-1e6, 1e6);
                case 3 -> random.nextDouble();
                default -> {
                  byte[] b = new byte[1 + random.nextInt(KernelArgs.BLOB_BYTES)];
                  for (int k = 0; k < b.length; k++) {
                    b[k] = (byte) random.nextInt(256);
                  }
                  yield b;
                }
              };
          blobs += kind == 4 ? 1 : 0;
        }
        MemorySegment pointers = args.pack("k", values);
        if (first == null) {
          first = pointers;
        }
        assertSame(first, pointers, "the pointer array is allocated once");
        for (int i = 0; i < values.length; i++) {
          if (values[i] instanceof byte[] bytes) {
            MemorySegment blob =
                pointers.getAtIndex(ValueLayout.ADDRESS, i).reinterpret(bytes.length);
            assertEquals(0, blob.address() % 64, "a struct argument is 64-byte aligned");
            assertArrayEquals(
                bytes, blob.toArray(ValueLayout.JAVA_BYTE), "launch " + launch + " argument " + i);
            continue;
          }
          MemorySegment at = pointers.getAtIndex(ValueLayout.ADDRESS, i).reinterpret(8);
          assertEquals(args.slot(i).address(), at.address());
          Object read =
              switch (values[i]) {
                case Long l -> at.get(ValueLayout.JAVA_LONG, 0);
                case Integer n -> at.get(ValueLayout.JAVA_INT, 0);
                case Float x -> at.get(ValueLayout.JAVA_FLOAT, 0);
                case Double x -> at.get(ValueLayout.JAVA_DOUBLE, 0);
                default -> throw new AssertionError(values[i]);
              };
          assertEquals(values[i], read, "launch " + launch + " argument " + i);
          assertEquals(0, at.address() % 8, "slots are aligned for every type");
        }
      }
    }
  }

  @ParameterizedTest
  @ValueSource(ints = {0, 7})
  void shouldRefuseTooManyArgumentsOrAnotherTypeNamingTheKernel(int at) {
    try (Arena arena = Arena.ofConfined()) {
      KernelArgs args = new KernelArgs(arena);
      var tooMany =
          assertThrows(
              IllegalArgumentException.class,
              () -> args.pack("wide", new Object[KernelArgs.MAX_ARGS + 1]));
      assertTrue(tooMany.getMessage().startsWith("wide takes 49 arguments"), tooMany.getMessage());
      Object[] values = new Object[8];
      java.util.Arrays.fill(values, 1);
      values[at] = "text";
      var type = assertThrows(IllegalArgumentException.class, () -> args.pack("k2", values));
      assertEquals(
          "k2 argument " + at + " has unsupported type class java.lang.String", type.getMessage());
      values[at] = null;
      var nul = assertThrows(IllegalArgumentException.class, () -> args.pack("k3", values));
      assertEquals("k3 argument " + at + " is null", nul.getMessage());
      values[at] = new byte[KernelArgs.BLOB_BYTES + 1];
      var big = assertThrows(IllegalArgumentException.class, () -> args.pack("k4", values));
      assertEquals(
          "k4 argument " + at + ": at most 4 byte arrays of at most 128 bytes a launch",
          big.getMessage());
    }
  }
}
