package io.tokenspeed.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The argument block of a kernel launch, allocated once and rewritten for every launch: {@code
 * cuLaunchKernel} takes an array of pointers, one per argument, each to that argument's value, and
 * copies the values during the call. A launch used to allocate that array and one native value per
 * argument in a fresh arena; a decode step of an 8B model launches about 300 kernels, and the host
 * must stay ahead of a GPU that runs most of them in a few microseconds.
 *
 * <p>Here every argument has a fixed 8-byte slot (enough for a pointer, a long, an int, a float or
 * a double, and aligned for each), and the pointer array, which never changes, points at the slots.
 * {@link #pack} writes the values into their slots and returns the pointer array. Not thread-safe:
 * its device packs and launches under one lock.
 */
public final class KernelArgs {

  /** The most arguments a kernel of the project takes, with room to spare. */
  public static final int MAX_ARGS = 48;

  private static final long SLOT = 8;

  /** The most {@code byte[]} arguments one launch takes. */
  public static final int MAX_BLOBS = 4;

  /** The largest {@code byte[]} argument, in bytes: a CUtensorMap's 128. */
  public static final int BLOB_BYTES = 128;

  private final MemorySegment values;
  private final MemorySegment blobs;
  private final MemorySegment pointers;

  /** Bit i: pointer i points at a blob (a previous launch's byte[]) rather than at its slot. */
  private long redirected;

  /** Slots allocated in {@code arena}, which must outlive every launch that uses them. */
  public KernelArgs(Arena arena) {
    this.values = arena.allocate(SLOT * MAX_ARGS, SLOT);
    this.blobs = arena.allocate((long) BLOB_BYTES * MAX_BLOBS, 64);
    this.pointers = arena.allocate(ValueLayout.ADDRESS, MAX_ARGS);
    for (int i = 0; i < MAX_ARGS; i++) {
      pointers.setAtIndex(ValueLayout.ADDRESS, i, slot(i));
    }
  }

  /**
   * Writes {@code args} into their slots and returns the pointer array to pass to the launch: a
   * {@link Long} (a device pointer or a {@code long long}), an {@link Integer}, a {@link Float}, a
   * {@link Double} or a {@code byte[]} (a struct passed by value, see the class comment) each.
   *
   * @throws IllegalArgumentException for more than {@link #MAX_ARGS} arguments or another type
   */
  public MemorySegment pack(String kernel, Object... args) {
    if (args.length > MAX_ARGS) {
      throw new IllegalArgumentException(
          kernel + " takes " + args.length + " arguments, more than " + MAX_ARGS);
    }
    int blob = 0;
    for (int i = 0; i < args.length; i++) {
      long at = SLOT * i;
      if (args[i] instanceof byte[] bytes) {
        if (blob == MAX_BLOBS || bytes.length > BLOB_BYTES) {
          throw new IllegalArgumentException(
              kernel
                  + " argument "
                  + i
                  + ": at most "
                  + MAX_BLOBS
                  + " byte arrays of at most "
                  + BLOB_BYTES
                  + " bytes a launch");
        }
        MemorySegment to = blobs.asSlice((long) BLOB_BYTES * blob++, BLOB_BYTES);
        MemorySegment.copy(bytes, 0, to, ValueLayout.JAVA_BYTE, 0, bytes.length);
        pointers.setAtIndex(ValueLayout.ADDRESS, i, to);
        redirected |= 1L << i;
        continue;
      }
      if ((redirected & (1L << i)) != 0) {
        pointers.setAtIndex(ValueLayout.ADDRESS, i, slot(i));
        redirected &= ~(1L << i);
      }
      switch (args[i]) {
        case Long l -> values.set(ValueLayout.JAVA_LONG, at, l);
        case Integer n -> values.set(ValueLayout.JAVA_INT, at, n);
        case Float x -> values.set(ValueLayout.JAVA_FLOAT, at, x);
        case Double x -> values.set(ValueLayout.JAVA_DOUBLE, at, x);
        case null -> throw new IllegalArgumentException(kernel + " argument " + i + " is null");
        default ->
            throw new IllegalArgumentException(
                kernel + " argument " + i + " has unsupported type " + args[i].getClass());
      }
    }
    return pointers;
  }

  /** The value slot of argument {@code i}, for tests: what the launch's i-th pointer points at. */
  MemorySegment slot(int i) {
    return values.asSlice(SLOT * i, SLOT);
  }
}
