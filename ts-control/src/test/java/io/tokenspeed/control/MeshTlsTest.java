package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.control.Cluster.Outcome;
import io.tokenspeed.control.ControlTls.PasswordSource;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import javax.net.ssl.SSLContext;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The mesh over mutual TLS 1.3, over real loopback TCP, with stores made by keytool. */
class MeshTlsTest {

  @TempDir static Path dir;

  private static TestCertificates certs;

  private final List<String> warnings = new CopyOnWriteArrayList<>();

  private final Handler capture =
      new Handler() {
        @Override
        public void publish(LogRecord r) {
          warnings.add(r.getMessage());
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
      };

  @BeforeAll
  static void makeStores() throws Exception {
    certs = TestCertificates.make(dir);
  }

  @BeforeEach
  void captureWarnings() {
    Logger.getLogger(Mesh.class.getName()).addHandler(capture);
  }

  @AfterEach
  void stopCapturing() {
    Logger.getLogger(Mesh.class.getName()).removeHandler(capture);
  }

  private static UnaryOperator<ControlConfig> overTls() {
    ControlTls tls = certs.tls();
    return c -> c.withTls(tls);
  }

  @ParameterizedTest(name = "ranks={0}")
  @ValueSource(ints = {2, 3})
  void shouldAgreeIdenticallyOnEveryRankWhenTheMeshRunsOverTls(int worldSize) throws Exception {
    int rounds = 400;
    Scenario scenario = new Scenario(40L + worldSize, worldSize, rounds);
    assertTrue(scenario.totalCompletions() > rounds, "the scenario carries completions");
    try (Cluster cluster = Cluster.start(worldSize, overTls())) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run((rank, x) -> Cluster.rounds(x, n -> scenario.report(rank, n), rounds));
      for (int r = 0; r < worldSize; r++) {
        List<AgreedRound> agreed = outcomes.get(r).get();
        for (int n = 0; n < rounds; n++) {
          assertEquals(
              scenario.expected().get(n), agreed.get(n), "rank " + r + " round " + (n + 1));
        }
      }
    }
    assertEquals(List.of(), warnings, "no connection was refused");
  }

  @Test
  void shouldRefuseAPlainClientAndAForeignCertificateWhenTheRealRankThenJoins() throws Exception {
    List<ServerSocketChannel> listeners = Cluster.listeners(2);
    List<ControlConfig> configs =
        Cluster.configs(
            Cluster.addresses(listeners), c -> overTls().apply(c.withHandshakeTimeout(3_000)));
    InetSocketAddress rank0 = configs.getFirst().addresses().getFirst();
    ExecutorService threads = Executors.newFixedThreadPool(2);
    try {
      Future<RelayExchange> first =
          threads.submit(() -> RelayExchange.connect(configs.get(0), listeners.get(0)));

      try (RawPeer plain = RawPeer.dial(rank0)) {
        plain.send(RawPeer.encode(RawPeer.hello(1, 2)));
        assertTrue(closedOrFailed(plain), "a plain client gets no answer");
      }
      awaitWarnings(1);
      assertTrue(warnings.getFirst().contains("its TLS handshake failed"), refusals());

      ReplicaSecret secret = configs.getFirst().secret();
      IOException foreign =
          org.junit.jupiter.api.Assertions.assertThrows(
              IOException.class,
              () -> RawPeer.joinTls(rank0, 1, 2, secret, certs.foreignContext()).close());
      assertNotNull(foreign);
      awaitWarnings(2);
      assertTrue(warnings.get(1).contains("its TLS handshake failed"), refusals());
      assertTrue(warnings.get(1).contains("refused a connection from /127.0.0.1"), refusals());

      Future<RelayExchange> second =
          threads.submit(() -> RelayExchange.connect(configs.get(1), listeners.get(1)));
      try (RelayExchange x0 = first.get(30, TimeUnit.SECONDS);
          RelayExchange x1 = second.get(30, TimeUnit.SECONDS)) {
        Future<List<AgreedRound>> at1 =
            threads.submit(() -> Cluster.rounds(x1, n -> LocalReport.idle(n), 5));
        List<AgreedRound> at0 = Cluster.rounds(x0, n -> LocalReport.idle(n), 5);
        assertEquals(at0, at1.get(30, TimeUnit.SECONDS));
      }
      assertEquals(2, warnings.size(), refusals());
    } finally {
      threads.shutdownNow();
    }
  }

  @Test
  void shouldStopEverySurvivorAtTheSameRoundWhenADyingRankReachedOnlySomePeersOverTls()
      throws Exception {
    SSLContext rankContext = certs.rankContext();
    List<Long> applied =
        DyingRank.run(
            overTls(), (peer, secret) -> RawPeer.joinTls(peer, 2, 3, secret, rankContext), true);
    assertEquals(List.of(3L, 3L), applied);
  }

  @Test
  void shouldCarryAReportOfSeveralMegabytesIntactWhenTheMeshRunsOverTls() throws Exception {
    int numOps = 150_000;
    int numKeys = 16;
    try (Cluster cluster = Cluster.start(2, overTls())) {
      List<Outcome<List<AgreedRound>>> outcomes =
          cluster.run(
              (rank, x) -> {
                List<StorageDone> records = new ArrayList<>(numOps);
                for (long op = 1; op <= numOps; op++) {
                  records.add(
                      new StorageDone(
                          op, StorageKind.GET, outcomes(rank, op, numKeys), true, 64, false));
                }
                LocalReport big = LocalReport.of(2, PressureSnapshot.IDLE, records);
                return Cluster.rounds(x, n -> n == 2 ? big : LocalReport.idle(n), 3);
              });
      List<AgreedRound> at0 = outcomes.get(0).get();
      assertEquals(at0, outcomes.get(1).get());
      List<AgreedCompletion> agreed = at0.get(1).completions();
      assertEquals(numOps, agreed.size());
      for (int i = 0; i < numOps; i++) {
        AgreedCompletion a = agreed.get(i);
        long op = i + 1;
        assertEquals(op, a.operationId());
        for (int k = 0; k < numKeys; k++) {
          KeyOutcome expected =
              outcomes(0, op, numKeys).get(k) == KeyOutcome.OK
                      && outcomes(1, op, numKeys).get(k) == KeyOutcome.OK
                  ? KeyOutcome.OK
                  : KeyOutcome.FAILED;
          assertEquals(expected, a.outcomes().get(k), "operation " + op + " key " + k);
        }
      }
    }
  }

  @Test
  void shouldNameTheFieldWhenATlsSettingIsMissingOrItsStoreCannotBeRead() {
    Path p = dir.resolve("store.p12");
    PasswordSource pw = PasswordSource.env("TS_NO_SUCH_PASSWORD_VARIABLE");
    assertRejected("tls.key_store_path is missing", () -> ControlTls.ofStores(null, pw, p, pw));
    assertRejected(
        "tls.trust_store_password is missing", () -> ControlTls.ofStores(p, pw, p, null));
    assertRejected(
        "tls.key_store_type=",
        () -> new ControlTls.Stores(p, " ", pw, p, ControlTls.DEFAULT_STORE_TYPE, pw));
    assertRejected("tls.ssl_context is missing", () -> ControlTls.ofContext(null));
    assertRejected(
        "tls.key_store_password: environment variable TS_NO_SUCH_PASSWORD_VARIABLE is not set",
        () -> {
          try {
            ((ControlTls.Stores) ControlTls.ofStores(p, pw, p, pw)).load(Map.of());
          } catch (Exception e) {
            throw e instanceof RuntimeException r ? r : new RuntimeException(e);
          }
        });
    assertRejected(
        "tls.key_store_path=" + p + " is not a readable file",
        () -> {
          try {
            ((ControlTls.Stores) ControlTls.ofStores(p, pw, p, pw))
                .load(Map.of("TS_NO_SUCH_PASSWORD_VARIABLE", "x"));
          } catch (Exception e) {
            throw e instanceof RuntimeException r ? r : new RuntimeException(e);
          }
        });
    String shown =
        ControlConfig.of(0, 0, List.of(new InetSocketAddress("127.0.0.1", 7001)), secret())
            .withTls(ControlTls.ofStores(p, pw, p, PasswordSource.file(p)))
            .toString();
    assertTrue(shown.contains("TS_NO_SUCH_PASSWORD_VARIABLE"), shown);
  }

  @Test
  void shouldNotOpenTheMeshWhenTheKeyStorePasswordIsWrong() throws Exception {
    Path wrong = dir.resolve("wrong.pass");
    java.nio.file.Files.writeString(wrong, "not-the-password");
    List<ServerSocketChannel> listeners = Cluster.listeners(1);
    ControlConfig c =
        Cluster.configs(
                Cluster.addresses(listeners),
                x ->
                    x.withTls(
                        ControlTls.ofStores(
                            certs.rankStore,
                            PasswordSource.file(wrong),
                            certs.trustStore,
                            PasswordSource.file(certs.passwordFile))))
            .getFirst();
    MeshException e =
        org.junit.jupiter.api.Assertions.assertThrows(
            MeshException.class, () -> RelayExchange.connect(c, listeners.getFirst()));
    assertEquals(MeshException.Reason.IO, e.reason(), e.getMessage());
    assertTrue(e.getMessage().contains("tls.key_store_path=" + certs.rankStore), e.getMessage());
    assertTrue(!e.getMessage().contains("not-the-password"), e.getMessage());
  }

  /** Rank 1 of two reports key k of {@code op} FAILED on a fixed pattern; rank 0 reports OK. */
  private static List<KeyOutcome> outcomes(int rank, long op, int numKeys) {
    List<KeyOutcome> out = new ArrayList<>(numKeys);
    for (int k = 0; k < numKeys; k++) {
      out.add(rank == 1 && (op * 31 + k) % 7 == 0 ? KeyOutcome.FAILED : KeyOutcome.OK);
    }
    return out;
  }

  private static ReplicaSecret secret() {
    return ReplicaSecret.generate();
  }

  private static void assertRejected(String field, Runnable build) {
    IllegalArgumentException e =
        org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class, build::run);
    assertTrue(e.getMessage().contains(field), e.getMessage());
  }

  /** True when the acceptor closed or reset the connection instead of answering. */
  private static boolean closedOrFailed(RawPeer p) {
    try {
      return p.readFrame() == null;
    } catch (IOException e) {
      return true;
    }
  }

  private String refusals() {
    return String.join("\n", warnings);
  }

  /** Waits (bounded) until the acceptor has logged {@code n} refusals. */
  private void awaitWarnings(int n) throws InterruptedException {
    long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (warnings.size() < n && System.nanoTime() - deadlineNs < 0) {
      Thread.sleep(10);
    }
    assertEquals(n, warnings.size(), refusals());
  }
}
