package io.tokenspeed.l3.store.file;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreArguments;
import io.tokenspeed.l3.spi.StoreConfigurationException;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.file.FileStoreSettings.DirectIo;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.FileSystemException;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The embedded default L3: a directory shared by every process on one machine. Objects written by
 * one process are read by any other that names the same root, after the writer has exited.
 *
 * <p><b>Where objects live.</b> A key is never used as a path: keys carry {@code |}, {@code _} and
 * whatever else a caller chooses. An object is named by the SHA-256 of its key, under a directory
 * of its namespace (the key's text before its first {@code _}) so that a namespace is deleted by
 * removing one tree:
 *
 * <pre>
 *   root/
 *   +-- tsl3-3f2a...e1/                 namespace directory: the namespace itself when it is a
 *   |   |                               plain name ([a-z0-9][a-z0-9-]*, at most 100 characters)
 *   |   +-- 9c/                         first two hex digits of sha256(key)
 *   |   |   +-- 9c0b...77               an object: the full sha256(key) in hex
 *   |   |   +-- .tmp-9c0b...-4711-5e1f  a PUT in progress (process 4711); never read
 *   |   +-- ...
 *   +-- _5d41...0b/                     any other namespace: '_' + sha256(namespace) in hex
 *   +-- _unscoped/                      keys without '_'
 * </pre>
 *
 * <p>A plain name never starts with {@code _}, and {@code _unscoped} is not 65 characters long, so
 * the three kinds of namespace directory cannot collide.
 *
 * <p><b>An object file</b> (big-endian, exactly {@code D + N} bytes; {@link ObjectFileDescriptor}
 * draws both versions in full):
 *
 * <pre>
 *   0                                   28        28+K          D = 28+K rounded up to 4096
 *   +-----------------------------------+---------+-------------+---------+
 *   | magic "TSL3", version 2, K, N,    | key     | zero        | payload |
 *   | payload CRC32C, D, header CRC32C  | (UTF-8) | padding     | N bytes |
 *   +-----------------------------------+---------+-------------+---------+
 *   the header CRC32C covers every byte before the payload but itself
 * </pre>
 *
 * <p>Objects written before payloads were aligned (version 1: a 24-byte fixed header, the key, the
 * payload at {@code 24 + K}) are still read, never written.
 *
 * <p><b>What it guarantees.</b>
 *
 * <ul>
 *   <li>PUT is create-only and atomic across threads and processes. The object is written to a
 *       temporary file beside its final name (named with the writer's process id and a random
 *       suffix), forced to the device when {@code fsync} is on, and published with a hard link,
 *       which the kernel refuses when the name already exists. A complete object appears under its
 *       name or nothing does; of several racing writers exactly one sees {@code
 *       alreadyExisted=false} and the others {@code Ok(…, alreadyExisted=true)}; the first bytes
 *       stay.
 *   <li>GET is exact-length and verified. It reads the object straight into the destination segment
 *       and answers {@code Ok} only when the header names this key with a format it reads, the
 *       payload length equals both the file's remaining length and the destination's {@code
 *       byteSize()}, and the payload checksum matches. A missing file is {@code Missing}. Anything
 *       else (another length, a torn, truncated, extended or overwritten file, a file of another
 *       key) is {@code Invalid(bytes)}, where {@code bytes} is how many payload bytes the file
 *       holds; it is never {@code Ok}. A header or length failure leaves the destination untouched;
 *       a checksum failure is found after the read, so the destination then holds unusable bytes
 *       under an {@code Invalid} row.
 *   <li>GET reads at the disk's pace, not one request at a time. A call's objects are read at once
 *       by the calling thread and by idle threads of the store's read pool ({@code read_threads};
 *       see {@link GetCall}). Where the root's file system takes {@code O_DIRECT} (tried once, when
 *       the store opens: {@link ReadMode}), cold objects are read with it, in chunks of {@code
 *       read_chunk_bytes} that several threads read at once, each checksummed by its reader and the
 *       checksums combined per object: a chunk is one request from the disk straight into Host
 *       memory when the destination is block-aligned, or goes through a block-aligned bounce buffer
 *       per thread when it is not (and for a payload's last partial block and every version 1
 *       payload). With {@code direct_io=auto} an object that is in the page cache already is copied
 *       from there instead. Where O_DIRECT is refused, reads are buffered (each object whole, on
 *       one thread), said once in the log and by {@link #readMode()}.
 *   <li>Every call retires. All I/O is synchronous, positional {@link FileChannel} reads and writes
 *       (a mapping is made only to ask which pages are cached, and unmapped before the read). A GET
 *       returns or throws only once every pool thread that helped it has finished its last chunk; a
 *       helper that starts later finds nothing to do. When a call returns or throws, nothing reads
 *       or writes a caller segment any more ({@link #failuresRetire()} is true).
 *   <li>Limits are checked before anything is written: a key longer than {@code maxKeyBytes} or a
 *       source larger than {@code maxValueBytes} throws {@link IllegalArgumentException} naming the
 *       size and the limit, and no row of that call is written.
 *   <li>A call that returns or throws leaves no temporary file behind. Only a process killed in the
 *       middle of a PUT can leave one; it is never read as an object, and {@link #deleteNamespace}
 *       removes it with its namespace.
 *   <li>A PUT the file system has no room for (no space on the device, a quota, a file-size limit)
 *       is a retired per-row refusal, {@code Rejected(NO_SPACE)}, exactly like Mooncake's {@code
 *       -200} and Redis's {@code OOM}: its temporary file is removed, nothing is published, the
 *       page may be re-offered later, and the executor sees no outage (reads go on). The rows after
 *       it are still tried: a smaller object may fit.
 *   <li>A PUT the file system refuses to write at all (a read-only file system, a directory this
 *       user may not write) throws {@link StoreConfigurationException}, like Redis's {@code
 *       NOPERM}: it is how this deployment is set up, not an outage, so no cooldown stops the
 *       reads, which go on; the executor logs it once and fails the call's rows (retired).
 *   <li>Other I/O failures (a dead disk) propagate as {@link IOException}; the executor turns them
 *       into facts.
 * </ul>
 *
 * <p><b>Why it is built this way.</b> Hashed names make any key safe and spread objects over 256
 * directories per namespace; the full key in the header catches a misplaced file or a hash
 * collision. Hard links decide create-only in the kernel, so no lock file or cross-process lock
 * exists that a crashed process could leave held; rename would silently replace an existing object.
 * Forcing the temporary file before publishing means a crash cannot publish an object whose bytes
 * never reached the device; the directory entry itself is not forced, because losing it in a power
 * cut is only a miss. CRC32C is hardware-accelerated and catches files that were torn, decayed or
 * damaged by something outside the store. A buffered read of a cold file waits for the kernel's
 * read-ahead of that one file; a direct read of a chunk is one request of its full size, and
 * several in flight keep the disk's queue full.
 *
 * <p>Where the file system refuses hard links, publication falls back to {@link Files#move} without
 * {@code REPLACE_EXISTING}. The JDK checks for the target and then renames, which is not atomic
 * against a concurrent writer of the same key: in that window a complete object may replace another
 * complete object of the same key and both writers see {@code alreadyExisted=false}. Readers are
 * unaffected (an open file keeps its bytes), and keys name content, so the replacement carries the
 * same bytes.
 *
 * <p><b>What it must never do.</b> Modify or overwrite a published object file; use key text as a
 * path; answer {@code Ok} without checking header, length and checksum; keep a channel or a caller
 * segment past the call; touch anything outside its root.
 */
public final class FileStore implements Store {

  /** Names of in-progress PUTs start with this; nothing else does. */
  static final String TEMP_PREFIX = ".tmp-";

  /** Directory of keys without a namespace separator. */
  static final String UNSCOPED_DIRECTORY = "_unscoped";

  private static final int MAX_PLAIN_NAME_CHARS = 100;
  private static final int CREATE_ATTEMPTS = 3;
  private static final HexFormat HEX = HexFormat.of();
  private static final long PID = ProcessHandle.current().pid();

  /** Idle pool threads end after this long; a store that is not read holds no thread. */
  private static final long READ_THREAD_KEEP_ALIVE_S = 30;

  /** Helper requests that may wait for a pool thread, per pool thread. */
  private static final int QUEUED_HELPERS_PER_THREAD = 4;

  private static final Logger LOG = Logger.getLogger(FileStore.class.getName());
  private static final AtomicInteger POOLS = new AtomicInteger();

  private final FileStoreSettings settings;
  private final Path root;
  private final boolean hardLinks;
  private final ReadMode readMode;
  private final ThreadPoolExecutor readPool;
  private final int bounceBytes;
  private final ThreadLocal<MemorySegment> bounce;
  private final LongAdder directObjects = new LongAdder();
  private final LongAdder cachedObjects = new LongAdder();
  private final LongAdder bufferedObjects = new LongAdder();
  private final LongAdder directOpenRefusals = new LongAdder();
  private final LongAdder bouncedBytes = new LongAdder();
  private volatile boolean closed;

  /** How a store finds out whether its root takes O_DIRECT (tests simulate a refusal). */
  @FunctionalInterface
  interface DirectProbe {
    ReadMode probe(Path root, DirectIo setting);
  }

  /** Opens (and creates when needed) the store directory of {@code settings}. */
  public FileStore(FileStoreSettings settings) throws IOException {
    this(settings, true, (root, setting) -> ReadMode.probe(root, setting, PID));
  }

  /** {@code hardLinks=false} publishes with the move fallback (for tests of that path). */
  FileStore(FileStoreSettings settings, boolean hardLinks) throws IOException {
    this(settings, hardLinks, (root, setting) -> ReadMode.probe(root, setting, PID));
  }

  /**
   * The store with its O_DIRECT probe given: a test simulates a file system that refuses it.
   *
   * @throws StoreConfigurationException when {@code direct_io=on} and the root refuses O_DIRECT
   */
  FileStore(FileStoreSettings settings, boolean hardLinks, DirectProbe probe) throws IOException {
    if (settings == null) {
      throw new IllegalArgumentException("file store settings are required");
    }
    this.settings = settings;
    this.root = settings.root();
    this.hardLinks = hardLinks;
    Files.createDirectories(root);
    this.readMode =
        settings.directIo() == DirectIo.OFF
            ? ReadMode.buffered("direct_io=off")
            : probe.probe(root, settings.directIo());
    if (settings.directIo() == DirectIo.ON && !readMode.direct()) {
      throw new StoreConfigurationException(
          "file store root="
              + root
              + " has direct_io=on, but its file system does not take O_DIRECT reads: "
              + readMode.reason()
              + " (use direct_io=auto to fall back to buffered reads, or another directory)",
          null);
    }
    if (settings.directIo() != DirectIo.OFF) {
      LOG.log(
          readMode.direct() ? Level.FINE : Level.INFO,
          () ->
              "file store root="
                  + root
                  + (readMode.direct()
                      ? " reads with O_DIRECT: "
                      : " reads through the page cache (direct_io=auto): ")
                  + readMode.reason());
    }
    int block = readMode.blockBytes();
    this.bounceBytes =
        ObjectFileDescriptor.alignUp(
                Math.max(
                    settings.readChunkBytes(),
                    ObjectFileDescriptor.headerBytes(settings.maxKeyBytes())),
                block)
            + block;
    this.bounce = ThreadLocal.withInitial(() -> Arena.ofAuto().allocate(bounceBytes, block));
    if (settings.readThreads() > 0) {
      int pool = POOLS.incrementAndGet();
      AtomicInteger threads = new AtomicInteger();
      this.readPool =
          new ThreadPoolExecutor(
              settings.readThreads(),
              settings.readThreads(),
              READ_THREAD_KEEP_ALIVE_S,
              TimeUnit.SECONDS,
              new ArrayBlockingQueue<>(settings.readThreads() * QUEUED_HELPERS_PER_THREAD),
              r ->
                  Thread.ofPlatform()
                      .daemon()
                      .name("ts-l3-file-read-" + pool + "-" + threads.incrementAndGet())
                      .unstarted(r));
      readPool.allowCoreThreadTimeOut(true);
    } else {
      this.readPool = null;
    }
  }

  @Override
  public long maxValueBytes() {
    return settings.maxValueBytes();
  }

  @Override
  public String name() {
    return "file";
  }

  /**
   * True: all I/O of a call is synchronous and over when it returns or throws; the pool threads
   * that help a GET are waited for (see {@link GetCall}).
   */
  @Override
  public boolean failuresRetire() {
    return true;
  }

  @Override
  public int maxKeyBytes() {
    return settings.maxKeyBytes();
  }

  /** The settings this store was built with. */
  public FileStoreSettings settings() {
    return settings;
  }

  /** How this store reads payloads, as decided when it opened. */
  public ReadMode readMode() {
    return readMode;
  }

  /** What the reads did so far. */
  public FileStoreCounters counters() {
    return new FileStoreCounters(
        directObjects.sum(),
        cachedObjects.sum(),
        bufferedObjects.sum(),
        directOpenRefusals.sum(),
        bouncedBytes.sum());
  }

  /** Where the object of {@code key} lives (whether or not it exists). */
  public Path objectPath(String key) {
    return place(key, 0).target();
  }

  @Override
  public StoreResult exists(List<String> keys) throws IOException {
    List<Placement> placements = place(keys);
    List<RowResult> rows = new ArrayList<>(placements.size());
    for (Placement p : placements) {
      try {
        long size =
            Files.readAttributes(p.target(), BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS)
                .size();
        long payloadOffset = ObjectFileDescriptor.payloadOffset(p.key().length);
        rows.add(new RowResult.Ok(Math.max(0, size - payloadOffset), false));
      } catch (NoSuchFileException e) {
        rows.add(RowResult.MISSING);
      }
    }
    return StoreResult.of(rows);
  }

  @Override
  public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws IOException {
    List<Placement> placements = place(keys);
    StoreArguments.checkSegments(keys, destinations, "destinations");
    int helpers = 0;
    if (readPool != null) {
      long units = 0;
      long chunk = chunkBytes(readMode.direct());
      for (MemorySegment destination : destinations) {
        units += chunk == 0 ? 1 : Math.max(1, (destination.byteSize() + chunk - 1) / chunk);
      }
      helpers = (int) Math.min(settings.readThreads(), units - 1);
    }
    return new GetCall(this, placements, destinations).run(readPool, helpers);
  }

  /**
   * The payload bytes one read moves: {@code read_chunk_bytes} rounded up to the block size when
   * direct; 0 (the whole object, one reader) when buffered. Several threads reading one file
   * through the page cache at different offsets share its read-ahead state and defeat it; one
   * sequential reader per file lets the kernel read ahead, and objects still go in parallel.
   */
  long chunkBytes(boolean direct) {
    return direct
        ? ObjectFileDescriptor.alignUp(settings.readChunkBytes(), readMode.blockBytes())
        : 0;
  }

  /** This thread's bounce buffer: block-aligned, a chunk and a block long, or a header's. */
  MemorySegment bounce() {
    return bounce.get();
  }

  void countObject(boolean direct, boolean directAvailable) {
    (direct ? directObjects : directAvailable ? cachedObjects : bufferedObjects).increment();
  }

  void countDirectOpenRefused() {
    directOpenRefusals.increment();
  }

  void countBounced(long bytes) {
    bouncedBytes.add(bytes);
  }

  @Override
  public StoreResult put(List<String> keys, List<MemorySegment> sources) throws IOException {
    List<Placement> placements = place(keys);
    StoreArguments.checkSegments(keys, sources, "sources");
    StoreArguments.checkValueSizes(sources, "value", settings.maxValueBytes());
    List<RowResult> rows = new ArrayList<>(placements.size());
    for (int i = 0; i < placements.size(); i++) {
      rows.add(putOne(placements.get(i), sources.get(i)));
    }
    return StoreResult.of(rows);
  }

  private RowResult putOne(Placement p, MemorySegment source) throws IOException {
    long length = source.byteSize();
    if (Files.exists(p.target(), LinkOption.NOFOLLOW_LINKS)) {
      return new RowResult.Ok(length, true);
    }
    ByteBuffer header =
        ObjectFileDescriptor.encodeHeader(p.key(), length, ObjectFileDescriptor.crc32c(source));
    Path temp =
        p.target()
            .resolveSibling(
                TEMP_PREFIX
                    + p.hashHex().substring(0, 16)
                    + '-'
                    + PID
                    + '-'
                    + Long.toHexString(ThreadLocalRandom.current().nextLong()));
    boolean created;
    try {
      try (FileChannel channel = createTemporary(temp)) {
        ObjectFileDescriptor.writeFully(channel, header);
        ObjectFileDescriptor.writeFully(channel, source);
        if (settings.fsync()) {
          channel.force(true);
        }
      }
      created = publish(temp, p.target());
    } catch (Throwable t) {
      boolean removed = true;
      try {
        Files.deleteIfExists(temp);
      } catch (IOException | RuntimeException cleanup) {
        t.addSuppressed(cleanup);
        removed = false;
      }
      if (removed && t instanceof IOException io && isOutOfSpace(io)) {
        return RowResult.Rejected.noSpace(reason(io)); // ENOSPC, EDQUOT or EFBIG, in the OS's words
      }
      if (t instanceof IOException io && isWriteRefused(io)) {
        throw new StoreConfigurationException(
            "file store root="
                + root
                + " refused a PUT: "
                + reason(io)
                + " (a read-only file system or a directory this user may not write; reads go"
                + " on)",
            io);
      }
      throw t;
    }
    Files.deleteIfExists(temp);
    return new RowResult.Ok(length, !created);
  }

  /**
   * Whether {@code e} is the file system refusing more bytes: no space on the device ({@code
   * ENOSPC}), a quota ({@code EDQUOT}) or a file-size limit ({@code EFBIG}). The JDK reports these
   * only through the operating system's text, so they are recognized by it ({@code strerror} of
   * glibc and musl, which agree on these three).
   */
  static boolean isOutOfSpace(IOException e) {
    String text = reason(e);
    for (String reason : OUT_OF_SPACE) {
      if (text.contains(reason)) {
        return true;
      }
    }
    return false;
  }

  private static final List<String> OUT_OF_SPACE =
      List.of("No space left on device", "Disk quota exceeded", "File too large");

  /**
   * Whether {@code e} is the file system refusing every write here, whatever its size: no
   * permission ({@code EACCES}, which the JDK reports as {@link AccessDeniedException}), an
   * operation not permitted ({@code EPERM}, e.g. an immutable directory) or a read-only file system
   * ({@code EROFS}), recognized by the operating system's text as in {@link #isOutOfSpace}.
   */
  static boolean isWriteRefused(IOException e) {
    if (e instanceof AccessDeniedException) {
      return true;
    }
    String text = reason(e);
    return text.contains("Read-only file system") || text.contains("Operation not permitted");
  }

  /** The operating system's text of {@code e} (never a file name), or its message; never null. */
  private static String reason(IOException e) {
    if (e instanceof AccessDeniedException denied && denied.getReason() == null) {
      return "Permission denied"; // the JDK's EACCES carries the file name only
    }
    String text = e instanceof FileSystemException fs ? fs.getReason() : null;
    if (text == null) {
      text = e.getMessage();
    }
    return text == null ? e.getClass().getSimpleName() : text;
  }

  /**
   * Creates the temporary file, creating its directories first; retries when a concurrent namespace
   * deletion removes them in between.
   */
  private static FileChannel createTemporary(Path temp) throws IOException {
    for (int attempt = 1; ; attempt++) {
      Files.createDirectories(temp.getParent());
      try {
        return FileChannel.open(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
      } catch (NoSuchFileException e) {
        if (attempt >= CREATE_ATTEMPTS) {
          throw e;
        }
      }
    }
  }

  /** Publishes {@code temp} as {@code target}; false when the target already existed. */
  private boolean publish(Path temp, Path target) throws IOException {
    if (hardLinks) {
      try {
        Files.createLink(target, temp);
        return true;
      } catch (FileAlreadyExistsException e) {
        return false;
      } catch (UnsupportedOperationException e) {
        // the file system provider has no hard links: fall back to the move below
      } catch (FileSystemException e) {
        if (e.getClass() != FileSystemException.class) {
          throw e; // NoSuchFile, AccessDenied, ...: a real failure, not a missing feature
        }
        // EPERM, ENOTSUP, EMLINK, EXDEV: this file system will not link it; move instead
      }
    }
    try {
      Files.move(temp, target);
      return true;
    } catch (FileAlreadyExistsException e) {
      return false;
    }
  }

  @Override
  public long deleteNamespace(String namespace) throws IOException {
    checkOpen();
    if (namespace == null) {
      throw new IllegalArgumentException("namespace=null must be a namespace name");
    }
    int separator = namespace.indexOf('_');
    if (separator >= 0) {
      return deleteMatching(namespace, separator);
    }
    Path directory = root.resolve(directoryOf(namespace));
    long[] removed = {0};
    Files.walkFileTree(
        directory,
        new SimpleFileVisitor<>() {
          @Override
          public FileVisitResult visitFile(Path file, BasicFileAttributes attrs)
              throws IOException {
            if (Files.deleteIfExists(file) && !isTemporary(file)) {
              removed[0]++;
            }
            return FileVisitResult.CONTINUE;
          }

          @Override
          public FileVisitResult visitFileFailed(Path file, IOException e) throws IOException {
            if (e instanceof NoSuchFileException) {
              return FileVisitResult.CONTINUE; // gone already (another deleter)
            }
            throw e;
          }

          @Override
          public FileVisitResult postVisitDirectory(Path dir, IOException e) throws IOException {
            if (e != null) {
              throw e;
            }
            Files.deleteIfExists(dir);
            return FileVisitResult.CONTINUE;
          }
        });
    return removed[0];
  }

  /**
   * Deletes the objects whose stored key starts with {@code namespace + "_"} when the namespace
   * itself holds a {@code _}: they share a directory with other keys, so each header is read.
   */
  private long deleteMatching(String namespace, int separator) throws IOException {
    Path directory = root.resolve(directoryOf(namespace.substring(0, separator)));
    byte[] prefix = (namespace + "_").getBytes(StandardCharsets.UTF_8);
    long[] removed = {0};
    Files.walkFileTree(
        directory,
        new SimpleFileVisitor<>() {
          @Override
          public FileVisitResult visitFile(Path file, BasicFileAttributes attrs)
              throws IOException {
            if (!attrs.isRegularFile() || isTemporary(file)) {
              return FileVisitResult.CONTINUE;
            }
            byte[] key;
            try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ)) {
              key = ObjectFileDescriptor.storedKey(channel);
            } catch (NoSuchFileException e) {
              return FileVisitResult.CONTINUE;
            }
            if (key != null
                && key.length >= prefix.length
                && Arrays.equals(key, 0, prefix.length, prefix, 0, prefix.length)
                && Files.deleteIfExists(file)) {
              removed[0]++;
            }
            return FileVisitResult.CONTINUE;
          }

          @Override
          public FileVisitResult visitFileFailed(Path file, IOException e) throws IOException {
            if (e instanceof NoSuchFileException) {
              return FileVisitResult.CONTINUE;
            }
            throw e;
          }
        });
    return removed[0];
  }

  /** Marks the store closed and lets its read threads end; it holds no open files between calls. */
  @Override
  public void close() {
    closed = true;
    if (readPool != null) {
      readPool.shutdown();
    }
  }

  /** After {@link #close()}: waits until every read thread has ended (for tests). */
  boolean awaitReadThreads(long timeoutMs) throws InterruptedException {
    return readPool == null || readPool.awaitTermination(timeoutMs, TimeUnit.MILLISECONDS);
  }

  private static boolean isTemporary(Path file) {
    return file.getFileName().toString().startsWith(TEMP_PREFIX);
  }

  /** The namespace directory name of a namespace (see the class javadoc). */
  static String directoryOf(String namespace) {
    return isPlainName(namespace)
        ? namespace
        : "_" + HEX.formatHex(sha256(namespace.getBytes(StandardCharsets.UTF_8)));
  }

  private static boolean isPlainName(String name) {
    if (name.isEmpty() || name.length() > MAX_PLAIN_NAME_CHARS) {
      return false;
    }
    for (int i = 0; i < name.length(); i++) {
      char c = name.charAt(i);
      boolean plain = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && i > 0);
      if (!plain) {
        return false;
      }
    }
    return true;
  }

  private List<Placement> place(List<String> keys) {
    checkOpen();
    // The whole list is checked before any key is hashed; place(key, index) serves objectPath too.
    StoreArguments.checkKeys(keys, settings.maxKeyBytes());
    List<Placement> placements = new ArrayList<>(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      placements.add(place(keys.get(i), i));
    }
    return placements;
  }

  private Placement place(String key, int index) {
    byte[] bytes = StoreArguments.keyBytes(key, index, settings.maxKeyBytes());
    int separator = key.indexOf('_');
    String namespaceDirectory =
        separator < 0 ? UNSCOPED_DIRECTORY : directoryOf(key.substring(0, separator));
    String hashHex = HEX.formatHex(sha256(bytes));
    Path target =
        root.resolve(namespaceDirectory).resolve(hashHex.substring(0, 2)).resolve(hashHex);
    return new Placement(bytes, hashHex, target);
  }

  private void checkOpen() {
    if (closed) {
      throw new IllegalStateException("file store root=" + root + " is closed");
    }
  }

  private static byte[] sha256(byte[] bytes) {
    try {
      return MessageDigest.getInstance("SHA-256").digest(bytes);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is not available in this JDK", e);
    }
  }

  /** Where one key's object lives, with the key's UTF-8 bytes for the header. */
  record Placement(byte[] key, String hashHex, Path target) {}
}
