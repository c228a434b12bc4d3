package io.tokenspeed.bench;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.engine.GenerationResult;
import io.tokenspeed.engine.RequestHandle;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.server.kvevents.KvEventPublisher;
import io.tokenspeed.server.kvevents.ZmqEndpoint;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;

/**
 * What the KV events (docs/kv-events.md) cost the serving loop, on the CPU, in one run: two engines
 * over the same weights, alive side by side for the whole run, one publishing its events through
 * the server's real publisher ({@link KvEventPublisher}: the tier listener, a batch per round, the
 * bounded queue, the sender thread's msgpack encoding and a PUB socket on loopback, read by a SUB
 * socket that drains every message, and the replay socket open) and one without events. Each round
 * measures both, one after the other, the order alternating round by round, so that the machine's
 * drift falls on both alike.
 *
 * <p><b>All-miss TTFT.</b> A prompt of {@code --prompt} seeded random tokens never seen before (so
 * nothing is reused; once the Device is full every prompt evicts older pages), {@code max_tokens}
 * 1: submission to the first token. Every page is stored on the Device as its prefill chunk is
 * computed, and older ones are removed.
 *
 * <p><b>Decode TPOT.</b> {@code --streams} requests of {@code --decode-prompt} tokens and {@code
 * --decode-tokens} output tokens at once: the median of the requests' time per output token.
 *
 * <p>The report gives each figure's median over the rounds per engine, their ratio, and the median
 * of the rounds' own on/off ratios.
 *
 * <pre>
 *   ./mvnw -q -B -pl ts-bench -am package -DskipTests
 *   java --add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED \
 *     -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.KvEventsOverheadHarness \
 *     [--model synthetic:llama-100m] [--rounds 12] [--prompt 1024] [--streams 8] \
 *     [--decode-prompt 128] [--decode-tokens 48] [--threads N] [--start off|on]
 * </pre>
 */
public final class KvEventsOverheadHarness {
  private static final int P = 64;
  private static final int BG = 16;
  private static final int TOKEN_BUDGET = 512;

  private KvEventsOverheadHarness() {}

  public static void main(String[] args) throws Exception {
    String modelName = "synthetic:llama-100m";
    int rounds = 12;
    int promptTokens = 1024;
    int streams = 8;
    int decodePrompt = 128;
    int decodeTokens = 48;
    int threads = Runtime.getRuntime().availableProcessors();
    boolean onStartsFirst = false;
    for (Map.Entry<String, String> flag : BenchFlags.of(args)) {
      String v = flag.getValue();
      switch (flag.getKey()) {
        case "--model" -> modelName = v;
        case "--start" -> onStartsFirst = v.equals("on");
        case "--rounds" -> rounds = Integer.parseInt(v);
        case "--prompt" -> promptTokens = Integer.parseInt(v);
        case "--streams" -> streams = Integer.parseInt(v);
        case "--decode-prompt" -> decodePrompt = Integer.parseInt(v);
        case "--decode-tokens" -> decodeTokens = Integer.parseInt(v);
        case "--threads" -> threads = Integer.parseInt(v);
        default -> throw new IllegalArgumentException("unknown flag " + flag.getKey());
      }
    }
    if (rounds < 1 || streams < 1 || decodeTokens < 2) {
      throw new IllegalArgumentException("--rounds, --streams >= 1 and --decode-tokens >= 2");
    }
    System.out.printf(
        Locale.ROOT,
        "JDK %s, CPU %s, %d cores visible, %d compute threads per engine, the engine %s events"
            + " started first%nargs: %s%n",
        Runtime.version(),
        ModelCpuHarness.cpuModel(),
        Runtime.getRuntime().availableProcessors(),
        threads,
        onStartsFirst ? "with" : "without",
        String.join(" ", args));
    Path folder =
        SyntheticCheckpoints.materialize(modelName, SyntheticCheckpoints.DEFAULT_SEED, DType.F32);
    try (CausalLm model = CausalLm.load(folder)) {
      int vocab = model.vocabSize();
      int parents =
          Engine.deviceParentsFor(
              model, Math.max(4 * promptTokens, streams * (decodePrompt + decodeTokens + 32)));
      EngineConfig config =
          new EngineConfig(P, BG, parents, 1.0, TOKEN_BUDGET, 64, 0, threads, 256);
      ZmqEndpoint any = ZmqEndpoint.parse("tcp://127.0.0.1:0");
      AtomicLong events = new AtomicLong();
      try (KvEventPublisher publisher =
              KvEventPublisher.start(
                  new KvEventPublisher.Settings(
                      any,
                      any,
                      "",
                      0,
                      P,
                      KvEventPublisher.Settings.DEFAULT_QUEUE_SIZE,
                      KvEventPublisher.Settings.DEFAULT_BUFFER_STEPS));
          Drain drain = new Drain(publisher.endpoint());
          Engines engines =
              new Engines(
                  EngineSettings.of(model, config),
                  EngineSettings.of(model, config)
                      .kvEvents(
                          batch -> {
                            events.addAndGet(batch.size());
                            publisher.publish(batch);
                          }),
                  onStartsFirst)) {
        Engine off = engines.off;
        Engine on = engines.on;
        // JIT warm-up of both, unmeasured
        for (Engine e : List.of(off, on)) {
          ttft(e, ModelCpuHarness.randomTokens(promptTokens, vocab, 1));
          tpot(e, streams, decodePrompt, decodeTokens, vocab, 2);
        }
        List<Long> ttftOff = new ArrayList<>();
        List<Long> ttftOn = new ArrayList<>();
        List<Long> tpotOff = new ArrayList<>();
        List<Long> tpotOn = new ArrayList<>();
        for (int r = 0; r < rounds; r++) {
          boolean onFirst = r % 2 == 1;
          int[] prompt = ModelCpuHarness.randomTokens(promptTokens, vocab, 1000L + r);
          for (boolean withEvents : onFirst ? List.of(true, false) : List.of(false, true)) {
            Engine e = withEvents ? on : off;
            (withEvents ? ttftOn : ttftOff).add(ttft(e, prompt));
          }
          for (boolean withEvents : onFirst ? List.of(true, false) : List.of(false, true)) {
            Engine e = withEvents ? on : off;
            (withEvents ? tpotOn : tpotOff)
                .add(tpot(e, streams, decodePrompt, decodeTokens, vocab, 100L * (r + 1)));
          }
          System.out.printf(
              Locale.ROOT,
              "round %d (%s first): TTFT off %.1f ms, on %.1f ms (%.3fx); TPOT off %.2f ms, on"
                  + " %.2f ms (%.3fx); %d events in %d batches so far, %d read%n",
              r,
              onFirst ? "on" : "off",
              ttftOff.getLast() / 1e6,
              ttftOn.getLast() / 1e6,
              (double) ttftOn.getLast() / ttftOff.getLast(),
              tpotOff.getLast() / 1e6,
              tpotOn.getLast() / 1e6,
              (double) tpotOn.getLast() / tpotOff.getLast(),
              events.get(),
              publisher.published() + publisher.dropped(),
              drain.messages());
        }
        List<Double> ttftRatios = new ArrayList<>();
        List<Double> tpotRatios = new ArrayList<>();
        for (int r = 0; r < rounds; r++) {
          ttftRatios.add((double) ttftOn.get(r) / ttftOff.get(r));
          tpotRatios.add((double) tpotOn.get(r) / tpotOff.get(r));
        }
        System.out.println();
        System.out.printf(
            Locale.ROOT,
            "| %s, %d rounds | events off, median | events on, median | on / off (medians) |"
                + " on / off per round, median |%n",
            modelName,
            rounds);
        System.out.println("|---|---:|---:|---:|---:|");
        System.out.printf(
            Locale.ROOT,
            "| all-miss TTFT, %d-token prompt (ms) | %.1f | %.1f | %.3f | %.3f |%n",
            promptTokens,
            median(ttftOff) / 1e6,
            median(ttftOn) / 1e6,
            (double) median(ttftOn) / median(ttftOff),
            medianD(ttftRatios));
        System.out.printf(
            Locale.ROOT,
            "| decode TPOT, %d streams of %d + %d tokens (ms) | %.2f | %.2f | %.3f | %.3f |%n",
            streams,
            decodePrompt,
            decodeTokens,
            median(tpotOff) / 1e6,
            median(tpotOn) / 1e6,
            (double) median(tpotOn) / median(tpotOff),
            medianD(tpotRatios));
        System.out.printf(
            Locale.ROOT,
            "%nevents on: %d events in %d batches (%d dropped), %d read by the subscriber%n",
            events.get(),
            publisher.published() + publisher.dropped(),
            publisher.dropped(),
            drain.messages());
      }
    }
  }

  /**
   * The two engines, started in the order asked for ({@code --start on|off}: the first gets the
   * memory first, which may favour it).
   */
  private static final class Engines implements AutoCloseable {
    final Engine off;
    final Engine on;

    Engines(EngineSettings.Builder off, EngineSettings.Builder on, boolean onFirst) {
      if (onFirst) {
        this.on = Engine.start(on.conclude());
        this.off = Engine.start(off.conclude());
      } else {
        this.off = Engine.start(off.conclude());
        this.on = Engine.start(on.conclude());
      }
    }

    @Override
    public void close() {
      on.close();
      off.close();
    }
  }

  /** Submission to the first token of {@code prompt}, {@code max_tokens} 1. */
  private static long ttft(Engine e, int[] prompt) throws Exception {
    long t0 = System.nanoTime();
    RequestHandle h = e.submit(prompt, SamplingParams.greedy(1));
    if (h.nextToken(30, TimeUnit.MINUTES).isEmpty()) {
      throw new IllegalStateException("no first token: " + h.result().getNow(null));
    }
    long ns = System.nanoTime() - t0;
    check(h.result().get(30, TimeUnit.MINUTES));
    return ns;
  }

  /** The median time per output token of {@code streams} requests decoding together. */
  private static long tpot(
      Engine e, int streams, int promptTokens, int outputTokens, int vocab, long seed)
      throws Exception {
    List<RequestHandle> handles = new ArrayList<>();
    for (int i = 0; i < streams; i++) {
      int[] prompt = ModelCpuHarness.randomTokens(promptTokens, vocab, seed * 7919 + i);
      handles.add(e.submit(prompt, SamplingParams.greedy(outputTokens)));
    }
    long[] tpots = new long[streams];
    for (int i = 0; i < streams; i++) {
      GenerationResult r = handles.get(i).result().get(30, TimeUnit.MINUTES);
      check(r);
      tpots[i] = r.metrics().tpotNs();
    }
    Arrays.sort(tpots);
    return tpots[streams / 2];
  }

  /** A subscriber that reads every message of the PUB socket and counts them. */
  private static final class Drain implements AutoCloseable {
    private final ZContext ctx = new ZContext();
    private final AtomicLong messages = new AtomicLong();
    private final Thread thread;
    private volatile boolean stop;

    Drain(ZmqEndpoint endpoint) {
      ZMQ.Socket sub = ctx.createSocket(SocketType.SUB);
      sub.setHandshakeIvl(500);
      sub.subscribe(new byte[0]);
      sub.setReceiveTimeOut(100);
      sub.connect(endpoint.toString());
      thread =
          Thread.ofPlatform()
              .daemon()
              .name("kv-events-drain")
              .start(
                  () -> {
                    while (!stop) {
                      byte[] f = sub.recv(0);
                      if (f == null) {
                        continue;
                      }
                      while (sub.hasReceiveMore()) {
                        sub.recv(0);
                      }
                      messages.incrementAndGet();
                    }
                  });
    }

    long messages() {
      return messages.get();
    }

    @Override
    public void close() throws InterruptedException {
      stop = true;
      thread.join(2_000);
      ctx.close();
    }
  }

  private static void check(GenerationResult r) {
    if (r.error() != null) {
      throw new IllegalStateException("request " + r.requestId() + " failed: " + r.error());
    }
  }

  private static long median(List<Long> xs) {
    long[] a = xs.stream().mapToLong(Long::longValue).sorted().toArray();
    return a[a.length / 2];
  }

  private static double medianD(List<Double> xs) {
    double[] a = xs.stream().mapToDouble(Double::doubleValue).sorted().toArray();
    return a[a.length / 2];
  }
}
