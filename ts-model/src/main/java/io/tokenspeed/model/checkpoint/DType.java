package io.tokenspeed.model.checkpoint;

/**
 * Element types a safetensors file may hold that this engine reads. Weights are {@link #F32},
 * {@link #BF16} or {@link #F16}; {@link #I32} is accepted for non-weight tensors (reference token
 * ids). The names are the ones safetensors headers use.
 */
public enum DType {
  F32(4),
  BF16(2),
  F16(2),
  I32(4);

  private final int byteSize;

  DType(int byteSize) {
    this.byteSize = byteSize;
  }

  /** Bytes per element. */
  public int byteSize() {
    return byteSize;
  }

  /** True for the floating-point types a weight may have. */
  public boolean isFloat() {
    return this != I32;
  }

  /**
   * The type named {@code name} in a safetensors header.
   *
   * @throws IllegalArgumentException naming the value and the supported ones
   */
  public static DType parse(String name) {
    for (DType d : values()) {
      if (d.name().equals(name)) {
        return d;
      }
    }
    throw new IllegalArgumentException(
        "dtype=" + name + " is not supported; allowed: F32, BF16, F16, I32");
  }
}
