package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.Cluster.Outcome;
import io.tokenspeed.control.MeshException.Reason;
import io.tokenspeed.core.storage.PressureSnapshot;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;
import java.util.zip.CRC32C;
import org.junit.jupiter.api.Test;

/** Silent, departed, misconfigured and hostile peers, over real loopback TCP. */
class MeshFailureTest {

  private static final long ROUND_TIMEOUT_MS = 1_500;

  @Test
  void shouldFailWithATimeoutNamingTheSilentRankWhenARankStopsExchanging() throws Exception {
    try (Cluster cluster = Cluster.start(3, c -> c.withTimeouts(ROUND_TIMEOUT_MS, 20_000))) {
      List<Outcome<Long>> outcomes =
          cluster.run(
              (rank, x) -> {
                for (int n = 1; n <= 5; n++) {
                  x.exchange(LocalReport.idle(n));
                }
                if (rank == 2) {
                  return 0L; // rank 2 goes silent, its connections stay open
                }
                long startNs = System.nanoTime();
                try {
                  x.exchange(LocalReport.idle(6));
                } catch (MeshException e) {
                  long waitedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
                  assertEquals(Reason.TIMEOUT, e.reason(), e.getMessage());
                  assertEquals(2, e.peerRank());
                  assertEquals(6, e.round());
                  assertTrue(
                      e.getMessage()
                          .startsWith(
                              "rank 2 sent no complete frame within round_timeout_ms=1500 in"
                                  + " round 6"),
                      e.getMessage());
                  return waitedMs;
                }
                return -1L;
              });
      for (int r = 0; r < 2; r++) {
        long waitedMs = outcomes.get(r).get();
        assertTrue(
            waitedMs >= ROUND_TIMEOUT_MS - 5 && waitedMs < ROUND_TIMEOUT_MS + 5_000,
            "rank " + r + " waited " + waitedMs + " ms");
      }
    }
  }

  @Test
  void shouldFailNamingTheRankWhenAPeerClosesItsConnections() throws Exception {
    try (Cluster cluster = Cluster.start(3)) {
      List<Outcome<MeshException>> outcomes =
          cluster.run(
              (rank, x) -> {
                for (int n = 1; n <= 3; n++) {
                  x.exchange(LocalReport.idle(n));
                }
                if (rank == 1) {
                  x.close();
                  return null;
                }
                return assertThrows(MeshException.class, () -> x.exchange(LocalReport.idle(4)));
              });
      for (int r : new int[] {0, 2}) {
        MeshException e = outcomes.get(r).get();
        assertEquals(Reason.DISCONNECTED, e.reason(), e.getMessage());
        assertEquals(1, e.peerRank());
        assertEquals(4, e.round());
        assertTrue(e.getMessage().startsWith("rank 1 disconnected in round 4"), e.getMessage());
      }
    }
  }

  /** Connects rank 0 and rank 1 with different settings; returns what each side threw. */
  private static List<Throwable> connectMismatched(UnaryOperator<ControlConfig> rank1)
      throws Exception {
    List<ServerSocketChannel> listeners = Cluster.listeners(2);
    List<ControlConfig> configs =
        Cluster.configs(Cluster.addresses(listeners), c -> c.withTimeouts(5_000, 5_000));
    ExecutorService threads = Executors.newFixedThreadPool(2);
    try {
      List<Future<RelayExchange>> futures = new ArrayList<>();
      futures.add(threads.submit(() -> RelayExchange.connect(configs.get(0), listeners.get(0))));
      futures.add(
          threads.submit(
              () -> RelayExchange.connect(rank1.apply(configs.get(1)), listeners.get(1))));
      List<Throwable> errors = new ArrayList<>();
      for (Future<RelayExchange> f : futures) {
        try {
          f.get(30, TimeUnit.SECONDS).close();
          errors.add(null);
        } catch (java.util.concurrent.ExecutionException e) {
          errors.add(e.getCause());
        }
      }
      return errors;
    } finally {
      threads.shutdownNow();
    }
  }

  private static void assertHandshake(Throwable t, String text) {
    MeshException e = assertInstanceOf(MeshException.class, t, String.valueOf(t));
    assertEquals(Reason.HANDSHAKE, e.reason(), e.getMessage());
    assertTrue(e.getMessage().contains(text), e.getMessage());
  }

  @Test
  void shouldRefuseBothEndsWhenReplicaIdsDiffer() throws Exception {
    List<Throwable> errors =
        connectMismatched(
            c ->
                new ControlConfig(
                    8,
                    c.rank(),
                    c.addresses(),
                    c.roundTimeoutMs(),
                    c.connectTimeoutMs(),
                    c.maxFrameBytes(),
                    c.maxPendingOperations(),
                    c.maxPendingKeys()));
    assertHandshake(errors.get(0), "replica_id=8, rank 0 has replica_id=7");
    assertHandshake(errors.get(1), "replica_id=7, rank 1 has replica_id=8");
  }

  @Test
  void shouldRefuseBothEndsWhenSharedLimitsDiffer() throws Exception {
    List<Throwable> errors = connectMismatched(c -> c.withWindow(10, 10));
    assertHandshake(errors.get(0), "(these must be equal on every rank)");
    assertHandshake(
        errors.get(1), "max_pending_operations=" + ControlConfig.DEFAULT_MAX_PENDING_OPERATIONS);
  }

  @Test
  void shouldRefuseBothEndsWhenWorldSizesDiffer() throws Exception {
    List<Throwable> errors =
        connectMismatched(
            c -> {
              List<InetSocketAddress> three = new ArrayList<>(c.addresses());
              three.add(new InetSocketAddress("127.0.0.1", 1));
              return ControlConfig.of(7, 1, three).withTimeouts(5_000, 3_000);
            });
    assertHandshake(errors.get(0), "world_size=3, expected 2");
    // Rank 1 of three refuses rank 0's answer as well.
    assertHandshake(errors.get(1), "world_size=2, expected 3");
  }

  /** Rank 0 of two, waiting for rank 1; returns the listener's address and the pending connect. */
  private static Future<RelayExchange> lonelyRankZero(
      ExecutorService threads, ServerSocketChannel[] listener, long connectTimeoutMs)
      throws IOException {
    List<ServerSocketChannel> listeners = Cluster.listeners(2);
    List<InetSocketAddress> addresses = Cluster.addresses(listeners);
    listeners.get(1).close();
    listener[0] = listeners.get(0);
    ControlConfig c =
        Cluster.configs(addresses, x -> x.withTimeouts(5_000, connectTimeoutMs)).getFirst();
    return threads.submit(() -> RelayExchange.connect(c, listeners.get(0)));
  }

  private static byte[] hello(int version, int rank) {
    return hello(version, rank, 2);
  }

  private static byte[] hello(int version, int rank, int worldSize) {
    byte[] bytes =
        FrameEncoder.encode(
            new Frame.Hello(
                7,
                worldSize,
                rank,
                ControlConfig.DEFAULT_MAX_FRAME_BYTES,
                ControlConfig.DEFAULT_MAX_PENDING_OPERATIONS,
                ControlConfig.DEFAULT_MAX_PENDING_KEYS),
            ControlConfig.DEFAULT_MAX_FRAME_BYTES);
    ByteBuffer.wrap(bytes).putShort(4, (short) version);
    return withCrc(bytes);
  }

  static byte[] withCrc(byte[] bytes) {
    CRC32C crc = new CRC32C();
    crc.update(bytes, 0, bytes.length - 4);
    ByteBuffer.wrap(bytes).putInt(bytes.length - 4, (int) crc.getValue());
    return bytes;
  }

  private static Throwable failureOf(Future<RelayExchange> f) throws Exception {
    try {
      f.get(30, TimeUnit.SECONDS).close();
      return null;
    } catch (java.util.concurrent.ExecutionException e) {
      return e.getCause();
    }
  }

  @Test
  void shouldRefuseAPeerThatSpeaksAnotherProtocolVersion() throws Exception {
    ExecutorService threads = Executors.newSingleThreadExecutor();
    try {
      ServerSocketChannel[] listener = new ServerSocketChannel[1];
      Future<RelayExchange> rank0 = lonelyRankZero(threads, listener, 10_000);
      try (Socket s = new Socket()) {
        s.connect(listener[0].getLocalAddress());
        s.getOutputStream().write(hello(2, 1));
        assertHandshake(failureOf(rank0), "version=2, this build speaks 1");
      }
    } finally {
      threads.shutdownNow();
    }
  }

  @Test
  void shouldRefuseAPeerWhoseRankLiesBeyondThisWorld() throws Exception {
    ExecutorService threads = Executors.newSingleThreadExecutor();
    try {
      ServerSocketChannel[] listener = new ServerSocketChannel[1];
      Future<RelayExchange> rank0 = lonelyRankZero(threads, listener, 10_000);
      try (Socket s = new Socket()) {
        s.connect(listener[0].getLocalAddress());
        s.getOutputStream().write(hello(1, 5, 6));
        assertHandshake(failureOf(rank0), "world_size=6, expected 2");
        byte[] answer = s.getInputStream().readNBytes(48);
        Frame.Hello theirs =
            (Frame.Hello) ((Decoded.Ok) new FrameDecoder(4096).decode(answer)).frame();
        assertEquals(0, theirs.rank());
        assertEquals(2, theirs.worldSize());
      }
    } finally {
      threads.shutdownNow();
    }
  }

  @Test
  void shouldRefuseAPeerThatSendsGarbageInsteadOfAHandshake() throws Exception {
    ExecutorService threads = Executors.newSingleThreadExecutor();
    try {
      ServerSocketChannel[] listener = new ServerSocketChannel[1];
      Future<RelayExchange> rank0 = lonelyRankZero(threads, listener, 10_000);
      try (Socket s = new Socket()) {
        s.connect(listener[0].getLocalAddress());
        s.getOutputStream().write("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes());
        assertHandshake(failureOf(rank0), "cannot read: BAD_MAGIC");
      }
    } finally {
      threads.shutdownNow();
    }
  }

  @Test
  void shouldFailWithATimeoutWhenAConnectedPeerNeverSendsItsHandshake() throws Exception {
    ExecutorService threads = Executors.newSingleThreadExecutor();
    try {
      ServerSocketChannel[] listener = new ServerSocketChannel[1];
      Future<RelayExchange> rank0 = lonelyRankZero(threads, listener, 1_000);
      try (Socket s = new Socket()) {
        s.connect(listener[0].getLocalAddress());
        MeshException e = assertInstanceOf(MeshException.class, failureOf(rank0));
        assertEquals(Reason.TIMEOUT, e.reason());
        assertTrue(
            e.getMessage().endsWith("sent no handshake within connect_timeout_ms=1000"),
            e.getMessage());
      }
    } finally {
      threads.shutdownNow();
    }
  }

  @Test
  void shouldFailWithATimeoutNamingTheRankWhenAPeerNeverConnects() throws Exception {
    ExecutorService threads = Executors.newSingleThreadExecutor();
    try {
      ServerSocketChannel[] listener = new ServerSocketChannel[1];
      long startNs = System.nanoTime();
      Throwable t = failureOf(lonelyRankZero(threads, listener, 1_000));
      long waitedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
      MeshException e = assertInstanceOf(MeshException.class, t);
      assertEquals(Reason.TIMEOUT, e.reason());
      assertEquals(1, e.peerRank());
      assertTrue(
          e.getMessage()
              .equals("rank 0 heard nothing from rank [1] within connect_timeout_ms=1000"),
          e.getMessage());
      assertTrue(waitedMs < 10_000, "waited " + waitedMs + " ms");
    } finally {
      threads.shutdownNow();
    }
  }

  /**
   * A fake rank 1 that shakes hands correctly, then sends {@code round1} in round 1; returns what
   * rank 0's first exchange threw.
   */
  private static MeshException afterHandshakeRank1Sends(byte[] round1) throws Exception {
    ExecutorService threads = Executors.newSingleThreadExecutor();
    try {
      ServerSocketChannel[] listener = new ServerSocketChannel[1];
      Future<RelayExchange> rank0 = lonelyRankZero(threads, listener, 10_000);
      try (Socket s = new Socket()) {
        s.connect(listener[0].getLocalAddress());
        OutputStream out = s.getOutputStream();
        out.write(hello(1, 1));
        InputStream in = s.getInputStream();
        in.readNBytes(FrameDescriptor.FRAMING_BYTES + FrameDescriptor.HELLO_BODY_BYTES);
        try (RelayExchange x = rank0.get(30, TimeUnit.SECONDS)) {
          out.write(round1);
          out.flush();
          return assertThrows(MeshException.class, () -> x.exchange(LocalReport.idle(1)));
        }
      }
    } finally {
      threads.shutdownNow();
    }
  }

  private static byte[] report(int rank, long round) {
    return FrameEncoder.encode(
        new Frame.Report(rank, round, 0, PressureSnapshot.IDLE, null, List.of(), List.of()),
        ControlConfig.DEFAULT_MAX_FRAME_BYTES);
  }

  @Test
  void shouldRefuseAHugeDeclaredLengthBeforeAllocatingWhenAPeerSendsIt() throws Exception {
    byte[] header = report(1, 1);
    ByteBuffer.wrap(header).putInt(8, 0x7fff_fff0);
    MeshException e = afterHandshakeRank1Sends(java.util.Arrays.copyOf(header, 12));
    assertEquals(Reason.MALFORMED_FRAME, e.reason());
    assertEquals(1, e.peerRank());
    assertTrue(e.getMessage().contains("TOO_LARGE"), e.getMessage());
  }

  @Test
  void shouldRefuseAFrameWithABadChecksumWhenAPeerSendsIt() throws Exception {
    byte[] frame = report(1, 1);
    frame[20] ^= 1;
    MeshException e = afterHandshakeRank1Sends(frame);
    assertEquals(Reason.MALFORMED_FRAME, e.reason());
    assertTrue(e.getMessage().contains("BAD_CHECKSUM"), e.getMessage());
  }

  @Test
  void shouldRefuseAReportOfAnotherRoundWhenAPeerIsOutOfStep() throws Exception {
    MeshException e = afterHandshakeRank1Sends(report(1, 2));
    assertEquals(Reason.DESYNC, e.reason());
    assertEquals(1, e.peerRank());
    assertTrue(
        e.getMessage().contains("for round 2 while this rank is in round 1"), e.getMessage());
  }
}
