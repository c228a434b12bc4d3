package io.tokenspeed.engine.sim;

import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.function.LongSupplier;

/**
 * A shared L3 store for simulations of the engine: objects in memory, every store call scheduled on
 * simulated time, and every fault drawn from one seed, so that a run replays exactly.
 *
 * <p><b>How calls happen.</b> The engine's executors run stepped ({@link L3Executor#startStepped}):
 * they have no workers, and {@link #attach} hands each one to this store. {@link #step()} then does
 * what the workers would, at the simulation's current time: each executor's idle workers (its
 * configured worker counts) take the next unit of work, and each taken call is given a due time
 * from the seed; every call whose due time has passed runs, in due order, on the caller's thread.
 * The executor sees the call complete only then.
 *
 * <pre>
 *   taken at t ──► due = t + latency ─────────────► runs when step() finds now ≥ due
 *                  latency: [min, max)                (due order, ties in taking order;
 *                           slow: + slowLatencyNs      a slow call completes after later ones:
 *                  hang:    never, until restart()     reordered completions)
 * </pre>
 *
 * <p><b>What can go wrong</b> ({@link Fault}), each with its {@link Faults} chance:
 *
 * <pre>
 *   fault        when                    what the executor sees
 *   SLOW         taking a call           a long delay; later calls overtake it (REORDERED)
 *   HUNG         taking a call           no completion until restart(), then a thrown failure
 *   REFUSED      a PUT row, while full   Rejected(NO_SPACE): the store is full for a spell of
 *                (capacity or a spell)   simulated time, or holds capacityObjects objects
 *   SHORT_READ   a GET row               Ok(fewer bytes than asked): INVALID
 *   CORRUPTED    a GET row               the object rots: its checksum fails, Invalid, for good
 *   UNRETIRED    a GET or PUT call       Unknown rows, not retired: the executor quarantines
 *   OUTAGE       any call                the store is down for outageNs: every call throws
 *   RESTART      any call                every object is lost; hung calls fail
 *   WRONG_BYTES  a GET row (planted)     a wrong byte lands and the row answers Ok — a store
 *                                        bug no real store may have; the simulation must see it
 *   WRONG_WRITE  a PUT row (planted)     the object is written with a wrong byte, checksummed as
 *                                        written, so that it reads back Ok — the same bug on the
 *                                        way in
 * </pre>
 *
 * <p>Each object keeps the checksum of the bytes its PUT wrote, as a checksummed store (the file
 * store) does, so a damaged object reads as {@code Invalid}, never as {@code Ok}. {@link #log()}
 * lists every call with its time and answer: two runs of one seed produce the same log.
 *
 * <p>Thread-safe (one monitor), as the SPI requires; a deterministic run calls {@link #step()} from
 * one thread at a time in an order the simulation fixes.
 */
public final class SimStore implements Store {

  /** A fault the store injected; {@link #count} tells how often. */
  public enum Fault {
    SLOW,
    REORDERED,
    HUNG,
    REFUSED,
    SHORT_READ,
    CORRUPTED,
    UNRETIRED,
    OUTAGE,
    RESTART,
    WRONG_BYTES,
    WRONG_WRITE
  }

  /**
   * How often each fault happens. Chances are per call, except the data faults, which are per row.
   *
   * @param minLatencyNs the least delay of a call
   * @param maxLatencyNs the delay of an ordinary call is in {@code [minLatencyNs, maxLatencyNs)}
   * @param slowChance the chance that a call is slow
   * @param slowLatencyNs the extra delay of a slow call
   * @param hangChance the chance that a call hangs until a restart
   * @param refuseSpellChance the chance, per PUT call, that the store becomes full for a spell
   * @param refuseSpellNs how long a full spell lasts, in simulated time
   * @param capacityObjects the most objects the store holds; PUT rows past it are refused
   * @param shortReadChance the chance that a GET row lands short
   * @param corruptChance the chance that a GET row finds its object rotted
   * @param unretiredChance the chance that a GET or PUT call answers unretired
   * @param outageChance the chance, per call, that the store goes down
   * @param outageNs how long an outage lasts, in simulated time
   * @param restartChance the chance, per call, that the store restarts and loses every object
   * @param wrongBytesChance the chance that a GET row lands a wrong byte and answers Ok (a planted
   *     bug; 0 for a correct store)
   * @param wrongWriteChance the chance that a PUT row writes its object with a wrong byte, which
   *     reads back Ok (a planted bug; 0 for a correct store)
   */
  public record Faults(
      long minLatencyNs,
      long maxLatencyNs,
      double slowChance,
      long slowLatencyNs,
      double hangChance,
      double refuseSpellChance,
      long refuseSpellNs,
      int capacityObjects,
      double shortReadChance,
      double corruptChance,
      double unretiredChance,
      double outageChance,
      long outageNs,
      double restartChance,
      double wrongBytesChance,
      double wrongWriteChance) {

    /** Ordinary delays of 50 µs to 3 ms, no faults, room for a million objects. */
    public static final Faults NONE =
        new Faults(50_000, 3_000_000, 0, 0, 0, 0, 0, 1 << 20, 0, 0, 0, 0, 0, 0, 0, 0);

    /**
     * Every fault of a correct store that leaves the executor working, a few times in a thousand
     * calls: no unretired answers (the first one quarantines the executor; add them with {@link
     * #with}).
     */
    public static final Faults HOSTILE =
        new Faults(
            50_000,
            3_000_000,
            0.02,
            400_000_000,
            0.002,
            0.01,
            200_000_000,
            1 << 20,
            0.005,
            0.005,
            0,
            0.002,
            300_000_000,
            0.001,
            0,
            0);

    public Faults {
      if (minLatencyNs < 0 || maxLatencyNs <= minLatencyNs) {
        throw new IllegalArgumentException(
            "min_latency_ns="
                + minLatencyNs
                + " max_latency_ns="
                + maxLatencyNs
                + ": need 0 <= min < max");
      }
      if (slowLatencyNs < 0 || refuseSpellNs < 0 || outageNs < 0) {
        throw new IllegalArgumentException(
            "slow_latency_ns="
                + slowLatencyNs
                + " refuse_spell_ns="
                + refuseSpellNs
                + " outage_ns="
                + outageNs
                + " must be >= 0");
      }
      if (capacityObjects < 0) {
        throw new IllegalArgumentException("capacity_objects=" + capacityObjects + " must be >= 0");
      }
      double[] chances = {
        slowChance,
        hangChance,
        refuseSpellChance,
        shortReadChance,
        corruptChance,
        unretiredChance,
        outageChance,
        restartChance,
        wrongBytesChance,
        wrongWriteChance
      };
      for (double c : chances) {
        if (!(c >= 0 && c <= 1)) {
          throw new IllegalArgumentException(
              "fault chances " + Arrays.toString(chances) + " must be in [0, 1]");
        }
      }
    }

    /**
     * These faults with {@code fault}'s chance replaced ({@link Fault#REORDERED} has none: it
     * follows from the delays).
     */
    public Faults with(Fault fault, double chance) {
      double[] c = {
        slowChance,
        hangChance,
        refuseSpellChance,
        shortReadChance,
        corruptChance,
        unretiredChance,
        outageChance,
        restartChance,
        wrongBytesChance,
        wrongWriteChance
      };
      int at =
          switch (fault) {
            case SLOW -> 0;
            case HUNG -> 1;
            case REFUSED -> 2;
            case SHORT_READ -> 3;
            case CORRUPTED -> 4;
            case UNRETIRED -> 5;
            case OUTAGE -> 6;
            case RESTART -> 7;
            case WRONG_BYTES -> 8;
            case WRONG_WRITE -> 9;
            case REORDERED ->
                throw new IllegalArgumentException("reordering follows from the delays");
          };
      c[at] = chance;
      return new Faults(
          minLatencyNs,
          maxLatencyNs,
          c[0],
          slowLatencyNs,
          c[1],
          c[2],
          refuseSpellNs,
          capacityObjects,
          c[3],
          c[4],
          c[5],
          c[6],
          outageNs,
          c[7],
          c[8],
          c[9]);
    }
  }

  private record StoredObject(byte[] bytes, long checksum) {}

  /** A call taken from an executor: it runs once {@code dueNs} has passed (never while hung). */
  private static final class Call {
    final Runnable work;
    final Attached owner;
    final StorageKind kind;
    final long takenSeq;
    long dueNs;
    boolean hung;

    Call(Runnable work, Attached owner, StorageKind kind, long takenSeq, long dueNs) {
      this.work = work;
      this.owner = owner;
      this.kind = kind;
      this.takenSeq = takenSeq;
      this.dueNs = dueNs;
    }
  }

  /** An executor this store runs the calls of, with its worker counts. */
  private record Attached(int index, L3Executor executor, int[] workers, int[] running) {}

  private final SplittableRandom rnd;
  private long slowGetsExtraNs;
  private long slowGetsUntilNs = Long.MIN_VALUE;
  private long slowSpellGets;
  private final LongSupplier nowNs;
  private final Faults faults;
  private final Map<String, StoredObject> objects = new HashMap<>();
  private final List<Attached> executors = new ArrayList<>();
  private final List<Call> inFlight = new ArrayList<>();
  private final EnumMap<Fault, Long> counts = new EnumMap<>(Fault.class);
  private final List<String> log = new ArrayList<>();
  private final boolean keepLog;
  private long logDigest = 0xCBF29CE484222325L;
  private long takenSeq;
  private long downUntilNs;
  private boolean down;
  private long fullUntilNs;
  private boolean full;

  /** Told of every answered PUT call; a simulation's checks. */
  public interface PutListener {
    /** The PUT of {@code keys} answered at {@code nowNs}; {@code refused.get(i)} for key i. */
    void answered(long nowNs, List<String> keys, List<Boolean> refused);
  }

  /** Told of every object a PUT writes, as it writes it; a simulation's checks. */
  public interface WriteListener {
    /** {@code key} now holds {@code bytes} (a copy the listener may keep). */
    void written(String key, byte[] bytes);
  }

  private PutListener putListener = (now, keys, refused) -> {};
  private WriteListener writeListener = (key, bytes) -> {};
  private java.util.function.Consumer<String> deleteListener = ns -> {};

  /** The call that is running now, if it failed by a restart while hung. */
  private boolean failingHung;

  /**
   * A store whose faults come from {@code seed} at the rates of {@code faults}, on the simulation's
   * clock {@code nowNs}.
   */
  public SimStore(long seed, LongSupplier nowNs, Faults faults) {
    this(seed, nowNs, faults, false);
  }

  /** The same, keeping every line of the call log in memory when {@code keepLog} (for tests). */
  public SimStore(long seed, LongSupplier nowNs, Faults faults, boolean keepLog) {
    if (nowNs == null || faults == null) {
      throw new IllegalArgumentException("the clock and the faults are required");
    }
    this.rnd = new SplittableRandom(seed);
    this.nowNs = nowNs;
    this.faults = faults;
    this.keepLog = keepLog;
    for (Fault f : Fault.values()) {
      counts.put(f, 0L);
    }
  }

  /**
   * Runs the store calls of {@code executor} (started by {@link L3Executor#startStepped} over this
   * store) with the worker counts of {@code config}; returns its index in the log.
   */
  public synchronized int attach(L3Executor executor, L3ExecutorConfig config) {
    int[] workers = new int[StorageKind.values().length];
    workers[StorageKind.QUERY.ordinal()] = config.queryWorkers();
    workers[StorageKind.GET.ordinal()] = config.getWorkers();
    workers[StorageKind.PUT.ordinal()] = config.putWorkers();
    Attached a =
        new Attached(executors.size(), executor, workers, new int[StorageKind.values().length]);
    executors.add(a);
    return a.index();
  }

  /**
   * Forgets the executors attached as {@code indexes} (their processes are gone): their calls in
   * flight, hung ones included, never run (the connections went with the processes: nothing of them
   * reaches the store), and no more work is taken from them. Returns how many calls were dropped.
   */
  public synchronized int detach(List<Integer> indexes) {
    int dropped = 0;
    for (var it = inFlight.iterator(); it.hasNext(); ) {
      if (indexes.contains(it.next().owner.index())) {
        it.remove();
        dropped++;
      }
    }
    executors.removeIf(a -> indexes.contains(a.index()));
    log(nowNs.getAsLong() + " DETACH " + indexes + " -> " + dropped + " calls dropped");
    return dropped;
  }

  /**
   * At the clock's time: lets every attached executor's idle workers take work, and runs every call
   * that is due, in due order, until none is. Returns how many calls ran.
   */
  public synchronized int step() {
    int ran = 0;
    while (true) {
      takeWork();
      Call next = null;
      long now = nowNs.getAsLong();
      for (Call c : inFlight) {
        if (!c.hung
            && c.dueNs - now <= 0
            && (next == null
                || c.dueNs - next.dueNs < 0
                || (c.dueNs == next.dueNs && c.takenSeq < next.takenSeq))) {
          next = c;
        }
      }
      if (next == null) {
        return ran;
      }
      for (Call c : inFlight) {
        if (c.takenSeq < next.takenSeq && c.owner == next.owner && c.kind == next.kind) {
          injected(Fault.REORDERED);
          break;
        }
      }
      finish(next);
      ran++;
    }
  }

  /** The earliest due time of a call in flight (hung calls excluded), or {@link Long#MAX_VALUE}. */
  public synchronized long nextDueNs() {
    long min = Long.MAX_VALUE;
    for (Call c : inFlight) {
      if (!c.hung && c.dueNs < min) {
        min = c.dueNs;
      }
    }
    return min;
  }

  /** Calls taken and not yet run, hung ones included. */
  public synchronized int inFlight() {
    return inFlight.size();
  }

  /** Hung calls: they complete only when the store restarts. */
  public synchronized int hungCalls() {
    int n = 0;
    for (Call c : inFlight) {
      n += c.hung ? 1 : 0;
    }
    return n;
  }

  /**
   * Restarts the store: every object is lost, and every hung call fails now (it throws, as a call
   * whose connection the restart cut).
   */
  public synchronized void restart() {
    injected(Fault.RESTART);
    objects.clear();
    log(nowNs.getAsLong() + " RESTART");
    List<Call> hung = new ArrayList<>();
    for (Call c : inFlight) {
      if (c.hung) {
        hung.add(c);
      }
    }
    for (Call c : hung) {
      failingHung = true;
      try {
        finish(c);
      } finally {
        failingHung = false;
      }
    }
  }

  /**
   * A slow spell until {@code untilNs}: every GET call taken meanwhile takes {@code extraNs} more
   * (a store whose page cache was dropped, a server under other load). Counted by {@link
   * #slowSpellGets}.
   */
  public synchronized void slowGets(long extraNs, long untilNs) {
    slowGetsExtraNs = extraNs;
    slowGetsUntilNs = untilNs;
    log(nowNs.getAsLong() + " SLOW_GETS +" + extraNs + " until " + untilNs);
  }

  /** GET calls a slow spell ({@link #slowGets}) delayed. */
  public synchronized long slowSpellGets() {
    return slowSpellGets;
  }

  /** Takes the store down until {@code untilNs}: every call meanwhile throws. */
  public synchronized void outage(long untilNs) {
    injected(Fault.OUTAGE);
    down = true;
    downUntilNs = untilNs;
    log(nowNs.getAsLong() + " OUTAGE until " + untilNs);
  }

  /** Tells {@code listener} of every answered PUT call (one listener). */
  public synchronized void onPut(PutListener listener) {
    this.putListener = listener;
  }

  /** Tells {@code listener} of every object a PUT writes (one listener). */
  public synchronized void onWrite(WriteListener listener) {
    this.writeListener = listener;
  }

  /**
   * Hands {@code listener} every object whose bytes are still those its PUT wrote (a rotted object,
   * which reads back as invalid, is left out), in no particular order.
   */
  public synchronized void forEachIntact(WriteListener listener) {
    for (Map.Entry<String, StoredObject> e : objects.entrySet()) {
      StoredObject o = e.getValue();
      if (checksum(o.bytes()) == o.checksum()) {
        listener.written(e.getKey(), o.bytes().clone());
      }
    }
  }

  /** Tells {@code listener} of every namespace deletion, once it returned (one listener). */
  public synchronized void onDelete(java.util.function.Consumer<String> listener) {
    this.deleteListener = listener;
  }

  /** How often each fault happened, as text (figures of a run). */
  public synchronized String faultCounts() {
    return counts.toString();
  }

  /** How often {@code fault} happened. */
  public synchronized long count(Fault fault) {
    return counts.get(fault);
  }

  /** Objects stored now. */
  public synchronized int size() {
    return objects.size();
  }

  /**
   * Every call so far with its time and answer, and every restart and outage; empty unless the
   * store keeps its log.
   */
  public synchronized List<String> log() {
    return List.copyOf(log);
  }

  /** A digest of every line of the call log, kept or not: equal for two runs of one seed. */
  public synchronized long logDigest() {
    return logDigest;
  }

  private void log(String line) {
    for (int i = 0; i < line.length(); i++) {
      logDigest = (logDigest ^ line.charAt(i)) * 0x100000001B3L;
    }
    logDigest = (logDigest ^ '\n') * 0x100000001B3L;
    if (keepLog) {
      log.add(line);
    }
  }

  private void injected(Fault f) {
    counts.merge(f, 1L, Long::sum);
  }

  private void takeWork() {
    long now = nowNs.getAsLong();
    for (Attached a : executors) {
      for (StorageKind kind : StorageKind.values()) {
        int k = kind.ordinal();
        while (a.running()[k] < a.workers()[k]) {
          Runnable work = a.executor().takeWork(kind);
          if (work == null) {
            break;
          }
          a.running()[k]++;
          long latency =
              faults.minLatencyNs() + rnd.nextLong(faults.maxLatencyNs() - faults.minLatencyNs());
          Call c = new Call(work, a, kind, takenSeq++, now + latency);
          if (kind == StorageKind.GET && now - slowGetsUntilNs < 0) {
            c.dueNs += slowGetsExtraNs;
            slowSpellGets++;
          }
          if (rnd.nextDouble() < faults.hangChance()) {
            c.hung = true;
            injected(Fault.HUNG);
          } else if (rnd.nextDouble() < faults.slowChance()) {
            c.dueNs += faults.slowLatencyNs();
            injected(Fault.SLOW);
          }
          inFlight.add(c);
        }
      }
    }
  }

  private void finish(Call c) {
    inFlight.remove(c);
    c.owner.running()[c.kind.ordinal()]--;
    c.work.run();
  }

  /**
   * The faults every call meets first: a restart or an outage starting now, an outage going on, a
   * hung call failing by a restart. Throws what the call throws.
   */
  private void begin(String what) throws IOException {
    long now = nowNs.getAsLong();
    if (failingHung) {
      log(now + " " + what + " -> failed by the restart");
      throw new IOException("simulated store restarted during the call");
    }
    if (rnd.nextDouble() < faults.restartChance()) {
      restart();
    }
    if (!down && rnd.nextDouble() < faults.outageChance()) {
      outage(now + faults.outageNs());
    }
    if (down && downUntilNs - now <= 0) {
      down = false;
    }
    if (down) {
      log(now + " " + what + " -> outage");
      throw new IOException("simulated outage until " + downUntilNs);
    }
  }

  /** Whether this GET or PUT call answers unretired; logs it when it does. */
  private boolean unretired(String what) {
    if (rnd.nextDouble() < faults.unretiredChance()) {
      injected(Fault.UNRETIRED);
      log(nowNs.getAsLong() + " " + what + " -> unretired");
      return true;
    }
    return false;
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
  public synchronized StoreResult exists(List<String> keys) throws Exception {
    String what = "QUERY " + keys;
    begin(what);
    List<RowResult> rows = new ArrayList<>(keys.size());
    for (String k : keys) {
      StoredObject o = objects.get(k);
      rows.add(o == null ? RowResult.MISSING : new RowResult.Ok(o.bytes().length, true));
    }
    log(nowNs.getAsLong() + " " + what + " -> " + rows);
    return StoreResult.of(rows);
  }

  @Override
  public synchronized StoreResult get(List<String> keys, List<MemorySegment> destinations)
      throws Exception {
    String what = "GET " + keys;
    begin(what);
    if (unretired(what)) {
      // The buffers may still be in use: some bytes may land, the answer proves nothing.
      for (MemorySegment dst : destinations) {
        if (rnd.nextBoolean() && dst.byteSize() > 0) {
          dst.set(ValueLayout.JAVA_BYTE, rnd.nextLong(dst.byteSize()), (byte) rnd.nextInt());
        }
      }
      return new StoreResult(unknownRows(keys.size()), false);
    }
    List<RowResult> rows = new ArrayList<>(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      rows.add(read(keys.get(i), destinations.get(i)));
    }
    log(nowNs.getAsLong() + " " + what + " -> " + rows);
    return StoreResult.of(rows);
  }

  private RowResult read(String key, MemorySegment dst) {
    StoredObject o = objects.get(key);
    if (o == null) {
      return RowResult.MISSING;
    }
    if (o.bytes().length > 0 && rnd.nextDouble() < faults.corruptChance()) {
      injected(Fault.CORRUPTED);
      byte[] rotted = o.bytes().clone();
      rotted[rnd.nextInt(rotted.length)] ^= (byte) (1 + rnd.nextInt(255));
      o = new StoredObject(rotted, o.checksum());
      objects.put(key, o);
    }
    if (o.bytes().length != dst.byteSize() || checksum(o.bytes()) != o.checksum()) {
      return new RowResult.Invalid(o.bytes().length);
    }
    int length = o.bytes().length;
    if (length > 0 && rnd.nextDouble() < faults.shortReadChance()) {
      injected(Fault.SHORT_READ);
      int landed = rnd.nextInt(length);
      MemorySegment.copy(MemorySegment.ofArray(o.bytes()), 0, dst, 0, landed);
      return new RowResult.Ok(landed, true);
    }
    MemorySegment.copy(MemorySegment.ofArray(o.bytes()), 0, dst, 0, length);
    if (length > 0 && rnd.nextDouble() < faults.wrongBytesChance()) {
      injected(Fault.WRONG_BYTES);
      long at = rnd.nextInt(length);
      dst.set(ValueLayout.JAVA_BYTE, at, (byte) (dst.get(ValueLayout.JAVA_BYTE, at) ^ 0x5A));
    }
    return new RowResult.Ok(length, true);
  }

  @Override
  public synchronized StoreResult put(List<String> keys, List<MemorySegment> sources)
      throws Exception {
    String what = "PUT " + keys;
    begin(what);
    long now = nowNs.getAsLong();
    if (full && fullUntilNs - now <= 0) {
      full = false;
    }
    if (!full && rnd.nextDouble() < faults.refuseSpellChance()) {
      full = true;
      fullUntilNs = now + faults.refuseSpellNs();
    }
    if (unretired(what)) {
      // The writes may or may not have happened.
      for (int i = 0; i < keys.size(); i++) {
        if (rnd.nextBoolean()) {
          write(keys.get(i), sources.get(i));
        }
      }
      return new StoreResult(unknownRows(keys.size()), false);
    }
    List<RowResult> rows = new ArrayList<>(keys.size());
    List<Boolean> refused = new ArrayList<>(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      String key = keys.get(i);
      refused.add(
          !objects.containsKey(key) && (full || objects.size() >= faults.capacityObjects()));
      if (objects.containsKey(key)) {
        rows.add(new RowResult.Ok(sources.get(i).byteSize(), true));
      } else if (full || objects.size() >= faults.capacityObjects()) {
        injected(Fault.REFUSED);
        rows.add(RowResult.Rejected.noSpace("simulated store is full"));
      } else {
        write(key, sources.get(i));
        rows.add(new RowResult.Ok(sources.get(i).byteSize(), false));
      }
    }
    log(now + " " + what + " -> " + rows);
    putListener.answered(now, keys, refused);
    return StoreResult.of(rows);
  }

  private void write(String key, MemorySegment source) {
    if (!objects.containsKey(key)) {
      byte[] bytes = source.toArray(ValueLayout.JAVA_BYTE);
      if (faults.wrongWriteChance() > 0
          && bytes.length > 0
          && rnd.nextDouble() < faults.wrongWriteChance()) {
        injected(Fault.WRONG_WRITE);
        bytes[rnd.nextInt(bytes.length)] ^= 0x5A;
      }
      objects.put(key, new StoredObject(bytes, checksum(bytes)));
      writeListener.written(key, bytes.clone());
    }
  }

  @Override
  public synchronized long deleteNamespace(String namespace) throws Exception {
    String what = "DELETE " + namespace;
    begin(what);
    long n = 0;
    for (var it = objects.keySet().iterator(); it.hasNext(); ) {
      if (it.next().startsWith(namespace + "_")) {
        it.remove();
        n++;
      }
    }
    log(nowNs.getAsLong() + " " + what + " -> " + n);
    deleteListener.accept(namespace);
    return n;
  }

  @Override
  public void close() {}

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
