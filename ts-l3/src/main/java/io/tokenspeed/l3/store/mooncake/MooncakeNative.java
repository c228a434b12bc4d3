package io.tokenspeed.l3.store.mooncake;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.Path;

/**
 * Downcall handles for the part of Mooncake's C API ({@code store_c.h}) that {@link MooncakeStore}
 * uses, and nothing else: no decoding, no counting, no policy. Each method is one C call with the C
 * types mapped as
 *
 * <pre>
 *   C                        Java
 *   mooncake_store_t, T*     MemorySegment (ADDRESS)
 *   int                      int           (JAVA_INT)
 *   int64_t, uint64_t        long          (JAVA_LONG; uint64_t values stay below 2^63)
 *   size_t                   long          (JAVA_LONG; checked to be 8 bytes on this platform)
 * </pre>
 *
 * <p>The library is loaded into the global arena and never unloaded: a Mooncake client starts
 * threads inside the library, and unmapping its code while one of them still runs would crash the
 * process. {@code mooncake_replicate_config_t*} is always passed as {@code NULL} (the SDK's
 * defaults), because that struct's layout differs between SDK releases and a mismatched layout
 * would be read silently.
 */
final class MooncakeNative {

  private final Path libraryPath;
  private final MethodHandle create;
  private final MethodHandle destroy;
  private final MethodHandle setup;
  private final MethodHandle registerBuffer;
  private final MethodHandle unregisterBuffer;
  private final MethodHandle batchPutFrom;
  private final MethodHandle batchGetInto;
  private final MethodHandle batchIsExist;
  private final MethodHandle isExist;
  private final MethodHandle removeByRegex;

  private MooncakeNative(Path libraryPath, Linker linker, SymbolLookup lookup) {
    this.libraryPath = libraryPath;
    // mooncake_store_t mooncake_store_create();
    create = bind(linker, lookup, "mooncake_store_create", FunctionDescriptor.of(ADDRESS));
    // void mooncake_store_destroy(mooncake_store_t store);
    destroy = bind(linker, lookup, "mooncake_store_destroy", FunctionDescriptor.ofVoid(ADDRESS));
    // int mooncake_store_setup(store, const char *local_hostname, const char *metadata_server,
    //     uint64_t global_segment_size, uint64_t local_buffer_size, const char *protocol,
    //     const char *device_name, const char *master_server_addr);
    setup =
        bind(
            linker,
            lookup,
            "mooncake_store_setup",
            FunctionDescriptor.of(
                JAVA_INT, ADDRESS, ADDRESS, ADDRESS, JAVA_LONG, JAVA_LONG, ADDRESS, ADDRESS,
                ADDRESS));
    // int mooncake_store_register_buffer(store, void *buffer, size_t size);
    registerBuffer =
        bind(
            linker,
            lookup,
            "mooncake_store_register_buffer",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG));
    // int mooncake_store_unregister_buffer(store, void *buffer);
    unregisterBuffer =
        bind(
            linker,
            lookup,
            "mooncake_store_unregister_buffer",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
    // int mooncake_store_batch_put_from(store, const char **keys, void **buffers,
    //     const size_t *sizes, size_t count, const mooncake_replicate_config_t *config,
    //     int *results_out);
    batchPutFrom =
        bind(
            linker,
            lookup,
            "mooncake_store_batch_put_from",
            FunctionDescriptor.of(
                JAVA_INT, ADDRESS, ADDRESS, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS));
    // int mooncake_store_batch_get_into(store, const char **keys, void **buffers,
    //     const size_t *sizes, size_t count, int64_t *results_out);
    batchGetInto =
        bind(
            linker,
            lookup,
            "mooncake_store_batch_get_into",
            FunctionDescriptor.of(
                JAVA_INT, ADDRESS, ADDRESS, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS));
    // int mooncake_store_batch_is_exist(store, const char **keys, size_t count, int *results_out);
    batchIsExist =
        bind(
            linker,
            lookup,
            "mooncake_store_batch_is_exist",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS));
    // int mooncake_store_is_exist(store, const char *key);
    isExist =
        bind(
            linker,
            lookup,
            "mooncake_store_is_exist",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
    // int64_t mooncake_store_remove_by_regex(store, const char *pattern, int force);
    removeByRegex =
        bind(
            linker,
            lookup,
            "mooncake_store_remove_by_regex",
            FunctionDescriptor.of(JAVA_LONG, ADDRESS, ADDRESS, JAVA_INT));
  }

  /**
   * Loads the library and binds every function, failing before any call when a symbol is absent.
   *
   * @throws IllegalArgumentException when the library cannot be loaded or lacks a function
   * @throws UnsupportedOperationException when {@code size_t} is not 8 bytes on this platform
   */
  static MooncakeNative load(Path libraryPath) {
    Linker linker = Linker.nativeLinker();
    MemoryLayout sizeT = linker.canonicalLayouts().get("size_t");
    if (sizeT == null || sizeT.byteSize() != JAVA_LONG.byteSize()) {
      throw new UnsupportedOperationException(
          "mooncake binding needs an 8-byte size_t; this platform has " + sizeT);
    }
    SymbolLookup lookup;
    try {
      lookup = SymbolLookup.libraryLookup(libraryPath, Arena.global());
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "mooncake library_path="
              + libraryPath
              + " cannot be loaded (it must be the shared library implementing store_c.h)",
          e);
    }
    return new MooncakeNative(libraryPath, linker, lookup);
  }

  private MethodHandle bind(
      Linker linker, SymbolLookup lookup, String symbol, FunctionDescriptor descriptor) {
    MemorySegment address =
        lookup
            .find(symbol)
            .orElseThrow(
                () ->
                    new IllegalArgumentException(
                        "mooncake library_path="
                            + libraryPath
                            + " does not export "
                            + symbol
                            + " (store_c.h)"));
    return linker.downcallHandle(address, descriptor);
  }

  Path libraryPath() {
    return libraryPath;
  }

  MemorySegment create() {
    try {
      return (MemorySegment) create.invokeExact();
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  void destroy(MemorySegment store) {
    try {
      destroy.invokeExact(store);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  int setup(
      MemorySegment store,
      MemorySegment localHostname,
      MemorySegment metadataServer,
      long globalSegmentSize,
      long localBufferSize,
      MemorySegment protocol,
      MemorySegment deviceName,
      MemorySegment masterServerAddress) {
    try {
      return (int)
          setup.invokeExact(
              store,
              localHostname,
              metadataServer,
              globalSegmentSize,
              localBufferSize,
              protocol,
              deviceName,
              masterServerAddress);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  int registerBuffer(MemorySegment store, MemorySegment buffer, long size) {
    try {
      return (int) registerBuffer.invokeExact(store, buffer, size);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  int unregisterBuffer(MemorySegment store, MemorySegment buffer) {
    try {
      return (int) unregisterBuffer.invokeExact(store, buffer);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  int batchPutFrom(
      MemorySegment store,
      MemorySegment keys,
      MemorySegment buffers,
      MemorySegment sizes,
      long count,
      MemorySegment results) {
    try {
      return (int)
          batchPutFrom.invokeExact(store, keys, buffers, sizes, count, MemorySegment.NULL, results);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  int batchGetInto(
      MemorySegment store,
      MemorySegment keys,
      MemorySegment buffers,
      MemorySegment sizes,
      long count,
      MemorySegment results) {
    try {
      return (int) batchGetInto.invokeExact(store, keys, buffers, sizes, count, results);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  int batchIsExist(MemorySegment store, MemorySegment keys, long count, MemorySegment results) {
    try {
      return (int) batchIsExist.invokeExact(store, keys, count, results);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  int isExist(MemorySegment store, MemorySegment key) {
    try {
      return (int) isExist.invokeExact(store, key);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  long removeByRegex(MemorySegment store, MemorySegment pattern, int force) {
    try {
      return (long) removeByRegex.invokeExact(store, pattern, force);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Errors and unchecked exceptions pass unchanged; anything else is wrapped. */
  private static RuntimeException rethrow(Throwable t) {
    if (t instanceof Error e) {
      throw e;
    }
    if (t instanceof RuntimeException e) {
      return e;
    }
    return new IllegalStateException("mooncake downcall failed", t);
  }
}
