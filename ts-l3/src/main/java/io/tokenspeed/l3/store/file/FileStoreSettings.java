package io.tokenspeed.l3.store.file;

import java.nio.file.Path;
import java.util.Locale;

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
 * @param directIo how GET reads payloads: {@link DirectIo#AUTO} (with {@code O_DIRECT} where the
 *     root's file system accepts it, except objects wholly in the page cache already), {@link
 *     DirectIo#ON} ({@code O_DIRECT} always; opening a root that refuses it fails) or {@link
 *     DirectIo#OFF} (through the page cache always)
 * @param readThreads the store's pool of reading threads, in {@code [0, MAX_READ_THREADS]}: a GET
 *     call reads its objects on its own thread and on as many idle pool threads as it has chunks
 *     for, so up to {@code readThreads} + (concurrent calls) reads are in flight; 0 reads each call
 *     on its own thread only, one read at a time
 * @param readChunkBytes the largest single read, in {@code [MIN_READ_CHUNK_BYTES,
 *     MAX_READ_CHUNK_BYTES]}: an object's payload is read in chunks of this size (rounded up to the
 *     file system's block size), which different threads may read at once
 */
public record FileStoreSettings(
    Path root,
    int maxKeyBytes,
    long maxValueBytes,
    boolean fsync,
    DirectIo directIo,
    int readThreads,
    int readChunkBytes) {

  /** How GET reads object payloads from the disk. */
  public enum DirectIo {
    /** {@code O_DIRECT} where the file system accepts it, unless the object is already cached. */
    AUTO,
    /** {@code O_DIRECT} for every read; a root whose file system refuses it cannot be opened. */
    ON,
    /** Buffered reads through the page cache, always. */
    OFF;

    /** The JSON spelling: {@code auto}, {@code on} or {@code off}. */
    public String jsonName() {
      return name().toLowerCase(Locale.ROOT);
    }

    /** The value of a JSON spelling, or null when {@code text} is none of them. */
    public static DirectIo ofJsonName(String text) {
      for (DirectIo mode : values()) {
        if (mode.jsonName().equals(text)) {
          return mode;
        }
      }
      return null;
    }
  }

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

  /**
   * Reads through the page cache, in parallel: measured on the two machines the project runs on
   * (docs/benchmarks/2026-12-06-file-store-cold.md), {@code O_DIRECT} read cold objects no faster
   * than buffered parallel reads (1.80 against 1.90 GB/s on the GPU machine's virtio disk), and
   * {@code auto}'s page-cache sampling made warm reads slower (25.5 against 31.0 GB/s). {@code
   * auto} and {@code on} stay for disks where direct reads win (measure with FileStoreColdHarness).
   */
  public static final DirectIo DEFAULT_DIRECT_IO = DirectIo.OFF;

  /**
   * Sixteen pool threads: with the executor's four GET workers that keeps about twenty 1 MiB reads
   * in flight, above the queue depth at which NVMe disks typically reach their sequential bandwidth
   * (8 to 16 requests of this size); a slower disk only queues them. Idle threads end after 30 s.
   */
  public static final int DEFAULT_READ_THREADS = 16;

  /** Upper bound of {@code readThreads}. */
  public static final int MAX_READ_THREADS = 256;

  /** 1 MiB: large enough for one request to run at the disk's streaming rate. */
  public static final int DEFAULT_READ_CHUNK_BYTES = 1 << 20;

  /** Lower bound of {@code readChunkBytes}: one page. */
  public static final int MIN_READ_CHUNK_BYTES = 4096;

  /** Upper bound of {@code readChunkBytes}: 256 MiB. */
  public static final int MAX_READ_CHUNK_BYTES = 256 << 20;

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
    if (directIo == null) {
      throw new IllegalArgumentException("direct_io=null must be one of auto, on, off");
    }
    if (readThreads < 0 || readThreads > MAX_READ_THREADS) {
      throw new IllegalArgumentException(
          "read_threads=" + readThreads + " must be in [0, " + MAX_READ_THREADS + "]");
    }
    if (readChunkBytes < MIN_READ_CHUNK_BYTES || readChunkBytes > MAX_READ_CHUNK_BYTES) {
      throw new IllegalArgumentException(
          "read_chunk_bytes="
              + readChunkBytes
              + " must be in ["
              + MIN_READ_CHUNK_BYTES
              + ", "
              + MAX_READ_CHUNK_BYTES
              + "]");
    }
  }

  /** Settings for {@code root} with the documented defaults. */
  public static FileStoreSettings of(Path root) {
    return new FileStoreSettings(
        root,
        DEFAULT_MAX_KEY_BYTES,
        DEFAULT_MAX_VALUE_BYTES,
        DEFAULT_FSYNC,
        DEFAULT_DIRECT_IO,
        DEFAULT_READ_THREADS,
        DEFAULT_READ_CHUNK_BYTES);
  }

  /** These settings with fsync switched on or off. */
  public FileStoreSettings withFsync(boolean newFsync) {
    return new FileStoreSettings(
        root, maxKeyBytes, maxValueBytes, newFsync, directIo, readThreads, readChunkBytes);
  }

  /** These settings with other key and value limits. */
  public FileStoreSettings withLimits(int newMaxKeyBytes, long newMaxValueBytes) {
    return new FileStoreSettings(
        root, newMaxKeyBytes, newMaxValueBytes, fsync, directIo, readThreads, readChunkBytes);
  }

  /** These settings with another way of reading and another read parallelism. */
  public FileStoreSettings withReads(
      DirectIo newDirectIo, int newReadThreads, int newReadChunkBytes) {
    return new FileStoreSettings(
        root, maxKeyBytes, maxValueBytes, fsync, newDirectIo, newReadThreads, newReadChunkBytes);
  }
}
