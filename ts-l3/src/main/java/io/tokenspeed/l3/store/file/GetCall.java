package io.tokenspeed.l3.store.file;

import com.sun.nio.file.ExtendedOpenOption;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStore.Placement;
import io.tokenspeed.l3.store.file.FileStoreSettings.DirectIo;
import io.tokenspeed.l3.store.file.ObjectFileDescriptor.Header;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One {@link FileStore#get} call: its objects read by the calling thread and by idle threads of the
 * store's read pool at once, chunk by chunk, each chunk checksummed by the thread that read it.
 *
 * <p><b>Work.</b> There are two kinds of work item: <i>open object i</i> (open the file, choose
 * direct or buffered, read and check the header and the lengths, then read the payload's first
 * chunk) and <i>read chunk j of an open object</i>. Opening an object whose payload has more than
 * one chunk queues its other chunks, which any runner takes before it opens another object, so a
 * large object is read by several threads and open files stay few.
 *
 * <pre>
 *   payload of one object, N bytes, chunk size C (direct: a multiple of the block size;
 *   buffered: C = N, one reader per file so that the kernel's read-ahead sees one stream):
 *   [ chunk 0 ][ chunk 1 ][ chunk 2 ] ... [ chunk k-1 (N - (k-1)C bytes) ]
 *     opener     any runner, in queue order
 *   each chunk: read into destination[jC, ...), then CRC32C of those bytes;
 *   the last chunk to finish combines the k checksums (Crc32cCombine) and decides the row
 * </pre>
 *
 * <p><b>Runners.</b> The caller runs work items until none is left and no runner is still busy; up
 * to {@code helpers} pool threads run items while there are any and leave when they find none. A
 * helper that starts after the call has returned finds nothing and touches nothing.
 *
 * <p><b>What it guarantees.</b> The call returns or throws only when every item it claimed has
 * finished: after that no thread reads into a destination, so the store's failures retire. An
 * exception stops the opening of further objects, turns the queued chunks into no-ops (they still
 * close their files), and is thrown by the caller once every runner is out. Rows are decided as
 * {@link FileStore} documents: a header or length failure before any payload byte is read, a short
 * read or checksum failure after.
 */
final class GetCall {

  private final FileStore store;
  private final List<Placement> placements;
  private final List<MemorySegment> destinations;
  private final RowResult[] rows;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition changed = lock.newCondition();

  // guarded by lock
  private final ArrayDeque<Chunk> chunks = new ArrayDeque<>();
  private int nextObject;
  private int busy;
  private Throwable failure;

  GetCall(FileStore store, List<Placement> placements, List<MemorySegment> destinations) {
    this.store = store;
    this.placements = placements;
    this.destinations = destinations;
    this.rows = new RowResult[placements.size()];
  }

  /** Reads every object, with up to {@code helpers} pool threads besides the caller. */
  StoreResult run(Executor pool, int helpers) throws IOException {
    for (int i = 0; i < helpers; i++) {
      try {
        pool.execute(this::help);
      } catch (RejectedExecutionException e) {
        break; // the pool is saturated or closing: the caller reads what is left
      }
    }
    work(true);
    Throwable thrown;
    lock.lock();
    try {
      thrown = failure;
    } finally {
      lock.unlock();
    }
    switch (thrown) {
      case null -> {}
      case IOException io -> throw io;
      case RuntimeException r -> throw r;
      case Error e -> throw e;
      default -> throw new IOException(thrown);
    }
    return StoreResult.of(Arrays.asList(rows));
  }

  /** How a pool thread helps: it runs items while there are any. */
  private void help() {
    work(false);
  }

  /** A chunk to read, or to skip after a failure (it still counts, and closes its file). */
  private record Chunk(ObjectRead object, int index, boolean skip) {}

  /**
   * Runs work items. A helper leaves when it finds none; the caller waits for busy runners, which
   * may still queue chunks, and leaves only when nothing is queued and nobody is busy.
   */
  private void work(boolean caller) {
    while (true) {
      Chunk chunk;
      int object = -1;
      lock.lock();
      try {
        while (true) {
          chunk = chunks.pollFirst();
          if (chunk != null) {
            if (failure != null && !chunk.skip()) {
              chunk = new Chunk(chunk.object(), chunk.index(), true);
            }
            break;
          }
          if (failure == null && nextObject < rows.length) {
            object = nextObject++;
            break;
          }
          if (!caller || busy == 0) {
            return;
          }
          changed.awaitUninterruptibly();
        }
        busy++;
      } finally {
        lock.unlock();
      }
      Throwable thrown = null;
      try {
        if (chunk != null) {
          runChunk(chunk);
        } else {
          open(object);
        }
      } catch (Throwable t) {
        thrown = t;
      }
      lock.lock();
      try {
        busy--;
        if (thrown != null) {
          if (failure == null) {
            failure = thrown;
          } else if (failure != thrown) {
            failure.addSuppressed(thrown);
          }
        }
        changed.signalAll();
      } finally {
        lock.unlock();
      }
    }
  }

  /** Opens object {@code i}, checks it, and reads its first chunk after queueing the others. */
  private void open(int i) throws IOException {
    Placement p = placements.get(i);
    MemorySegment destination = destinations.get(i);
    FileChannel buffered;
    try {
      buffered = FileChannel.open(p.target(), StandardOpenOption.READ);
    } catch (NoSuchFileException e) {
      rows[i] = RowResult.MISSING;
      return;
    }
    FileChannel channel = buffered;
    ObjectRead read = null;
    try {
      long size = buffered.size();
      ReadMode mode = store.readMode();
      boolean direct =
          mode.direct()
              && (store.settings().directIo() == DirectIo.ON || !resident(buffered, size));
      if (direct) {
        try {
          channel =
              FileChannel.open(p.target(), StandardOpenOption.READ, ExtendedOpenOption.DIRECT);
        } catch (NoSuchFileException e) {
          direct = false; // removed since: the open file still holds its bytes
        } catch (IOException e) {
          if (store.settings().directIo() == DirectIo.ON) {
            throw e;
          }
          store.countDirectOpenRefused();
          direct = false;
        }
        if (channel != buffered) {
          buffered.close();
        }
      }
      store.countObject(direct, mode.direct());

      int keyBytes = p.key().length;
      int wanted = ObjectFileDescriptor.headerBytes(keyBytes);
      byte[] prefix = new byte[wanted];
      int got;
      if (direct) {
        got = (int) readHeaderDirect(channel, size, prefix, mode.blockBytes());
      } else {
        got = ObjectFileDescriptor.readFully(channel, ByteBuffer.wrap(prefix), 0);
      }
      long held =
          Math.max(0, size - ObjectFileDescriptor.nominalPayloadOffset(prefix, got, keyBytes));
      Header header = ObjectFileDescriptor.parse(prefix, got, p.key());
      if (header == null) {
        rows[i] = new RowResult.Invalid(held);
        return;
      }
      held = size - header.payloadOffset();
      if (header.payloadBytes() != held) {
        rows[i] = new RowResult.Invalid(Math.max(0, held));
        return;
      }
      if (header.payloadBytes() != destination.byteSize()) {
        rows[i] = new RowResult.Invalid(header.payloadBytes());
        return;
      }
      ObjectRead opened =
          new ObjectRead(i, channel, direct, header, destination, store.chunkBytes(direct));
      if (opened.chunkCount == 0) {
        rows[i] = opened.row(); // an empty payload: its checksum is that of no bytes
        return;
      }
      read = opened; // from here the object's last chunk closes the file
      if (read.chunkCount > 1) {
        lock.lock();
        try {
          for (int j = 1; j < read.chunkCount; j++) {
            chunks.addLast(new Chunk(read, j, false));
          }
          changed.signalAll();
        } finally {
          lock.unlock();
        }
      }
    } finally {
      if (read == null) {
        channel.close(); // a row is decided, or it threw: the file is no longer needed
      }
    }
    runChunk(new Chunk(read, 0, false));
  }

  /** Reads (or skips) one chunk; the last chunk of its object to finish decides the row. */
  private void runChunk(Chunk chunk) throws IOException {
    ObjectRead o = chunk.object();
    boolean done = false;
    try {
      if (!chunk.skip()) {
        o.read(chunk.index());
      }
      done = true;
    } finally {
      if (o.finish(done)) {
        try {
          o.channel.close();
        } finally {
          rows[o.row] = o.row();
        }
      }
    }
  }

  /** Pages of a file whose residency decides whether it is cached (evenly spaced, both ends). */
  static final int RESIDENCY_SAMPLES = 8;

  private static final long PAGE_BYTES = 4096;

  /**
   * Whether the file is in the page cache already, by {@value #RESIDENCY_SAMPLES} evenly spaced
   * pages of it (mincore through a mapping): then a buffered read copies it from memory, where a
   * direct one would read the disk again. Asking for every page would cost the kernel a page-cache
   * lookup per page (about 100 µs for 4 MiB, a quarter of the copy); objects are written whole and
   * evicted mostly whole, so a sample tells. A partly cached object taken for cached is read
   * through the page cache, as every object was before O_DIRECT: correct, only slower.
   */
  private static boolean resident(FileChannel channel, long size) {
    if (size == 0) {
      return true;
    }
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment map = channel.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
      long pages = (size + PAGE_BYTES - 1) / PAGE_BYTES;
      if (pages <= RESIDENCY_SAMPLES) {
        return map.isLoaded();
      }
      for (int s = 0; s < RESIDENCY_SAMPLES; s++) {
        long at = (pages - 1) * s / (RESIDENCY_SAMPLES - 1) * PAGE_BYTES;
        if (!map.asSlice(at, Math.min(PAGE_BYTES, size - at)).isLoaded()) {
          return false;
        }
      }
      return true;
    } catch (IOException | UnsupportedOperationException e) {
      return false; // no answer: read it from the disk
    }
  }

  /** Reads the first bytes of the file with O_DIRECT through the bounce buffer. */
  private long readHeaderDirect(FileChannel channel, long size, byte[] prefix, int blockBytes)
      throws IOException {
    long length =
        ObjectFileDescriptor.alignUp(Math.min(size, (long) prefix.length), (long) blockBytes);
    if (length == 0) {
      return 0;
    }
    MemorySegment bounce = store.bounce();
    long n = ObjectFileDescriptor.readDirect(channel, bounce.asSlice(0, length), 0, blockBytes);
    int usable = (int) Math.min(n, prefix.length);
    MemorySegment.copy(bounce, 0, MemorySegment.ofArray(prefix), 0, usable);
    return usable;
  }

  /** One object being read: its open file, its chunks' checksums and byte counts. */
  private final class ObjectRead {
    final int row;
    final FileChannel channel;
    final boolean direct;
    final Header header;
    final MemorySegment destination;
    final long chunkBytes;
    final int chunkCount;
    final int[] crcs;
    final long[] bytesRead;
    final AtomicInteger left;
    volatile boolean failed;

    ObjectRead(
        int row,
        FileChannel channel,
        boolean direct,
        Header header,
        MemorySegment destination,
        long chunkBytes) { // 0: the whole payload in one read
      this.row = row;
      this.channel = channel;
      this.direct = direct;
      this.header = header;
      this.destination = destination;
      this.chunkBytes = chunkBytes == 0 ? Math.max(1, header.payloadBytes()) : chunkBytes;
      this.chunkCount = (int) ((header.payloadBytes() + this.chunkBytes - 1) / this.chunkBytes);
      this.crcs = new int[chunkCount];
      this.bytesRead = new long[chunkCount];
      this.left = new AtomicInteger(chunkCount);
    }

    /** Reads chunk {@code j} into its slice of the destination and checksums what was read. */
    void read(int j) throws IOException {
      long start = j * chunkBytes;
      long length = Math.min(chunkBytes, header.payloadBytes() - start);
      MemorySegment slice = destination.asSlice(start, length);
      long position = header.payloadOffset() + start;
      long n =
          direct
              ? readDirect(channel, slice, position)
              : ObjectFileDescriptor.readFully(channel, slice, position);
      bytesRead[j] = n;
      crcs[j] = n == length ? ObjectFileDescriptor.crc32c(slice) : 0;
    }

    /** Counts one chunk as finished; true for the last one, which then closes and decides. */
    boolean finish(boolean ok) {
      if (!ok) {
        failed = true;
      }
      return left.decrementAndGet() == 0;
    }

    /** The row, once every chunk has finished (or at once for an empty payload). */
    RowResult row() {
      long total = 0;
      for (long n : bytesRead) {
        total += n;
      }
      if (failed || total != header.payloadBytes()) {
        return new RowResult.Invalid(total);
      }
      int crc = 0;
      for (int j = 0; j < chunkCount; j++) {
        long length = Math.min(chunkBytes, header.payloadBytes() - j * chunkBytes);
        crc = j == 0 ? crcs[0] : Crc32cCombine.combine(crc, crcs[j], length);
      }
      return crc == header.payloadCrc()
          ? new RowResult.Ok(header.payloadBytes(), false)
          : new RowResult.Invalid(header.payloadBytes());
    }
  }

  /**
   * Reads {@code destination.byteSize()} bytes at {@code position} with O_DIRECT; returns how many
   * were read. Straight into the destination when the position and the destination's address are
   * block-aligned (the last partial block through the bounce buffer); otherwise through the bounce
   * buffer, one aligned read per bounce buffer's worth, copied out.
   */
  private long readDirect(FileChannel channel, MemorySegment destination, long position)
      throws IOException {
    int block = store.readMode().blockBytes();
    MemorySegment bounce = store.bounce();
    long length = destination.byteSize();
    if (position % block == 0 && destination.address() % block == 0) {
      long body = ObjectFileDescriptor.alignDown(length, block);
      long got =
          body == 0
              ? 0
              : ObjectFileDescriptor.readDirect(
                  channel, destination.asSlice(0, body), position, block);
      if (got < body || body == length) {
        return got;
      }
      long tail = length - body;
      long n =
          ObjectFileDescriptor.readDirect(
              channel, bounce.asSlice(0, block), position + body, block);
      long usable = Math.min(n, tail);
      MemorySegment.copy(bounce, 0, destination, body, usable);
      store.countBounced(usable);
      return got + usable;
    }
    long done = 0;
    while (done < length) {
      long at = position + done;
      long blockStart = ObjectFileDescriptor.alignDown(at, block);
      long skip = at - blockStart;
      long want = Math.min(length - done, bounce.byteSize() - block);
      long readLength = ObjectFileDescriptor.alignUp(skip + want, (long) block);
      long n =
          ObjectFileDescriptor.readDirect(
              channel, bounce.asSlice(0, readLength), blockStart, block);
      long usable = Math.min(Math.max(0, n - skip), want);
      MemorySegment.copy(bounce, skip, destination, done, usable);
      store.countBounced(usable);
      done += usable;
      if (usable < want) {
        break;
      }
    }
    return done;
  }
}
