package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The departed-client watch, over scripted TCP tables and over this machine's kernel. */
class ClientWatchTest {

  /** A line of /proc/net/tcp6 for a connection in {@code state}, addresses as IPv4-mapped. */
  private static String line6(
      int slot, byte[] local, int localPort, byte[] remote, int remotePort, int state) {
    return String.format(
        "%4d: %s:%04X %s:%04X %02X 00000000:00000000 00:00000000 00000000     0        0 1 1 0",
        slot, word6(local), localPort, word6(remote), remotePort, state);
  }

  /** An IPv4 address as the kernel prints it in tcp6 (mapped; 32-bit words in host order). */
  private static String word6(byte[] v4) {
    return "0000000000000000FFFF0000" + word(v4);
  }

  private static String word(byte[] v4) {
    // little-endian hosts print each 32-bit word's bytes reversed
    return String.format("%02X%02X%02X%02X", v4[3], v4[2], v4[1], v4[0]);
  }

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3, 4, 5})
  void shouldFireOnlyForTheWatchedConnectionOnceItsClientCloses(long seed) throws Exception {
    SplittableRandom r = new SplittableRandom(seed);
    byte[] server = {127, 0, 0, 1};
    int serverPort = 1 + r.nextInt(65535);
    int n = 2 + r.nextInt(20);
    int[] clientPorts = new int[n];
    byte[][] clients = new byte[n][];
    for (int i = 0; i < n; i++) {
      clientPorts[i] = 1 + r.nextInt(65535);
      clients[i] = new byte[] {10, (byte) r.nextInt(256), (byte) r.nextInt(256), (byte) (1 + i)};
    }
    int[] states = new int[n];
    java.util.Arrays.fill(states, 0x01);
    boolean[] present = new boolean[n];
    java.util.Arrays.fill(present, true);
    AtomicReference<List<String>> table = new AtomicReference<>();
    Runnable publish =
        () -> {
          List<String> lines = new ArrayList<>();
          lines.add("  sl  local_address                         remote_address  st ...");
          for (int i = 0; i < n; i++) {
            if (present[i]) {
              lines.add(line6(i, server, serverPort, clients[i], clientPorts[i], states[i]));
            }
          }
          table.set(lines);
        };
    publish.run();
    AtomicInteger[] fired = new AtomicInteger[n];
    try (ClientWatch watch = new ClientWatch(5, table::get)) {
      List<ClientWatch.Registration> regs = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        fired[i] = new AtomicInteger();
        AtomicInteger f = fired[i];
        regs.add(
            watch.watch(
                new InetSocketAddress(InetAddress.getByAddress(server), serverPort),
                new InetSocketAddress(InetAddress.getByAddress(clients[i]), clientPorts[i]),
                f::incrementAndGet));
      }
      Thread.sleep(60); // armed: each seen in the table
      int gone = r.nextInt(n);
      int reset = (gone + 1 + r.nextInt(n - 1)) % n;
      states[gone] = 0x08; // CLOSE_WAIT: the client's FIN came
      present[reset] = false; // a reset takes the socket out of the table
      publish.run();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
      while ((fired[gone].get() == 0 || fired[reset].get() == 0) && System.nanoTime() < deadline) {
        Thread.sleep(5);
      }
      Thread.sleep(50);
      for (int i = 0; i < n; i++) {
        assertEquals(i == gone || i == reset ? 1 : 0, fired[i].get(), "connection " + i);
      }
      regs.forEach(ClientWatch.Registration::close);
      assertEquals(0, watch.watched());
    }
  }

  @Test
  void shouldNeverFireForAConnectionItNeverSaw() throws Exception {
    AtomicInteger fired = new AtomicInteger();
    try (ClientWatch watch = new ClientWatch(5, () -> List.of("  sl  local_address ..."))) {
      watch.watch(
          new InetSocketAddress(InetAddress.getLoopbackAddress(), 80),
          new InetSocketAddress(InetAddress.getLoopbackAddress(), 5000),
          fired::incrementAndGet);
      Thread.sleep(200);
      assertEquals(0, fired.get());
      assertEquals(0, watch.watched(), "given up after its arming polls");
    }
  }

  @Test
  void shouldSeeARealClientCloseItsConnectionThroughTheKernelsTable() throws Exception {
    try (ClientWatch watch = ClientWatch.ofKernel();
        ServerSocket listener = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      Socket client = new Socket(InetAddress.getLoopbackAddress(), listener.getLocalPort());
      try (Socket accepted = listener.accept()) {
        CountDownLatch gone = new CountDownLatch(1);
        watch.watch(
            accepted.getLocalSocketAddress(), accepted.getRemoteSocketAddress(), gone::countDown);
        Thread.sleep(3 * watch.periodMs());
        assertFalse(gone.await(0, TimeUnit.MILLISECONDS), "fired while the client was there");
        client.close();
        assertTrue(gone.await(5, TimeUnit.SECONDS), "the client's close was not seen");
      }
    }
  }

  @Test
  void shouldParseTheKernelsAddressesInHostOrder() {
    Map<String, Integer> states =
        ClientWatch.parse(
            List.of(
                "   0: 0100007F:1F90 0200007F:C350 01 00000000:00000000 00:00000000 00000000 0 0 1",
                "   1: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000300007F:C351 08 0"));
    assertEquals(
        1, states.get(key(new byte[] {127, 0, 0, 1}, 8080, new byte[] {127, 0, 0, 2}, 50000)));
    assertEquals(
        8, states.get(key(new byte[] {127, 0, 0, 1}, 8080, new byte[] {127, 0, 0, 3}, 50001)));
  }

  private static String key(byte[] local, int localPort, byte[] remote, int remotePort) {
    byte[] l = new byte[16];
    byte[] rm = new byte[16];
    l[10] = l[11] = rm[10] = rm[11] = (byte) 0xff;
    System.arraycopy(local, 0, l, 12, 4);
    System.arraycopy(remote, 0, rm, 12, 4);
    return new ClientWatch.Endpoints(l, localPort, rm, remotePort).key();
  }
}
