package io.tokenspeed.model.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.testkit.ChildJvm;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The shared-memory collective between real processes: child JVMs, one per rank, play the same
 * seeded script through one file and must all report the digest of the results computed here; and
 * when one child is killed mid-sequence, the survivors must fail within their timeout with a
 * message naming the dead rank.
 */
class SharedMemoryCollectiveProcessTest {

  private static final int MAX_FLOATS = 37;
  private static final Duration CHILD_LIMIT = Duration.ofSeconds(60);

  @TempDir Path dir;

  private ChildJvm start(int rank, int size, long seed, int steps, long timeoutMs, String mode)
      throws Exception {
    return ChildJvm.launch(CollectiveChild.class)
        // The children load the collective's Vector API reduction, as the test JVM does.
        .env("JDK_JAVA_OPTIONS", "--add-modules=jdk.incubator.vector")
        .maxHeap("64m")
        .failOn("collective-failed")
        .args(
            List.of(
                dir.resolve("replica.collective").toString(),
                Integer.toString(rank),
                Integer.toString(size),
                Integer.toString(MAX_FLOATS),
                Long.toString(seed),
                Integer.toString(steps),
                Long.toString(timeoutMs),
                mode))
        .start(dir, "rank-" + rank);
  }

  @ParameterizedTest(name = "{0} processes")
  @ValueSource(ints = {2, 3})
  void shouldReportTheExpectedDigestFromEveryProcess(int size) throws Exception {
    long seed = 900 + size;
    int steps = 40;
    String expected =
        Long.toHexString(
            CollectiveScript.expectedDigest(
                seed, size, CollectiveScript.steps(seed, size, MAX_FLOATS, steps)));
    List<ChildJvm> children = new ArrayList<>();
    try {
      for (int r = 0; r < size; r++) {
        children.add(start(r, size, seed, steps, 20_000, "digest"));
      }
      for (ChildJvm child : children) {
        ChildJvm.Finished done = child.finish(CHILD_LIMIT);
        assertEquals(0, done.exitStatus(), done.describe());
        assertEquals(expected, done.value("digest"), done.describe());
      }
    } finally {
      for (ChildJvm child : children) {
        child.close();
      }
    }
  }

  @Test
  void shouldFailTheSurvivorsNamingAKilledRank() throws Exception {
    int size = 3;
    int dead = 1;
    long timeoutMs = 2_000;
    List<ChildJvm> children = new ArrayList<>();
    try {
      for (int r = 0; r < size; r++) {
        children.add(start(r, size, 77, 20, timeoutMs, "loop"));
      }
      for (ChildJvm child : children) {
        child.awaitLine("running", CHILD_LIMIT);
      }
      long killed = System.nanoTime();
      children.get(dead).kill();
      for (int r = 0; r < size; r++) {
        if (r == dead) {
          continue;
        }
        ChildJvm.Finished done = children.get(r).finish(CHILD_LIMIT);
        long afterMs = (System.nanoTime() - killed) / 1_000_000;
        System.out.printf(
            "SharedMemoryCollective: rank %d exited %d ms after rank %d was killed%n",
            r, afterMs, dead);
        assertEquals(3, done.exitStatus(), done.describe());
        String message = done.value("collective-failed");
        assertTrue(
            message != null && message.contains("rank " + dead + " did not arrive within 2000 ms"),
            done.describe());
        assertTrue(afterMs < timeoutMs + 20_000, "exited only " + afterMs + " ms after the kill");
      }
    } finally {
      for (ChildJvm child : children) {
        child.close();
      }
    }
  }
}
