package io.tokenspeed.l3;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A test double for the Store SPI: an in-memory map by default, with scripted answers, faults and a
 * gate that holds calls inside the store until the test releases them. Unit tests only.
 */
final class ScriptedStore implements Store {

  /** Answers one call; may throw. */
  interface Script {
    StoreResult answer(String op, List<String> keys, List<MemorySegment> segments) throws Exception;
  }

  final Map<String, byte[]> objects = new ConcurrentHashMap<>();
  final AtomicInteger calls = new AtomicInteger();
  final List<List<String>> seenKeys = Collections.synchronizedList(new ArrayList<>());
  final AtomicBoolean closed = new AtomicBoolean();
  final AtomicInteger closes = new AtomicInteger();
  private final boolean failuresRetire;
  private final int maxKeyBytes;
  private volatile Script script;
  private volatile boolean gated;
  private final Semaphore entered = new Semaphore(0);
  private final Semaphore released = new Semaphore(0);

  ScriptedStore(boolean failuresRetire, int maxKeyBytes) {
    this.failuresRetire = failuresRetire;
    this.maxKeyBytes = maxKeyBytes;
  }

  ScriptedStore() {
    this(true, 256);
  }

  /** Every later call answers through {@code s}; null restores the in-memory behaviour. */
  void script(Script s) {
    this.script = s;
  }

  /** Calls from now on wait inside the store until {@link #release} lets them go. */
  void gate() {
    gated = true;
  }

  /** Lets {@code n} gated calls return. */
  void release(int n) {
    released.release(n);
  }

  /** Stops gating and lets every waiting call go. */
  void openGate() {
    gated = false;
    released.release(1000);
  }

  /** Waits until {@code n} calls have entered the gate. */
  void awaitEntered(int n) throws InterruptedException {
    if (!entered.tryAcquire(n, 10, TimeUnit.SECONDS)) {
      throw new AssertionError("only " + entered.availablePermits() + " calls entered the store");
    }
  }

  @Override
  public String name() {
    return "scripted";
  }

  @Override
  public boolean failuresRetire() {
    return failuresRetire;
  }

  @Override
  public int maxKeyBytes() {
    return maxKeyBytes;
  }

  @Override
  public StoreResult exists(List<String> keys) throws Exception {
    return call("exists", keys, List.of());
  }

  @Override
  public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
    return call("get", keys, destinations);
  }

  @Override
  public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
    return call("put", keys, sources);
  }

  @Override
  public long deleteNamespace(String namespace) {
    int before = objects.size();
    objects.keySet().removeIf(k -> k.startsWith(namespace + "_"));
    return before - objects.size();
  }

  @Override
  public void close() {
    closes.incrementAndGet();
    closed.set(true);
  }

  private StoreResult call(String op, List<String> keys, List<MemorySegment> segments)
      throws Exception {
    calls.incrementAndGet();
    seenKeys.add(List.copyOf(keys));
    if (gated) {
      entered.release();
      released.acquireUninterruptibly();
    }
    Script s = script;
    if (s != null) {
      return s.answer(op, keys, segments);
    }
    List<RowResult> rows = new ArrayList<>();
    for (int i = 0; i < keys.size(); i++) {
      String k = keys.get(i);
      switch (op) {
        case "exists" ->
            rows.add(objects.containsKey(k) ? new RowResult.Ok(0, false) : RowResult.MISSING);
        case "put" -> {
          byte[] bytes = segments.get(i).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
          rows.add(new RowResult.Ok(bytes.length, objects.putIfAbsent(k, bytes) != null));
        }
        default -> {
          byte[] v = objects.get(k);
          if (v == null) {
            rows.add(RowResult.MISSING);
          } else if (v.length != segments.get(i).byteSize()) {
            rows.add(new RowResult.Invalid(v.length));
          } else {
            MemorySegment.copy(
                v, 0, segments.get(i), java.lang.foreign.ValueLayout.JAVA_BYTE, 0, v.length);
            rows.add(new RowResult.Ok(v.length, false));
          }
        }
      }
    }
    return StoreResult.of(rows);
  }
}
