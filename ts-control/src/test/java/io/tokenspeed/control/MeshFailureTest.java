package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.Cluster.Outcome;
import io.tokenspeed.control.MeshException.Reason;
import io.tokenspeed.core.control.AgreedRound;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.text.MessageFormat;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.zip.CRC32C;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** Silent, departed, misconfigured, stray and hostile peers, over real loopback TCP. */
class MeshFailureTest {

  private static final long ROUND_TIMEOUT_MS = 1_500;

  /** WARNING lines of the mesh (refused connections), captured per test. */
  private final List<String> warnings = new CopyOnWriteArrayList<>();

  private final Handler capture =
      new Handler() {
        @Override
        public void publish(LogRecord r) {
          warnings.add(
              r.getParameters() == null
                  ? r.getMessage()
                  : MessageFormat.format(r.getMessage(), r.getParameters()));
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
      };

  private final Logger meshLog = Logger.getLogger(Mesh.class.getName());

  private Level meshLevel;

  /** Captures the mesh's WARNING lines and its FINE ones (which say when a rank was accepted). */
  @BeforeEach
  void captureWarnings() {
    meshLevel = meshLog.getLevel();
    meshLog.setLevel(Level.FINE);
    meshLog.addHandler(capture);
  }

  @AfterEach
  void stopCapturing() {
    meshLog.removeHandler(capture);
    meshLog.setLevel(meshLevel);
  }

  private String refusals() {
    return String.join("\n", warnings);
  }

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
                  // Both survivors gathered round 5 and heard each other: round 5 is the last.
                  assertEquals(5, e.finalRound().orElseThrow().round());
                  assertEquals(5, e.lastAppliedRound());
                  return waitedMs;
                }
                return -1L;
              });
      for (int r = 0; r < 2; r++) {
        long waitedMs = outcomes.get(r).get();
        // The round timeout, then at most twice that for settling with the silent rank.
        assertTrue(
            waitedMs >= ROUND_TIMEOUT_MS - 5 && waitedMs < 3 * ROUND_TIMEOUT_MS + 10_000,
            "rank " + r + " waited " + waitedMs + " ms");
      }
    }
  }

  @Test
  void shouldFailNamingTheRankWhenAPeerClosesItsConnections() throws Exception {
    try (Cluster cluster = Cluster.start(3)) {
      List<Outcome<MeshException>> outcomes = cluster.closeAfterThreeRounds(1);
      for (int r : new int[] {0, 2}) {
        MeshException e = outcomes.get(r).get();
        assertEquals(Reason.DISCONNECTED, e.reason(), e.getMessage());
        assertEquals(1, e.peerRank());
        assertEquals(4, e.round());
        assertTrue(e.getMessage().startsWith("rank 1 disconnected in round 4"), e.getMessage());
        assertEquals(3, e.lastAppliedRound(), e.getMessage());
      }
    }
  }

  /** Connects rank 0 and rank 1 with different settings; returns what each side threw. */
  private static List<Throwable> connectMismatched(UnaryOperator<ControlConfig> rank1)
      throws Exception {
    List<ServerSocketChannel> listeners = Cluster.listeners(2);
    List<ControlConfig> configs =
        Cluster.configs(Cluster.addresses(listeners), c -> c.withTimeouts(5_000, 2_000));
    ExecutorService threads = Executors.newFixedThreadPool(2);
    try {
      List<Future<RelayExchange>> futures = new ArrayList<>();
      futures.add(threads.submit(() -> RelayExchange.connect(configs.get(0), listeners.get(0))));
      futures.add(
          threads.submit(
              () -> RelayExchange.connect(rank1.apply(configs.get(1)), listeners.get(1))));
      List<Throwable> errors = new ArrayList<>();
      for (Future<RelayExchange> f : futures) {
        errors.add(failureOf(f));
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

  /** The acceptor refused the dialer, logged why, and then timed out waiting for a real peer. */
  private void assertRefusedThenTimedOut(Throwable t, String reason) {
    MeshException e = assertInstanceOf(MeshException.class, t, String.valueOf(t));
    assertEquals(Reason.TIMEOUT, e.reason(), e.getMessage());
    assertTrue(e.getMessage().contains("refused 1 connection(s)"), e.getMessage());
    assertTrue(e.getMessage().contains(reason), e.getMessage());
    assertTrue(refusals().contains(reason), refusals());
  }

  @Test
  void shouldRefuseADialerOfAnotherReplicaBeforeRevealingItsOwnHandshake() throws Exception {
    List<Throwable> errors =
        connectMismatched(
            c ->
                new ControlConfig(
                    8,
                    c.rank(),
                    c.addresses(),
                    c.secret(),
                    c.roundTimeoutMs(),
                    c.connectTimeoutMs(),
                    c.handshakeTimeoutMs(),
                    c.maxFrameBytes(),
                    c.maxPendingOperations(),
                    c.maxPendingKeys()));
    assertRefusedThenTimedOut(errors.get(0), "replica_id=8, rank 0 has replica_id=7");
    assertHandshake(errors.get(1), "closed the connection without answering this rank's handshake");
    assertTrue(errors.get(1).getMessage().startsWith("rank 0 at "), errors.get(1).getMessage());
  }

  @Test
  void shouldRefuseADialerWhoseSharedLimitsDiffer() throws Exception {
    List<Throwable> errors = connectMismatched(c -> c.withWindow(10, 10));
    assertRefusedThenTimedOut(errors.get(0), "(these must be equal on every rank)");
    assertHandshake(errors.get(1), "rank 0's log names the field");
  }

  @Test
  void shouldRefuseADialerWhoseWorldSizeDiffers() throws Exception {
    List<Throwable> errors =
        connectMismatched(
            c -> {
              List<InetSocketAddress> three = new ArrayList<>(c.addresses());
              three.add(new InetSocketAddress("127.0.0.1", 1));
              return ControlConfig.of(7, 1, three, c.secret()).withTimeouts(5_000, 3_000);
            });
    assertRefusedThenTimedOut(errors.get(0), "world_size=3, expected 2");
    assertHandshake(errors.get(1), "closed the connection without answering");
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
        Cluster.configs(addresses, x -> x.withTimeouts(1_000, connectTimeoutMs)).getFirst();
    return threads.submit(() -> RelayExchange.connect(c, listeners.get(0)));
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

  /** What a connection that is not a peer does to rank 0 during setup. */
  enum Stray {
    GARBAGE("it sent bytes that are not a handshake: BAD_MAGIC"),
    OTHER_VERSION("UNSUPPORTED_VERSION: version=1, this build speaks " + FrameDescriptor.VERSION),
    OTHER_REPLICA("replica_id=9, rank 0 has replica_id=7"),
    LOWER_RANK("rank=0, but rank 0 accepts only ranks above it"),
    REPORT_INSTEAD_OF_HELLO("where a hello was due"),
    HUGE_LENGTH("bytes where at most"),
    CONNECT_AND_CLOSE("it closed the connection without sending anything"),
    SILENT("setup finished before it completed a handshake"),
    MADE_UP_PROOF("its proof of the replica secret is wrong"),
    OTHER_SECRET("its proof of the replica secret is wrong");

    final String logged;

    Stray(String logged) {
      this.logged = logged;
    }
  }

  /** Plays {@code stray} against rank 0 at {@code address}; returns a connection to keep open. */
  private static RawPeer play(Stray stray, InetSocketAddress address) throws Exception {
    RawPeer p = RawPeer.dial(address);
    switch (stray) {
      case GARBAGE -> p.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes());
      case OTHER_VERSION -> {
        byte[] hello = RawPeer.encode(RawPeer.hello(1, 2));
        ByteBuffer.wrap(hello).putShort(4, (short) 1);
        p.send(withCrc(hello));
      }
      case OTHER_REPLICA -> {
        Frame.Hello h = RawPeer.hello(1, 2);
        p.send(
            RawPeer.encode(
                new Frame.Hello(
                    9,
                    2,
                    1,
                    h.maxFrameBytes(),
                    h.maxPendingOperations(),
                    h.maxPendingKeys(),
                    h.nonce())));
      }
      case LOWER_RANK -> p.send(RawPeer.encode(RawPeer.hello(0, 2)));
      case REPORT_INSTEAD_OF_HELLO -> p.send(RawPeer.report(1, 1));
      case HUGE_LENGTH -> {
        byte[] header = java.util.Arrays.copyOf(RawPeer.report(1, 1), 12);
        ByteBuffer.wrap(header).putInt(8, 1 << 20);
        p.send(header);
      }
      case CONNECT_AND_CLOSE -> p.close();
      case SILENT -> {
        return p; // connected, says nothing, and stays connected through the setup
      }
      case MADE_UP_PROOF -> {
        assertNotNullFrame(p.sendHello(RawPeer.hello(1, 2)));
        // Rank 0 never reveals its proof to a dialer that could not prove the secret.
        assertEquals(null, p.sendMadeUpProof(), "rank 0 answered a made-up proof");
      }
      case OTHER_SECRET -> {
        assertNotNullFrame(p.sendHello(RawPeer.hello(1, 2)));
        assertEquals(null, p.sendProof(ReplicaSecret.generate()), "rank 0 accepted another secret");
      }
    }
    if (stray != Stray.CONNECT_AND_CLOSE) {
      assertTrue(p.closedByPeer(), stray + ": rank 0 kept the connection");
      p.close();
    }
    return null;
  }

  private static void assertNotNullFrame(byte[] f) {
    assertTrue(f != null, "rank 0 closed instead of answering a valid HELLO");
  }

  @ParameterizedTest(name = "{0}")
  @EnumSource(Stray.class)
  void shouldIgnoreAStrayConnectionAndJoinTheRealPeerWhenSomethingElseConnectsFirst(Stray stray)
      throws Exception {
    List<ServerSocketChannel> listeners = Cluster.listeners(2);
    // A long handshake timeout: the real rank must join while the silent stray still holds on.
    List<ControlConfig> configs =
        Cluster.configs(
            Cluster.addresses(listeners),
            c -> c.withTimeouts(5_000, 20_000).withHandshakeTimeout(60_000));
    ExecutorService threads = Executors.newFixedThreadPool(2);
    RawPeer kept = null;
    try {
      Future<RelayExchange> rank0 =
          threads.submit(() -> RelayExchange.connect(configs.get(0), listeners.get(0)));
      kept = play(stray, configs.get(0).addresses().get(0));
      Future<RelayExchange> rank1 =
          threads.submit(() -> RelayExchange.connect(configs.get(1), listeners.get(1)));
      try (RelayExchange x0 = rank0.get(30, TimeUnit.SECONDS);
          RelayExchange x1 = rank1.get(30, TimeUnit.SECONDS)) {
        Future<List<AgreedRound>> r1 =
            threads.submit(() -> Cluster.rounds(x1, LocalReport::idle, 3));
        List<AgreedRound> r0 = Cluster.rounds(x0, LocalReport::idle, 3);
        assertEquals(r0, r1.get(30, TimeUnit.SECONDS));
        assertEquals(3, r0.size());
      }
      if (kept != null) {
        assertTrue(kept.closedByPeer(), "the silent stray was left connected");
      }
      assertTrue(refusals().contains(stray.logged), refusals());
      assertTrue(refusals().contains("rank 0 refused a connection from /127.0.0.1:"), refusals());
    } finally {
      if (kept != null) {
        kept.close();
      }
      threads.shutdownNow();
    }
  }

  /**
   * The acceptor checks "not yet joined" only after both proofs. Rank 1 has joined rank 0 (world of
   * three, rank 2 still missing); then a connection without the secret claims rank 1 and gets rank
   * 0's HELLO like any dialer (it learns nothing about who joined) and is refused at its proof; a
   * second process with the secret claims rank 1, proves it, and is refused as already joined. Rank
   * 2 then joins, and the three ranks agree on rounds: the rank 1 that joined first kept its
   * connection.
   */
  @Test
  void shouldAnswerAConnectionClaimingAJoinedRankLikeAnyOtherAndKeepTheJoinedRank()
      throws Exception {
    List<ServerSocketChannel> listeners = Cluster.listeners(3);
    List<ControlConfig> configs =
        Cluster.configs(Cluster.addresses(listeners), c -> c.withTimeouts(5_000, 20_000));
    InetSocketAddress rank0Address = configs.get(0).addresses().get(0);
    ExecutorService threads = Executors.newFixedThreadPool(4);
    try {
      List<Future<RelayExchange>> ranks = new ArrayList<>();
      for (int r = 0; r < 2; r++) {
        ControlConfig c = configs.get(r);
        ServerSocketChannel l = listeners.get(r);
        ranks.add(threads.submit(() -> RelayExchange.connect(c, l)));
      }
      awaitLogged("rank 0 accepted rank 1 from ");

      try (RawPeer stray = RawPeer.dial(rank0Address)) {
        assertNotNullFrame(stray.sendHello(RawPeer.hello(1, 3)));
        assertEquals(null, stray.sendMadeUpProof(), "rank 0 answered a made-up proof");
      }
      try (RawPeer twin = RawPeer.dial(rank0Address)) {
        assertNotNullFrame(twin.sendHello(RawPeer.hello(1, 3)));
        assertNotNullFrame(twin.sendProof(configs.get(1).secret()));
        assertTrue(twin.closedByPeer(), "rank 0 kept a second connection of rank 1");
      }
      awaitLogged("claiming rank 1: rank 1 has already joined");
      assertTrue(
          refusals().contains("claiming rank 1: its proof of the replica secret is wrong"),
          refusals());

      ranks.add(threads.submit(() -> RelayExchange.connect(configs.get(2), listeners.get(2))));
      List<RelayExchange> joined = new ArrayList<>();
      try {
        for (Future<RelayExchange> f : ranks) {
          joined.add(f.get(30, TimeUnit.SECONDS));
        }
        List<Future<List<AgreedRound>>> rounds = new ArrayList<>();
        for (RelayExchange x : joined) {
          rounds.add(threads.submit(() -> Cluster.rounds(x, LocalReport::idle, 3)));
        }
        List<AgreedRound> first = rounds.get(0).get(30, TimeUnit.SECONDS);
        assertEquals(3, first.size());
        for (Future<List<AgreedRound>> f : rounds) {
          assertEquals(first, f.get(30, TimeUnit.SECONDS));
        }
      } finally {
        joined.forEach(RelayExchange::close);
      }
    } finally {
      threads.shutdownNow();
    }
  }

  /** Waits (bounded) until the mesh has logged a line containing {@code text}. */
  private void awaitLogged(String text) throws InterruptedException {
    long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (!refusals().contains(text)) {
      if (System.nanoTime() - deadlineNs >= 0) {
        throw new AssertionError("the mesh never logged '" + text + "'; it logged:\n" + refusals());
      }
      Thread.sleep(10);
    }
  }

  @Test
  void shouldRefuseARankStartedWithAnotherSecretAndThenJoinTheRealRank() throws Exception {
    List<ServerSocketChannel> listeners = Cluster.listeners(2);
    List<ControlConfig> configs =
        Cluster.configs(Cluster.addresses(listeners), c -> c.withTimeouts(5_000, 20_000));
    ServerSocketChannel impostorListener = Cluster.listeners(1).getFirst();
    ExecutorService threads = Executors.newFixedThreadPool(2);
    try {
      Future<RelayExchange> rank0 =
          threads.submit(() -> RelayExchange.connect(configs.get(0), listeners.get(0)));
      ControlConfig impostor = configs.get(1).withSecret(ReplicaSecret.generate());
      Throwable refused =
          failureOf(threads.submit(() -> RelayExchange.connect(impostor, impostorListener)));
      assertHandshake(refused, "closed the connection after this rank's proof");
      assertTrue(refused.getMessage().startsWith("rank 0 at "), refused.getMessage());
      assertTrue(refusals().contains("its proof of the replica secret is wrong"), refusals());
      Future<RelayExchange> rank1 =
          threads.submit(() -> RelayExchange.connect(configs.get(1), listeners.get(1)));
      try (RelayExchange x0 = rank0.get(30, TimeUnit.SECONDS);
          RelayExchange x1 = rank1.get(30, TimeUnit.SECONDS)) {
        Future<AgreedRound> r1 = threads.submit(() -> Cluster.oneRound(x1, LocalReport.idle(1)));
        assertEquals(Cluster.oneRound(x0, LocalReport.idle(1)), r1.get(30, TimeUnit.SECONDS));
      }
    } finally {
      threads.shutdownNow();
    }
  }

  @Test
  void shouldNotJoinAnAcceptorThatCannotProveTheSecret() throws Exception {
    try (ServerSocket fake = new ServerSocket(0, 4, java.net.InetAddress.getLoopbackAddress())) {
      fake.setSoTimeout(30_000);
      ServerSocketChannel own = Cluster.listeners(1).getFirst();
      List<InetSocketAddress> addresses =
          List.of(
              new InetSocketAddress(fake.getInetAddress(), fake.getLocalPort()),
              Cluster.addresses(List.of(own)).getFirst());
      ControlConfig rank1 = Cluster.configs(addresses, c -> c.withTimeouts(5_000, 10_000)).get(1);
      ExecutorService threads = Executors.newSingleThreadExecutor();
      try {
        Future<RelayExchange> joining = threads.submit(() -> RelayExchange.connect(rank1, own));
        try (Socket s = fake.accept();
            RawPeer acceptor = RawPeer.accepted(s)) {
          assertNotNullFrame(acceptor.readFrame()); // rank 1's HELLO
          acceptor.send(RawPeer.encode(RawPeer.hello(0, 2)));
          assertNotNullFrame(acceptor.readFrame()); // rank 1's proof
          acceptor.send(RawPeer.encode(new Frame.Proof(Bytes32.random())));
          assertHandshake(failureOf(joining), "could not prove the replica secret");
        }
      } finally {
        threads.shutdownNow();
      }
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
   * A raw rank 1 that shakes hands correctly, then sends {@code round1} in round 1; returns what
   * rank 0's first exchange threw.
   */
  private static MeshException afterHandshakeRank1Sends(byte[] round1) throws Exception {
    List<ServerSocketChannel> listeners = Cluster.listeners(2);
    List<ControlConfig> configs =
        Cluster.configs(Cluster.addresses(listeners), c -> c.withTimeouts(1_000, 10_000));
    listeners.get(1).close();
    ExecutorService threads = Executors.newSingleThreadExecutor();
    try {
      Future<RelayExchange> rank0 =
          threads.submit(() -> RelayExchange.connect(configs.get(0), listeners.get(0)));
      try (RawPeer p =
          RawPeer.join(configs.get(0).addresses().get(0), 1, 2, configs.get(0).secret())) {
        try (RelayExchange x = rank0.get(30, TimeUnit.SECONDS)) {
          p.send(round1);
          return assertThrows(MeshException.class, () -> x.exchange(LocalReport.idle(1)));
        }
      }
    } finally {
      threads.shutdownNow();
    }
  }

  @Test
  void shouldRefuseAHugeDeclaredLengthBeforeAllocatingWhenAPeerSendsIt() throws Exception {
    byte[] header = RawPeer.report(1, 1);
    ByteBuffer.wrap(header).putInt(8, 0x7fff_fff0);
    MeshException e = afterHandshakeRank1Sends(java.util.Arrays.copyOf(header, 12));
    assertEquals(Reason.MALFORMED_FRAME, e.reason());
    assertEquals(1, e.peerRank());
    assertTrue(e.getMessage().contains("TOO_LARGE"), e.getMessage());
  }

  @Test
  void shouldRefuseAFrameWithABadChecksumWhenAPeerSendsIt() throws Exception {
    byte[] frame = RawPeer.report(1, 1);
    frame[20] ^= 1;
    MeshException e = afterHandshakeRank1Sends(frame);
    assertEquals(Reason.MALFORMED_FRAME, e.reason());
    assertTrue(e.getMessage().contains("BAD_CHECKSUM"), e.getMessage());
  }

  @Test
  void shouldRefuseAReportOfAnotherRoundWhenAPeerIsOutOfStep() throws Exception {
    MeshException e = afterHandshakeRank1Sends(RawPeer.report(1, 2));
    assertEquals(Reason.DESYNC, e.reason());
    assertEquals(1, e.peerRank());
    assertTrue(
        e.getMessage().contains("for round 2 while this rank is in round 1"), e.getMessage());
  }

  @Test
  void shouldRefuseAHandshakeFrameInARoundWhenAPeerSendsIt() throws Exception {
    MeshException e = afterHandshakeRank1Sends(RawPeer.encode(new Frame.Proof(Bytes32.random())));
    assertEquals(Reason.MALFORMED_FRAME, e.reason());
    assertTrue(e.getMessage().contains("sent a proof frame in round 1"), e.getMessage());
  }

  /**
   * Rank 2 (raw) sends its report of round 4 to rank 0 only and dies: rank 0 gathered round 4 and
   * rank 1 did not. The survivors settle on round 3, the newest round both hold, whichever of them
   * had already returned it: neither applies a round the other does not.
   */
  @Test
  void shouldStopEverySurvivorAtTheSameRoundWhenADyingRankReachedOnlySomePeers() throws Exception {
    List<Long> applied =
        DyingRank.run(
            UnaryOperator.identity(), (peer, secret) -> RawPeer.join(peer, 2, 3, secret), false);
    assertEquals(List.of(3L, 3L), applied);
  }

  @Test
  void shouldReportNoFinalRoundWhenSetupFails() throws Exception {
    ExecutorService threads = Executors.newSingleThreadExecutor();
    try {
      ServerSocketChannel[] listener = new ServerSocketChannel[1];
      MeshException e =
          assertInstanceOf(MeshException.class, failureOf(lonelyRankZero(threads, listener, 300)));
      assertEquals(Optional.empty(), e.finalRound());
      assertEquals(-1, e.lastAppliedRound());
    } finally {
      threads.shutdownNow();
    }
  }
}
