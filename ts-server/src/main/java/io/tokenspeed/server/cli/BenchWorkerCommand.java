package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.ObjectKey;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineMetrics;
import io.tokenspeed.engine.EngineStats;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestMetrics;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.engine.l3.StorageBackend;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreResult;
import io.tokenspeed.l3.store.ThrottledStore;
import io.tokenspeed.server.config.StorageExtraConfig;
import java.io.PrintWriter;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * One process of {@code tokenspeed bench ttft} (hidden: the benchmark starts it). Roles:
 *
 * <ul>
 *   <li>{@code writer}: serves the seed prompts on an engine with L3 and exits once its writes are
 *       done;
 *   <li>{@code reader}: a fresh process with empty local caches. Untimed: JIT warm-up on throwaway
 *       engines (a request without L3, a miss with L3, and with L3 a restore of the first quarter
 *       of each stored prefix, reported as cohort {@code warm-up}), then the store's raw read
 *       bandwidth for one prefix's objects (direct GETs, one call and parallel calls, best of 3);
 *       with {@code --drop-page-cache}, the store directory's pages are dropped before each raw
 *       read and each cohort that reads them. Timed, each cohort on a fresh engine of the same
 *       configuration: {@code l3} (the query prompts, their prefixes in the store), {@code partial}
 *       (half of each prefix and new tokens), {@code recompute} (the query prompts without L3);
 *       then {@code --pairs} pairs of {@code miss-l3} / {@code miss-off} requests (prompts whose
 *       prefixes no one wrote, with and without L3), each on a fresh engine, and {@code
 *       --decode-pairs} pairs of decode runs on two engines alive side by side, one with L3 enabled
 *       and idle, one without (TPOT, and the loop's own time per round outside the forward), the
 *       two sides of a pair back to back in alternating order.
 *   <li>{@code memory}: the writer's and the reader's engines in one process over one in-memory
 *       store (it cannot cross processes).
 * </ul>
 *
 * <p>With {@code --tp N} the worker is the launcher of a tensor-parallel replica of N rank
 * processes ({@link TpLauncher}): every rank runs the role with its own store client (and, for
 * {@code memory}, its own in-memory store) and starts the same engines in the same order; rank 0
 * serves the requests and its lines are the worker's, the others follow each engine until rank 0
 * closes it. A replica's ranks run one engine at a time, so the decode pairs run each side on a
 * fresh engine (the prompt served and written through untimed first) instead of on two engines
 * alive side by side; the raw reads are rank 0's objects, its share of each prefix.
 *
 * <p>The model loads once per process, on the device {@code --device} names (the CPU, or one GPU:
 * then without {@code --tp}), and every engine of the run is a fresh one over it. The first line
 * names the device; each request line of a timed cohort also carries its Host→Device copies (the
 * blocks that went up to the Device tier, restored from L3 for the {@code l3} cohort) from the
 * engine's stats.
 *
 * <p>Every measurement is one JSON line on stdout; progress goes to stderr.
 */
@Command(name = "bench-worker", hidden = true, description = "One process of bench ttft.")
final class BenchWorkerCommand implements Callable<Integer> {

  @Spec private CommandSpec spec;

  @Mixin private ModelOptions modelOptions;

  @Mixin private StorageOptions storageOptions;

  @Mixin private TensorParallelOptions tp;

  @Mixin private DeviceOptions deviceOptions;

  @Option(names = "--role", required = true)
  private String role;

  @Option(names = "--label", required = true)
  private String label;

  @Option(names = "--prompts", required = true)
  private int prompts;

  @Option(names = "--prefix-tokens", required = true)
  private int prefixTokens;

  @Option(names = "--suffix-tokens", required = true)
  private int suffixTokens;

  @Option(names = "--max-tokens", required = true)
  private int maxTokens;

  @Option(names = "--decode-tokens", required = true)
  private int decodeTokens;

  @Option(names = "--prompt-seed", required = true)
  private long promptSeed;

  @Option(names = "--run-seed", required = true)
  private long runSeed;

  @Option(names = "--drop-page-cache")
  private Path dropPageCache;

  @Option(names = "--pairs", required = true)
  private int pairs;

  @Option(names = "--decode-pairs", required = true)
  private int decodePairs;

  /**
   * Reads from the store at this rate (10^6 bytes per second, {@link ThrottledStore}); the writer
   * then also writes a learning prefix, which every timed cohort's engine serves first (untimed):
   * its restore teaches the cost model the store's rate.
   */
  @Option(names = "--throttle-mbps")
  private Double throttleMbps;

  private PrintWriter out;
  private PrintWriter err;
  private EngineModel lm;
  private EngineConfig config;
  private StorageExtraConfig.Resolved storage;

  @Override
  public Integer call() throws Exception {
    modelOptions.checkThreads();
    modelOptions.requireVectorModule();
    storage =
        storageOptions
            .resolve()
            .orElseThrow(() -> modelOptions.usage("the benchmark's worker needs an L3 backend"));
    out = spec.commandLine().getOut();
    err = spec.commandLine().getErr();
    deviceOptions.checkTensorParallel(tp.size());
    Path folder = modelOptions.folder(modelOptions.weightType());
    if (tp.launcher()) {
      return tp.launch(); // rank 0's lines are this worker's; the other ranks compute with it
    }
    // the weights load once; every engine of the run is a fresh one over them
    try (EngineModel model = deviceOptions.load(folder, modelOptions.model(), tp)) {
      lm = model;
      if (!tp.follower()) {
        emit(line("device").put("device", model.deviceName()));
      }
      // with a throttled store, one more prefix: the learning prompt's (the last seed)
      DemoPrompts p =
          DemoPrompts.of(
              promptSeed,
              lm.vocabSize(),
              prompts + (throttleMbps != null ? 1 : 0),
              prefixTokens,
              suffixTokens);
      int perRequest = prefixTokens + suffixTokens + Math.max(maxTokens, decodeTokens);
      config =
          EngineConfig.defaults(lm.deviceParentsFor(2 * perRequest))
              .withComputeThreads(modelOptions.computeThreads());
      switch (role) {
        case "writer" -> write(l3(), p);
        case "reader" -> read(p, this::l3, null);
        case "memory" -> {
          Store shared = storage.backend().open();
          Callable<L3Settings> l3 =
              () ->
                  new L3Settings(
                      throttled(new BenchTraceCommand.SharedStore(shared)),
                      storage.runtime(),
                      lm.attentionBackend());
          write(l3.call(), p);
          read(p, l3, shared);
        }
        default ->
            throw modelOptions.usage("--role=" + role + " is not one of: writer, reader, memory");
      }
    }
    return 0;
  }

  private L3Settings l3() throws Exception {
    L3Settings s = L3Settings.open(storage.backend(), storage.runtime());
    return new L3Settings(throttled(s.store()), s.runtime(), s.attentionBackend());
  }

  /** {@code store} read at {@code --throttle-mbps}, or itself without it. */
  private Store throttled(Store store) {
    return throttleMbps == null ? store : new ThrottledStore(store, throttleMbps * 1e6);
  }

  private void write(L3Settings l3, DemoPrompts p) throws Exception {
    withEngine(
        l3,
        w -> {
          // one prompt at a time, each one's write-through waited for before the next: a store
          // slower than the prefill (an 8B shape's 32k-token prefix is 4.3 GB) would otherwise
          // close the pressure gate while the next prompt runs, and the engine sheds backups
          // under pressure by design; the readers need every prefix in the store. The engine's
          // close drains for a bounded time only (10 s), so the wait is here, not in the close.
          long waited = 0;
          for (int i = 0; i < p.seeds().length; i++) {
            progress("writer: seed prompt " + (i + 1) + "/" + p.seeds().length);
            long served = System.nanoTime();
            WorkerProcess.serve(w, p.seeds()[i], maxTokens);
            progress("writer: writing prompt " + (i + 1) + " to the store");
            long w0 = System.nanoTime();
            if (!WorkerProcess.awaitStorageIdle(w, served, WRITE_THROUGH_NS)) {
              throw new IllegalStateException(
                  "writer: the write-through of prompt "
                      + (i + 1)
                      + " did not finish within "
                      + WRITE_THROUGH_NS / 1_000_000_000L
                      + " s: the store takes writes slower than the benchmark can wait for");
            }
            waited += System.nanoTime() - w0;
          }
          ObjectNode line = writerFigures(line("writer-closed"), w.metrics());
          w.close();
          line.put("write_through_wait_ms", waited / 1e6);
          line.put("store_closed", w.storageCloseReport().orElseThrow().storeClosed());
          emit(line);
        });
  }

  /**
   * Adds the writer's L3 write figures to {@code line}: the PUT rows issued and written, their
   * bytes, and the backup keys the engine dropped, by reason (only reasons with drops; a reader
   * falls back where a prefix's keys were dropped).
   */
  static ObjectNode writerFigures(ObjectNode line, EngineMetrics m) {
    EngineMetrics.Storage s = m.storage().orElseThrow();
    line.put("put_keys", s.executor().put().keys());
    line.put("put_ok_keys", s.executor().put().okKeys());
    line.put("put_bytes", s.executor().put().payloadBytes());
    ObjectNode dropped = line.putObject("dropped_backup_keys");
    s.transfers()
        .droppedBackupKeys()
        .forEach(
            (reason, n) -> {
              if (n > 0) {
                dropped.put(reason.name().toLowerCase(Locale.ROOT), n);
              }
            });
    return line;
  }

  /**
   * @param rawStore the client the raw reads use, or null for a second client of the backend
   */
  private void read(DemoPrompts p, Callable<L3Settings> l3, Store rawStore) throws Exception {
    int vocab = lm.vocabSize();
    // this reader's own suffixes and misses (a run seed per reader: what one reader's engines write
    // through never turns another reader's query suffix or miss into a hit)
    SplittableRandom rnd = new SplittableRandom(runSeed);
    int n = prompts; // a learning prefix, when there is one, is the last seed
    learning = null;
    if (throttleMbps != null) {
      int page = config.prefixGranularity();
      int learnPrefix = Math.max(page, prefixTokens / 4 / page * page);
      learning =
          concat(
              java.util.Arrays.copyOf(p.seeds()[prompts], learnPrefix),
              rnd.ints(suffixTokens, 0, vocab).toArray());
    }
    int[][] queries = new int[n][];
    int[][] partial = new int[n][];
    int[][] misses = new int[pairs][];
    for (int i = 0; i < n; i++) {
      int[] prefix = java.util.Arrays.copyOf(p.seeds()[i], prefixTokens);
      queries[i] = concat(prefix, rnd.ints(suffixTokens, 0, vocab).toArray());
      partial[i] =
          concat(
              java.util.Arrays.copyOf(prefix, prefixTokens / 2),
              rnd.ints(suffixTokens, 0, vocab).toArray());
    }
    for (int i = 0; i < pairs; i++) {
      misses[i] = rnd.ints(prefixTokens + suffixTokens, 0, vocab).toArray();
    }
    // untimed: warm code paths on throwaway engines, without L3, with L3 on a miss, and with L3 on
    // restores (of the first quarter of each stored prefix: the restore path's own code, not the
    // objects the timed cohorts read)
    progress("reader: warming up");
    int[] warm = rnd.ints(Math.min(512, prefixTokens), 0, vocab).toArray();
    withEngine(null, e -> WorkerProcess.serve(e, warm, maxTokens));
    int[] warmMiss = rnd.ints(Math.min(512, prefixTokens), 0, vocab).toArray();
    int page = config.prefixGranularity();
    int warmPrefix = Math.min(prefixTokens, Math.max(page, prefixTokens / 4 / page * page));
    int[][] warmRestores = new int[n][];
    for (int i = 0; i < n; i++) {
      warmRestores[i] =
          concat(
              java.util.Arrays.copyOf(p.seeds()[i], warmPrefix),
              rnd.ints(suffixTokens, 0, vocab).toArray());
    }
    withEngine(
        l3.call(),
        e -> {
          WorkerProcess.serve(e, warmMiss, maxTokens);
          for (int i = 0; i < n; i++) {
            emit(
                WorkerProcess.requestLine(
                    line("request"),
                    "warm-up",
                    i,
                    WorkerProcess.serve(e, warmRestores[i], maxTokens)));
          }
          rawBandwidth(e, queries[0], rawStore);
        });
    dropPages("l3");
    cohort("l3", queries, l3.call());
    dropPages("partial"); // the l3 cohort's reads warmed the pages again
    cohort("partial", partial, l3.call());
    cohort("recompute", queries, null);
    // all-miss and decode: L3 on and off interleaved in pairs (the order alternating), each
    // request on a fresh engine, so that the machine's drift affects both sides alike
    for (int i = 0; i < pairs; i++) {
      int pair = i;
      for (boolean withL3 : new boolean[] {i % 2 == 0, i % 2 != 0}) {
        String cohort = withL3 ? "miss-l3" : "miss-off";
        withEngine(
            withL3 ? l3.call() : null,
            e -> {
              progress("reader: " + cohort + " " + (pair + 1) + "/" + pairs);
              EngineStats before = e.stats();
              GenerationResult r = WorkerProcess.serve(e, misses[pair], maxTokens);
              emit(
                  loopFigures(
                      WorkerProcess.requestLine(line("request"), cohort, pair, r),
                      before,
                      e.stats()));
            });
      }
    }
    if (learning != null && !tp.ranked()) {
      slowPairs(p, l3, rnd);
    }
    int[] decodePrompt = rnd.ints(128, 0, vocab).toArray();
    if (tp.ranked()) {
      decodeOnReplica(decodePrompt, l3);
      return;
    }
    // decode: one engine with L3 (enabled and idle) and one without, alive side by side, their
    // runs alternating, so that the machine's drift affects both alike
    try (Engine on = engine(l3.call());
        Engine off = engine(null)) {
      WorkerProcess.serve(on, decodePrompt, 2); // untimed: the prompt cached on both engines,
      WorkerProcess.serve(off, decodePrompt, 2); // and the L3 engine's write-through done
      Thread.sleep(500);
      for (int i = 0; i < decodePairs; i++) {
        for (boolean withL3 : new boolean[] {i % 2 == 0, i % 2 != 0}) {
          Engine e = withL3 ? on : off;
          progress(
              "reader: decode, L3 "
                  + (withL3 ? "idle" : "off")
                  + ", pair "
                  + (i + 1)
                  + "/"
                  + decodePairs);
          EngineStats before = e.stats();
          RequestMetrics m = WorkerProcess.serve(e, decodePrompt, decodeTokens).metrics();
          emit(
              loopFigures(
                  line("tpot").put("l3", withL3).put("pair", i).put("tpot_ms", m.tpotNs() / 1e6),
                  before,
                  e.stats()));
        }
      }
    }
  }

  /**
   * With {@code --throttle-mbps}: the TTFT of requests that bypass a store slower than recomputing
   * against the TTFT without L3, in pairs. Two engines alive side by side, one with L3 over the
   * throttled store (it first serves the learning prompt and waits for its restore, so that the
   * cost model has measured the store), one without (which serves the learning prompt too); then
   * each stored prefix with a new suffix on both, {@code slow-l3} and {@code slow-off}, the two
   * sides of a pair back to back in alternating order, so that the machine's drift affects both
   * alike.
   */
  private void slowPairs(DemoPrompts p, Callable<L3Settings> l3, SplittableRandom rnd)
      throws Exception {
    int[][] pairPrompts = new int[prompts][];
    for (int i = 0; i < prompts; i++) {
      pairPrompts[i] =
          concat(
              java.util.Arrays.copyOf(p.seeds()[i], prefixTokens),
              rnd.ints(suffixTokens, 0, lm.vocabSize()).toArray());
    }
    try (Engine on = engine(l3.call());
        Engine off = engine(null)) {
      progress("reader: slow pairs: learning the store's rate");
      long t0 = System.nanoTime();
      emit(
          WorkerProcess.requestLine(
              line("request"), "learn-slow", 0, WorkerProcess.serve(on, learning, maxTokens)));
      WorkerProcess.serve(off, learning, maxTokens);
      if (!WorkerProcess.awaitStorageIdle(on, t0, WRITE_THROUGH_NS)) {
        throw new IllegalStateException("reader: the learning restore did not finish");
      }
      for (int i = 0; i < prompts; i++) {
        for (boolean withL3 : new boolean[] {i % 2 == 0, i % 2 != 0}) {
          progress("reader: slow pair " + (i + 1) + "/" + prompts + (withL3 ? ", L3" : ", off"));
          GenerationResult r = WorkerProcess.serve(withL3 ? on : off, pairPrompts[i], maxTokens);
          emit(WorkerProcess.requestLine(line("request"), withL3 ? "slow-l3" : "slow-off", i, r));
        }
      }
      emit(costFigures(line("costs").put("cohort", "slow-l3"), on));
    }
  }

  /**
   * How long the writer, and a decode run's engine, wait for the write-through of their prompts (an
   * 8B shape's 32k-token prefix is 4.3 GB: tens of seconds into a store that syncs to disk).
   */
  private static final long WRITE_THROUGH_NS = 300_000_000_000L;

  /**
   * Decode on a tensor-parallel replica, whose ranks run one engine at a time (one control-plane
   * mesh, one collective): each run of a pair on a fresh engine, with L3 enabled and idle or
   * without, the two sides back to back in alternating order. Untimed first on each engine: the
   * prompt is served (cached, and with L3 written through), and the write-through waited for.
   */
  private void decodeOnReplica(int[] decodePrompt, Callable<L3Settings> l3) throws Exception {
    for (int i = 0; i < decodePairs; i++) {
      int pair = i;
      for (boolean withL3 : new boolean[] {i % 2 == 0, i % 2 != 0}) {
        withEngine(
            withL3 ? l3.call() : null,
            e -> {
              long served = System.nanoTime();
              WorkerProcess.serve(e, decodePrompt, 2);
              WorkerProcess.awaitStorageIdle(e, served, WRITE_THROUGH_NS);
              progress(
                  "reader: decode, L3 "
                      + (withL3 ? "idle" : "off")
                      + ", pair "
                      + (pair + 1)
                      + "/"
                      + decodePairs);
              EngineStats before = e.stats();
              RequestMetrics m = WorkerProcess.serve(e, decodePrompt, decodeTokens).metrics();
              emit(
                  loopFigures(
                      line("tpot")
                          .put("l3", withL3)
                          .put("pair", pair)
                          .put("tpot_ms", m.tpotNs() / 1e6),
                      before,
                      e.stats()));
            });
      }
    }
  }

  /** Work on one engine. */
  @FunctionalInterface
  private interface EngineWork {
    void run(Engine e) throws Exception;
  }

  /**
   * Runs {@code work} on a fresh engine of the benchmark's configuration (with L3 when {@code l3}
   * is not null), then closes it. On a follower rank of a replica it follows the leader's engine
   * instead, until the leader closes it: every rank starts the same engines in the same order.
   */
  private void withEngine(L3Settings l3, EngineWork work) throws Exception {
    try (Engine e = engine(l3)) {
      if (tp.follower()) {
        tp.follow(e);
        return;
      }
      work.run(e);
    }
  }

  /**
   * Adds the loop's figures between two snapshots of one engine's stats to {@code line}: its own
   * time outside the forward (the L3 poll and exchange, scheduling, sampling), in total and per
   * round.
   */
  private static ObjectNode loopFigures(ObjectNode line, EngineStats before, EngineStats after) {
    long rounds = Math.max(1, after.rounds() - before.rounds());
    long outside =
        (after.roundNanos() - before.roundNanos()) - (after.forwardNanos() - before.forwardNanos());
    return line.put("loop_ms", outside / 1e6).put("loop_us_per_round", outside / 1e3 / rounds);
  }

  /**
   * An engine of the benchmark's configuration, with L3 when {@code l3} is not null: this process's
   * own, or its rank of the worker's tensor-parallel replica.
   */
  private Engine engine(L3Settings l3) {
    return lm.start(config, OptionalInt.empty(), l3);
  }

  /**
   * The learning prompt: with {@code --throttle-mbps}, a quarter of a prefix no cohort shares,
   * which every timed cohort's engine serves first (untimed); null without.
   */
  private int[] learning;

  private void cohort(String name, int[][] prompts, L3Settings l3) throws Exception {
    withEngine(
        l3,
        e -> {
          if (learning != null) {
            // untimed: the engine measures the store (the restore) and its prefill before the
            // cohort, and the restore's GET, which may outlive the request's soft deadline,
            // finishes before the first timed request
            progress("reader: " + name + ": learning the store's rate");
            long t0 = System.nanoTime();
            GenerationResult r = WorkerProcess.serve(e, learning, maxTokens);
            emit(WorkerProcess.requestLine(line("request"), "learn-" + name, 0, r));
            if (!WorkerProcess.awaitStorageIdle(e, t0, WRITE_THROUGH_NS)) {
              throw new IllegalStateException("reader: the learning restore did not finish");
            }
          }
          for (int i = 0; i < prompts.length; i++) {
            progress("reader: " + name + " " + (i + 1) + "/" + prompts.length);
            EngineStats before = e.stats();
            GenerationResult r = WorkerProcess.serve(e, prompts[i], maxTokens);
            emit(
                hostToDevice(
                    WorkerProcess.requestLine(line("request"), name, i, r),
                    before,
                    statsAfter(e, before)));
          }
          if (l3 != null) {
            emit(costFigures(line("costs").put("cohort", name), e));
          }
        });
  }

  /**
   * Adds the cost model's figures of {@code e} to {@code line}, from its latest metrics snapshot
   * taken after the cohort's last request ended: the bypasses by reason (every final reason), the
   * partial restores and explorations, the agreed figures and the break-even bandwidth, and the
   * early Host→Device copies (blocks published through them, GETs that had no room for them).
   */
  static ObjectNode costFigures(ObjectNode line, Engine e) throws InterruptedException {
    long deadline = System.nanoTime() + STATS_WAIT_NS;
    long since = System.nanoTime();
    EngineMetrics m = e.metrics();
    while (m.timeNs() - since < 0 && System.nanoTime() - deadline < 0) {
      Thread.sleep(5);
      m = e.metrics();
    }
    EngineMetrics.Costs c = m.storage().orElseThrow().transfers().costs();
    ObjectNode bypasses = line.putObject("bypasses");
    c.bypasses()
        .forEach((reason, count) -> bypasses.put(reason.name().toLowerCase(Locale.ROOT), count));
    line.put("cost_model", c.enabled());
    line.put("partial_restores", c.partialRestores());
    line.put("explorations", c.explorations());
    line.put("restores_abandoned", c.abandoned());
    line.put("restore_bytes_per_second", c.figures().storeBytesPerSecond());
    line.put("restore_latency_ms", c.figures().storeLatencyNs() / 1e6);
    line.put("break_even_bytes_per_second", c.breakEvenBytesPerSecond());
    line.put("reference_tokens", c.referenceTokens());
    line.put("reference_prefill_s", c.referencePrefillSeconds());
    EngineMetrics.Transfers t = m.storage().orElseThrow().transfers();
    line.put("early_h2d_blocks", t.earlyH2dBlocks());
    line.put("early_h2d_skipped", t.earlyH2dSkipped());
    return line;
  }

  /** How long {@link #statsAfter} waits for the round that ended a request to be published. */
  private static final long STATS_WAIT_NS = 5_000_000_000L;

  /**
   * {@code e}'s stats once they include the round that ended the request served since {@code
   * before} (the loop publishes them after each round, a little after the request's result); the
   * latest after {@value #STATS_WAIT_NS} ns.
   */
  private static EngineStats statsAfter(Engine e, EngineStats before) throws InterruptedException {
    long deadline = System.nanoTime() + STATS_WAIT_NS;
    EngineStats now = e.stats();
    while (now.endedRequests() <= before.endedRequests() && System.nanoTime() - deadline < 0) {
      Thread.sleep(1);
      now = e.stats();
    }
    return now;
  }

  /**
   * Adds to {@code line} the Host→Device copies between two snapshots of one engine's stats: the
   * bytes of the blocks that went up to the Device tier (restored from L3 or reused from the Host
   * tier) and the copy thread's time moving them, and of those bytes the ones copied in stages of
   * layers while the forward computed.
   */
  private static ObjectNode hostToDevice(ObjectNode line, EngineStats before, EngineStats after) {
    return line.put("h2d_bytes", after.loadedBytes() - before.loadedBytes())
        .put("h2d_ms", (after.loadNanos() - before.loadNanos()) / 1e6)
        .put("h2d_staged_bytes", after.stagedLoadedBytes() - before.stagedLoadedBytes());
  }

  /**
   * Reads the objects of {@code prompt}'s prefix straight from other clients of the store: one GET
   * of every key, and as many concurrent GETs of a share each as the executor has GET workers (best
   * of 3 each; with {@code --drop-page-cache} the pages are dropped before every read): the raw
   * bandwidth restores are compared with. On a replica these are rank 0's objects (its share of the
   * prefix; every rank restores its own share in parallel). Not with {@code --throttle-mbps}.
   */
  private void rawBandwidth(Engine e, int[] prompt, Store shared) throws Exception {
    if (throttleMbps != null) {
      return; // a throttled store's rate is --throttle-mbps, by construction
    }
    Namespace ns = e.storageNamespace().orElseThrow();
    int p = e.layout().prefixGranularity();
    int boundary = prefixTokens / p * p;
    PromptKeys keys =
        PromptKeys.of(e.layout(), java.util.Arrays.copyOf(prompt, boundary), List.of());
    List<String> objects = new ArrayList<>();
    List<Long> sizes = new ArrayList<>();
    for (CacheGroupSpec g : e.layout().groups()) {
      if (g.kind() instanceof GroupKind.StateCheckpoints) {
        objects.add(
            ObjectKey.forRank(ns, keys.checkpointKey(g.groupId(), boundary), g, 0).toString());
        sizes.add(g.bytesPerBlock());
        continue;
      }
      for (int row = g.firstNeededRow(boundary); row < g.rowsFor(boundary); row++) {
        CacheKey k = keys.keyOf(g.groupId(), row, boundary);
        objects.add(ObjectKey.forRank(ns, k, g, 0).toString());
        sizes.add(g.bytesPerBlock());
      }
    }
    long total = sizes.stream().mapToLong(Long::longValue).sum();
    int threads = storage.runtime().executor().getWorkers();
    StorageBackend backend = storage.backend();
    List<Store> clients = new ArrayList<>();
    Arena arena = Arena.ofShared();
    try {
      // one allocation, sliced: a store that reads only into registered memory (Mooncake)
      // registers it once per fresh client, as the engine registers its Host allocation
      long[] offsets = new long[sizes.size()];
      long end = 0;
      for (int i = 0; i < sizes.size(); i++) {
        offsets[i] = end;
        end = (end + sizes.get(i) + 63) / 64 * 64;
      }
      MemorySegment all = arena.allocate(Math.max(end, 64), 64);
      List<MemorySegment> dest = new ArrayList<>();
      for (int i = 0; i < sizes.size(); i++) {
        dest.add(all.asSlice(offsets[i], sizes.get(i)));
      }
      for (int t = 0; t < threads; t++) {
        Store client = shared != null ? shared : backend.open();
        clients.add(client);
        if (shared == null) {
          client.registerHostBuffer(all);
        }
      }
      double one = Double.MAX_VALUE;
      double parallel = Double.MAX_VALUE;
      for (int r = 0; r < 3; r++) {
        dropPagesQuietly();
        one = Math.min(one, timedGet(List.of(clients.get(0)), objects, dest));
        dropPagesQuietly();
        parallel = Math.min(parallel, timedGet(clients, objects, dest));
      }
      emit(
          line("raw-get")
              .put("objects", objects.size())
              .put("bytes", total)
              .put("ms", one)
              .put("parallel_ms", parallel)
              .put("threads", threads)
              .put("cold", dropPageCache != null));
    } finally {
      try {
        if (shared == null) {
          for (Store c : clients) {
            c.close(); // unregisters the allocation before it is freed
          }
        }
      } finally {
        arena.close();
      }
    }
  }

  /**
   * Reads {@code objects} into {@code dest} with one GET per client, each of a contiguous share of
   * the keys, all at once; returns the milliseconds until the last one returned.
   */
  private static double timedGet(
      List<Store> clients, List<String> objects, List<MemorySegment> dest) throws Exception {
    int n = clients.size();
    List<java.util.concurrent.Callable<StoreResult>> calls = new ArrayList<>();
    for (int t = 0; t < n; t++) {
      int from = objects.size() * t / n;
      int to = objects.size() * (t + 1) / n;
      Store c = clients.get(t);
      calls.add(() -> c.get(objects.subList(from, to), dest.subList(from, to)));
    }
    long t0 = System.nanoTime();
    List<StoreResult> results = new ArrayList<>();
    if (n == 1) {
      results.add(calls.get(0).call());
    } else {
      try (var pool = java.util.concurrent.Executors.newFixedThreadPool(n)) {
        for (var f : pool.invokeAll(calls)) {
          results.add(f.get());
        }
      }
    }
    double ms = (System.nanoTime() - t0) / 1e6;
    for (StoreResult got : results) {
      if (got.rows().stream().anyMatch(x -> !(x instanceof io.tokenspeed.l3.spi.RowResult.Ok))) {
        throw new IllegalStateException("raw read of the prefix's objects failed: " + got);
      }
    }
    return ms;
  }

  /** With {@code --drop-page-cache}, drops the store's pages (a cold raw read; untimed). */
  private void dropPagesQuietly() throws Exception {
    if (dropPageCache != null) {
      dropPages(dropPageCache);
    }
  }

  /**
   * With {@code --drop-page-cache}, drops the store's pages before {@code cohort} (untimed; on a
   * replica rank 0 drops every rank's).
   */
  private void dropPages(String cohort) throws Exception {
    if (dropPageCache != null && !tp.follower()) {
      progress("reader: dropping the store's pages from the page cache before " + cohort);
      emit(line("page-cache-dropped").put("before", cohort).put("files", dropPages(dropPageCache)));
    }
  }

  /** Asks the kernel to drop the page cache of every file under {@code dir}. */
  private static int dropPages(Path dir) throws Exception {
    try {
      return dropPagesOf(dir);
    } catch (Exception | Error e) {
      throw e;
    } catch (Throwable t) {
      throw new IllegalStateException("posix_fadvise failed", t);
    }
  }

  private static int dropPagesOf(Path dir) throws Throwable {
    Linker linker = Linker.nativeLinker();
    var lookup = linker.defaultLookup();
    MethodHandle open =
        linker.downcallHandle(
            lookup.find("open").orElseThrow(),
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT));
    MethodHandle fadvise =
        linker.downcallHandle(
            lookup.find("posix_fadvise").orElseThrow(),
            FunctionDescriptor.of(
                ValueLayout.JAVA_INT,
                ValueLayout.JAVA_INT,
                ValueLayout.JAVA_LONG,
                ValueLayout.JAVA_LONG,
                ValueLayout.JAVA_INT));
    MethodHandle close =
        linker.downcallHandle(
            lookup.find("close").orElseThrow(),
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
    int dropped = 0;
    List<Path> files;
    try (Stream<Path> walk = Files.walk(dir)) {
      files = walk.filter(Files::isRegularFile).toList();
    }
    try (Arena arena = Arena.ofConfined()) {
      for (Path f : files) {
        int fd = (int) open.invokeExact(arena.allocateFrom(f.toString()), 0);
        if (fd < 0) {
          continue;
        }
        int rc = (int) fadvise.invokeExact(fd, 0L, 0L, 4); // POSIX_FADV_DONTNEED
        int closed = (int) close.invokeExact(fd);
        if (rc == 0 && closed == 0) {
          dropped++;
        }
      }
    }
    return dropped;
  }

  private ObjectNode line(String kind) {
    ObjectNode n = JsonNodeFactory.instance.objectNode();
    n.put("kind", kind);
    n.put("label", label);
    return n;
  }

  private void emit(ObjectNode line) {
    out.println(line);
    out.flush();
  }

  private void progress(String what) {
    err.println(what);
    err.flush();
  }

  private static int[] concat(int[] a, int[] b) {
    int[] o = java.util.Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, o, a.length, b.length);
    return o;
  }
}
