package io.tokenspeed.l3.store.file;

import com.sun.nio.file.ExtendedOpenOption;
import io.tokenspeed.l3.store.file.FileStoreSettings.DirectIo;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.ThreadLocalRandom;

/**
 * How a {@link FileStore} reads payloads from its root, decided once when the store opens.
 *
 * <p>{@code O_DIRECT} needs the file system's cooperation: tmpfs before Linux 6.6, some overlay,
 * FUSE and network file systems refuse it, others accept the open and fail the first read. So the
 * store does not guess from the file system's name; it tries: it writes a probe file of two blocks
 * in the root, opens it with {@link ExtendedOpenOption#DIRECT}, reads the second block into an
 * aligned buffer and compares the bytes, then removes the file. Any failure means buffered reads,
 * with the failure's text as the reason.
 *
 * @param direct whether payloads are read with {@code O_DIRECT}
 * @param blockBytes the file system's block size ({@code FileStore.getBlockSize()}): direct reads
 *     are aligned to it in the file and in memory, and are multiples of it in length; 4096 when it
 *     could not be learnt (buffered reads need no alignment)
 * @param reason why reads are buffered, or what was found when they are direct; never null
 */
public record ReadMode(boolean direct, int blockBytes, String reason) {

  /** Block sizes a direct read is attempted with: from a 512-byte sector to 64 KiB. */
  static final int MIN_BLOCK_BYTES = 512;

  static final int MAX_BLOCK_BYTES = 1 << 16;

  private static final int FALLBACK_BLOCK_BYTES = 4096;

  public ReadMode {
    if (blockBytes < MIN_BLOCK_BYTES
        || blockBytes > MAX_BLOCK_BYTES
        || Integer.bitCount(blockBytes) != 1) {
      throw new IllegalArgumentException(
          "blockBytes=" + blockBytes + " must be a power of two in [512, 65536]");
    }
    if (reason == null) {
      throw new IllegalArgumentException("reason=null must say why");
    }
  }

  /** The mode of a store whose settings ask for buffered reads. */
  static ReadMode buffered(String reason) {
    return new ReadMode(false, FALLBACK_BLOCK_BYTES, reason);
  }

  /**
   * Tries {@code O_DIRECT} in {@code root} for a store whose setting ({@code auto} or {@code on})
   * asks for it; never throws (a failure is a buffered mode whose reason says what failed).
   */
  static ReadMode probe(Path root, DirectIo setting, long pid) {
    int blockBytes;
    try {
      long size = Files.getFileStore(root).getBlockSize();
      if (size < MIN_BLOCK_BYTES || size > MAX_BLOCK_BYTES || Long.bitCount(size) != 1) {
        return buffered("the file system's block size " + size + " is not usable for O_DIRECT");
      }
      blockBytes = (int) size;
    } catch (IOException | UnsupportedOperationException e) {
      return buffered("the file system's block size is unknown: " + describe(e));
    }
    Path probe =
        root.resolve(
            FileStore.TEMP_PREFIX
                + "direct-probe-"
                + pid
                + '-'
                + Long.toHexString(ThreadLocalRandom.current().nextLong()));
    try (Arena arena = Arena.ofConfined()) {
      byte[] pattern = new byte[2 * blockBytes];
      for (int i = 0; i < pattern.length; i++) {
        pattern[i] = (byte) (i * 31 + 7);
      }
      try (FileChannel out =
          FileChannel.open(probe, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
        ObjectFileDescriptor.writeFully(out, ByteBuffer.wrap(pattern));
      }
      MemorySegment block = arena.allocate(blockBytes, blockBytes);
      long read;
      try (FileChannel in =
          FileChannel.open(probe, StandardOpenOption.READ, ExtendedOpenOption.DIRECT)) {
        read = ObjectFileDescriptor.readDirect(in, block, blockBytes, blockBytes);
      }
      if (read != blockBytes) {
        return buffered("an O_DIRECT read of one block returned " + read + " bytes");
      }
      if (block.mismatch(MemorySegment.ofArray(pattern).asSlice(blockBytes, blockBytes)) >= 0) {
        return buffered("an O_DIRECT read returned other bytes than were written");
      }
      return new ReadMode(
          true,
          blockBytes,
          "O_DIRECT accepted (block size "
              + blockBytes
              + ", direct_io="
              + setting.jsonName()
              + ")");
    } catch (IOException | UnsupportedOperationException e) {
      return buffered("the O_DIRECT probe failed: " + describe(e));
    } finally {
      try {
        Files.deleteIfExists(probe);
      } catch (IOException e) {
        // a leftover probe is a temporary file: never read, removed with nothing else
      }
    }
  }

  private static String describe(Exception e) {
    String text = e instanceof FileSystemException fs ? fs.getReason() : null;
    if (text == null) {
      text = e.getMessage();
    }
    return e.getClass().getSimpleName() + (text == null ? "" : ": " + text);
  }
}
