package io.tokenspeed.l3.store.mooncake;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.Path;

/**
 * The test controls of {@code src/test/c/mooncake_stub.c}, the in-memory library that implements
 * {@code store_c.h} for these tests. The build compiles it into {@code
 * target/native/libmooncake_stub.so} and names it in the {@code mooncake.stub.lib} system property.
 * Function names are given without the {@code mooncake_store_} prefix ({@code batch_get_into}).
 */
final class MooncakeStub {

  static final Path LIBRARY =
      Path.of(System.getProperty("mooncake.stub.lib", "target/native/libmooncake_stub.so"))
          .toAbsolutePath();

  private static final Linker LINKER = Linker.nativeLinker();
  private static final SymbolLookup LOOKUP = SymbolLookup.libraryLookup(LIBRARY, Arena.global());

  private static final MethodHandle RESET = bind("stub_reset", FunctionDescriptor.ofVoid());
  private static final MethodHandle INJECT =
      bind("stub_inject", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT));
  private static final MethodHandle INJECT_ROWS =
      bind("stub_inject_rows", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT));
  private static final MethodHandle SHORT_READS =
      bind("stub_short_reads", FunctionDescriptor.ofVoid(JAVA_INT, JAVA_LONG));
  private static final MethodHandle MALFORM =
      bind("stub_malform", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
  private static final MethodHandle CREATE_NULL =
      bind("stub_create_null", FunctionDescriptor.ofVoid(JAVA_INT));
  private static final MethodHandle CALLS =
      bind("stub_calls", FunctionDescriptor.of(JAVA_LONG, ADDRESS));
  private static final MethodHandle OBJECT_COUNT =
      bind("stub_object_count", FunctionDescriptor.of(JAVA_LONG));
  private static final MethodHandle REGISTERED_COUNT =
      bind("stub_registered_count", FunctionDescriptor.of(JAVA_LONG));
  private static final MethodHandle HAS =
      bind("stub_has", FunctionDescriptor.of(JAVA_INT, ADDRESS));
  private static final MethodHandle LAST_SETUP =
      bind("stub_last_setup", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
  private static final MethodHandle SET_LEASE_TTL =
      bind("stub_set_lease_ttl_ms", FunctionDescriptor.ofVoid(JAVA_LONG));
  private static final MethodHandle ADVANCE =
      bind("stub_advance_ms", FunctionDescriptor.ofVoid(JAVA_LONG));
  private static final MethodHandle LEASED_COUNT =
      bind("stub_leased_count", FunctionDescriptor.of(JAVA_LONG));
  private static final MethodHandle MASTER_STOP =
      bind("stub_master_stop", FunctionDescriptor.ofVoid());
  private static final MethodHandle MASTER_START =
      bind("stub_master_start", FunctionDescriptor.ofVoid(JAVA_INT));
  private static final MethodHandle STALE_FAILURES =
      bind("stub_stale_failures", FunctionDescriptor.of(JAVA_LONG));

  /** The read lease the stub grants unless a test sets another: the master's default. */
  static final long DEFAULT_LEASE_TTL_MS = 10_000;

  /** Malformed answers {@link #malform} can arm. */
  static final int LAST_ROW_UNWRITTEN = 1;

  static final int ROW_PAST_COUNT = 2;
  static final int VALUE_OUT_OF_SET = 3;

  private MooncakeStub() {}

  private static MethodHandle bind(String symbol, FunctionDescriptor descriptor) {
    return LINKER.downcallHandle(LOOKUP.find(symbol).orElseThrow(), descriptor);
  }

  /** Settings that reach the stub: a pure client with a small key limit. */
  static MooncakeStoreSettings settings(int maxKeyBytes) {
    return new MooncakeStoreSettings(
        LIBRARY,
        "127.0.0.1:17812",
        MooncakeStoreSettings.DEFAULT_METADATA_SERVER,
        "127.0.0.1:50051",
        "tcp",
        "",
        0,
        MooncakeStoreSettings.DEFAULT_LOCAL_BUFFER_SIZE_BYTES,
        maxKeyBytes,
        DEFAULT_LEASE_TTL_MS,
        MooncakeStoreSettings.DEFAULT_NAMESPACE_DELETE_WAIT_MS);
  }

  /** The same settings over another transfer protocol. */
  static MooncakeStoreSettings settings(int maxKeyBytes, String protocol) {
    MooncakeStoreSettings tcp = settings(maxKeyBytes);
    return new MooncakeStoreSettings(
        tcp.libraryPath(),
        tcp.localHostname(),
        tcp.metadataServer(),
        tcp.masterServerAddress(),
        protocol,
        tcp.deviceName(),
        tcp.globalSegmentSizeBytes(),
        tcp.localBufferSizeBytes(),
        tcp.maxKeyBytes(),
        tcp.leaseTtlMs(),
        tcp.namespaceDeleteWaitMs());
  }

  /** The read lease every later hit of a GET or an existence query grants. */
  static void setLeaseTtlMs(long ttlMs) {
    try {
      SET_LEASE_TTL.invokeExact(ttlMs);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** Moves the stub's lease clock forward, so leases end without a test sleeping. */
  static void advanceMs(long ms) {
    try {
      ADVANCE.invokeExact(ms);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** Objects whose read lease has not ended. */
  static long leasedCount() {
    try {
      return (long) LEASED_COUNT.invokeExact();
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /**
   * The master stops: every call that needs it answers {@code RPC_FAIL} until {@link #masterStart},
   * and every object is forgotten (the master's metadata is in its memory).
   */
  static void masterStop() {
    try {
      MASTER_STOP.invokeExact();
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /**
   * A new master answers; every client open now keeps {@code staleConnections} pooled connections
   * to the old one, each of which fails one call with {@code RPC_FAIL} before it is dropped.
   */
  static void masterStart(int staleConnections) {
    try {
      MASTER_START.invokeExact(staleConnections);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** Calls that failed on a stale connection since the last reset. */
  static long staleFailures() {
    try {
      return (long) STALE_FAILURES.invokeExact();
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  static void reset() {
    try {
      RESET.invokeExact();
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** The next {@code count} calls of {@code fn} return {@code code} and do nothing else. */
  static void inject(String fn, int code, int count) {
    try (Arena arena = Arena.ofConfined()) {
      check((int) INJECT.invokeExact(arena.allocateFrom(fn), code, count), fn);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** The next {@code count} rows of the batch function {@code fn} report {@code code}. */
  static void injectRows(String fn, long code, int count) {
    try (Arena arena = Arena.ofConfined()) {
      check((int) INJECT_ROWS.invokeExact(arena.allocateFrom(fn), code, count), fn);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** The next {@code count} reads report {@code shortfall} fewer bytes (negative: more). */
  static void shortReads(int count, long shortfall) {
    try {
      SHORT_READS.invokeExact(count, shortfall);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** The next call of the batch function {@code fn} answers malformed in the given mode. */
  static void malform(String fn, int mode) {
    try (Arena arena = Arena.ofConfined()) {
      check((int) MALFORM.invokeExact(arena.allocateFrom(fn), mode), fn);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  static void createNull(int count) {
    try {
      CREATE_NULL.invokeExact(count);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** Calls of {@code fn} since the last reset; {@code "*"} for every function together. */
  static long calls(String fn) {
    try (Arena arena = Arena.ofConfined()) {
      long calls = (long) CALLS.invokeExact(arena.allocateFrom(fn));
      if (calls < 0) {
        throw new AssertionError("the stub has no function " + fn);
      }
      return calls;
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  static long objectCount() {
    try {
      return (long) OBJECT_COUNT.invokeExact();
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  static long registeredCount() {
    try {
      return (long) REGISTERED_COUNT.invokeExact();
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  static boolean has(String key) {
    try (Arena arena = Arena.ofConfined()) {
      return (int) HAS.invokeExact(arena.allocateFrom(key)) == 1;
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  /** The last setup's arguments as {@code host|metadata|segment|buffer|protocol|device|master}. */
  static String lastSetup() {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment buf = arena.allocate(1024);
      check((int) LAST_SETUP.invokeExact(buf, buf.byteSize()), "last_setup");
      return buf.getString(0);
    } catch (Throwable t) {
      throw new AssertionError(t);
    }
  }

  private static void check(int status, String fn) {
    if (status != 0) {
      throw new AssertionError("stub control failed for " + fn);
    }
  }
}
