package io.tokenspeed.model.parallel;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.Arrays;
import java.util.Objects;
import java.util.concurrent.locks.LockSupport;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * The {@link Collective} of the ranks of one tensor-parallel replica on one host: the processes (or
 * threads) exchange their values through one memory-mapped file, which every rank opens with {@link
 * #open} under the same path.
 *
 * <p>Guarantees:
 *
 * <ul>
 *   <li><b>Bit-identical results.</b> Every rank computes {@link #allReduceSum} element by element
 *       as {@code s = v0; s += v1; ...; s += v(size-1)} from the same published values, so every
 *       rank ends with the same bits (vector lanes are separate elements: the order per element
 *       never changes).
 *   <li><b>One barrier per operation.</b> A call moves at most {@link #maxFloats()} floats per rank
 *       in one operation; longer calls run as several operations (chunks) in the same order on
 *       every rank. Every call is at least one operation, so a call with nothing to move still
 *       waits for every rank. Each rank writes its values into its own slot of the operation's
 *       buffer, publishes the operation's number, and waits until every rank has published it;
 *       buffers alternate by the parity of the operation number, so a rank writes a buffer again
 *       only after every rank has arrived at the next operation, that is, after they all finished
 *       reading it.
 *   <li><b>Diverged calls are detected.</b> With its values each rank publishes which call it is in
 *       (the kind, its total length, the chunk, and for a gather a hash of the counts); a rank
 *       whose call differs from this rank's makes the operation fail on every rank instead of
 *       mixing unrelated values.
 *   <li><b>Bounded waits.</b> A wait longer than the timeout fails with a {@link
 *       CollectiveException} naming the ranks that did not arrive (and those that never opened the
 *       file) and the operation number. Any failure this rank detects is also written into the
 *       file's abort word, so the other ranks' waits fail at once and name the first failing rank
 *       and its reason; {@link #abort} does the same on request, and {@link #close} marks the rank
 *       closed, so a rank waiting for it fails at once naming it. A failed instance stays failed:
 *       every later call throws.
 *   <li><b>Waiting that yields.</b> A waiting rank spins briefly ({@link Thread#onSpinWait}), then
 *       yields, then parks for a few microseconds growing to 64 µs, so more ranks than cores still
 *       progress.
 *   <li><b>No allocation per call</b> once compiled; arguments are checked before anything is
 *       published, so a rejected call ({@link IllegalArgumentException}) leaves the collective as
 *       it was.
 * </ul>
 *
 * <p>It takes no lock on the path of a call (only {@link #abort}, {@link #close} and a failing call
 * synchronize, within this instance), never starts a thread, never deletes its file by itself (see
 * {@link #remove}), and never reads another rank's slot before that rank published it.
 *
 * <p>File layout (native byte order; {@code B = roundUp(4 * maxFloats, 64)} bytes per buffer):
 *
 * <pre>
 *   0     header, 256 bytes
 *           0  long  magic "TSCOLL01" (written last by the rank that creates the layout)
 *           8  int   layout version      12  int  size      16  int  maxFloats
 *          24  int   abort claim (rank + 1 of the first rank to fail, 0 while none)
 *          28  int   aborted (rank + 1, written once the reason below is complete)
 *          32  int   reason length       36  UTF-8 reason, at most 220 bytes
 *   256   one control line of 128 bytes per rank r
 *           0  long  operations published (operation k is published as k + 1)
 *           8  int   state: 0 never opened, 1 open, 2 closed
 *          16  long  process id
 *          24  long  call word, long counts hash   of even operations
 *          40  long  call word, long counts hash   of odd operations
 *   256 + 128 * size
 *         rank 0 even buffer (B) | rank 0 odd buffer (B) | rank 1 even | rank 1 odd | ...
 * </pre>
 *
 * <p>Every rank maps the whole file ({@link #fileBytes}); the first to arrive creates it and writes
 * the header, the others wait for the magic number and refuse a file whose geometry (size,
 * maxFloats, layout version) is not theirs, naming both. A rank claims its control line when it
 * opens, so a second opening of the same rank, or a file left behind by an earlier replica, is
 * refused: the launcher removes the file ({@link #remove}) before starting a replica and after it
 * ends. A mapping stays valid after its file is unlinked, so rank 0 may also remove the file after
 * a first {@link #barrier} (every rank has opened it by then), leaving nothing behind whatever
 * happens to the processes.
 *
 * <p>Calls on one instance come from one thread at a time, except {@link #abort}, which may come
 * from any thread, also while a call of this rank waits. {@link #close} must not overlap a call.
 * The reduction uses the Vector API: the JVM needs {@code --add-modules jdk.incubator.vector}.
 */
public final class SharedMemoryCollective implements Collective {

  /** The layout version this class reads and writes. */
  public static final int LAYOUT_VERSION = 1;

  private static final long MAGIC = 0x5453_434F_4C4C_3031L; // "TSCOLL01"
  private static final long INITIALIZING = 0x5453_434F_4C4C_3030L; // "TSCOLL00"

  private static final int HEADER_BYTES = 256;
  private static final long MAGIC_AT = 0;
  private static final long VERSION_AT = 8;
  private static final long SIZE_AT = 12;
  private static final long MAX_FLOATS_AT = 16;
  private static final long ABORT_CLAIM_AT = 24;
  private static final long ABORTED_AT = 28;
  private static final long REASON_LENGTH_AT = 32;
  private static final long REASON_AT = 36;
  private static final int REASON_BYTES = HEADER_BYTES - (int) REASON_AT;

  private static final int CONTROL_BYTES = 128;
  private static final long ARRIVED_AT = 0;
  private static final long STATE_AT = 8;
  private static final long PID_AT = 16;
  private static final long CALLS_AT = 24;

  private static final int NEVER_OPENED = 0;
  private static final int OPEN = 1;
  private static final int CLOSED = 2;

  private static final int BARRIER = 1;
  private static final int REDUCE = 2;
  private static final int GATHER = 3;

  private static final int BUFFER_ALIGNMENT = 64;

  private static final int SPINS = 256;
  private static final int YIELDS = 64;
  private static final long MIN_PARK_NANOS = 1_000;
  private static final long MAX_PARK_NANOS = 64_000;

  private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();
  private static final VarHandle INT = ValueLayout.JAVA_INT.varHandle();
  private static final ValueLayout.OfFloat FLOAT = ValueLayout.JAVA_FLOAT;
  private static final VectorSpecies<Float> SPECIES = FloatVector.SPECIES_PREFERRED;
  private static final ByteOrder NATIVE = ByteOrder.nativeOrder();

  private final Path file;
  private final int rank;
  private final int size;
  private final int maxFloats;
  private final Duration timeout;
  private final long timeoutNanos;
  private final Arena arena;
  private final MemorySegment shared;
  private final long dataStart;
  private final long bufferBytes;
  private final Object lifecycle = new Object();

  /** Operations this rank has published; operation k is published as k + 1. */
  private long operations;

  private volatile String failure;
  private volatile boolean closed;

  private SharedMemoryCollective(
      Path file,
      int rank,
      int size,
      int maxFloats,
      Duration timeout,
      Arena arena,
      MemorySegment shared) {
    this.file = file;
    this.rank = rank;
    this.size = size;
    this.maxFloats = maxFloats;
    this.timeout = timeout;
    this.timeoutNanos = timeout.toNanos();
    this.arena = arena;
    this.shared = shared;
    this.dataStart = HEADER_BYTES + (long) CONTROL_BYTES * size;
    this.bufferBytes = bufferBytes(maxFloats);
  }

  /**
   * Opens the collective file {@code file} as rank {@code rank} of {@code size} ranks, creating and
   * laying out the file when this rank is the first to arrive. Every rank of the replica passes the
   * same {@code file}, {@code size} and {@code maxFloats}.
   *
   * @param file the file shared by the replica's ranks, typically under {@code /dev/shm}; created
   *     when absent
   * @param rank this rank, in {@code [0, size)}
   * @param size the number of ranks, at least 1
   * @param maxFloats the floats one rank moves per operation, at least 1; longer calls run in
   *     chunks of this many floats
   * @param timeout how long any wait may last: for another rank's arrival at an operation, and for
   *     the creating rank's header when this rank opens the file
   * @throws IllegalArgumentException for a rank outside {@code [0, size)}, a size or maxFloats
   *     below 1, or a timeout that is not positive
   * @throws CollectiveException when the file was laid out for another geometry or is not a
   *     collective file, when this rank is already open (or closed) in it, or when its header is
   *     not written within the timeout
   * @throws IOException when the file cannot be opened or mapped
   */
  public static SharedMemoryCollective open(
      Path file, int rank, int size, int maxFloats, Duration timeout) throws IOException {
    Objects.requireNonNull(file, "file");
    Objects.requireNonNull(timeout, "timeout");
    long bytes = fileBytes(size, maxFloats);
    if (rank < 0 || rank >= size) {
      throw new IllegalArgumentException("rank " + rank + " outside [0, " + size + ")");
    }
    if (timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("timeout " + timeout + " is not positive");
    }
    Arena arena = Arena.ofShared();
    try {
      MemorySegment shared;
      try (FileChannel channel =
          FileChannel.open(
              file, StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
        long existing = channel.size();
        if (existing != 0 && existing != bytes) {
          throw new CollectiveException(
              mismatch(file, describe(channel, existing), rank, size, maxFloats));
        }
        shared = channel.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
      }
      SharedMemoryCollective collective =
          new SharedMemoryCollective(file, rank, size, maxFloats, timeout, arena, shared);
      collective.awaitLayout();
      collective.claimRank();
      return collective;
    } catch (IOException | RuntimeException | Error e) {
      arena.close();
      throw e;
    }
  }

  /**
   * The length in bytes of the collective file of {@code size} ranks moving up to {@code maxFloats}
   * floats each per operation: a 256-byte header, 128 bytes per rank, and two buffers per rank of
   * {@code 4 * maxFloats} bytes rounded up to 64.
   *
   * @throws IllegalArgumentException when {@code size} or {@code maxFloats} is below 1
   */
  public static long fileBytes(int size, int maxFloats) {
    if (size < 1) {
      throw new IllegalArgumentException("size " + size + " below 1");
    }
    if (maxFloats < 1) {
      throw new IllegalArgumentException("maxFloats " + maxFloats + " below 1");
    }
    return HEADER_BYTES + (long) CONTROL_BYTES * size + 2L * size * bufferBytes(maxFloats);
  }

  /**
   * Removes a replica's collective file, for the launcher when the replica ends (or before it
   * starts, for a file left behind). The ranks' mappings stay valid after the file is unlinked:
   * ranks still running keep exchanging through it, and a rank opening the path afterwards creates
   * a new, unrelated file.
   *
   * @return whether a file was there to remove
   */
  public static boolean remove(Path file) throws IOException {
    return Files.deleteIfExists(file);
  }

  @Override
  public int rank() {
    return rank;
  }

  @Override
  public int size() {
    return size;
  }

  /** The floats one rank moves per operation. */
  public int maxFloats() {
    return maxFloats;
  }

  /** The collective file. */
  public Path file() {
    return file;
  }

  /** How long a wait may last. */
  public Duration timeout() {
    return timeout;
  }

  /** {@inheritDoc} Lengths above {@link #maxFloats()} run as several operations. */
  @Override
  public void allReduceSum(float[] data, int offset, int length) {
    Objects.requireNonNull(data, "data");
    if (offset < 0 || length < 0 || offset > data.length - length) {
      throw new IllegalArgumentException(
          "range [" + offset + ", " + offset + " + " + length + ") outside " + data.length);
    }
    ensureUsable();
    int chunks = length == 0 ? 1 : (length - 1) / maxFloats + 1;
    for (int chunk = 0; chunk < chunks; chunk++) {
      int from = chunk * maxFloats;
      int n = Math.min(maxFloats, length - from);
      long call = callWord(REDUCE, chunk, length);
      long k = operations;
      int parity = (int) (k & 1);
      checkAborted(k);
      MemorySegment.copy(data, offset + from, shared, FLOAT, buffer(rank, parity), n);
      publish(k, parity, call, 0L);
      awaitAll(k + 1, timeoutNanos, call);
      checkCalls(k, parity, call, 0L);
      sumInRankOrder(parity, data, offset + from, n);
      operations = k + 1;
    }
  }

  /**
   * {@inheritDoc}
   *
   * <p>Counts may differ between ranks but every rank passes the same {@code counts}; {@code
   * counts.length == size()}, every count non-negative, {@code counts[rank()] <= local.length} and
   * {@code out.length} at least their sum. {@code local} and {@code out} are different arrays.
   * Counts above {@link #maxFloats()} run as several operations: {@code ceil(max(counts) /
   * maxFloats)} of them (at least one), each moving the next {@code maxFloats} values of every rank
   * that has values left.
   */
  @Override
  public void allGather(float[] local, int[] counts, float[] out) {
    Objects.requireNonNull(local, "local");
    Objects.requireNonNull(counts, "counts");
    Objects.requireNonNull(out, "out");
    if (counts.length != size) {
      throw new IllegalArgumentException(
          "counts of " + counts.length + " ranks, not " + size + " ranks");
    }
    if (local == out) {
      throw new IllegalArgumentException("local and out are the same array");
    }
    long total = 0;
    int most = 0;
    for (int r = 0; r < size; r++) {
      if (counts[r] < 0) {
        throw new IllegalArgumentException("counts[" + r + "] = " + counts[r] + " is negative");
      }
      total += counts[r];
      most = Math.max(most, counts[r]);
    }
    if (counts[rank] > local.length) {
      throw new IllegalArgumentException(
          "counts[" + rank + "] = " + counts[rank] + " exceeds local.length " + local.length);
    }
    if (total > out.length) {
      throw new IllegalArgumentException(
          "counts add up to " + total + ", more than out.length " + out.length);
    }
    ensureUsable();
    long hash = countsHash(counts);
    int chunks = most == 0 ? 1 : (most - 1) / maxFloats + 1;
    for (int chunk = 0; chunk < chunks; chunk++) {
      int from = chunk * maxFloats;
      long call = callWord(GATHER, chunk, (int) total);
      long k = operations;
      int parity = (int) (k & 1);
      checkAborted(k);
      int mine = Math.clamp(counts[rank] - (long) from, 0, maxFloats);
      if (mine > 0) {
        MemorySegment.copy(local, from, shared, FLOAT, buffer(rank, parity), mine);
      }
      publish(k, parity, call, hash);
      awaitAll(k + 1, timeoutNanos, call);
      checkCalls(k, parity, call, hash);
      int at = 0;
      for (int r = 0; r < size; r++) {
        int n = Math.clamp(counts[r] - (long) from, 0, maxFloats);
        if (n == 0) {
          // this rank's values ended in an earlier chunk
        } else if (r == rank) {
          System.arraycopy(local, from, out, at + from, n);
        } else {
          MemorySegment.copy(shared, FLOAT, buffer(r, parity), out, at + from, n);
        }
        at += counts[r];
      }
      operations = k + 1;
    }
  }

  /** Waits until every rank has called {@code barrier} too: one operation moving nothing. */
  public void barrier() {
    barrier(timeout);
  }

  /**
   * {@link #barrier()} with its own bound on the wait, such as a longer one for the first barrier
   * of a replica whose ranks load their weights at different speeds.
   */
  public void barrier(Duration timeout) {
    Objects.requireNonNull(timeout, "timeout");
    if (timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("timeout " + timeout + " is not positive");
    }
    ensureUsable();
    long call = callWord(BARRIER, 0, 0);
    long k = operations;
    int parity = (int) (k & 1);
    checkAborted(k);
    publish(k, parity, call, 0L);
    awaitAll(k + 1, timeout.toNanos(), call);
    checkCalls(k, parity, call, 0L);
    operations = k + 1;
  }

  /**
   * {@inheritDoc}
   *
   * <p>Writes this rank and the first 220 bytes of {@code reason} (UTF-8) into the file's abort
   * word unless another rank failed first; either way this instance fails from now on. Does nothing
   * once this rank is closed. May be called from any thread.
   */
  @Override
  public void abort(String reason) {
    String text = String.valueOf(reason);
    synchronized (lifecycle) {
      if (closed) {
        return;
      }
      if (failure == null) {
        failure = "rank " + rank + " aborted: " + text;
      }
      claimAbort(text);
    }
  }

  /**
   * {@inheritDoc}
   *
   * <p>Marks this rank closed in the file, then unmaps it; later calls on this instance throw.
   * Closing again does nothing.
   */
  @Override
  public void close() {
    synchronized (lifecycle) {
      if (closed) {
        return;
      }
      closed = true;
      INT.setRelease(shared, control(rank) + STATE_AT, CLOSED);
      arena.close();
    }
  }

  @Override
  public String toString() {
    return "SharedMemoryCollective[rank "
        + rank
        + " of "
        + size
        + ", "
        + maxFloats
        + " floats, "
        + file
        + "]";
  }

  // ---------------------------------------------------------------- opening

  private void awaitLayout() {
    long magic = (long) LONG.compareAndExchange(shared, MAGIC_AT, 0L, INITIALIZING);
    if (magic == 0L) {
      INT.set(shared, VERSION_AT, LAYOUT_VERSION);
      INT.set(shared, SIZE_AT, size);
      INT.set(shared, MAX_FLOATS_AT, maxFloats);
      LONG.setRelease(shared, MAGIC_AT, MAGIC);
      return;
    }
    long start = System.nanoTime();
    long park = MIN_PARK_NANOS;
    while (magic == INITIALIZING) {
      if (System.nanoTime() - start > timeoutNanos) {
        throw new CollectiveException(
            file
                + ": the rank creating this collective file did not finish its header within "
                + timeout.toMillis()
                + " ms");
      }
      LockSupport.parkNanos(park);
      park = Math.min(2 * park, MAX_PARK_NANOS);
      magic = (long) LONG.getAcquire(shared, MAGIC_AT);
    }
    if (magic != MAGIC) {
      throw new CollectiveException(
          mismatch(
              file,
              "a file that is not a collective file" + magicText(magic),
              rank,
              size,
              maxFloats));
    }
    int version = (int) INT.get(shared, VERSION_AT);
    int fileSize = (int) INT.get(shared, SIZE_AT);
    int fileMaxFloats = (int) INT.get(shared, MAX_FLOATS_AT);
    if (version != LAYOUT_VERSION || fileSize != size || fileMaxFloats != maxFloats) {
      throw new CollectiveException(
          mismatch(file, geometry(fileSize, fileMaxFloats, version), rank, size, maxFloats));
    }
  }

  private void claimRank() {
    long line = control(rank);
    int prior = (int) INT.compareAndExchange(shared, line + STATE_AT, NEVER_OPENED, OPEN);
    if (prior != NEVER_OPENED) {
      throw new CollectiveException(
          file
              + ": rank "
              + rank
              + " is already "
              + (prior == OPEN ? "open" : "closed")
              + " in this collective file (pid "
              + (long) LONG.getAcquire(shared, line + PID_AT)
              + "): another process opened it as rank "
              + rank
              + ", or the file is left from an earlier replica and must be removed first");
    }
    LONG.setRelease(shared, line + PID_AT, ProcessHandle.current().pid());
  }

  private static String describe(FileChannel channel, long existing) throws IOException {
    if (existing < MAX_FLOATS_AT + 4) {
      return "a file of " + existing + " bytes that is not a collective file";
    }
    ByteBuffer head = ByteBuffer.allocate((int) MAX_FLOATS_AT + 4).order(NATIVE);
    while (head.hasRemaining() && channel.read(head, head.position()) >= 0) {
      // reads the header's first words
    }
    long magic = head.getLong((int) MAGIC_AT);
    if (magic != MAGIC) {
      return "a file of " + existing + " bytes that is not a collective file" + magicText(magic);
    }
    return geometry(head.getInt((int) SIZE_AT), head.getInt((int) MAX_FLOATS_AT), head.getInt(8));
  }

  private static String geometry(int size, int maxFloats, int version) {
    return "a collective of "
        + size
        + (size == 1 ? " rank" : " ranks")
        + " of "
        + maxFloats
        + " floats (layout version "
        + version
        + ")";
  }

  private static String magicText(long magic) {
    return magic == 0 ? "" : String.format(" (magic 0x%016x)", magic);
  }

  private static String mismatch(Path file, String found, int rank, int size, int maxFloats) {
    return file
        + " holds "
        + found
        + ", but rank "
        + rank
        + " opens it as "
        + geometry(size, maxFloats, LAYOUT_VERSION)
        + ": every rank of a replica must pass the same size and maxFloats, and a file left by"
        + " another replica must be removed first";
  }

  // ---------------------------------------------------------------- operations

  private void publish(long k, int parity, long call, long hash) {
    long line = control(rank);
    long calls = line + CALLS_AT + 16L * parity;
    LONG.set(shared, calls, call);
    LONG.set(shared, calls + 8, hash);
    LONG.setRelease(shared, line + ARRIVED_AT, k + 1);
  }

  /** Waits until every rank has published {@code target}. */
  private void awaitAll(long target, long timeoutNanos, long call) {
    long start = 0;
    int idle = 0;
    long park = MIN_PARK_NANOS;
    for (int r = 0; r < size; r++) {
      if (r == rank) {
        continue;
      }
      long arrived = control(r) + ARRIVED_AT;
      while ((long) LONG.getAcquire(shared, arrived) < target) {
        if (idle == 0) {
          start = System.nanoTime();
        }
        idle++;
        if (idle <= SPINS) {
          Thread.onSpinWait();
          if ((idle & 31) != 0) {
            continue;
          }
        } else if (idle <= SPINS + YIELDS) {
          Thread.yield();
        } else {
          LockSupport.parkNanos(park);
          park = Math.min(2 * park, MAX_PARK_NANOS);
        }
        checkWaiting(r, target, start, timeoutNanos, call);
      }
    }
  }

  /** The checks of a wait for rank {@code r}: failures elsewhere, its close, the time. */
  private void checkWaiting(int r, long target, long start, long timeoutNanos, long call) {
    String failed = failure;
    if (failed != null) {
      throw new CollectiveException(failed);
    }
    long k = target - 1;
    checkAborted(k);
    if ((int) INT.getAcquire(shared, control(r) + STATE_AT) == CLOSED
        && (long) LONG.getAcquire(shared, control(r) + ARRIVED_AT) < target) {
      throw fail(
          "rank "
              + r
              + " closed before operation "
              + k
              + " ("
              + describeCall(call)
              + "), which rank "
              + rank
              + " waited for");
    }
    if (Thread.currentThread().isInterrupted()) {
      throw fail("rank " + rank + " was interrupted waiting at operation " + k);
    }
    if (System.nanoTime() - start > timeoutNanos) {
      CollectiveException late = timedOut(target, timeoutNanos, call);
      if (late != null) {
        throw late;
      }
    }
  }

  /** The failure of a wait that ran out of time, or null when every rank has arrived after all. */
  private CollectiveException timedOut(long target, long timeoutNanos, long call) {
    StringBuilder missing = new StringBuilder();
    StringBuilder detail = new StringBuilder();
    int count = 0;
    for (int r = 0; r < size; r++) {
      if (r == rank) {
        continue;
      }
      long line = control(r);
      long arrived = (long) LONG.getAcquire(shared, line + ARRIVED_AT);
      if (arrived >= target) {
        continue;
      }
      missing.append(count == 0 ? "" : ", ").append(r);
      detail.append("; rank ").append(r);
      if ((int) INT.getAcquire(shared, line + STATE_AT) == NEVER_OPENED) {
        detail.append(" never opened the file");
      } else {
        detail
            .append(" (pid ")
            .append((long) LONG.getAcquire(shared, line + PID_AT))
            .append(") last arrived at ")
            .append(arrived == 0 ? "no operation" : "operation " + (arrived - 1));
      }
      count++;
    }
    if (count == 0) {
      return null;
    }
    String ranks = (count == 1 ? "rank " : "ranks ") + missing;
    String reason =
        "operation "
            + (target - 1)
            + ": "
            + ranks
            + " did not arrive within "
            + Duration.ofNanos(timeoutNanos).toMillis()
            + " ms";
    return fail(
        reason, reason + " (" + describeCall(call) + "; rank " + rank + " waited" + detail + ")");
  }

  private void checkCalls(long k, int parity, long call, long hash) {
    long offset = CALLS_AT + 16L * parity;
    for (int r = 0; r < size; r++) {
      if (r == rank) {
        continue;
      }
      long line = control(r) + offset;
      long theirs = (long) LONG.get(shared, line);
      long theirHash = (long) LONG.get(shared, line + 8);
      if (theirs != call || theirHash != hash) {
        String what = theirs == call ? "allGather with other counts" : describeCall(theirs);
        throw fail(
            "operation "
                + k
                + " diverged: rank "
                + rank
                + " is in "
                + describeCall(call)
                + ", rank "
                + r
                + " in "
                + what);
      }
    }
  }

  private void sumInRankOrder(int parity, float[] data, int dst, int n) {
    long stride = 2 * bufferBytes;
    long base = dataStart + parity * bufferBytes;
    int lanes = SPECIES.length();
    int bound = SPECIES.loopBound(n);
    int i = 0;
    for (; i < bound; i += lanes) {
      long at = base + 4L * i;
      FloatVector sum = FloatVector.fromMemorySegment(SPECIES, shared, at, NATIVE);
      for (int r = 1; r < size; r++) {
        sum = sum.add(FloatVector.fromMemorySegment(SPECIES, shared, at + r * stride, NATIVE));
      }
      sum.intoArray(data, dst + i);
    }
    for (; i < n; i++) {
      long at = base + 4L * i;
      float sum = shared.get(FLOAT, at);
      for (int r = 1; r < size; r++) {
        sum += shared.get(FLOAT, at + r * stride);
      }
      data[dst + i] = sum;
    }
  }

  // ---------------------------------------------------------------- failures

  private void ensureUsable() {
    if (closed) {
      throw new CollectiveException("rank " + rank + " closed its collective " + file);
    }
    String failed = failure;
    if (failed != null) {
      throw new CollectiveException(failed);
    }
  }

  /** Throws when a rank has aborted the collective. */
  private void checkAborted(long k) {
    int aborted = (int) INT.getAcquire(shared, ABORTED_AT);
    if (aborted != 0) {
      int length = Math.clamp((int) INT.get(shared, REASON_LENGTH_AT), 0, REASON_BYTES);
      byte[] bytes = new byte[length];
      MemorySegment.copy(shared, ValueLayout.JAVA_BYTE, REASON_AT, bytes, 0, length);
      String reason = new String(bytes, StandardCharsets.UTF_8);
      String message =
          aborted - 1 == rank
              ? "rank " + rank + " aborted: " + reason
              : "rank "
                  + (aborted - 1)
                  + " aborted the collective: "
                  + reason
                  + " (seen by rank "
                  + rank
                  + " at operation "
                  + k
                  + ")";
      failure = message;
      throw new CollectiveException(message);
    }
  }

  private CollectiveException fail(String message) {
    return fail(message, message);
  }

  /** Fails this instance with {@code message} and every rank with {@code reason}. */
  private CollectiveException fail(String reason, String message) {
    synchronized (lifecycle) {
      if (failure == null) {
        failure = message;
      }
      if (!closed) {
        claimAbort(reason);
      }
    }
    return new CollectiveException(message);
  }

  /** Writes this rank and {@code reason} into the abort word unless a rank failed first. */
  private void claimAbort(String reason) {
    if ((int) INT.compareAndExchange(shared, ABORT_CLAIM_AT, 0, rank + 1) != 0) {
      return;
    }
    byte[] bytes = truncate(reason);
    MemorySegment.copy(bytes, 0, shared, ValueLayout.JAVA_BYTE, REASON_AT, bytes.length);
    INT.set(shared, REASON_LENGTH_AT, bytes.length);
    INT.setRelease(shared, ABORTED_AT, rank + 1);
  }

  private static byte[] truncate(String text) {
    byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
    if (bytes.length <= REASON_BYTES) {
      return bytes;
    }
    int end = REASON_BYTES;
    while (end > 0 && (bytes[end] & 0xC0) == 0x80) {
      end--; // never cut a character in two
    }
    return Arrays.copyOf(bytes, end);
  }

  // ---------------------------------------------------------------- layout

  private long control(int r) {
    return HEADER_BYTES + (long) CONTROL_BYTES * r;
  }

  private long buffer(int r, int parity) {
    return dataStart + (2L * r + parity) * bufferBytes;
  }

  private static long bufferBytes(int maxFloats) {
    long bytes = 4L * maxFloats;
    return (bytes + BUFFER_ALIGNMENT - 1) / BUFFER_ALIGNMENT * BUFFER_ALIGNMENT;
  }

  /** Kind in bits 62-63, chunk in bits 31-61, total length in bits 0-30. */
  private static long callWord(int kind, int chunk, int total) {
    return ((long) kind << 62) | ((long) chunk << 31) | total;
  }

  private static String describeCall(long call) {
    int kind = (int) (call >>> 62);
    long chunk = (call >>> 31) & Integer.MAX_VALUE;
    long total = call & Integer.MAX_VALUE;
    return switch (kind) {
      case BARRIER -> "barrier";
      case REDUCE -> "allReduceSum of " + total + " floats, chunk " + chunk;
      case GATHER -> "allGather of " + total + " floats in all, chunk " + chunk;
      default -> "no call";
    };
  }

  private static long countsHash(int[] counts) {
    long h = 0xCBF2_9CE4_8422_2325L;
    for (int count : counts) {
      h = (h ^ count) * 0x0000_0100_0000_01B3L;
    }
    return h | 1; // never 0, the hash of the calls that have no counts
  }
}
