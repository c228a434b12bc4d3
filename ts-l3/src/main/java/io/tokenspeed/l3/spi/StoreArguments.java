package io.tokenspeed.l3.spi;

import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * The argument checks that every {@link Store} makes before it touches anything: keys present,
 * non-empty and within the store's {@code max_key_bytes}, one non-null segment per key, and segment
 * sizes within its {@code max_value_bytes}. Each throws {@link IllegalArgumentException} naming the
 * offending index, the size and the limit, so that all stores word a refusal alike.
 */
public final class StoreArguments {

  private StoreArguments() {}

  /**
   * Checks that {@code keys} is a list of non-empty keys of at most {@code maxKeyBytes} UTF-8 bytes
   * each.
   */
  public static void checkKeys(List<String> keys, int maxKeyBytes) {
    if (keys == null) {
      throw new IllegalArgumentException("keys=null must be a list of keys");
    }
    for (int i = 0; i < keys.size(); i++) {
      String key = keys.get(i);
      checkNonEmpty(key, i);
      // A UTF-16 char never takes more than 3 UTF-8 bytes: short keys need no encoding.
      if ((long) key.length() * 3 > maxKeyBytes) {
        checkKeyLength(key.getBytes(StandardCharsets.UTF_8).length, i, maxKeyBytes);
      }
    }
  }

  /**
   * Checks that key #{@code index} is non-empty and at most {@code maxKeyBytes} UTF-8 bytes long;
   * returns its UTF-8 bytes.
   */
  public static byte[] keyBytes(String key, int index, int maxKeyBytes) {
    checkNonEmpty(key, index);
    byte[] bytes = key.getBytes(StandardCharsets.UTF_8);
    checkKeyLength(bytes.length, index, maxKeyBytes);
    return bytes;
  }

  /**
   * Checks that {@code segments} (the {@code what} of the call: "destinations", "sources") holds
   * one non-null segment per key.
   */
  public static void checkSegments(List<String> keys, List<MemorySegment> segments, String what) {
    if (segments == null || segments.size() != keys.size()) {
      throw new IllegalArgumentException(
          "keys="
              + keys.size()
              + " and "
              + what
              + "="
              + (segments == null ? "null" : segments.size())
              + " must have the same count");
    }
    for (int i = 0; i < segments.size(); i++) {
      if (segments.get(i) == null) {
        throw new IllegalArgumentException(what + " #" + i + " is null");
      }
    }
  }

  /**
   * Checks that no segment is larger than {@code maxValueBytes}; {@code what} names one segment in
   * the message ("value", "destination").
   */
  public static void checkValueSizes(
      List<MemorySegment> segments, String what, long maxValueBytes) {
    for (int i = 0; i < segments.size(); i++) {
      checkValueSize(segments.get(i).byteSize(), i, what, maxValueBytes);
    }
  }

  /** Checks that the {@code what} of key #{@code index} is at most {@code maxValueBytes} long. */
  public static void checkValueSize(long size, int index, String what, long maxValueBytes) {
    if (size > maxValueBytes) {
      throw new IllegalArgumentException(
          what
              + " size="
              + size
              + " bytes of key #"
              + index
              + " exceeds max_value_bytes="
              + maxValueBytes);
    }
  }

  private static void checkNonEmpty(String key, int index) {
    if (key == null || key.isEmpty()) {
      throw new IllegalArgumentException("key #" + index + "=" + key + " must be non-empty");
    }
  }

  private static void checkKeyLength(int bytes, int index, int maxKeyBytes) {
    if (bytes > maxKeyBytes) {
      throw new IllegalArgumentException(
          "key length="
              + bytes
              + " bytes of key #"
              + index
              + " exceeds max_key_bytes="
              + maxKeyBytes);
    }
  }
}
