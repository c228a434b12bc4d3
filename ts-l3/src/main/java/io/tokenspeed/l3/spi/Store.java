package io.tokenspeed.l3.spi;

import java.lang.foreign.MemorySegment;
import java.util.List;

/**
 * A shared L3 object store, as the executor's workers call it. Stores are called from several
 * worker threads at once and must be thread-safe. They never see the scheduler, the cache or a
 * device: only object keys and Host memory segments.
 *
 * <p>Contract (architecture §8):
 *
 * <ul>
 *   <li>{@link #put} is create-only: an existing object is never overwritten, and finding one is
 *       success ({@code Ok(…, alreadyExisted=true)}).
 *   <li>{@link #get} reads straight into the destination segment; the executor checks that the byte
 *       count equals the segment's length exactly.
 *   <li>Each call returns one row per key in key order. A call may also throw; {@link
 *       #failuresRetire()} then says whether the store has stopped touching the buffers.
 *   <li>{@link #exists} touches no payload buffer, so its failure never retains buffers.
 *   <li>A call the backend refused because of the deployment's configuration (a permission or a
 *       credential, before any transfer) throws {@link StoreConfigurationException}. The executor
 *       then fails the call's rows as retired, without object evidence and without reporting an
 *       outage: a cooldown cannot repair a configuration.
 * </ul>
 *
 * <pre>
 *   a call ...                               rows              retired?            outage?
 *   returns a StoreResult                    per RowResult     per result          per row
 *   throws StoreConfigurationException       all FAILED        yes                 no
 *   throws anything else, or is malformed    all FAILED        failuresRetire()    yes
 *                                                              (QUERY: yes)
 * </pre>
 */
public interface Store extends AutoCloseable {

  /** A short name for logs and metrics ({@code memory}, {@code file}, {@code redis}, ...). */
  String name();

  /**
   * Whether a call that throws or returns a malformed result has provably stopped accessing the
   * Host buffers it was given. False for stores whose native I/O may outlive the call.
   */
  boolean failuresRetire();

  /** Longest key this store accepts, in UTF-8 bytes. */
  int maxKeyBytes();

  /**
   * Largest object this store accepts, in bytes. The executor refuses a job with a longer Host
   * range before it reaches the store. Default: no limit of the store's own.
   */
  default long maxValueBytes() {
    return Long.MAX_VALUE;
  }

  /** Registers the shared Host allocation once, before any call. Default: nothing to do. */
  default void registerHostBuffer(MemorySegment hostAllocation) throws Exception {}

  /** Which keys exist: {@code Ok(payload length, false)} or {@code Missing} per key. */
  StoreResult exists(List<String> keys) throws Exception;

  /** Reads each object into its destination segment. */
  StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception;

  /** Creates each object from its source segment unless it already exists. */
  StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception;

  /**
   * Deletes every object whose key starts with {@code namespace + "_"}; returns how many were
   * removed, or -1 when the store cannot count them. Namespaces never contain {@code _} (see {@link
   * io.tokenspeed.core.Namespace}). An administrative call, never on an executor worker: the engine
   * makes it on its loop thread between rounds, which waits for it.
   */
  long deleteNamespace(String namespace) throws Exception;

  /**
   * Deletes the namespace's objects as {@link #deleteNamespace} does and reports what stayed. A
   * store that can leave matching objects behind (Mooncake skips objects under a read lease)
   * overrides this to wait, retry and say so. Default: one {@link #deleteNamespace} call, after
   * which nothing of the namespace stays.
   */
  default NamespaceDeletion purgeNamespace(String namespace) throws Exception {
    return NamespaceDeletion.complete(deleteNamespace(namespace));
  }

  /** Releases the store's resources. Never called while a call may still touch a buffer. */
  @Override
  void close() throws Exception;
}
