package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageRuntimeConfig;
import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.L3ExecutorConfig;
import io.tokenspeed.l3.L3Metrics;
import io.tokenspeed.l3.spi.ForwardingStore;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.scheduler.StorageConfig;
import io.tokenspeed.scheduler.StorageCounters.DropReason;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.text.MessageFormat;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Predicate;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * An engine over a store that refuses its writes (issue 43): a full Redis refused every backup
 * while each was sent about five times with its whole payload and new prompts' pages went too,
 * without a log line and with the health {@code healthy}; pages refused during a health cooldown
 * were dropped. Here the store is a memory store behind a switch: full (every PUT row refused for
 * no space), down (every call throws: an outage and its cooldown), or taking writes.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class EngineL3RefusingStoreTest {
  private static final int P = 4;
  private static final String FULL = "OOM command not allowed when used memory > 'maxmemory'.";

  private CausalLm model;
  private final List<LogRecord> logged = Collections.synchronizedList(new ArrayList<>());
  private final Logger executorLog = Logger.getLogger(L3Executor.class.getName());
  private final Handler capture =
      new Handler() {
        @Override
        public void publish(LogRecord r) {
          logged.add(r);
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
      };

  @BeforeAll
  void load(@TempDir Path dir) {
    model = ContextModels.llama(dir);
  }

  @AfterAll
  void close() {
    model.close();
  }

  @BeforeEach
  void listen() {
    logged.clear();
    executorLog.addHandler(capture);
  }

  @AfterEach
  void stopListening() {
    executorLog.removeHandler(capture);
  }

  /** A memory store that is full, down or taking writes; counts what PUTs send it. */
  static final class SwitchedStore extends ForwardingStore {
    enum Mode {
      FULL,
      DOWN,
      OK
    }

    volatile Mode mode;
    final AtomicLong putKeys = new AtomicLong();
    final AtomicLong putBytes = new AtomicLong();
    final AtomicLong putCalls = new AtomicLong();
    final Set<String> failed = Collections.synchronizedSet(new HashSet<>());
    final Set<String> written = Collections.synchronizedSet(new HashSet<>());

    SwitchedStore(Mode mode) {
      super(new MemoryStore());
      this.mode = mode;
    }

    @Override
    public StoreResult put(List<String> keys, List<MemorySegment> sources) throws Exception {
      putCalls.incrementAndGet();
      putKeys.addAndGet(keys.size());
      for (MemorySegment s : sources) {
        putBytes.addAndGet(s.byteSize());
      }
      switch (mode) {
        case FULL -> {
          failed.addAll(keys);
          List<RowResult> rows = new ArrayList<>();
          for (int i = 0; i < keys.size(); i++) {
            rows.add(RowResult.Rejected.noSpace(FULL));
          }
          return StoreResult.of(rows);
        }
        case DOWN -> {
          failed.addAll(keys);
          throw new IOException("connection refused");
        }
        case OK -> {
          StoreResult r = super.put(keys, sources);
          for (int i = 0; i < keys.size(); i++) {
            if (r.rows().get(i) instanceof RowResult.Ok) {
              written.add(keys.get(i));
            }
          }
          return r;
        }
      }
      throw new AssertionError(mode);
    }

    @Override
    public StoreResult exists(List<String> keys) throws Exception {
      if (mode == Mode.DOWN) {
        throw new IOException("connection refused");
      }
      return super.exists(keys);
    }

    /** The objects outlive each engine over the store: fresh engines read them. */
    @Override
    public void close() {}
  }

  /** One-page extensions; the executor's health cooldown as given. */
  private static L3Settings settings(SwitchedStore store, long cooldownMs) {
    return settings(store, cooldownMs, StorageConfig.DEFAULT_SOFT_DEADLINE_MS);
  }

  private static L3Settings settings(SwitchedStore store, long cooldownMs, long softDeadlineMs) {
    L3ExecutorConfig d = L3ExecutorConfig.defaults();
    L3ExecutorConfig executor =
        new L3ExecutorConfig(
            d.queryWorkers(),
            d.getWorkers(),
            d.putWorkers(),
            d.queryQueueCapacity(),
            d.getQueueCapacity(),
            d.putQueueCapacity(),
            d.maxOutstandingOperations(),
            cooldownMs,
            d.closeJoinDeadlineMs());
    return new L3Settings(
        store,
        new StorageRuntimeConfig(
            StorageConfig.defaults().withMinExtensionTokens(P).withSoftDeadlineMs(softDeadlineMs),
            executor),
        L3Settings.CPU_ATTENTION_BACKEND);
  }

  private Engine started(Checked rec, L3Settings l3) {
    return Engine.start(
        EngineSettings.of(model, EngineTest.small(256)).observer(rec).l3(l3).conclude());
  }

  private static Run serve(Engine e, Checked rec, int[] prompt) throws Exception {
    return rec.await(e.submit(prompt, SamplingParams.greedy(4)));
  }

  /** Waits (up to {@code seconds}) for a snapshot that meets {@code test}; returns the last one. */
  private static EngineMetrics awaitMetrics(Engine e, long seconds, Predicate<EngineMetrics> test)
      throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    EngineMetrics m = e.metrics();
    while (!test.test(m) && System.nanoTime() < deadline) {
      Thread.sleep(20);
      m = e.metrics();
    }
    return m;
  }

  private static L3Metrics executor(EngineMetrics m) {
    return m.storage().orElseThrow().executor();
  }

  private static EngineMetrics.Transfers transfers(EngineMetrics m) {
    return m.storage().orElseThrow().transfers();
  }

  private List<String> lines(Level level, String text) {
    List<String> out = new ArrayList<>();
    synchronized (logged) {
      for (LogRecord r : logged) {
        String m = MessageFormat.format(r.getMessage(), r.getParameters());
        if (r.getLevel() == level && m.contains(text)) {
          out.add(m);
        }
      }
    }
    return out;
  }

  /**
   * Forty prompts, one after another, over a store that answers "full" to every PUT: one warning
   * names the store's reason, none follows; the executor shows the store refusing writes while its
   * health stays healthy; the store is sent the first prompt's pages and then one page per hold,
   * not every page of every prompt five times; nothing is dropped as refused. Then the store takes
   * writes again: one line says so, the state clears, and the pages still on the Host are written.
   */
  @Test
  void shouldLogOnceShowTheStateAndSendBoundedBytesToAFullStore() throws Exception {
    SwitchedStore store = new SwitchedStore(SwitchedStore.Mode.FULL);
    SplittableRandom rnd = new SplittableRandom(43);
    Checked rec = new Checked();
    long pagesOffered = 0;
    long burst = 0;
    long startNs = System.nanoTime();
    try (Engine e = started(rec, settings(store, L3ExecutorConfig.DEFAULT_HEALTH_COOLDOWN_MS))) {
      for (int i = 0; i < 40; i++) {
        int[] prompt = rnd.ints(40 + rnd.nextInt(40), 0, model.vocabSize()).toArray();
        serve(e, rec, prompt);
        pagesOffered += prompt.length / P;
        if (i == 0) {
          awaitMetrics(e, 5, m -> executor(m).writesRefused()); // the first refusal is in
          burst = store.putKeys.get(); // the first prompt's write-through
        }
      }
      long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
      EngineMetrics m =
          awaitMetrics(
              e, 5, x -> transfers(x).heldCandidates() + transfers(x).deferredCandidates() > 0);
      L3Metrics ex = executor(m);
      assertTrue(ex.writesRefused(), "the store refuses writes: " + ex);
      assertEquals(FULL, ex.writesRefusedReason());
      assertEquals("HEALTHY", ex.healthState(), "a full store is not an outage");
      assertEquals(0, ex.healthEpoch());
      assertTrue(transfers(m).backupBackoffMs() > 0, "backups are held back: " + transfers(m));
      assertEquals(0L, transfers(m).droppedBackupKeys().get(DropReason.REFUSED));
      List<String> warnings = lines(Level.WARNING, "refuses writes");
      assertEquals(1, warnings.size(), "one line, not one per key: " + warnings);
      assertTrue(warnings.getFirst().contains(FULL), warnings::toString);
      assertEquals(0, lines(Level.INFO, "takes writes again").size());
      // one probe per hold: 100, 200, 400 ... ms, at most one a round trip
      long holds = 0;
      for (long spent = 0, b = 100;
          spent < elapsedMs + 1_000;
          spent += b, b = Math.min(b * 2, 10_000)) {
        holds++;
      }
      long bound = burst + holds + 8; // 8: pages in flight before the refusal was agreed
      long pageBytes = store.putBytes.get() / Math.max(1, store.putKeys.get());
      assertTrue(
          store.putKeys.get() <= bound,
          "pages sent "
              + store.putKeys.get()
              + " ("
              + store.putBytes.get()
              + " bytes) of "
              + pagesOffered
              + " offered in "
              + elapsedMs
              + " ms: more than the first prompt's "
              + burst
              + " and one per hold ("
              + holds
              + ")");
      assertTrue(store.putBytes.get() <= bound * pageBytes);
      assertTrue(pagesOffered >= 5 * store.putKeys.get(), pagesOffered + " offered");

      store.mode = SwitchedStore.Mode.OK; // room again
      m = awaitMetrics(e, 30, x -> !executor(x).writesRefused() && !store.written.isEmpty());
      assertTrue(!executor(m).writesRefused(), "the state clears: " + executor(m));
      assertEquals("", executor(m).writesRefusedReason());
      List<String> back = lines(Level.INFO, "takes writes again");
      assertEquals(1, back.size(), back::toString);
      assertEquals(1, lines(Level.WARNING, "refuses writes").size());
      awaitMetrics(
          e,
          30,
          x ->
              transfers(x).queuedCandidates()
                      + transfers(x).deferredCandidates()
                      + transfers(x).heldCandidates()
                  == 0);
      for (String k : new ArrayList<>(store.failed)) {
        // a page refused while the store was full went again, unless the Host evicted it
        if (!store.written.contains(k)) {
          assertTrue(
              transfers(e.metrics()).droppedBackupKeys().get(DropReason.UNAVAILABLE)
                      + transfers(e.metrics()).droppedBackupKeys().get(DropReason.OVERFLOW)
                  > 0,
              "a refused page neither written nor dropped with its reason: " + k);
        }
      }
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
  }

  /**
   * The store goes down for longer than the health cooldown (2 s) while prompts finish: the first
   * PUT fails (an outage), the next ones are rejected during the cooldown. Every page refused or
   * rejected meanwhile is written once the store answers again (the old per-page attempts ran out
   * after 1.5 s and dropped them), none is dropped as refused, and a fresh engine restores each
   * prompt from the store.
   */
  @Test
  void shouldWriteThePagesRejectedDuringACooldownOnceTheStoreAnswers() throws Exception {
    SwitchedStore store = new SwitchedStore(SwitchedStore.Mode.DOWN);
    SplittableRandom rnd = new SplittableRandom(44);
    List<int[]> prompts = new ArrayList<>();
    Checked rec = new Checked();
    try (Engine e = started(rec, settings(store, 2_000))) {
      long downNs = System.nanoTime();
      for (int i = 0; i < 3; i++) {
        int[] prompt = rnd.ints(41 + 8 * i, 0, model.vocabSize()).toArray();
        prompts.add(prompt);
        serve(e, rec, prompt);
        Thread.sleep(200);
      }
      EngineMetrics m = awaitMetrics(e, 5, x -> executor(x).healthEpoch() > 0);
      assertTrue(executor(m).healthEpoch() > 0, "an outage: " + executor(m));
      long leftMs = 2_500 - TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - downNs);
      Thread.sleep(Math.max(0, leftMs)); // past the old attempts' 1.5 s, past the cooldown
      m = e.metrics();
      assertTrue(transfers(m).putsIssued() > 0, "backups were sent while the store was down");
      assertTrue(
          executor(m).rejections().getOrDefault("REJECTED_UNHEALTHY", 0L) > 0,
          "and rejected during the cooldown: " + executor(m));
      assertTrue(store.written.isEmpty(), "nothing was written meanwhile");
      Set<String> failed = Set.copyOf(store.failed); // those that reached the store, if any
      store.mode = SwitchedStore.Mode.OK;
      m =
          awaitMetrics(
              e,
              30,
              x ->
                  store.written.containsAll(failed)
                      && transfers(x).queuedCandidates()
                              + transfers(x).deferredCandidates()
                              + transfers(x).heldCandidates()
                          == 0
                      && "HEALTHY".equals(executor(x).healthState()));
      Set<String> lost = new HashSet<>(failed);
      lost.removeAll(store.written);
      assertEquals(Set.of(), lost, "pages refused during the cooldown were never written");
      assertEquals(0L, transfers(m).droppedBackupKeys().get(DropReason.REFUSED));
      assertEquals("HEALTHY", executor(m).healthState());
      assertEquals(0, lines(Level.WARNING, "refuses writes").size(), "an outage is no refusal");
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    for (int[] prompt : prompts) {
      int[] extended = EngineL3Test.extend(prompt, prompt.length + 5, model.vocabSize(), rnd);
      Checked r = new Checked();
      Run got;
      // a fresh engine's first read may be slow to compile: no soft deadline gets in the way
      try (Engine reader =
          started(r, settings(store, L3ExecutorConfig.DEFAULT_HEALTH_COOLDOWN_MS, 60_000))) {
        got = serve(reader, r, extended);
      }
      assertEquals(
          prompt.length / P * P,
          got.result().metrics().reusedStorageTokens(),
          "a fresh engine restores the prompt written after the outage: " + got.result().metrics());
    }
  }
}
