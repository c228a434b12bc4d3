package io.tokenspeed.l3.store.file;

import java.nio.file.Path;

/**
 * Settings of a {@link FileStore}.
 *
 * @param root the shared directory; made absolute and normalized. Every process of the machine that
 *     should share objects names the same root.
 * @param maxKeyBytes longest key accepted, in UTF-8 bytes, in {@code [1, MAX_KEY_BYTES_LIMIT]} (the
 *     object header stores the key length in two bytes)
 * @param maxValueBytes largest object accepted, in {@code [1, MAX_VALUE_BYTES_LIMIT]}
 * @param fsync whether a PUT forces the object's bytes to the device before publishing it. With it
 *     off, a machine crash can leave a published object whose bytes never reached the disk; its
 *     checksum then fails and GET reports it {@code Invalid}, never {@code Ok}.
 */
public record FileStoreSettings(Path root, int maxKeyBytes, long maxValueBytes, boolean fsync) {

  /** Default longest key: comfortably above a tsl3 object key (about 160 bytes). */
  public static final int DEFAULT_MAX_KEY_BYTES = 1024;

  /** Upper bound of {@code maxKeyBytes}: the header's two-byte key length. */
  public static final int MAX_KEY_BYTES_LIMIT = 65_535;

  /** Default largest object: 256 MiB, above any single KV page or state checkpoint we expect. */
  public static final long DEFAULT_MAX_VALUE_BYTES = 256L << 20;

  /** Upper bound of {@code maxValueBytes}: 1 TiB, a sanity bound rather than a format limit. */
  public static final long MAX_VALUE_BYTES_LIMIT = 1L << 40;

  /** Forcing objects to the device before publishing them is on by default. */
  public static final boolean DEFAULT_FSYNC = true;

  public FileStoreSettings {
    if (root == null) {
      throw new IllegalArgumentException("root=null must be a directory path");
    }
    root = root.toAbsolutePath().normalize();
    if (maxKeyBytes < 1 || maxKeyBytes > MAX_KEY_BYTES_LIMIT) {
      throw new IllegalArgumentException(
          "max_key_bytes=" + maxKeyBytes + " must be in [1, " + MAX_KEY_BYTES_LIMIT + "]");
    }
    if (maxValueBytes < 1 || maxValueBytes > MAX_VALUE_BYTES_LIMIT) {
      throw new IllegalArgumentException(
          "max_value_bytes=" + maxValueBytes + " must be in [1, " + MAX_VALUE_BYTES_LIMIT + "]");
    }
  }

  /** Settings for {@code root} with the documented defaults. */
  public static FileStoreSettings of(Path root) {
    return new FileStoreSettings(
        root, DEFAULT_MAX_KEY_BYTES, DEFAULT_MAX_VALUE_BYTES, DEFAULT_FSYNC);
  }

  /** These settings with fsync switched on or off. */
  public FileStoreSettings withFsync(boolean newFsync) {
    return new FileStoreSettings(root, maxKeyBytes, maxValueBytes, newFsync);
  }

  /** These settings with other key and value limits. */
  public FileStoreSettings withLimits(int newMaxKeyBytes, long newMaxValueBytes) {
    return new FileStoreSettings(root, newMaxKeyBytes, newMaxValueBytes, fsync);
  }
}
