package io.tokenspeed.bench;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.LocalRelayHub;
import io.tokenspeed.control.LocalReport;
import io.tokenspeed.control.RelayExchange;
import io.tokenspeed.control.ReplicaSecret;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.HdrHistogram.Histogram;

/**
 * The cost of one relay-exchange round (all-gather over loopback TCP, decoding every report, owner
 * agreement) for 2 and 4 ranks running as threads of one JVM, idle and carrying completion records,
 * all measured in the same run; and for 1 rank, a single engine's exchange (in memory, as {@code
 * Engine} runs it: encoding and decoding its own report, the agreement, the round delivered at
 * once), the cost every single-engine round pays.
 *
 * <p>Every rank reports the same {@code R} single-key GET records each round, so every operation
 * completes in the round it is reported and the window stays empty: a round with {@code R} records
 * encodes, sends, decodes and reduces {@code R} records on every rank. Each round's records carry
 * fresh operation ids (the agreement refuses an id reported again after it was agreed); they are
 * renumbered before the timer starts. Round kinds alternate in blocks of {@value #BLOCK} rounds so
 * that machine noise hits all of them alike. Rank 0's time inside {@link RelayExchange#exchange} is
 * recorded per round, in HdrHistogram.
 *
 * <pre>
 *   ./mvnw -q -pl ts-core,ts-control,ts-cache,ts-l3,ts-bench -am package -DskipTests
 *   java -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.ControlExchangeHarness [rounds]
 * </pre>
 *
 * {@code rounds} is the number of measured rounds per kind (default 3000), after 2000 rounds of
 * warm-up.
 */
public final class ControlExchangeHarness {

  private static final int BLOCK = 100;
  private static final int WARMUP_ROUNDS = 2000;
  private static final int[] RECORDS = {0, 10, 100, 1000};

  private ControlExchangeHarness() {}

  /** Figures of one (ranks, records) cell. */
  private record Cell(int ranks, int records, Histogram histogram) {}

  public static void main(String[] args) throws Exception {
    int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 3000;
    System.out.printf(
        Locale.ROOT,
        "JDK %s, %s %s, %d CPUs; %d measured rounds per cell%n%n",
        System.getProperty("java.version"),
        System.getProperty("os.name"),
        System.getProperty("os.arch"),
        Runtime.getRuntime().availableProcessors(),
        rounds);
    List<Cell> cells = new ArrayList<>();
    for (int ranks : new int[] {1, 2, 4}) {
      cells.addAll(run(ranks, rounds));
    }
    System.out.println(
        "| ranks | records per rank per round | frame bytes | p50 µs | p90 µs | p99 µs | mean µs |"
            + " p50 / idle p50 | added p50 µs per record |");
    System.out.println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (Cell c : cells) {
      double idle =
          cells.stream()
                  .filter(x -> x.ranks == c.ranks && x.records == 0)
                  .findFirst()
                  .orElseThrow()
                  .histogram
                  .getValueAtPercentile(50)
              / 1000.0;
      double p50 = c.histogram.getValueAtPercentile(50) / 1000.0;
      System.out.printf(
          Locale.ROOT,
          "| %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %s |%n",
          c.ranks,
          c.records,
          65 + 25 * c.records,
          p50,
          c.histogram.getValueAtPercentile(90) / 1000.0,
          c.histogram.getValueAtPercentile(99) / 1000.0,
          c.histogram.getMean() / 1000.0,
          p50 / idle,
          c.records == 0 ? "-" : String.format(Locale.ROOT, "%.3f", (p50 - idle) / c.records));
    }
  }

  private static List<StorageDone> records(int count) {
    List<StorageDone> out = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      out.add(new StorageDone(i, StorageKind.GET, List.of(KeyOutcome.OK), true, 4096, false));
    }
    return List.copyOf(out);
  }

  /** {@code records} with operation ids {@code base}, {@code base + 1}, ... */
  private static List<StorageDone> renumbered(List<StorageDone> records, long base) {
    List<StorageDone> out = new ArrayList<>(records.size());
    for (int i = 0; i < records.size(); i++) {
      StorageDone d = records.get(i);
      out.add(
          new StorageDone(base + i, d.kind(), d.outcomes(), d.retired(), d.bytes(), d.detached()));
    }
    return out;
  }

  private static List<Cell> run(int ranks, int rounds) throws Exception {
    List<ServerSocketChannel> listeners = new ArrayList<>();
    List<InetSocketAddress> addresses = new ArrayList<>();
    for (int r = 0; r < ranks; r++) {
      ServerSocketChannel l =
          ServerSocketChannel.open()
              .bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
      listeners.add(l);
      addresses.add((InetSocketAddress) l.getLocalAddress());
    }
    List<List<StorageDone>> lists = new ArrayList<>();
    for (int records : RECORDS) {
      lists.add(records(records));
    }
    Histogram[] histograms = new Histogram[RECORDS.length];
    for (int i = 0; i < RECORDS.length; i++) {
      histograms[i] = new Histogram(TimeUnit.SECONDS.toNanos(10), 3);
    }
    int total = WARMUP_ROUNDS + rounds * RECORDS.length;
    ReplicaSecret secret = ReplicaSecret.generate();
    ExecutorService threads = Executors.newFixedThreadPool(ranks);
    try {
      List<Future<Void>> futures = new ArrayList<>();
      for (int r = 0; r < ranks; r++) {
        int rank = r;
        futures.add(
            threads.submit(
                () -> {
                  ControlConfig config =
                      ControlConfig.of(1, rank, addresses, secret).withTimeouts(30_000, 30_000);
                  try (RelayExchange x =
                      ranks == 1
                          ? RelayExchange.connect(config, new LocalRelayHub(1))
                          : RelayExchange.connect(config, listeners.get(rank))) {
                    long nextOperationId = 0;
                    int previousKind = -1;
                    for (int n = 0; n < total; n++) {
                      int kind = (n / BLOCK) % RECORDS.length;
                      // Operation ids are never reported again once agreed: each round's are new.
                      List<StorageDone> records = renumbered(lists.get(kind), nextOperationId);
                      nextOperationId += records.size();
                      LocalReport local = LocalReport.of(n, PressureSnapshot.IDLE, records);
                      long t0 = System.nanoTime();
                      Optional<AgreedRound> a = x.exchange(local);
                      long t = System.nanoTime() - t0;
                      // Rounds arrive one exchange late (this one is the previous round's), a
                      // single rank's at once.
                      int agreedKind = ranks == 1 ? kind : previousKind;
                      if (agreedKind >= 0
                          && a.orElseThrow().completions().size() != RECORDS[agreedKind]) {
                        throw new IllegalStateException("round " + n + " agreed " + a);
                      }
                      previousKind = kind;
                      if (rank == 0 && n >= WARMUP_ROUNDS) {
                        histograms[kind].recordValue(t);
                      }
                    }
                  }
                  return null;
                }));
      }
      for (Future<Void> f : futures) {
        f.get(30, TimeUnit.MINUTES);
      }
    } finally {
      threads.shutdownNow();
      if (ranks == 1) {
        listeners.getFirst().close(); // the in-memory exchange never took it
      }
    }
    List<Cell> cells = new ArrayList<>();
    for (int i = 0; i < RECORDS.length; i++) {
      cells.add(new Cell(ranks, RECORDS[i], histograms[i]));
    }
    return cells;
  }
}
