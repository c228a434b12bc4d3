package io.tokenspeed.bench;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Arrays;
import java.util.Locale;

/**
 * What one small message over loopback TCP costs on this machine when the receiving thread waits
 * the way a relay-exchange rank waits (blocked in a selector) against when it polls the socket
 * without blocking: the time of the sender's {@code write} call and the time from just before the
 * write until the receiver has the message. The sender sleeps between messages (2 ms), as a rank
 * computes between exchanges. Both modes run in the same process, alternating in blocks, so machine
 * noise hits them alike.
 *
 * <pre>
 *   java -cp ts-bench/target/benchmarks.jar io.tokenspeed.bench.LoopbackWakeHarness [messages]
 * </pre>
 */
public final class LoopbackWakeHarness {
  private static final int MESSAGE_BYTES = 100;
  private static final int BLOCK = 50;

  private LoopbackWakeHarness() {}

  public static void main(String[] args) throws Exception {
    int messages = args.length > 0 ? Integer.parseInt(args[0]) : 600;
    long[][] write = new long[2][];
    long[][] delivery = new long[2][];
    int[] counts = new int[2];
    write[0] = new long[messages];
    write[1] = new long[messages];
    delivery[0] = new long[messages];
    delivery[1] = new long[messages];
    for (int done = 0; done < 2 * messages; done += BLOCK) {
      int mode = (done / BLOCK) % 2;
      int n = Math.min(BLOCK, messages - counts[mode]);
      if (n <= 0) {
        continue;
      }
      run(mode == 1, n, write[mode], delivery[mode], counts[mode]);
      counts[mode] += n;
    }
    System.out.printf(
        Locale.ROOT,
        "# One %d-byte loopback TCP message, receiver blocked in a selector vs polling%n%n"
            + "%d messages per mode, %d cores, JDK %s.%n%n"
            + "| receiver | write() p50 µs | write() p90 µs | delivery p50 µs | delivery p90"
            + " µs |%n|---|---:|---:|---:|---:|%n",
        MESSAGE_BYTES,
        messages,
        Runtime.getRuntime().availableProcessors(),
        Runtime.version());
    String[] names = {"blocked in a selector", "polling (non-blocking reads)"};
    for (int mode = 0; mode < 2; mode++) {
      long[] w = Arrays.copyOf(write[mode], counts[mode]);
      long[] d = Arrays.copyOf(delivery[mode], counts[mode]);
      Arrays.sort(w);
      Arrays.sort(d);
      System.out.printf(
          Locale.ROOT,
          "| %s | %.1f | %.1f | %.1f | %.1f |%n",
          names[mode],
          w[w.length / 2] / 1e3,
          w[w.length * 9 / 10] / 1e3,
          d[d.length / 2] / 1e3,
          d[d.length * 9 / 10] / 1e3);
    }
  }

  /** {@code n} messages into {@code write[at..]} and {@code delivery[at..]}. */
  private static void run(boolean poll, int n, long[] write, long[] delivery, int at)
      throws Exception {
    InetAddress loopback = InetAddress.getLoopbackAddress();
    try (ServerSocketChannel server =
            ServerSocketChannel.open().bind(new InetSocketAddress(loopback, 0));
        SocketChannel sender = SocketChannel.open(server.getLocalAddress());
        SocketChannel receiver = server.accept();
        Selector selector = Selector.open()) {
      sender.setOption(StandardSocketOptions.TCP_NODELAY, true);
      receiver.setOption(StandardSocketOptions.TCP_NODELAY, true);
      receiver.configureBlocking(false);
      receiver.register(selector, SelectionKey.OP_READ);
      Throwable[] failed = new Throwable[1];
      Thread reader =
          new Thread(
              () -> {
                try {
                  ByteBuffer in = ByteBuffer.allocate(MESSAGE_BYTES);
                  for (int i = 0; i < n; i++) {
                    in.clear();
                    while (in.hasRemaining()) {
                      if (!poll) {
                        selector.select();
                        selector.selectedKeys().clear();
                      }
                      if (receiver.read(in) == 0 && poll) {
                        Thread.onSpinWait();
                      }
                    }
                    delivery[at + i] = System.nanoTime() - in.getLong(0);
                  }
                } catch (Throwable t) {
                  failed[0] = t;
                }
              },
              "wake-receiver");
      reader.start();
      ByteBuffer out = ByteBuffer.allocate(MESSAGE_BYTES);
      for (int i = 0; i < n; i++) {
        Thread.sleep(2);
        out.clear();
        long t0 = System.nanoTime();
        out.putLong(0, t0);
        while (out.hasRemaining()) {
          sender.write(out);
        }
        write[at + i] = System.nanoTime() - t0;
      }
      reader.join(10_000);
      if (failed[0] != null) {
        throw new IllegalStateException("the receiver failed", failed[0]);
      }
    }
  }
}
