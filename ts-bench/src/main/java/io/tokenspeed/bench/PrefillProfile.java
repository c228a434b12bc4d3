package io.tokenspeed.bench;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordedFrame;
import jdk.jfr.consumer.RecordedStackTrace;
import jdk.jfr.consumer.RecordingFile;

/**
 * Where a CPU prefill chunk's time goes, by phase: the chunked prefill of {@link ModelCpuHarness}
 * under a JFR recording that samples the running Java threads every millisecond, each sample
 * charged to the phase of the innermost project frame on its stack.
 *
 * <pre>
 *   frame class (innermost io.tokenspeed frame,        phase
 *   skipping the shared helpers FastExp, VectorMath)
 *   MatMul, PackedMatrix                                matmul
 *   PagedAttention, AttentionTile                       attention
 *   RmsNormKernel, RmsNorm                              norms
 *   Rope                                                rope
 *   Activations, SwiGluMlp, GeGluMlp                    activations
 *   io.tokenspeed.model.kv.*                            KV pages
 *   ComputePool                                         hand-offs
 *   Embedding, LmHead                                   embedding, LM head
 *   anything else                                       other (named in the class table)
 * </pre>
 *
 * <p>A sample is a thread found running Java code: threads parked between tasks are not sampled, so
 * the samples of a chunk times the period, divided by the chunk's wall time, is the number of
 * threads kept busy (at most the compute threads). The first and the last chunk of the prompt are
 * reported apart (the last attends over the whole prompt), then all chunks together.
 *
 * <pre>
 *   java --add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED \
 *     -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.PrefillProfile \
 *     [--model synthetic:llama-100m] [--tokens 8192] [--chunk 512] [--threads N]
 * </pre>
 */
public final class PrefillProfile {

  private static final int BLOCK_TOKENS = 16;
  private static final int PREFIX_GRANULARITY = 64;
  private static final Duration PERIOD = Duration.ofMillis(1);
  private static final List<String> HELPERS = List.of("FastExp", "VectorMath");
  private static final List<String> PHASES =
      List.of(
          "matmul",
          "attention",
          "norms",
          "rope",
          "activations",
          "KV pages",
          "hand-offs",
          "embedding, LM head",
          "other");

  private PrefillProfile() {}

  /** The phase of a sample whose innermost project class is {@code className}. */
  static String phaseOf(String className) {
    // a nested or lambda class counts as its outer class ("Activations$$Lambda.0x1")
    int nested = className.indexOf('$');
    String outer = nested >= 0 ? className.substring(0, nested) : className;
    String simple = outer.substring(outer.lastIndexOf('.') + 1);
    if (className.startsWith("io.tokenspeed.model.kv.")) {
      return "KV pages";
    }
    return switch (simple) {
      case "MatMul", "PackedMatrix" -> "matmul";
      case "PagedAttention", "AttentionTile" -> "attention";
      case "RmsNormKernel", "RmsNorm" -> "norms";
      case "Rope" -> "rope";
      case "Activations", "SwiGluMlp", "GeGluMlp" -> "activations";
      case "ComputePool" -> "hand-offs";
      case "Embedding", "LmHead" -> "embedding, LM head";
      default -> "other";
    };
  }

  /** The innermost project class of a stack, helpers skipped; null when it has none. */
  static String projectClass(List<String> classesInnermostFirst) {
    for (String c : classesInnermostFirst) {
      if (c.startsWith("io.tokenspeed.")
          && HELPERS.stream().noneMatch(h -> c.endsWith("." + h) || c.contains("." + h + "$"))) {
        return c;
      }
    }
    return null;
  }

  private record Sample(Instant at, String cls) {}

  public static void main(String[] args) throws Exception {
    String name = "synthetic:llama-100m";
    int tokens = 8192;
    int chunk = 512;
    int threads = Runtime.getRuntime().availableProcessors();
    for (Map.Entry<String, String> flag : BenchFlags.of(args)) {
      String a = flag.getKey();
      String v = flag.getValue();
      switch (a) {
        case "--model" -> name = v;
        case "--tokens" -> tokens = Integer.parseInt(v);
        case "--chunk" -> chunk = Integer.parseInt(v);
        case "--threads" -> threads = Integer.parseInt(v);
        default -> throw new IllegalArgumentException("unknown flag " + a);
      }
    }
    if (tokens < 2 * chunk) {
      throw new IllegalArgumentException("--tokens must be at least two chunks");
    }
    Path folder =
        SyntheticCheckpoints.materialize(name, SyntheticCheckpoints.DEFAULT_SEED, DType.F32);
    int chunks = Math.ceilDiv(tokens, chunk);
    Instant[] starts = new Instant[chunks + 1];
    long[] wallNs = new long[chunks];
    List<Sample> samples = new ArrayList<>();
    try (ComputePool pool = ComputePool.ofThreads(threads);
        CausalLm model = CausalLm.load(folder);
        BenchKv kv =
            new BenchKv(
                model.cacheLayout(PREFIX_GRANULARITY, BLOCK_TOKENS),
                Math.ceilDiv(tokens, BLOCK_TOKENS) + 1)) {
      int vocab = model.config().dims().vocabSize();
      // warm-up: the same prompt length once, untimed and unrecorded, so the JIT has compiled it
      int[] warm = ModelCpuHarness.randomTokens(tokens, vocab, 3);
      kv.reset();
      ModelCpuHarness.prefill(model, kv, warm, kv.table(tokens), chunk, pool);
      int[] ids = ModelCpuHarness.randomTokens(tokens, vocab, 7);
      kv.reset();
      int[][] table = kv.table(tokens);
      Path jfr = Files.createTempFile("tokenspeed-prefill", ".jfr");
      try (Recording rec = new Recording()) {
        rec.enable("jdk.ExecutionSample").withPeriod(PERIOD).withStackTrace();
        rec.start();
        Instant t0 = Instant.now();
        long[] ns = ModelCpuHarness.prefill(model, kv, ids, table, chunk, pool);
        rec.stop();
        // chunk boundaries from the chunks' own times, laid end to end from the start
        starts[0] = t0;
        for (int c = 0; c < chunks; c++) {
          wallNs[c] = ns[c];
          starts[c + 1] = starts[c].plusNanos(ns[c]);
        }
        rec.dump(jfr);
      }
      for (RecordedEvent e : RecordingFile.readAllEvents(jfr)) {
        RecordedStackTrace st = e.getStackTrace();
        if (!e.getEventType().getName().equals("jdk.ExecutionSample") || st == null) {
          continue;
        }
        List<String> classes = new ArrayList<>();
        for (RecordedFrame f : st.getFrames()) {
          classes.add(f.getMethod().getType().getName());
        }
        String cls = projectClass(classes);
        samples.add(new Sample(e.getStartTime(), cls == null ? "(no project frame)" : cls));
      }
      Files.deleteIfExists(jfr);
    }

    System.out.printf(
        Locale.ROOT,
        "%s: prefill of %d tokens in %d chunks of %d, %d compute threads, JFR execution samples"
            + " every %d ms (JDK %s)%n%n",
        name,
        tokens,
        chunks,
        chunk,
        threads,
        PERIOD.toMillis(),
        Runtime.version());
    Map<String, Map<String, Integer>> byPhase = new LinkedHashMap<>();
    String[] columns = {"first chunk", "last chunk", "all chunks"};
    Map<String, Integer> byClass = new TreeMap<>();
    int[] totals = new int[3];
    for (Sample s : samples) {
      int c = chunkOf(starts, s.at());
      if (c < 0) {
        continue;
      }
      String phase = s.cls().startsWith("(") ? "other" : phaseOf(s.cls());
      for (int col = 0; col < 3; col++) {
        boolean in = col == 2 || (col == 0 && c == 0) || (col == 1 && c == chunks - 1);
        if (in) {
          byPhase
              .computeIfAbsent(phase, k -> new LinkedHashMap<>())
              .merge(columns[col], 1, Integer::sum);
          totals[col]++;
        }
      }
      if (phase.equals("other")) {
        byClass.merge(s.cls(), 1, Integer::sum);
      }
    }
    double[] wallMs = {
      wallNs[0] / 1e6, wallNs[chunks - 1] / 1e6, Arrays.stream(wallNs).sum() / 1e6
    };
    System.out.println("| phase | first chunk | last chunk | all chunks |");
    System.out.println("|---|---:|---:|---:|");
    for (String phase : PHASES) {
      Map<String, Integer> row = byPhase.getOrDefault(phase, Map.of());
      StringBuilder line = new StringBuilder("| " + phase + " |");
      for (int col = 0; col < 3; col++) {
        int n = row.getOrDefault(columns[col], 0);
        // a phase's share of the samples, as milliseconds of the chunk's wall time
        line.append(
            String.format(
                Locale.ROOT,
                " %.1f%% (%.0f ms) |",
                totals[col] == 0 ? 0 : 100.0 * n / totals[col],
                totals[col] == 0 ? 0 : wallMs[col] * n / totals[col]));
      }
      System.out.println(line);
    }
    StringBuilder wall = new StringBuilder("| wall time |");
    StringBuilder busy = new StringBuilder("| threads busy (samples × period / wall) |");
    for (int col = 0; col < 3; col++) {
      wall.append(String.format(Locale.ROOT, " %.0f ms |", wallMs[col]));
      busy.append(
          String.format(Locale.ROOT, " %.2f |", totals[col] * PERIOD.toMillis() / wallMs[col]));
    }
    System.out.println(wall);
    System.out.println(busy);
    System.out.printf(Locale.ROOT, "%nsamples: %d in all%n", totals[2]);
    if (!byClass.isEmpty()) {
      System.out.println("\"other\" by class:");
      byClass.entrySet().stream()
          .sorted(Map.Entry.<String, Integer>comparingByValue().reversed())
          .limit(12)
          .forEach(e -> System.out.printf(Locale.ROOT, "  %6d  %s%n", e.getValue(), e.getKey()));
    }
  }

  /** The chunk whose interval holds {@code at}, or -1 outside the recorded prefill. */
  private static int chunkOf(Instant[] starts, Instant at) {
    if (at.isBefore(starts[0]) || !at.isBefore(starts[starts.length - 1])) {
      return -1;
    }
    int c = 0;
    while (c + 1 < starts.length - 1 && !at.isBefore(starts[c + 1])) {
      c++;
    }
    return c;
  }
}
