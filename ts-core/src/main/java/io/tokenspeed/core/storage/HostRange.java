package io.tokenspeed.core.storage;

/**
 * A byte range of the one shared Host allocation: where a GET lands or a PUT reads. Workers address
 * the allocation by offset; they never see blocks, groups or requests.
 */
public record HostRange(long offset, long lengthBytes) {
  public HostRange {
    if (offset < 0) {
      throw new IllegalArgumentException("host range offset=" + offset + " must be >= 0");
    }
    if (lengthBytes <= 0) {
      throw new IllegalArgumentException(
          "host range length_bytes=" + lengthBytes + " must be positive");
    }
    if (offset + lengthBytes < 0) {
      throw new IllegalArgumentException(
          "host range offset=" + offset + " length_bytes=" + lengthBytes + " overflows");
    }
  }

  /** Exclusive end offset. */
  public long end() {
    return offset + lengthBytes;
  }
}
