package io.tokenspeed.bench;

import io.tokenspeed.pd.Ack;
import io.tokenspeed.pd.Bootstrap;
import io.tokenspeed.pd.CachedTokens;
import io.tokenspeed.pd.Destinations;
import io.tokenspeed.pd.DoneInfo;
import io.tokenspeed.pd.KvReceiver;
import io.tokenspeed.pd.KvSender;
import io.tokenspeed.pd.Landed;
import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import io.tokenspeed.pd.Registration;
import io.tokenspeed.pd.Transfer;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * KV-transfer throughput over loopback TCP ({@code ts-pd}: a {@link KvSender} and a {@link
 * KvReceiver} in this JVM, the handshake done once, rooms of 256 blocks of 256 KiB, two rooms in
 * flight, CRC32C on both ends, the receiver reading each block straight into its destination)
 * against a raw loopback socket copy of the same bytes in the same block size (one writer thread
 * writing the source blocks, one reader thread reading them into the same destination slabs, no
 * framing, no checksum). Rounds alternate between the two so that machine noise hits both alike;
 * the figure is the ratio of the medians.
 *
 * <pre>
 *   ./mvnw -q -pl ts-bench -am package -DskipTests
 *   java -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.PdTransferHarness [MiB] [rounds]
 * </pre>
 *
 * {@code MiB} is the bytes moved per round (default 1024, a multiple of 64), {@code rounds} the
 * measured rounds of each kind (default 5), after one warm-up round of each.
 */
public final class PdTransferHarness {

  private static final int BLOCK_BYTES = 256 * 1024;
  private static final int ROOM_BLOCKS = 256;
  private static final int IN_FLIGHT = 2;

  private PdTransferHarness() {}

  public static void main(String[] args) throws Exception {
    int mib = args.length > 0 ? Integer.parseInt(args[0]) : 1024;
    int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 5;
    int rooms = Math.max(1, mib / (ROOM_BLOCKS * BLOCK_BYTES >> 20));
    long bytes = (long) rooms * ROOM_BLOCKS * BLOCK_BYTES;
    Arena arena = Arena.ofShared();
    MemorySegment[] sources = new MemorySegment[ROOM_BLOCKS];
    SplittableRandom rnd = new SplittableRandom(1);
    for (int i = 0; i < ROOM_BLOCKS; i++) {
      sources[i] = arena.allocate(BLOCK_BYTES, 4096);
      for (long o = 0; o < BLOCK_BYTES; o += 8) {
        sources[i].set(ValueLayout.JAVA_LONG_UNALIGNED, o, rnd.nextLong());
      }
    }
    ArrayBlockingQueue<MemorySegment[]> slabs = new ArrayBlockingQueue<>(IN_FLIGHT);
    List<MemorySegment[]> allSlabs = new ArrayList<>();
    for (int s = 0; s < IN_FLIGHT; s++) {
      MemorySegment[] slab = new MemorySegment[ROOM_BLOCKS];
      for (int i = 0; i < ROOM_BLOCKS; i++) {
        slab[i] = arena.allocate(BLOCK_BYTES, 4096);
      }
      slabs.add(slab);
      allSlabs.add(slab);
    }

    System.out.printf(
        Locale.ROOT,
        "JDK %s, %s %s, %d CPUs; %d MiB per round in %d KiB blocks (%d rooms of %d blocks, %d in"
            + " flight); %d measured rounds of each%n%n",
        System.getProperty("java.version"),
        System.getProperty("os.name"),
        System.getProperty("os.arch"),
        Runtime.getRuntime().availableProcessors(),
        bytes >> 20,
        BLOCK_BYTES >> 10,
        rooms,
        ROOM_BLOCKS,
        IN_FLIGHT,
        rounds);

    PdSecret secret = PdSecret.generate();
    PdSettings settings = PdSettings.defaults();
    InetSocketAddress loopback = new InetSocketAddress(InetAddress.getLoopbackAddress(), 0);
    double[] pd = new double[rounds];
    double[] raw = new double[rounds];
    try (KvReceiver receiver =
            KvReceiver.open(
                loopback,
                secret,
                settings,
                (room, b) -> CompletableFuture.completedFuture(slab(slabs)));
        KvSender sender = KvSender.open(secret, settings)) {
      for (int round = -1; round < rounds; round++) {
        double r = rawRound(sources, allSlabs, rooms);
        double p = pdRound(sender, receiver, sources, rooms, round + 1L);
        if (round >= 0) {
          raw[round] = r;
          pd[round] = p;
        }
        System.out.printf(
            Locale.ROOT,
            "%s: raw %.2f GiB/s, ts-pd %.2f GiB/s%n",
            round < 0 ? "warm-up" : "round " + (round + 1),
            bytes / r / (1 << 30),
            bytes / p / (1 << 30));
      }
    }
    double rawMedian = median(raw);
    double pdMedian = median(pd);
    System.out.printf(
        Locale.ROOT,
        "%n| path | median GiB/s | best GiB/s |%n|---|---:|---:|%n"
            + "| raw loopback copy | %.2f | %.2f |%n| ts-pd transfer | %.2f | %.2f |%n%n"
            + "ts-pd / raw (medians): %.2f%n",
        bytes / rawMedian / (1 << 30),
        bytes / Arrays.stream(raw).min().orElseThrow() / (1 << 30),
        bytes / pdMedian / (1 << 30),
        bytes / Arrays.stream(pd).min().orElseThrow() / (1 << 30),
        rawMedian / pdMedian);
    arena.close();
  }

  /** One round over ts-pd: seconds from the first BOOTSTRAP to the last RECEIVED. */
  private static double pdRound(
      KvSender sender, KvReceiver receiver, MemorySegment[] sources, int rooms, long round)
      throws Exception {
    int[] tokens = new int[ROOM_BLOCKS * 16];
    Bootstrap b = new Bootstrap(tokens, new byte[32], new int[] {BLOCK_BYTES});
    ArrayDeque<Transfer> inFlight = new ArrayDeque<>();
    long start = System.nanoTime();
    for (int r = 0; r < rooms; r++) {
      if (inFlight.size() == IN_FLIGHT) {
        inFlight.removeFirst().received().toCompletableFuture().get(60, TimeUnit.SECONDS);
      }
      long room = round << 32 | r;
      Registration reg = receiver.expect(room);
      reg.landed()
          .thenAccept(
              (Landed landed) -> {
                // As an engine would once its copies are fenced: free the blocks (the next room
                // reserves them again), then hand the prefill side its fence.
                landed.destinations().release();
                landed.acknowledge();
              });
      Transfer t = sender.bootstrap(room, receiver.address(), b);
      Ack ack = t.acknowledged().toCompletableFuture().get(60, TimeUnit.SECONDS);
      for (int i = 0; i < ack.numBlocks(0); i++) {
        t.send(0, i, sources[i]);
      }
      t.done(new DoneInfo(1, CachedTokens.NONE));
      inFlight.addLast(t);
    }
    while (!inFlight.isEmpty()) {
      inFlight.removeFirst().received().toCompletableFuture().get(60, TimeUnit.SECONDS);
    }
    return (System.nanoTime() - start) / 1e9;
  }

  /** One round of a raw loopback copy of the same blocks into the same slabs. */
  private static double rawRound(MemorySegment[] sources, List<MemorySegment[]> slabs, int rooms)
      throws Exception {
    try (ServerSocketChannel server =
        ServerSocketChannel.open()
            .bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))) {
      SocketChannel out = SocketChannel.open(server.getLocalAddress());
      SocketChannel in = server.accept();
      out.setOption(StandardSocketOptions.TCP_NODELAY, true);
      in.setOption(StandardSocketOptions.TCP_NODELAY, true);
      long start = System.nanoTime();
      Thread writer =
          Thread.ofVirtual()
              .start(
                  () -> {
                    try {
                      for (int r = 0; r < rooms; r++) {
                        for (MemorySegment s : sources) {
                          ByteBuffer bb = s.asByteBuffer();
                          while (bb.hasRemaining()) {
                            out.write(bb);
                          }
                        }
                      }
                    } catch (Exception e) {
                      throw new IllegalStateException(e);
                    }
                  });
      for (int r = 0; r < rooms; r++) {
        for (MemorySegment d : slabs.get(r % slabs.size())) {
          ByteBuffer bb = d.asByteBuffer();
          while (bb.hasRemaining()) {
            if (in.read(bb) < 0) {
              throw new IllegalStateException("raw copy ended early");
            }
          }
        }
      }
      double seconds = (System.nanoTime() - start) / 1e9;
      writer.join();
      out.close();
      in.close();
      return seconds;
    }
  }

  private static Destinations slab(ArrayBlockingQueue<MemorySegment[]> slabs) {
    MemorySegment[] slab = slabs.poll();
    if (slab == null) {
      throw new IllegalStateException("more rooms in flight than slabs");
    }
    return new Destinations() {
      @Override
      public int numGroups() {
        return 1;
      }

      @Override
      public int numBlocks(int group) {
        return slab.length;
      }

      @Override
      public MemorySegment block(int group, int index) {
        return slab[index];
      }

      @Override
      public void release() {
        slabs.add(slab);
      }
    };
  }

  private static double median(double[] values) {
    double[] v = values.clone();
    Arrays.sort(v);
    return v[v.length / 2];
  }
}
