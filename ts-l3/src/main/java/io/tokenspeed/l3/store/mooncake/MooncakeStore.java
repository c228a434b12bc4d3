package io.tokenspeed.l3.store.mooncake;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import io.tokenspeed.l3.spi.NamespaceDeletion;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * The {@code mooncake} store: a Java FFM binding of Mooncake's C API ({@code store_c.h}) that moves
 * object bytes straight between Mooncake and the one shared Host allocation, without a copy on the
 * Java side.
 *
 * <h2>What it guarantees</h2>
 *
 * <ul>
 *   <li><b>Zero copy, registered memory only.</b> The Host allocation is registered once ({@link
 *       #registerHostBuffer}); every GET destination and PUT source must be a slice of it, checked
 *       before any native call. A segment outside it is rejected with an exception and nothing is
 *       submitted.
 *   <li><b>Retirement is claimed only where the SDK proves it.</b> A row is retired when its answer
 *       says the transfer completed (a GET byte count, a PUT {@code 0}) or when it is a code the
 *       real client produces only before submitting the row's transfer or only after waiting for
 *       every transfer of the call ({@code -704}, {@code -705}, {@code -200}, and the codes of
 *       {@link MooncakeCodes#retiredGetFailure} and {@link MooncakeCodes#retiredPutFailure});
 *       everything else is {@link RowResult.Unknown} with {@code retired=false}, which quarantines
 *       the job (table below, and {@link MooncakeCodes}).
 *   <li><b>Exact sizes.</b> A GET passes the SDK exactly the destination's length, which is the
 *       block payload every object of the namespace holds. The real client answers the object's own
 *       size whenever it fits, so a smaller answer is an object shorter than the block (a retired
 *       short read, {@link RowResult.Invalid}) and an object longer than the block is refused
 *       before any transfer ({@code -600}).
 *   <li><b>Create-only PUT.</b> {@code OBJECT_ALREADY_EXISTS} is idempotent success and is counted
 *       apart from new writes ({@link MooncakeCounters}); the real client answers {@code 0} for an
 *       existing object instead, so with it the two cannot be told apart.
 *   <li><b>Keys are validated before any native call</b>: non-empty, no NUL, at most {@link
 *       MooncakeStoreSettings#maxKeyBytes()} UTF-8 bytes, passed as NUL-terminated UTF-8.
 *   <li><b>A restarted master costs one health cooldown.</b> After an answer that reads as an
 *       outage, the next call first re-establishes the connection to the master with existence
 *       queries of a key no object has ({@link #reconnectIfDue}), so a recovery probe does not fail
 *       on a connection the restart left stale.
 *   <li><b>Close never races a call.</b> Calls hold a read lock for the length of their downcall;
 *       {@link #close} takes the write lock, so {@code mooncake_store_destroy} never frees a client
 *       another thread is inside. Close runs once.
 * </ul>
 *
 * <h2>The result contract</h2>
 *
 * <pre>
 *   call    SDK answer per key                    row                            call retired?
 *   GET     n &gt;= 0 and n == destination length   Ok(n, false)                   yes
 *   GET     0 &lt;= n &lt; destination length        Invalid(n)  (short read)       yes
 *   GET     n &gt; destination length              Unknown(MALFORMED_RESULT)      NO
 *   GET     -704 OBJECT_NOT_FOUND                 Missing                        yes
 *   GET     -703 -702 -600 -200 -707              Rejected(code)                 yes
 *   GET     -801 -900 -901                        Rejected(code, outage=true)    yes
 *   GET     any other negative                    Unknown(code)                  NO
 *   PUT     0                                     Ok(length, false)              yes
 *   PUT     -705 OBJECT_ALREADY_EXISTS            Ok(length, true)               yes
 *   PUT     -200 NO_AVAILABLE_HANDLE              Rejected(-200)                 yes
 *   PUT     -900 -901                             Rejected(code, outage=true)    yes
 *   PUT     any other negative                    Unknown(code)                  NO
 *   QUERY   1 / 0                                 Ok(0, false) / Missing         yes
 *   QUERY   any negative                          Unknown(code)                  yes (no payload)
 *   any     top-level status != 0                 Unknown(status) on every row   NO (QUERY: yes)
 *   any     malformed (see below)                 Unknown(MALFORMED_RESULT)      NO (QUERY: yes)
 * </pre>
 *
 * <p>A QUERY never hands the SDK a payload buffer, so nothing it answers can leave a buffer in use;
 * its Unknown rows still report an outage to the executor's health monitor.
 *
 * <h2>One batch call in memory</h2>
 *
 * Every batch call allocates its argument arrays in a confined arena that lives exactly as long as
 * the call. The C API promises not to use them after it returns (its header: "All memory pointed to
 * by the char* parameters will not be used after the C function returns"), so freeing them is safe
 * even when the payload's retirement is unknown. Only the payload slices are shared with the SDK.
 *
 * <pre>
 *   confined arena (per call)                       registered Host allocation (process-long)
 *   keys     [ char* ][ char* ] ... [ char* ]       +-------------------------------------+
 *              |        '--&gt; "ns_h2|g0|o0|r0\0"     |   ...  [ slice 0 ]  ...  [ slice 1 ] |
 *              '--&gt; "ns_h1|g0|o0|r0\0"             +-----------^------------------^------+
 *   buffers  [ void* ][ void* ] ... ------------------------------'------------------'
 *   sizes    [ len 0 ][ len 1 ] ...
 *   results  [ S ][ S ] ... [ S ][ S guard ]        S = sentinel (MALFORMED_RESULT / Long.MIN_VALUE)
 *            `---- count rows -----'
 * </pre>
 *
 * Results are prefilled with a sentinel and carry one guard row. After the call, a row still
 * holding the sentinel was not written, and a guard row that changed means the SDK wrote past the
 * count; both make the answer malformed, as does a value outside the documented set (a positive PUT
 * code, a QUERY answer above 1, a GET code below the {@code int} range of Mooncake's error codes, a
 * GET byte count larger than its destination: bytes that cannot have landed in the buffer). A
 * top-level status other than 0 means the C layer gave up on the whole call; its own wrapper also
 * returns {@code -1} when it catches a C++ exception, which may happen after transfers were
 * submitted, so it proves nothing.
 *
 * <h2>Why {@link #failuresRetire()} is false</h2>
 *
 * A failed SDK call does not say whether a transfer it started has finished: a transfer error, an
 * RPC timeout, or an exception caught by the C layer can each leave RDMA or TCP I/O running against
 * the Host allocation after the call returned. The adapter therefore never infers retirement from a
 * failure, and a Java exception thrown once a native call has been submitted propagates unchanged
 * rather than being turned into a retired result; the executor's quarantine is the only safe answer
 * to it. Exceptions thrown by argument checks happen before any native call.
 *
 * <h2>What it must never do</h2>
 *
 * <ul>
 *   <li>Report {@code retired=true} for a GET or PUT whose answer is not on a "yes" line of the
 *       table above.
 *   <li>Retry, re-read or re-check an object to repair an Unknown answer: an existence check does
 *       not retire an in-flight transfer.
 *   <li>Pass the SDK memory that is not a slice of the registered allocation, or a key it has not
 *       validated.
 *   <li>Unload the library or destroy the client while a call may be inside it.
 * </ul>
 *
 * <h2>Namespace deletion and read leases</h2>
 *
 * The master grants a read lease ({@code default_kv_lease_ttl}, 10 s by default) on every object a
 * GET or an existence query finds, and {@code mooncake_store_remove_by_regex} without {@code force}
 * skips leased objects (and objects whose PUT has not finished). A deletion right after the engine
 * queried its own keys would therefore leave them all behind. {@link #purgeNamespace} does not
 * force (a forced removal frees an object another replica may be reading, whose bytes could then be
 * overwritten under that reader); instead it waits, within {@link
 * MooncakeStoreSettings#namespaceDeleteWaitMs()}:
 *
 * <pre>
 *   now            own lease end          + 1 lease             + 1 lease
 *    |---- wait ------|-- pass 1 --|---- wait ----|-- pass 2 --|-- ... until a pass removes 0
 *    this client's GET/QUERY leases end;   leases other clients held at pass 1 have ended
 * </pre>
 *
 * The store knows when its own leases end (it notes the end of every GET and QUERY call), so the
 * first pass runs once they have. Each later pass runs one lease after the previous one and stops
 * when a pass removes nothing or the bound would be passed. The C API has no call that lists or
 * counts keys, so what stays cannot be counted: the result says so and why ({@link
 * NamespaceDeletion#remainingObjects()} is -1). {@link #deleteNamespace} is one pass at once. A
 * pass is {@code mooncake_store_remove_by_regex} with the pattern {@code ^<escaped namespace>_}
 * (ECMAScript syntax, searched anywhere in the key, hence the anchor).
 *
 * <p>Thread-safe: the executor's workers call one instance concurrently.
 */
public final class MooncakeStore implements Store {

  /** The reason of a PUT row the master refused for space, for the executor's log. */
  static final String NO_HANDLE_REASON =
      "NO_AVAILABLE_HANDLE (-200): the Mooncake master has no space for the object";

  private static final String REGEX_METACHARACTERS = "\\^$.|?*+()[]{}";
  private static final long LONG_SENTINEL = Long.MIN_VALUE;
  private static final int INT_SENTINEL = MooncakeCodes.MALFORMED_RESULT;

  private final MooncakeStoreSettings settings;
  private final MooncakeNative library;
  private final MemorySegment client;

  /** Read lock: one downcall on {@link #client}. Write lock: {@link #close}. */
  private final ReentrantReadWriteLock lifecycle = new ReentrantReadWriteLock();

  /** Guarded by {@link #lifecycle}: written under the write lock, read under either. */
  private boolean closed;

  private final Clock clock;

  /**
   * When the read leases this client's own GET and QUERY calls were granted have all ended
   * (nanoTime), as far as this client can tell: the end of the latest such call plus one lease.
   */
  private final AtomicLong ownLeaseEndNs;

  /** The TCP sockets setup opened, as {@code address:port} (empty when /proc is unreadable). */
  private List<String> clientListeners = List.of();

  private final Object registration = new Object();
  private volatile MemorySegment registered;

  private final AtomicLong putsNewlyWritten = new AtomicLong();
  private final AtomicLong putsAlreadyExisted = new AtomicLong();
  private final AtomicLong getsOk = new AtomicLong();
  private final AtomicLong getsMissing = new AtomicLong();
  private final AtomicLong getsInvalid = new AtomicLong();
  private final AtomicLong existsOk = new AtomicLong();
  private final AtomicLong existsMissing = new AtomicLong();
  private final AtomicLong rejected = new AtomicLong();
  private final AtomicLong retiredFailures = new AtomicLong();
  private final AtomicLong unknown = new AtomicLong();
  private final AtomicLong malformed = new AtomicLong();
  private final AtomicLong nativeCalls = new AtomicLong();
  private final AtomicLong reconnectRoundTrips = new AtomicLong();

  /**
   * Set by an answer that reads as an outage (the master may have restarted): the next call that
   * reaches the master re-establishes the connection first ({@link #reconnectIfDue}).
   */
  private final AtomicBoolean reconnectDue = new AtomicBoolean();

  /** Data-path calls inside the library now, and the most there ever were at once. */
  private final AtomicInteger callsInside = new AtomicInteger();

  private final AtomicInteger peakCallsInside = new AtomicInteger();

  /** Time and waiting for namespace deletion; tests replace it to move a manual clock. */
  interface Clock {
    long nowNs();

    void sleepNs(long ns) throws InterruptedException;

    Clock SYSTEM =
        new Clock() {
          @Override
          public long nowNs() {
            return System.nanoTime();
          }

          @Override
          public void sleepNs(long ns) throws InterruptedException {
            TimeUnit.NANOSECONDS.sleep(ns);
          }
        };
  }

  /**
   * Added to every lease end this client computes: the master starts a lease while it answers,
   * before the call returns here, so the margin only covers timer granularity.
   */
  static final long LEASE_MARGIN_MS = 100;

  private MooncakeStore(
      MooncakeStoreSettings settings, MooncakeNative library, MemorySegment client, Clock clock) {
    this.settings = settings;
    this.library = library;
    this.client = client;
    this.clock = clock;
    this.ownLeaseEndNs = new AtomicLong(clock.nowNs());
  }

  /**
   * Loads the library, creates a client and runs {@code mooncake_store_setup} with the settings.
   *
   * @throws IllegalArgumentException when the library cannot be loaded or lacks a function
   * @throws IOException when the client cannot be created or setup fails (the client is destroyed)
   */
  public static MooncakeStore open(MooncakeStoreSettings settings) throws IOException {
    return open(settings, Clock.SYSTEM);
  }

  /** {@link #open(MooncakeStoreSettings)} with another clock for namespace deletion. */
  static MooncakeStore open(MooncakeStoreSettings settings, Clock clock) throws IOException {
    MooncakeNative library = MooncakeNative.load(settings.libraryPath());
    MemorySegment client = library.create();
    if (client == null || client.address() == 0) {
      throw new IOException(
          "mooncake_store_create returned NULL (library_path=" + settings.libraryPath() + ")");
    }
    MooncakeStore store = new MooncakeStore(settings, library, client, clock);
    store.nativeCalls.incrementAndGet();
    try {
      store.setup();
    } catch (IOException | RuntimeException | Error e) {
      store.nativeCalls.incrementAndGet();
      library.destroy(client);
      throw e;
    }
    return store;
  }

  private void setup() throws IOException {
    int status;
    Optional<Set<ListeningSockets.Listener>> before = ListeningSockets.ofThisProcess();
    try (Arena arena = Arena.ofConfined()) {
      nativeCalls.incrementAndGet();
      status =
          library.setup(
              client,
              arena.allocateFrom(settings.localHostname()),
              arena.allocateFrom(settings.metadataServer()),
              settings.globalSegmentSizeBytes(),
              settings.localBufferSizeBytes(),
              arena.allocateFrom(settings.protocol()),
              arena.allocateFrom(settings.deviceName()),
              arena.allocateFrom(settings.masterServerAddress()));
    }
    if (status != MooncakeCodes.OK) {
      throw new IOException(
          "mooncake_store_setup returned "
              + MooncakeCodes.describe(status)
              + " for master_server_address="
              + settings.masterServerAddress()
              + " metadata_server="
              + settings.metadataServer()
              + " protocol="
              + settings.protocol()
              + " local_hostname="
              + settings.localHostname()
              + " (the client was destroyed)");
    }
    Optional<Set<ListeningSockets.Listener>> after = ListeningSockets.ofThisProcess();
    if (before.isPresent() && after.isPresent()) {
      List<ListeningSockets.Listener> opened =
          after.get().stream().filter(l -> !before.get().contains(l)).toList();
      clientListeners = opened.stream().map(ListeningSockets.Listener::toString).toList();
      reportListeners(opened);
    }
  }

  /**
   * Says which sockets the client opened. The real client binds its transfer listeners to every
   * interface whatever {@code local_hostname} names, and none of them authenticates its peers: a
   * warning when {@code local_hostname} is a loopback address (the operator evidently meant the
   * store to stay on this machine), otherwise a note, both pointing at the firewall advice.
   */
  private void reportListeners(List<ListeningSockets.Listener> opened) {
    List<String> wildcard =
        opened.stream()
            .filter(ListeningSockets.Listener::allInterfaces)
            .map(ListeningSockets.Listener::toString)
            .toList();
    if (wildcard.isEmpty()) {
      return;
    }
    String host = settings.localHostname();
    boolean loopback = host.equals("localhost") || host.startsWith("127.") || host.equals("::1");
    System.getLogger(MooncakeStore.class.getName())
        .log(
            loopback ? System.Logger.Level.WARNING : System.Logger.Level.INFO,
            "the Mooncake client listens on every interface at "
                + String.join(", ", wildcard)
                + " (local_hostname="
                + host
                + " only names the address peers are told); these ports accept unauthenticated"
                + " reads and writes of the store: firewall them (docs/mooncake.md, Network"
                + " exposure)");
  }

  /**
   * The TCP sockets the client opened in {@code mooncake_store_setup}, as {@code address:port}
   * ({@code 0.0.0.0} and {@code [0:0:0:0:0:0:0:0]} are every interface); empty when this is not
   * Linux. For operators and tests: what the inference process exposes on the network.
   */
  public List<String> clientListeners() {
    return clientListeners;
  }

  @Override
  public String name() {
    return "mooncake";
  }

  /**
   * False: a failed SDK call may leave a transfer running against the Host buffers (see the class
   * comment).
   */
  @Override
  public boolean failuresRetire() {
    return false;
  }

  @Override
  public int maxKeyBytes() {
    return settings.maxKeyBytes();
  }

  /** The settings this store was opened with. */
  public MooncakeStoreSettings settings() {
    return settings;
  }

  /** A snapshot of the row and call counters. */
  public MooncakeCounters counters() {
    return new MooncakeCounters(
        putsNewlyWritten.get(),
        putsAlreadyExisted.get(),
        getsOk.get(),
        getsMissing.get(),
        getsInvalid.get(),
        existsOk.get(),
        existsMissing.get(),
        rejected.get(),
        retiredFailures.get(),
        unknown.get(),
        malformed.get(),
        nativeCalls.get(),
        reconnectRoundTrips.get());
  }

  /**
   * Registers the shared Host allocation with {@code mooncake_store_register_buffer}, once. Every
   * later GET destination and PUT source must be a slice of it.
   *
   * @throws IllegalArgumentException when the allocation is not native memory or is empty
   * @throws IllegalStateException when an allocation is already registered or the store is closed
   * @throws IOException when the SDK refuses the registration
   */
  @Override
  public void registerHostBuffer(MemorySegment hostAllocation) throws IOException {
    if (hostAllocation == null || !hostAllocation.isNative() || hostAllocation.byteSize() == 0) {
      throw new IllegalArgumentException(
          "mooncake host allocation="
              + hostAllocation
              + " must be a non-empty native segment (off-heap memory the SDK can address)");
    }
    Lock lock = lifecycle.readLock();
    lock.lock();
    try {
      requireOpen();
      synchronized (registration) {
        if (registered != null) {
          throw new IllegalStateException(
              "mooncake host allocation already registered at address=0x"
                  + Long.toHexString(registered.address())
                  + " length_bytes="
                  + registered.byteSize());
        }
        nativeCalls.incrementAndGet();
        int status = library.registerBuffer(client, hostAllocation, hostAllocation.byteSize());
        if (status != MooncakeCodes.OK) {
          throw new IOException(
              "mooncake_store_register_buffer returned "
                  + MooncakeCodes.describe(status)
                  + " for length_bytes="
                  + hostAllocation.byteSize());
        }
        registered = hostAllocation;
      }
    } finally {
      lock.unlock();
    }
  }

  @Override
  public StoreResult exists(List<String> keys) {
    byte[][] encoded = encodeKeys(keys);
    int count = encoded.length;
    if (count == 0) {
      return StoreResult.of(List.of());
    }
    Lock lock = lifecycle.readLock();
    lock.lock();
    try (Arena arena = Arena.ofConfined()) {
      requireOpen();
      reconnectIfDue(arena);
      MemorySegment keyArray = keyArray(arena, encoded);
      MemorySegment results = intResults(arena, count);
      nativeCalls.incrementAndGet();
      enterLibrary();
      int status;
      try {
        status = library.batchIsExist(client, keyArray, count, results);
      } finally {
        leaveLibrary();
      }
      noteLeases();
      // A QUERY hands the SDK no payload buffer: whatever it answers, nothing stays in use.
      return noteOutage(status, new StoreResult(decodeExists(status, results, count), true));
    } finally {
      lock.unlock();
    }
  }

  @Override
  public StoreResult get(List<String> keys, List<MemorySegment> destinations) {
    byte[][] encoded = encodeKeys(keys);
    requirePayloads("destination", destinations, encoded.length, true);
    int count = encoded.length;
    if (count == 0) {
      return StoreResult.of(List.of());
    }
    Lock lock = lifecycle.readLock();
    lock.lock();
    try (Arena arena = Arena.ofConfined()) {
      requireOpen();
      reconnectIfDue(arena);
      MemorySegment keyArray = keyArray(arena, encoded);
      MemorySegment buffers = bufferArray(arena, destinations);
      MemorySegment sizes = sizeArray(arena, destinations);
      MemorySegment results = longResults(arena, count);
      nativeCalls.incrementAndGet();
      enterLibrary();
      int status;
      try {
        status = library.batchGetInto(client, keyArray, buffers, sizes, count, results);
      } finally {
        leaveLibrary();
      }
      noteLeases();
      return noteOutage(status, decodeGet(status, results, destinations));
    } finally {
      lock.unlock();
    }
  }

  @Override
  public StoreResult put(List<String> keys, List<MemorySegment> sources) {
    byte[][] encoded = encodeKeys(keys);
    requirePayloads("source", sources, encoded.length, false);
    int count = encoded.length;
    if (count == 0) {
      return StoreResult.of(List.of());
    }
    Lock lock = lifecycle.readLock();
    lock.lock();
    try (Arena arena = Arena.ofConfined()) {
      requireOpen();
      reconnectIfDue(arena);
      MemorySegment keyArray = keyArray(arena, encoded);
      MemorySegment buffers = bufferArray(arena, sources);
      MemorySegment sizes = sizeArray(arena, sources);
      MemorySegment results = intResults(arena, count);
      nativeCalls.incrementAndGet();
      enterLibrary();
      int status;
      try {
        status = library.batchPutFrom(client, keyArray, buffers, sizes, count, results);
      } finally {
        leaveLibrary();
      }
      return noteOutage(status, decodePut(status, results, sources));
    } finally {
      lock.unlock();
    }
  }

  /**
   * Removes every object whose key starts with {@code namespace + "_"} by one {@code
   * mooncake_store_remove_by_regex(client, "^<escaped namespace>_", force=0)}, at once: objects
   * under a read lease stay. {@link #purgeNamespace} waits for leases to end.
   *
   * @return how many objects the master removed (leased objects are skipped)
   * @throws IOException when the SDK answers a negative code
   */
  @Override
  public long deleteNamespace(String namespace) throws IOException {
    byte[] utf8 = encodeKey("namespace", namespace);
    return removeOnce(namespacePattern(namespace), utf8.length);
  }

  /**
   * Removes the namespace's objects in passes of {@code remove_by_regex(force=0)}, waiting for read
   * leases to end before and between them within {@link
   * MooncakeStoreSettings#namespaceDeleteWaitMs()} (class comment). Runs on the calling thread (an
   * administrative call); holds no lock while it waits.
   *
   * @return the objects removed over every pass; what stayed cannot be counted (-1), and the reason
   *     says what may have stayed
   * @throws IOException when a pass answers a negative code: the deletion failed
   * @throws InterruptedException when the waiting thread is interrupted
   */
  @Override
  public NamespaceDeletion purgeNamespace(String namespace)
      throws IOException, InterruptedException {
    byte[] utf8 = encodeKey("namespace", namespace);
    String pattern = namespacePattern(namespace);
    long leaseNs = TimeUnit.MILLISECONDS.toNanos(settings.leaseTtlMs());
    long startNs = clock.nowNs();
    long deadlineNs = startNs + TimeUnit.MILLISECONDS.toNanos(settings.namespaceDeleteWaitMs());
    long waitedNs = 0;

    long ownEndNs = ownLeaseEndNs.get();
    boolean ownLeasesEnded = ownEndNs - startNs <= 0;
    if (!ownLeasesEnded) {
      long untilNs = ownEndNs - deadlineNs <= 0 ? ownEndNs : deadlineNs;
      clock.sleepNs(untilNs - startNs);
      waitedNs += untilNs - startNs;
      ownLeasesEnded = untilNs == ownEndNs;
    }
    long removed = removeOnce(pattern, utf8.length);
    int passes = 1;
    boolean settled = false;
    while (leaseNs > 0 && clock.nowNs() + leaseNs - deadlineNs <= 0) {
      clock.sleepNs(leaseNs);
      waitedNs += leaseNs;
      long pass = removeOnce(pattern, utf8.length);
      passes++;
      removed += pass;
      if (pass == 0) {
        settled = true;
        break;
      }
    }
    return new NamespaceDeletion(
        removed,
        -1,
        passes,
        TimeUnit.NANOSECONDS.toMillis(waitedNs),
        remainingReason(ownLeasesEnded, settled));
  }

  private String remainingReason(boolean ownLeasesEnded, boolean settled) {
    StringBuilder why =
        new StringBuilder(
            "Mooncake cannot count the objects that stay: remove_by_regex without force skips"
                + " objects under a read lease (lease_ttl_ms="
                + settings.leaseTtlMs()
                + ") and objects whose PUT has not finished; ");
    if (!ownLeasesEnded) {
      why.append(
          "this client's own read leases had not ended when namespace_delete_wait_ms="
              + settings.namespaceDeleteWaitMs()
              + " ran out, so objects it had read or queried may have stayed");
    } else if (settled) {
      why.append(
          "a pass one lease after the previous one removed nothing, so only objects another"
              + " client read or queried within the last lease, or was still writing, can have"
              + " stayed");
    } else {
      why.append(
          "namespace_delete_wait_ms="
              + settings.namespaceDeleteWaitMs()
              + " ran out before a pass removed nothing, so objects other clients had read,"
              + " queried or were writing may have stayed");
    }
    return why.toString();
  }

  /** One {@code remove_by_regex(pattern, force=0)} under the read lock. */
  private long removeOnce(String pattern, int namespaceBytes) throws IOException {
    Lock lock = lifecycle.readLock();
    lock.lock();
    try (Arena arena = Arena.ofConfined()) {
      requireOpen();
      reconnectIfDue(arena);
      nativeCalls.incrementAndGet();
      long removed = library.removeByRegex(client, arena.allocateFrom(pattern), 0);
      if (removed == MooncakeCodes.RPC_FAIL || removed == MooncakeCodes.RPC_TIMEOUT) {
        reconnectDue.set(true);
      }
      if (removed < 0) {
        throw new IOException(
            "mooncake_store_remove_by_regex pattern="
                + pattern
                + " returned "
                + MooncakeCodes.describe(removed)
                + " (namespace of "
                + namespaceBytes
                + " bytes)");
      }
      return removed;
    } finally {
      lock.unlock();
    }
  }

  /** A data-path call enters the library: counts it, and the most calls inside at once. */
  private void enterLibrary() {
    int inside = callsInside.incrementAndGet();
    peakCallsInside.accumulateAndGet(inside, Math::max);
  }

  private void leaveLibrary() {
    callsInside.decrementAndGet();
  }

  /**
   * Marks the connection for re-establishment when {@code result} reads as an outage: a top-level
   * failure, a row the executor takes as an outage signal, or an unknown row. Returns {@code
   * result}.
   */
  private StoreResult noteOutage(int status, StoreResult result) {
    boolean outage = status != MooncakeCodes.OK;
    for (RowResult row : result.rows()) {
      outage |=
          row instanceof RowResult.Unknown
              || (row instanceof RowResult.Rejected rejected && rejected.outage());
    }
    if (outage) {
      reconnectDue.set(true);
    }
    return result;
  }

  /**
   * Re-establishes the connection to the master after an answer that read as an outage, before the
   * call that follows it: with the executor, that call is the recovery probe.
   *
   * <p>The real client talks to the master through a pool of RPC connections, one for each call it
   * ran at once. A master restart leaves them stale, and each fails the next call made on it with
   * {@code RPC_FAIL} before it is dropped and replaced by a fresh one. Left alone, the probe would
   * spend a stale connection and fail although the master is back, and recovery would take a second
   * cooldown. So the store first makes round trips of its own: {@code mooncake_store_is_exist} of a
   * key no object has ({@link #RECONNECT_KEY}; it touches no payload and, finding nothing, grants
   * no lease), until one is answered. Each {@code RPC_FAIL} spends one stale connection; there can
   * be no more of them than the most calls this store ever had inside the library at once, so it
   * stops after that many round trips plus one. Any other failure means the master does not answer
   * (it is still down, or times out): it stops at once and lets the call go on, whose answer
   * reports the outage, and the next call tries again.
   */
  private void reconnectIfDue(Arena arena) {
    if (!reconnectDue.getAndSet(false)) {
      return;
    }
    byte[] key = RECONNECT_KEY.getBytes(StandardCharsets.UTF_8);
    if (key.length > settings.maxKeyBytes()) {
      key = Arrays.copyOf(key, settings.maxKeyBytes());
    }
    MemorySegment cKey = arena.allocate(key.length + 1L); // zero-filled: NUL-terminated
    MemorySegment.copy(key, 0, cKey, JAVA_BYTE, 0, key.length);
    int roundTrips = peakCallsInside.get() + 1;
    for (int i = 1; i <= roundTrips; i++) {
      nativeCalls.incrementAndGet();
      reconnectRoundTrips.incrementAndGet();
      int answer = library.isExist(client, cKey);
      if (answer == 0 || answer == 1) {
        if (i > 1) {
          System.getLogger(MooncakeStore.class.getName())
              .log(
                  System.Logger.Level.INFO,
                  "the Mooncake client reached the master "
                      + settings.masterServerAddress()
                      + " again after "
                      + (i - 1)
                      + " failed round trips on stale connections");
        }
        return;
      }
      if (answer != MooncakeCodes.RPC_FAIL) {
        break; // not a stale connection: the master does not answer
      }
    }
    reconnectDue.set(true);
  }

  /**
   * The key of {@link #reconnectIfDue}'s existence queries (cut to {@link
   * MooncakeStoreSettings#maxKeyBytes()}). It has no {@code _}, so it is in no namespace, and
   * nothing writes it.
   */
  static final String RECONNECT_KEY = "tsl3-reconnect";

  /** A GET or QUERY call just returned: the leases it was granted end one lease from now. */
  private void noteLeases() {
    long endNs =
        clock.nowNs() + TimeUnit.MILLISECONDS.toNanos(settings.leaseTtlMs() + LEASE_MARGIN_MS);
    ownLeaseEndNs.accumulateAndGet(endNs, (current, next) -> next - current > 0 ? next : current);
  }

  /**
   * Unregisters the Host allocation and destroys the client, once; later calls do nothing. The
   * executor calls this only after every call has retired; a store whose retirement is unknown is
   * kept open for the life of the process.
   *
   * @throws IOException when unregistering failed (the client is destroyed all the same)
   */
  @Override
  public void close() throws IOException {
    Lock lock = lifecycle.writeLock();
    lock.lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
      int status = MooncakeCodes.OK;
      MemorySegment host = registered;
      try {
        if (host != null) {
          nativeCalls.incrementAndGet();
          status = library.unregisterBuffer(client, host);
        }
      } finally {
        nativeCalls.incrementAndGet();
        library.destroy(client);
      }
      if (status != MooncakeCodes.OK) {
        throw new IOException(
            "mooncake_store_unregister_buffer returned "
                + MooncakeCodes.describe(status)
                + "; the client was destroyed");
      }
    } finally {
      lock.unlock();
    }
  }

  /**
   * The removal pattern for a namespace: {@code ^}, the namespace with every ECMAScript and POSIX
   * ERE metacharacter ({@code \ ^ $ . | ? * + ( ) [ ] { }}) escaped by a backslash, then {@code _}.
   */
  static String namespacePattern(String namespace) {
    StringBuilder pattern = new StringBuilder(namespace.length() + 8).append('^');
    for (int i = 0; i < namespace.length(); i++) {
      char c = namespace.charAt(i);
      if (REGEX_METACHARACTERS.indexOf(c) >= 0) {
        pattern.append('\\');
      }
      pattern.append(c);
    }
    return pattern.append('_').toString();
  }

  // ---------------------------------------------------------------------------------------------
  // Argument checks: every one runs before any native call.
  // ---------------------------------------------------------------------------------------------

  private void requireOpen() {
    if (closed) {
      throw new IllegalStateException("mooncake store is closed");
    }
  }

  private byte[][] encodeKeys(List<String> keys) {
    if (keys == null) {
      throw new IllegalArgumentException("mooncake keys=null");
    }
    byte[][] encoded = new byte[keys.size()][];
    for (int i = 0; i < encoded.length; i++) {
      encoded[i] = encodeKey("key", keys.get(i));
    }
    return encoded;
  }

  private byte[] encodeKey(String what, String key) {
    if (key == null || key.isEmpty()) {
      throw new IllegalArgumentException("mooncake " + what + "='" + key + "' must be non-empty");
    }
    if (key.indexOf('\0') >= 0) {
      throw new IllegalArgumentException(
          "mooncake " + what + " must not contain NUL (it is passed as a C string)");
    }
    byte[] utf8 = key.getBytes(StandardCharsets.UTF_8);
    if (utf8.length > settings.maxKeyBytes()) {
      throw new IllegalArgumentException(
          "mooncake "
              + what
              + " of "
              + utf8.length
              + " UTF-8 bytes exceeds max_key_bytes="
              + settings.maxKeyBytes()
              + " (allowed: [1, "
              + settings.maxKeyBytes()
              + "])");
    }
    return utf8;
  }

  private void requirePayloads(
      String what, List<MemorySegment> segments, int count, boolean writable) {
    if (segments == null || segments.size() != count) {
      throw new IllegalArgumentException(
          "mooncake "
              + what
              + " count="
              + (segments == null ? "null" : segments.size())
              + " must equal key count="
              + count);
    }
    if (count == 0) {
      return;
    }
    MemorySegment host = registered;
    if (host == null) {
      throw new IllegalStateException(
          "mooncake host allocation is not registered; call registerHostBuffer first");
    }
    long base = host.address();
    long length = host.byteSize();
    for (int i = 0; i < count; i++) {
      MemorySegment segment = segments.get(i);
      if (segment == null || !segment.isNative() || segment.byteSize() == 0) {
        throw new IllegalArgumentException(
            "mooncake " + what + "[" + i + "]=" + segment + " must be a non-empty native slice");
      }
      long offset = segment.address() - base;
      if (segment.address() < base || offset > length - segment.byteSize()) {
        throw new IllegalArgumentException(
            "mooncake "
                + what
                + "["
                + i
                + "] at address=0x"
                + Long.toHexString(segment.address())
                + " length_bytes="
                + segment.byteSize()
                + " lies outside the registered host allocation [0x"
                + Long.toHexString(base)
                + ", 0x"
                + Long.toHexString(base + length)
                + ")");
      }
      if (writable && segment.isReadOnly()) {
        throw new IllegalArgumentException(
            "mooncake " + what + "[" + i + "] is read-only; a GET writes into it");
      }
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Argument arrays (confined arena, freed when the call returns).
  // ---------------------------------------------------------------------------------------------

  private static MemorySegment keyArray(Arena arena, byte[][] encoded) {
    MemorySegment pointers = arena.allocate(ADDRESS, encoded.length);
    for (int i = 0; i < encoded.length; i++) {
      // allocate() zero-fills, so the byte after the key is the C string's NUL.
      MemorySegment key = arena.allocate(encoded[i].length + 1L);
      MemorySegment.copy(encoded[i], 0, key, JAVA_BYTE, 0, encoded[i].length);
      pointers.setAtIndex(ADDRESS, i, key);
    }
    return pointers;
  }

  private static MemorySegment bufferArray(Arena arena, List<MemorySegment> segments) {
    MemorySegment pointers = arena.allocate(ADDRESS, segments.size());
    for (int i = 0; i < segments.size(); i++) {
      pointers.setAtIndex(ADDRESS, i, segments.get(i));
    }
    return pointers;
  }

  private static MemorySegment sizeArray(Arena arena, List<MemorySegment> segments) {
    MemorySegment sizes = arena.allocate(JAVA_LONG, segments.size());
    for (int i = 0; i < segments.size(); i++) {
      sizes.setAtIndex(JAVA_LONG, i, segments.get(i).byteSize());
    }
    return sizes;
  }

  /** {@code count} rows plus one guard row, all holding the sentinel. */
  private static MemorySegment intResults(Arena arena, int count) {
    MemorySegment results = arena.allocate(JAVA_INT, count + 1L);
    for (int i = 0; i <= count; i++) {
      results.setAtIndex(JAVA_INT, i, INT_SENTINEL);
    }
    return results;
  }

  /** {@code count} rows plus one guard row, all holding the sentinel. */
  private static MemorySegment longResults(Arena arena, int count) {
    MemorySegment results = arena.allocate(JAVA_LONG, count + 1L);
    for (int i = 0; i <= count; i++) {
      results.setAtIndex(JAVA_LONG, i, LONG_SENTINEL);
    }
    return results;
  }

  // ---------------------------------------------------------------------------------------------
  // Decoding: the result contract of the class comment.
  // ---------------------------------------------------------------------------------------------

  /** Rows of a call whose top-level status was not 0: nothing per key is known. */
  private List<RowResult> failedCall(int status, int count) {
    boolean documented = status < 0 && status != INT_SENTINEL;
    int code = documented ? status : MooncakeCodes.MALFORMED_RESULT;
    (documented ? unknown : malformed).addAndGet(count);
    List<RowResult> rows = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      rows.add(new RowResult.Unknown(code));
    }
    return rows;
  }

  private RowResult malformedRow() {
    malformed.incrementAndGet();
    return new RowResult.Unknown(MooncakeCodes.MALFORMED_RESULT);
  }

  private List<RowResult> decodeExists(int status, MemorySegment results, int count) {
    if (status != MooncakeCodes.OK) {
      return failedCall(status, count);
    }
    boolean overrun = results.getAtIndex(JAVA_INT, count) != INT_SENTINEL;
    List<RowResult> rows = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      int answer = results.getAtIndex(JAVA_INT, i);
      if (overrun || answer == INT_SENTINEL || answer > 1) {
        rows.add(malformedRow());
      } else if (answer == 1) {
        existsOk.incrementAndGet();
        rows.add(new RowResult.Ok(0, false));
      } else if (answer == 0) {
        existsMissing.incrementAndGet();
        rows.add(RowResult.MISSING);
      } else {
        unknown.incrementAndGet();
        rows.add(new RowResult.Unknown(answer));
      }
    }
    return rows;
  }

  private StoreResult decodeGet(int status, MemorySegment results, List<MemorySegment> dsts) {
    int count = dsts.size();
    if (status != MooncakeCodes.OK) {
      return new StoreResult(failedCall(status, count), false);
    }
    boolean overrun = results.getAtIndex(JAVA_LONG, count) != LONG_SENTINEL;
    boolean retired = !overrun;
    List<RowResult> rows = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      long answer = results.getAtIndex(JAVA_LONG, i);
      if (overrun || answer <= Integer.MIN_VALUE || answer > dsts.get(i).byteSize()) {
        rows.add(malformedRow()); // a read longer than its destination broke the contract
        retired = false;
      } else if (answer >= 0) {
        if (answer == dsts.get(i).byteSize()) {
          getsOk.incrementAndGet();
          rows.add(new RowResult.Ok(answer, false));
        } else {
          getsInvalid.incrementAndGet();
          rows.add(new RowResult.Invalid(answer));
        }
      } else if (answer == MooncakeCodes.OBJECT_NOT_FOUND) {
        getsMissing.incrementAndGet();
        rows.add(RowResult.MISSING);
      } else if (MooncakeCodes.retiredGetFailure(answer)) {
        retiredFailures.incrementAndGet();
        rows.add(new RowResult.Rejected((int) answer, MooncakeCodes.outage(answer)));
      } else {
        unknown.incrementAndGet();
        rows.add(new RowResult.Unknown((int) answer));
        retired = false;
      }
    }
    return new StoreResult(rows, retired);
  }

  private StoreResult decodePut(int status, MemorySegment results, List<MemorySegment> srcs) {
    int count = srcs.size();
    if (status != MooncakeCodes.OK) {
      return new StoreResult(failedCall(status, count), false);
    }
    boolean overrun = results.getAtIndex(JAVA_INT, count) != INT_SENTINEL;
    boolean retired = !overrun;
    List<RowResult> rows = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      int answer = results.getAtIndex(JAVA_INT, i);
      long length = srcs.get(i).byteSize();
      if (overrun || answer == INT_SENTINEL || answer > 0) {
        rows.add(malformedRow());
        retired = false;
      } else if (answer == MooncakeCodes.OK) {
        putsNewlyWritten.incrementAndGet();
        rows.add(new RowResult.Ok(length, false));
      } else if (answer == MooncakeCodes.OBJECT_ALREADY_EXISTS) {
        putsAlreadyExisted.incrementAndGet();
        rows.add(new RowResult.Ok(length, true));
      } else if (answer == MooncakeCodes.NO_AVAILABLE_HANDLE) {
        rejected.incrementAndGet();
        rows.add(new RowResult.Rejected(answer, false, NO_HANDLE_REASON));
      } else if (MooncakeCodes.retiredPutFailure(answer)) {
        retiredFailures.incrementAndGet();
        rows.add(new RowResult.Rejected(answer, MooncakeCodes.outage(answer)));
      } else {
        unknown.incrementAndGet();
        rows.add(new RowResult.Unknown(answer));
        retired = false;
      }
    }
    return new StoreResult(rows, retired);
  }
}
