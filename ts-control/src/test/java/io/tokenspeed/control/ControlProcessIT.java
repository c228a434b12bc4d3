package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.testkit.ChildJvm;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.EnumSource;

/** Ranks as separate JVM processes over loopback TCP. */
class ControlProcessIT {

  private static final Duration WAIT = Duration.ofSeconds(90);
  private static final Pattern ERROR =
      Pattern.compile(
          "error (\\w+) peer=(-?\\d+) round=(\\d+) waited_ms=(\\d+) applied=(-?\\d+) (.*)");

  /** Kill trials run by the build; the documented 100-trial run sets -Dcontrol.killTrials=100. */
  private static final int KILL_TRIALS = Integer.getInteger("control.killTrials", 3);

  @TempDir Path work;

  private final ReplicaSecret secret = ReplicaSecret.generate();

  /** Starts {@code worldSize} children, hands them each other's ports, waits until connected. */
  private List<ChildJvm> start(
      int worldSize, long seed, int rounds, long roundTimeoutMs, boolean endless) throws Exception {
    return start(worldSize, seed, rounds, roundTimeoutMs, endless, List.of());
  }

  private List<ChildJvm> start(
      int worldSize,
      long seed,
      int rounds,
      long roundTimeoutMs,
      boolean endless,
      List<String> extra)
      throws Exception {
    return start(worldSize, seed, rounds, roundTimeoutMs, endless, extra, null);
  }

  /**
   * Starts the ranks; {@code beforePorts}, when given, runs once rank 0 listens and before any rank
   * learns the others' ports (for strays that must reach rank 0 before its peers do).
   */
  private List<ChildJvm> start(
      int worldSize,
      long seed,
      int rounds,
      long roundTimeoutMs,
      boolean endless,
      List<String> extra,
      PortsHook beforePorts)
      throws Exception {
    List<ChildJvm> children = new ArrayList<>();
    try {
      for (int r = 0; r < worldSize; r++) {
        List<String> args =
            new ArrayList<>(
                List.of(
                    "" + worldSize,
                    "" + r,
                    "" + seed,
                    "" + rounds,
                    "" + roundTimeoutMs,
                    "" + endless));
        args.addAll(extra);
        children.add(ChildRank.start(work, r, args, secret));
      }
      List<String> ports = new ArrayList<>();
      for (ChildJvm c : children) {
        ports.add(c.awaitLineStartingWith("port ", WAIT).substring(5));
      }
      java.util.Set<Integer> told = new java.util.HashSet<>();
      if (beforePorts != null) {
        told.addAll(beforePorts.run(ports, children));
      }
      for (int r = 0; r < children.size(); r++) {
        if (!told.contains(r)) {
          children.get(r).send("ports " + String.join(",", ports));
        }
      }
      for (ChildJvm c : children) {
        c.awaitLineStartingWith("connected", WAIT);
      }
      return children;
    } catch (Throwable t) {
      for (ChildJvm c : children) {
        c.close();
      }
      throw t;
    }
  }

  /** Runs before the ranks learn the ports; returns the ranks it told the ports itself. */
  @FunctionalInterface
  private interface PortsHook {
    java.util.Set<Integer> run(List<String> ports, List<ChildJvm> children) throws Exception;
  }

  private static void closeAll(List<ChildJvm> children) throws InterruptedException {
    for (ChildJvm c : children) {
      c.close();
    }
  }

  @ParameterizedTest(name = "ranks={0} seed={1} rounds={2}")
  @CsvSource({"2, 41, 2000", "4, 42, 1500"})
  void shouldAgreeOnTheSameDigestInEveryProcessWhenRunningSeededRounds(
      int worldSize, long seed, int rounds) throws Exception {
    Scenario scenario = new Scenario(seed, worldSize, rounds);
    assertTrue(scenario.maxOwnerSpread() >= 20, "some owner reports many rounds late");
    assertTrue(scenario.maxPendingOperations() >= 5, "operations wait on late owners");
    String expected = scenario.expectedDigest();
    List<ChildJvm> children = start(worldSize, seed, rounds, 20_000, false);
    try {
      for (ChildJvm c : children) {
        assertEquals("pending 0", c.awaitLineStartingWith("pending ", WAIT), c.describe());
        assertEquals("digest " + expected, c.awaitLineStartingWith("digest ", WAIT), c.describe());
      }
      for (ChildJvm c : children) {
        c.endInput();
        assertEquals(0, c.finish(WAIT).exitStatus(), c.describe());
      }
    } finally {
      closeAll(children);
    }
  }

  @ParameterizedTest(name = "ranks={0}")
  @CsvSource({"2", "4"})
  void shouldRaiseTheSameProtocolErrorInEveryProcessWhenOneRanksPollFails(int worldSize)
      throws Exception {
    int poisoned = worldSize - 1;
    List<ChildJvm> children = start(worldSize, 45, 400, 20_000, false, List.of(poisoned + "@250"));
    try {
      List<String> verdicts = new ArrayList<>();
      for (ChildJvm c : children) {
        verdicts.add(c.awaitLineStartingWith("protocol ", WAIT));
      }
      String expected =
          "protocol round=250 applied=249 protocol error in round 250: invalid report from rank "
              + poisoned
              + ": local poll failed: injected poll failure on rank "
              + poisoned;
      assertEquals(java.util.Collections.nCopies(worldSize, expected), verdicts);
      for (ChildJvm c : children) {
        c.endInput();
        assertEquals(3, c.finish(WAIT).exitStatus(), c.describe());
      }
    } finally {
      closeAll(children);
    }
  }

  @Test
  void shouldFailNamingTheKilledRankWhenARankProcessDiesMidRun() throws Exception {
    long roundTimeoutMs = 3_000;
    List<ChildJvm> children = start(3, 43, 300, roundTimeoutMs, true);
    try {
      for (ChildJvm c : children) {
        c.awaitLineStartingWith("round 400", WAIT);
      }
      long killedAtNs = System.nanoTime();
      children.get(2).kill();
      List<String> applied = new ArrayList<>();
      for (int r = 0; r < 2; r++) {
        ChildJvm c = children.get(r);
        String line =
            c.awaitLineStartingWith("error ", Duration.ofMillis(3 * roundTimeoutMs + 10_000));
        System.out.println("survivor " + r + ": " + line);
        Matcher m = ERROR.matcher(line);
        assertTrue(m.matches(), line);
        assertTrue(
            m.group(1).equals("DISCONNECTED")
                || m.group(1).equals("TIMEOUT")
                || m.group(1).equals("PEER_STOPPED"),
            c.describe());
        assertTrue(m.group(6).contains("rank 2"), line);
        applied.add(m.group(5));
      }
      assertEquals(applied.get(0), applied.get(1), "survivors stopped at different rounds");
      long elapsedMs = (System.nanoTime() - killedAtNs) / 1_000_000;
      assertTrue(elapsedMs < 3 * roundTimeoutMs + 10_000, "survivors took " + elapsedMs + " ms");
      for (int r = 0; r < 2; r++) {
        children.get(r).endInput();
        assertEquals(3, children.get(r).finish(WAIT).exitStatus(), children.get(r).describe());
      }
    } finally {
      closeAll(children);
    }
  }

  @Test
  void shouldTimeOutNamingTheFrozenRankWhenARankProcessStopsAnswering() throws Exception {
    long roundTimeoutMs = 2_000;
    List<ChildJvm> children = start(2, 44, 200, roundTimeoutMs, true);
    try {
      for (ChildJvm c : children) {
        c.awaitLineStartingWith("round 300", WAIT);
      }
      children.get(1).freeze();
      ChildJvm survivor = children.get(0);
      String line =
          survivor.awaitLineStartingWith("error ", Duration.ofMillis(3 * roundTimeoutMs + 10_000));
      System.out.println("survivor 0: " + line);
      Matcher m = ERROR.matcher(line);
      assertTrue(m.matches(), line);
      assertEquals("TIMEOUT", m.group(1), line);
      assertEquals("1", m.group(2), line);
      long waitedMs = Long.parseLong(m.group(4));
      // The round timeout, then at most twice that waiting for the frozen rank's last word.
      assertTrue(waitedMs >= roundTimeoutMs - 5 && waitedMs <= 3 * roundTimeoutMs + 5_000, line);
      assertTrue(
          m.group(6).startsWith("rank 1 sent no complete frame within round_timeout_ms=2000"),
          line);
      // Resumed past the timeout, the frozen rank finds the survivor's last word and stops at
      // the same round: it applies nothing the survivor did not.
      children.get(1).resume();
      String resumed = children.get(1).awaitLineStartingWith("error ", WAIT);
      System.out.println("resumed 1: " + resumed);
      Matcher r = ERROR.matcher(resumed);
      assertTrue(r.matches(), resumed);
      assertEquals(m.group(5), r.group(5), "survivor: " + line + "\nresumed: " + resumed);
      children.get(1).kill();
      survivor.endInput();
      assertEquals(3, survivor.finish(WAIT).exitStatus(), survivor.describe());
    } finally {
      closeAll(children);
    }
  }

  /** What a foreign client does to rank 0's port before the real ranks learn each other's ports. */
  enum Foreign {
    GARBAGE,
    WRONG_REPLICA,
    WRONG_VERSION,
    NOTHING,
    CONNECT_AND_CLOSE
  }

  @ParameterizedTest(name = "{0}")
  @EnumSource(Foreign.class)
  void shouldCompleteSetupAndAgreeWhenAForeignClientReachesRankZeroFirst(Foreign foreign)
      throws Exception {
    int worldSize = 3;
    long seed = 46;
    int rounds = 300;
    Scenario scenario = new Scenario(seed, worldSize, rounds);
    java.net.Socket[] kept = new java.net.Socket[1];
    List<ChildJvm> children =
        start(
            worldSize,
            seed,
            rounds,
            20_000,
            false,
            List.of(),
            (ports, ranks) -> {
              java.net.Socket s = new java.net.Socket();
              s.connect(
                  new java.net.InetSocketAddress(
                      java.net.InetAddress.getLoopbackAddress(), Integer.parseInt(ports.get(0))),
                  10_000);
              switch (foreign) {
                case GARBAGE ->
                    s.getOutputStream().write("\u0016\u0003\u0001 not a rank".getBytes());
                case WRONG_REPLICA -> {
                  Frame.Hello h = RawPeer.hello(1, worldSize);
                  s.getOutputStream()
                      .write(
                          RawPeer.encode(
                              new Frame.Hello(
                                  99,
                                  worldSize,
                                  1,
                                  h.maxFrameBytes(),
                                  h.maxPendingOperations(),
                                  h.maxPendingKeys(),
                                  h.nonce())));
                }
                case WRONG_VERSION -> {
                  byte[] hello = RawPeer.encode(RawPeer.hello(1, worldSize));
                  java.nio.ByteBuffer.wrap(hello)
                      .putShort(4, (short) (FrameDescriptor.VERSION + 1));
                  s.getOutputStream().write(MeshFailureTest.withCrc(hello));
                }
                case NOTHING -> {}
                case CONNECT_AND_CLOSE -> s.close();
              }
              kept[0] = s;
              return java.util.Set.of();
            });
    try {
      String expected = scenario.expectedDigest();
      for (ChildJvm c : children) {
        assertEquals("pending 0", c.awaitLineStartingWith("pending ", WAIT), c.describe());
        assertEquals("digest " + expected, c.awaitLineStartingWith("digest ", WAIT), c.describe());
      }
      if (foreign != Foreign.NOTHING) {
        // A silent client is closed when setup ends or its handshake times out; the others at once.
        awaitStderr(children.get(0), "rank 0 refused a connection from /127.0.0.1:");
      }
      for (ChildJvm c : children) {
        c.endInput();
        assertEquals(0, c.finish(WAIT).exitStatus(), c.describe());
      }
    } finally {
      if (kept[0] != null) {
        kept[0].close();
      }
      closeAll(children);
    }
  }

  private static void awaitStderr(ChildJvm c, String text) throws InterruptedException {
    long deadlineNs = System.nanoTime() + WAIT.toNanos();
    while (!c.stderrSoFar().contains(text)) {
      if (System.nanoTime() - deadlineNs > 0) {
        throw new AssertionError("no '" + text + "' in the log of " + c.describe());
      }
      Thread.sleep(50);
    }
  }

  /**
   * A process started with another secret reaches rank 0 as rank 2 before the real rank 2: it is
   * refused with a log line naming the reason, it fails naming rank 0, and the real rank 2 joins.
   */
  @Test
  void shouldRefuseAnImpostorWithAnotherSecretAndLetTheRealRankJoin() throws Exception {
    int worldSize = 3;
    long seed = 47;
    int rounds = 200;
    Scenario scenario = new Scenario(seed, worldSize, rounds);
    List<String> args = List.of("" + worldSize, "2", "" + seed, "" + rounds, "20000", "false");
    ChildJvm impostor = ChildRank.start(work, "impostor", args, ReplicaSecret.generate());
    List<ChildJvm> children =
        start(
            worldSize,
            seed,
            rounds,
            20_000,
            false,
            List.of(),
            (ports, ranks) -> {
              // Rank 0 accepts; the impostor reaches it before the real rank 2 exists.
              ranks.get(0).send("ports " + String.join(",", ports));
              impostor.awaitLineStartingWith("port ", WAIT);
              impostor.send("ports " + String.join(",", ports));
              String line = impostor.awaitLineStartingWith("error ", WAIT);
              assertTrue(line.startsWith("error HANDSHAKE peer=0 "), line);
              assertTrue(line.contains("closed the connection after this rank's proof"), line);
              return java.util.Set.of(0);
            });
    try {
      for (ChildJvm c : children) {
        assertEquals(
            "digest " + scenario.expectedDigest(),
            c.awaitLineStartingWith("digest ", WAIT),
            c.describe());
      }
      awaitStderr(children.get(0), "its proof of the replica secret is wrong");
      for (ChildJvm c : children) {
        c.endInput();
        assertEquals(0, c.finish(WAIT).exitStatus(), c.describe());
      }
    } finally {
      impostor.close();
      closeAll(children);
    }
  }

  /**
   * Kill -9 of a random rank at a random point: every survivor stops having applied the same last
   * round. The build runs {@value #KILL_TRIALS}-ish trials; docs/control-plane.md quotes a
   * 100-trial run.
   */
  @Test
  void shouldStopEverySurvivorAtTheSameRoundWhenARandomRankIsKilledAtARandomPoint()
      throws Exception {
    java.util.SplittableRandom rnd =
        new java.util.SplittableRandom(Long.getLong("control.killSeed", 48));
    int agreed = 0;
    for (int trial = 0; trial < KILL_TRIALS; trial++) {
      int victim = rnd.nextInt(3);
      long killAfterMs = 50 + rnd.nextInt(400);
      List<ChildJvm> children = start(3, 49 + trial, 100, 3_000, true);
      try {
        Thread.sleep(killAfterMs);
        children.get(victim).kill();
        List<String> applied = new ArrayList<>();
        for (int r = 0; r < 3; r++) {
          if (r == victim) {
            continue;
          }
          String line = children.get(r).awaitLineStartingWith("error ", WAIT);
          Matcher m = ERROR.matcher(line);
          assertTrue(m.matches(), line);
          applied.add(m.group(5));
        }
        System.out.println(
            "kill trial "
                + trial
                + ": victim="
                + victim
                + " after "
                + killAfterMs
                + " ms, survivors applied "
                + applied);
        assertEquals(applied.get(0), applied.get(1), "trial " + trial + ": survivors differ");
        agreed++;
      } finally {
        closeAll(children);
      }
    }
    assertEquals(KILL_TRIALS, agreed);
  }
}
