package io.tokenspeed.l3.store.memory;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreArguments;
import io.tokenspeed.l3.spi.StoreResult;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The in-process L3 store: a concurrent map from key to an immutable copy of the object's bytes. It
 * serves tests, single-process deployments and the scheduler's tail round trips, and it is the
 * reference the other stores are compared against.
 *
 * <p><b>What it guarantees.</b>
 *
 * <ul>
 *   <li>PUT is create-only. The first writer of a key wins; every later PUT of that key, whatever
 *       its bytes, is {@code Ok(length, alreadyExisted=true)} and leaves the first bytes in place.
 *       Exactly one of several racing writers of a key sees {@code alreadyExisted=false}.
 *   <li>GET is exact-length. An object is copied into the destination only when its length equals
 *       the destination segment's {@code byteSize()}; otherwise the row is {@code
 *       Invalid(objectLength)} and the destination is not touched. A missing key is {@code Missing}
 *       and the destination is not touched either.
 *   <li>Every call retires: all copies happen on the calling thread inside the call, so when a call
 *       returns or throws, the store holds no reference to any caller segment ({@link
 *       #failuresRetire()} is true).
 *   <li>Limits are checked before anything is stored: a call with a key longer than {@code
 *       maxKeyBytes} or a source larger than {@code maxValueBytes} throws {@link
 *       IllegalArgumentException} naming the size and the limit, and no row of that call is
 *       written.
 *   <li>With a capacity, the payload bytes held never exceed it. A PUT of a new key that does not
 *       fit is {@code Rejected(REJECTED_NO_SPACE)}: a retired per-row refusal that the scheduler
 *       re-offers later, never an outage. A PUT of a key that already exists is still {@code Ok(…,
 *       true)} when the store is full.
 * </ul>
 *
 * <p><b>Why it is built this way.</b> Objects are stored as private {@code byte[]} copies made
 * before publication with {@link ConcurrentHashMap#putIfAbsent}; an array is never written after it
 * is published, so readers need no lock and the map's happens-before edge is the only
 * synchronization. Capacity is reserved with a compare-and-set on a byte counter before the copy is
 * made and released if the key turns out to exist, so racing writers of one key may briefly
 * over-reserve (a concurrent PUT of another key may then be refused and re-offered), but the held
 * bytes never pass the capacity.
 *
 * <p><b>What it must never do.</b> Overwrite an object; hand out or keep a reference to a caller
 * segment after a call; write into a destination whose length does not match; block a caller on
 * another caller's copy (there is no lock to block on).
 */
public final class MemoryStore implements Store {

  /**
   * The {@link RowResult.Rejected} code of a PUT refused for lack of capacity. It is the value of
   * Mooncake's {@code NO_AVAILABLE_HANDLE}, so logs read the same whichever store refused.
   */
  public static final int REJECTED_NO_SPACE = RowResult.Rejected.NO_SPACE;

  private final MemoryStoreSettings settings;
  private final ConcurrentHashMap<String, byte[]> objects = new ConcurrentHashMap<>();
  private final AtomicLong usedBytes = new AtomicLong();
  private volatile boolean closed;

  /** A store with {@link MemoryStoreSettings#defaults()}. */
  public MemoryStore() {
    this(MemoryStoreSettings.defaults());
  }

  public MemoryStore(MemoryStoreSettings settings) {
    if (settings == null) {
      throw new IllegalArgumentException("memory store settings are required");
    }
    this.settings = settings;
  }

  @Override
  public String name() {
    return "memory";
  }

  /** True: every copy happens inside the call, on the caller's thread. */
  @Override
  public boolean failuresRetire() {
    return true;
  }

  @Override
  public int maxKeyBytes() {
    return settings.maxKeyBytes();
  }

  @Override
  public long maxValueBytes() {
    return settings.maxValueBytes();
  }

  /** The settings this store was built with. */
  public MemoryStoreSettings settings() {
    return settings;
  }

  /** Payload bytes currently held (reservations of PUTs in progress included). */
  public long usedBytes() {
    return usedBytes.get();
  }

  @Override
  public StoreResult exists(List<String> keys) {
    checkOpen();
    StoreArguments.checkKeys(keys, settings.maxKeyBytes());
    List<RowResult> rows = new ArrayList<>(keys.size());
    for (String key : keys) {
      byte[] object = objects.get(key);
      rows.add(object == null ? RowResult.MISSING : new RowResult.Ok(object.length, false));
    }
    return StoreResult.of(rows);
  }

  @Override
  public StoreResult get(List<String> keys, List<MemorySegment> destinations) {
    checkOpen();
    StoreArguments.checkKeys(keys, settings.maxKeyBytes());
    StoreArguments.checkSegments(keys, destinations, "destinations");
    List<RowResult> rows = new ArrayList<>(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      byte[] object = objects.get(keys.get(i));
      MemorySegment destination = destinations.get(i);
      if (object == null) {
        rows.add(RowResult.MISSING);
      } else if (object.length != destination.byteSize()) {
        rows.add(new RowResult.Invalid(object.length));
      } else {
        MemorySegment.copy(object, 0, destination, ValueLayout.JAVA_BYTE, 0, object.length);
        rows.add(new RowResult.Ok(object.length, false));
      }
    }
    return StoreResult.of(rows);
  }

  @Override
  public StoreResult put(List<String> keys, List<MemorySegment> sources) {
    checkOpen();
    StoreArguments.checkKeys(keys, settings.maxKeyBytes());
    StoreArguments.checkSegments(keys, sources, "sources");
    StoreArguments.checkValueSizes(sources, "value", settings.maxValueBytes());
    List<RowResult> rows = new ArrayList<>(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      rows.add(putOne(keys.get(i), sources.get(i)));
    }
    return StoreResult.of(rows);
  }

  private RowResult putOne(String key, MemorySegment source) {
    int length = (int) source.byteSize(); // bounded by maxValueBytes <= MAX_VALUE_BYTES_LIMIT
    if (objects.containsKey(key)) {
      return new RowResult.Ok(length, true);
    }
    if (!reserve(length)) {
      return new RowResult.Rejected(
          REJECTED_NO_SPACE,
          false,
          "memory store full: capacity_bytes=" + settings.capacityBytes() + " reached");
    }
    byte[] copy;
    try {
      copy = source.toArray(ValueLayout.JAVA_BYTE);
    } catch (RuntimeException | Error e) {
      usedBytes.addAndGet(-length);
      throw e;
    }
    if (objects.putIfAbsent(key, copy) != null) {
      usedBytes.addAndGet(-length);
      return new RowResult.Ok(length, true);
    }
    return new RowResult.Ok(length, false);
  }

  private boolean reserve(long length) {
    long capacity = settings.capacityBytes();
    while (true) {
      long used = usedBytes.get();
      if (length > capacity - used) {
        return false;
      }
      if (usedBytes.compareAndSet(used, used + length)) {
        return true;
      }
    }
  }

  @Override
  public long deleteNamespace(String namespace) {
    checkOpen();
    if (namespace == null) {
      throw new IllegalArgumentException("namespace=null must be a namespace name");
    }
    String prefix = namespace + "_";
    long removed = 0;
    for (Map.Entry<String, byte[]> entry : objects.entrySet()) {
      if (entry.getKey().startsWith(prefix) && objects.remove(entry.getKey(), entry.getValue())) {
        usedBytes.addAndGet(-entry.getValue().length);
        removed++;
      }
    }
    return removed;
  }

  /** Drops every object. Never called while a call may still run (the SPI's contract). */
  @Override
  public void close() {
    closed = true;
    objects.clear();
    usedBytes.set(0);
  }

  private void checkOpen() {
    if (closed) {
      throw new IllegalStateException("memory store is closed");
    }
  }
}
