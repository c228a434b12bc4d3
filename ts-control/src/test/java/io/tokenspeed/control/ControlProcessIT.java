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

/** Ranks as separate JVM processes over loopback TCP. */
class ControlProcessIT {

  private static final Duration WAIT = Duration.ofSeconds(90);
  private static final Pattern ERROR =
      Pattern.compile("error (\\w+) peer=(-?\\d+) round=(\\d+) waited_ms=(\\d+) (.*)");

  @TempDir Path work;

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
        children.add(ChildRank.start(work, r, args));
      }
      List<String> ports = new ArrayList<>();
      for (ChildJvm c : children) {
        ports.add(c.awaitLineStartingWith("port ", WAIT).substring(5));
      }
      for (ChildJvm c : children) {
        c.send("ports " + String.join(",", ports));
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
          "protocol round=250 protocol error in round 250: invalid report from rank "
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
      for (int r = 0; r < 2; r++) {
        ChildJvm c = children.get(r);
        String line = c.awaitLineStartingWith("error ", Duration.ofMillis(roundTimeoutMs + 10_000));
        System.out.println("survivor " + r + ": " + line);
        Matcher m = ERROR.matcher(line);
        assertTrue(m.matches(), line);
        assertTrue(m.group(1).equals("DISCONNECTED") || m.group(1).equals("TIMEOUT"), c.describe());
        assertEquals("2", m.group(2), c.describe());
        assertTrue(m.group(5).contains("rank 2"), line);
        assertTrue(Long.parseLong(m.group(4)) <= roundTimeoutMs + 2_000, line);
      }
      long elapsedMs = (System.nanoTime() - killedAtNs) / 1_000_000;
      assertTrue(elapsedMs < roundTimeoutMs + 10_000, "survivors took " + elapsedMs + " ms");
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
          survivor.awaitLineStartingWith("error ", Duration.ofMillis(roundTimeoutMs + 10_000));
      System.out.println("survivor 0: " + line);
      Matcher m = ERROR.matcher(line);
      assertTrue(m.matches(), line);
      assertEquals("TIMEOUT", m.group(1), line);
      assertEquals("1", m.group(2), line);
      long waitedMs = Long.parseLong(m.group(4));
      assertTrue(waitedMs >= roundTimeoutMs - 5 && waitedMs <= roundTimeoutMs + 2_000, line);
      assertTrue(
          m.group(5).startsWith("rank 1 sent no complete frame within round_timeout_ms=2000"),
          line);
      children.get(1).kill();
      survivor.endInput();
      assertEquals(3, survivor.finish(WAIT).exitStatus(), survivor.describe());
    } finally {
      closeAll(children);
    }
  }
}
