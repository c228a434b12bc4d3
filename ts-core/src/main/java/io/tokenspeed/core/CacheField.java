package io.tokenspeed.core;

/**
 * One named tensor slice of a cache block (for example {@code k}, {@code v} or {@code ssm}) and its
 * size in bytes per block on one rank. Fields are laid out in declaration order, so a field's byte
 * offset inside a block is the sum of the sizes before it.
 */
public record CacheField(String name, long bytesPerBlock) {
  public CacheField {
    if (name == null || name.isBlank()) {
      throw new IllegalArgumentException("field name=" + name + " must be non-empty");
    }
    if (bytesPerBlock < 1) {
      throw new IllegalArgumentException(
          "field " + name + " bytes_per_block=" + bytesPerBlock + " must be at least 1");
    }
  }
}
