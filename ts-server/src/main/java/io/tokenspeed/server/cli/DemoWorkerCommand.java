package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.l3.CloseReport;
import io.tokenspeed.server.config.StorageExtraConfig;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.OptionalInt;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * One process of {@code tokenspeed demo} (hidden: the demo starts it). The writer serves the seed
 * prompts cold on an engine with L3 (their prefixes go to the store as they finish), then the query
 * prompts on the same engine (the L2-only cohort: warm local caches), and exits after its engine
 * drained the writes. The reader, a fresh process with empty local caches, first warms its L3 path
 * on a throwaway engine (prompts of its own written to the store and restored), then serves the
 * query prompts on an engine with L3 (the L3 cohort), then on a fresh engine without L3 (the
 * cache-off cohort: recomputation). Each served request is one JSON line on stdout; progress goes
 * to stderr. The model loads once, on the device {@code --device} names, and every engine is a
 * fresh one over it.
 */
@Command(name = "demo-worker", hidden = true, description = "One process of the demo.")
final class DemoWorkerCommand implements Callable<Integer> {

  @Spec private CommandSpec spec;

  @Mixin private ModelOptions modelOptions;

  @Option(names = "--role", required = true, description = "writer or reader")
  private String role;

  @Mixin private StorageOptions storageOptions;

  @Mixin private TensorParallelOptions tp;

  @Mixin private DeviceOptions deviceOptions;

  @Option(names = "--prefixes", required = true)
  private int prefixes;

  @Option(names = "--prefix-tokens", required = true)
  private int prefixTokens;

  @Option(names = "--suffix-tokens", required = true)
  private int suffixTokens;

  @Option(names = "--max-tokens", required = true)
  private int maxTokens;

  @Option(names = "--prompt-seed", required = true)
  private long promptSeed;

  @Override
  public Integer call() throws Exception {
    modelOptions.checkThreads();
    modelOptions.requireVectorModule();
    deviceOptions.checkTensorParallel(tp.size());
    Path folder = modelOptions.folder(modelOptions.weightType());
    if (tp.launcher()) {
      return tp.launch(); // rank 0's lines are this worker's; the other ranks compute with it
    }
    PrintWriter out = spec.commandLine().getOut();
    PrintWriter err = spec.commandLine().getErr();
    try (EngineModel lm = deviceOptions.load(folder, modelOptions.model(), tp)) {
      DemoPrompts prompts =
          DemoPrompts.of(promptSeed, lm.vocabSize(), prefixes, prefixTokens, suffixTokens);
      int perRequest = prefixTokens + suffixTokens + maxTokens;
      // every prompt fits at once, so the warm cohort finds every prefix it served
      int parents = lm.deviceParentsFor(prefixes * perRequest + perRequest);
      EngineConfig config =
          EngineConfig.defaults(parents).withComputeThreads(modelOptions.computeThreads());
      warmUp(lm, config, err);
      if (role.equals("reader")) {
        warmUpL3(lm, config, err);
      }
      switch (role) {
        case "writer" -> {
          try (Engine w = start(lm, config, l3())) {
            if (!follow(w)) {
              serveAll(w, prompts.seeds(), "writer-cold", out, err);
              serveAll(w, prompts.queries(), "l2-only", out, err);
              progress(err, "writing the prefixes to the store and closing");
              w.close();
              report(out, w.storageCloseReport().orElseThrow());
            }
          }
        }
        case "reader" -> {
          try (Engine r = start(lm, config, l3())) {
            if (!follow(r)) {
              serveAll(r, prompts.queries(), "l3", out, err);
              r.close();
              report(out, r.storageCloseReport().orElseThrow());
            }
          }
          try (Engine c = start(lm, config, null)) {
            if (!follow(c)) {
              serveAll(c, prompts.queries(), "cache-off", out, err);
            }
          }
        }
        default -> throw modelOptions.usage("--role=" + role + " is not one of: writer, reader");
      }
    }
    return 0;
  }

  /**
   * An engine of {@code lm} (with L3 when {@code l3} is given): this process's own, or its rank of
   * the worker's tensor-parallel replica (every rank starts the same engines in the same order).
   */
  private static Engine start(EngineModel lm, EngineConfig config, L3Settings l3) {
    return lm.start(config, OptionalInt.empty(), l3);
  }

  /**
   * On a follower rank: waits until rank 0 closes {@code engine} (true: the rank has nothing else
   * to do with it); false on rank 0 or a single process, which serves.
   */
  private boolean follow(Engine engine) throws InterruptedException {
    if (!tp.follower()) {
      return false;
    }
    tp.follow(engine);
    return true;
  }

  private L3Settings l3() throws Exception {
    StorageExtraConfig.Resolved r =
        storageOptions
            .resolve()
            .orElseThrow(() -> modelOptions.usage("the demo's worker needs an L3 backend"));
    return L3Settings.open(r.backend(), r.runtime());
  }

  /** A throwaway request on a throwaway engine: the cohorts run on warm code. */
  private void warmUp(EngineModel lm, EngineConfig config, PrintWriter err) throws Exception {
    progress(err, "warming up");
    int[] prompt =
        new SplittableRandom(promptSeed ^ 0x5DEECE66DL)
            .ints(Math.min(256, prefixTokens + suffixTokens), 0, lm.vocabSize())
            .toArray();
    try (Engine e = start(lm, config, null)) {
      if (!follow(e)) {
        WorkerProcess.serve(e, prompt, maxTokens);
      }
    }
  }

  /** How many prompts the reader's L3 warm-up writes to the store and restores from it. */
  static final int L3_WARM_UP_PROMPTS = 2;

  /** How long the L3 warm-up waits for a prompt's write-through before it restores it. */
  private static final long L3_WARM_UP_WRITE_NS = 10_000_000_000L;

  /**
   * The reader's L3 path warmed before its L3 cohort: on a throwaway engine with L3 (on a replica,
   * every rank with its own store client), prompts of this run's own, as long as the cohort's, are
   * served (their pages written through to the store), the caches cleared and the prompts served
   * again: their pages are queried and read back from the store as the cohort's will be (through
   * the replica's agreement at TP > 1), so the cohort runs on compiled code, the large GETs' split
   * across the executor's workers included. Without it the cohort's first restores can pass the
   * soft deadline and fall back to recomputation. The warm-up's pages stay in the store under the
   * demo's namespace; no demo prompt shares them.
   */
  private void warmUpL3(EngineModel lm, EngineConfig config, PrintWriter err) throws Exception {
    progress(err, "warming up the L3 path");
    SplittableRandom random = new SplittableRandom(System.nanoTime()); // new objects every run
    try (Engine e = start(lm, config, l3())) {
      if (follow(e)) {
        return;
      }
      for (int i = 0; i < L3_WARM_UP_PROMPTS; i++) {
        int[] prompt = random.ints(prefixTokens + suffixTokens, 0, lm.vocabSize()).toArray();
        long served = System.nanoTime();
        WorkerProcess.serve(e, prompt, 2);
        WorkerProcess.awaitStorageIdle(e, served, L3_WARM_UP_WRITE_NS);
        e.clearCache().get();
        int restored = WorkerProcess.serve(e, prompt, 2).metrics().reusedStorageTokens();
        progress(err, "L3 warm-up: prompt " + (i + 1) + ", " + restored + " tokens from L3");
      }
    }
  }

  private void serveAll(Engine e, int[][] prompts, String cohort, PrintWriter out, PrintWriter err)
      throws Exception {
    for (int i = 0; i < prompts.length; i++) {
      progress(err, cohort + ": request " + (i + 1) + "/" + prompts.length);
      ObjectNode line =
          WorkerProcess.requestLine(
              JsonNodeFactory.instance.objectNode(),
              cohort,
              i,
              WorkerProcess.serve(e, prompts[i], maxTokens));
      out.println(line);
      out.flush();
    }
  }

  private static void report(PrintWriter out, CloseReport report) {
    ObjectNode line = JsonNodeFactory.instance.objectNode();
    line.put("store_closed", report.storeClosed());
    line.put("restart_required", report.restartRequired());
    out.println(line);
    out.flush();
  }

  private static void progress(PrintWriter err, String what) {
    err.println(what);
    err.flush();
  }
}
