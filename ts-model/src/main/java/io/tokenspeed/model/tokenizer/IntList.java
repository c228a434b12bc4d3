package io.tokenspeed.model.tokenizer;

import java.util.Arrays;

/** A growable list of ints, for building id arrays without boxing. */
final class IntList {

  private int[] values;
  private int size;

  IntList(int initialCapacity) {
    values = new int[Math.max(4, initialCapacity)];
  }

  void add(int value) {
    if (size == values.length) {
      values = Arrays.copyOf(values, size * 2);
    }
    values[size++] = value;
  }

  void addAll(int[] more) {
    if (size + more.length > values.length) {
      values = Arrays.copyOf(values, Math.max(size * 2, size + more.length));
    }
    System.arraycopy(more, 0, values, size, more.length);
    size += more.length;
  }

  int[] toArray() {
    return Arrays.copyOf(values, size);
  }
}
