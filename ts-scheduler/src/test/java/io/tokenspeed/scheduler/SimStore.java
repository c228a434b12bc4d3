package io.tokenspeed.scheduler;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.function.BiConsumer;

/**
 * The store of {@link LoopSimulation}: objects in a map, every call synchronous on the simulation's
 * thread (the simulation decides when a call happens), and faults the simulation switches on and
 * off. Each object keeps a checksum of the bytes written, so damage is detected on read as a store
 * with checksummed objects (the file store) detects it: a truncated or overwritten object reads as
 * invalid.
 *
 * <p>It checks the one rule a store can see: no object is written under a namespace after that
 * namespace's deletion returned.
 */
final class SimStore implements Store {

  private record StoredObject(byte[] bytes, long checksum) {}

  private final Map<String, StoredObject> objects = new HashMap<>();
  private final Set<String> deletedNamespaces = new HashSet<>();
  private final Random rnd;

  /** Told each PUT's key and bytes (the simulation checks them against the reference). */
  private final BiConsumer<String, byte[]> onPut;

  /** Violations the store saw (the simulation reports them with its seed). */
  final List<String> violations = new ArrayList<>();

  /** Every call throws (an outage: the connection is down). */
  boolean outage;

  /** Every PUT row is refused for lack of space. */
  boolean refusePuts;

  /** The chance that one PUT row is refused for lack of space. */
  double refuseChance;

  /** The next GET or PUT call's result cannot be proven retired (Unknown). */
  boolean nextUnretired;

  /**
   * A broken store: now and then a GET lands a wrong byte and still answers OK (no store may do
   * this; it shows that the simulation notices wrong KV).
   */
  boolean landsWrongBytes;

  /** The next deletion of a namespace fails. */
  boolean nextDeleteFails;

  long calls;
  long unknownResults;
  long refusedRows;
  long damagedReads;
  long deletions;

  SimStore(Random rnd, BiConsumer<String, byte[]> onPut) {
    this.rnd = rnd;
    this.onPut = onPut;
  }

  @Override
  public String name() {
    return "sim";
  }

  @Override
  public boolean failuresRetire() {
    return true;
  }

  @Override
  public int maxKeyBytes() {
    return 512;
  }

  @Override
  public StoreResult exists(List<String> keys) throws Exception {
    begin();
    List<RowResult> rows = new ArrayList<>(keys.size());
    for (String k : keys) {
      StoredObject o = objects.get(k);
      rows.add(o == null ? RowResult.MISSING : new RowResult.Ok(o.bytes().length, true));
    }
    return StoreResult.of(rows);
  }

  @Override
  public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws Exception {
    begin();
    if (takeUnretired()) {
      return new StoreResult(unknownRows(keys.size()), false);
    }
    List<RowResult> rows = new ArrayList<>(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      StoredObject o = objects.get(keys.get(i));
      MemorySegment dst = destinations.get(i);
      if (o == null) {
        rows.add(RowResult.MISSING);
      } else if (o.bytes().length != dst.byteSize() || checksum(o.bytes()) != o.checksum()) {
        damagedReads++;
        rows.add(new RowResult.Invalid(o.bytes().length));
      } else {
        MemorySegment.copy(
            MemorySegment.ofArray(o.bytes()),
            ValueLayout.JAVA_BYTE,
            0,
            dst,
            ValueLayout.JAVA_BYTE,
            0,
            o.bytes().length);
        if (landsWrongBytes && rnd.nextInt(20) == 0) {
          dst.set(ValueLayout.JAVA_BYTE, rnd.nextInt((int) dst.byteSize()), (byte) 0x5A);
        }
        rows.add(new RowResult.Ok(o.bytes().length, true));
      }
    }
    return StoreResult.of(rows);
  }

  @Override
  public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
    begin();
    if (takeUnretired()) {
      return new StoreResult(unknownRows(keys.size()), false);
    }
    List<RowResult> rows = new ArrayList<>(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      String key = keys.get(i);
      if (refusePuts || (refuseChance > 0 && rnd.nextDouble() < refuseChance)) {
        refusedRows++;
        rows.add(new RowResult.Rejected(RowResult.Rejected.NO_SPACE));
        continue;
      }
      String ns = key.substring(0, key.indexOf('/'));
      if (deletedNamespaces.contains(ns)) {
        violations.add("object " + key + " written after the deletion of namespace " + ns);
      }
      byte[] bytes = sources.get(i).toArray(ValueLayout.JAVA_BYTE);
      onPut.accept(key, bytes);
      boolean existed = objects.containsKey(key);
      if (!existed) {
        objects.put(key, new StoredObject(bytes, checksum(bytes)));
      }
      rows.add(new RowResult.Ok(bytes.length, existed));
    }
    return StoreResult.of(rows);
  }

  @Override
  public long deleteNamespace(String namespace) throws Exception {
    begin();
    if (nextDeleteFails) {
      nextDeleteFails = false;
      throw new IOException("simulated deletion failure of " + namespace);
    }
    long n = 0;
    for (var it = objects.keySet().iterator(); it.hasNext(); ) {
      if (it.next().startsWith(namespace + "/")) {
        it.remove();
        n++;
      }
    }
    deletedNamespaces.add(namespace);
    deletions++;
    return n;
  }

  @Override
  public void close() {}

  /** A restart of the store: every object is gone. */
  void restart() {
    objects.clear();
  }

  /**
   * Damages one object at random: truncated (a short read), grown by garbage (a long read), or
   * overwritten with garbage of its length.
   */
  void damageOne() {
    if (objects.isEmpty()) {
      return;
    }
    List<String> keys = new ArrayList<>(objects.keySet());
    keys.sort(null); // the map's order is not part of the seed
    String key = keys.get(rnd.nextInt(keys.size()));
    StoredObject o = objects.get(key);
    byte[] b;
    int how = rnd.nextInt(3);
    if (how == 0) {
      b = Arrays.copyOf(o.bytes(), rnd.nextInt(o.bytes().length));
    } else if (how == 1) {
      b = Arrays.copyOf(o.bytes(), o.bytes().length + 1 + rnd.nextInt(64));
    } else {
      b = new byte[o.bytes().length];
      rnd.nextBytes(b);
    }
    objects.put(key, new StoredObject(b, o.checksum()));
  }

  int size() {
    return objects.size();
  }

  private void begin() throws IOException {
    calls++;
    if (outage) {
      throw new IOException("simulated outage");
    }
  }

  private boolean takeUnretired() {
    if (!nextUnretired) {
      return false;
    }
    nextUnretired = false;
    unknownResults++;
    return true;
  }

  private static List<RowResult> unknownRows(int n) {
    List<RowResult> rows = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      rows.add(new RowResult.Unknown(-1));
    }
    return rows;
  }

  private static long checksum(byte[] b) {
    long h = 0x9E3779B97F4A7C15L;
    for (byte x : b) {
      h = (h ^ x) * 0x100000001B3L;
    }
    return h ^ b.length;
  }
}
