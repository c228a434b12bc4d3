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

  private final MemorySegment values;
  private final MemorySegment pointers;

  /** Slots allocated in {@code arena}, which must outlive every launch that uses them. */
  public KernelArgs(Arena arena) {
    this.values = arena.allocate(SLOT * MAX_ARGS, SLOT);
    this.pointers = arena.allocate(ValueLayout.ADDRESS, MAX_ARGS);
    for (int i = 0; i < MAX_ARGS; i++) {
      pointers.setAtIndex(ValueLayout.ADDRESS, i, values.asSlice(SLOT * i, SLOT));
    }
  }

  /**
   * Writes {@code args} into their slots and returns the pointer array to pass to the launch: a
   * {@link Long} (a device pointer or a {@code long long}), an {@link Integer}, a {@link Float} or
   * a {@link Double} each.
   *
   * @throws IllegalArgumentException for more than {@link #MAX_ARGS} arguments or another type
   */
  public MemorySegment pack(String kernel, Object... args) {
    if (args.length > MAX_ARGS) {
      throw new IllegalArgumentException(
          kernel + " takes " + args.length + " arguments, more than " + MAX_ARGS);
    }
    for (int i = 0; i < args.length; i++) {
      long at = SLOT * i;
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
