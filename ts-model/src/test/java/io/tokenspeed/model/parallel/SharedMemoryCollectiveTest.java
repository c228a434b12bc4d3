package io.tokenspeed.model.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.parallel.CollectiveScript.Step;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The shared-memory collective with its ranks as threads of this JVM, each opening the same file:
 * seeded call sequences whose results must be the rank-order sums and concatenations bit for bit on
 * every rank; failures (a rank that never arrives, abort, close, diverged calls, a file of another
 * geometry, a rank opened twice) that must fail fast and name the rank; argument checks that leave
 * the collective usable; and the latency of a small all-reduce, logged.
 */
class SharedMemoryCollectiveTest {

  private static final Duration LONG = Duration.ofSeconds(20);

  @TempDir Path dir;

  private final ExecutorService threads = Executors.newCachedThreadPool();

  @AfterEach
  void stopThreads() throws InterruptedException {
    threads.shutdownNow();
    assertTrue(threads.awaitTermination(10, TimeUnit.SECONDS), "rank threads still running");
  }

  private Path file() {
    return dir.resolve("replica.collective");
  }

  /** Runs {@code body} for every rank in its own thread, each with its own opened collective. */
  private <T> List<T> ranks(int size, int maxFloats, Function<SharedMemoryCollective, T> body)
      throws Exception {
    List<Future<T>> futures = new ArrayList<>();
    for (int r = 0; r < size; r++) {
      int rank = r;
      futures.add(
          threads.submit(
              () -> {
                try (SharedMemoryCollective c =
                    SharedMemoryCollective.open(file(), rank, size, maxFloats, LONG)) {
                  return body.apply(c);
                }
              }));
    }
    List<T> results = new ArrayList<>();
    for (Future<T> future : futures) {
      results.add(future.get(60, TimeUnit.SECONDS));
    }
    return results;
  }

  @ParameterizedTest(name = "size={0} seed={1}")
  @CsvSource({"1, 11", "2, 12", "3, 13", "4, 14", "2, 15", "4, 16"})
  void shouldGiveEveryRankTheRankOrderResultsBitForBit(int size, long seed) throws Exception {
    int maxFloats = 37;
    List<Step> steps = CollectiveScript.steps(seed, size, maxFloats, 60);
    List<List<float[]>> results =
        ranks(
            size,
            maxFloats,
            c -> {
              List<float[]> mine = new ArrayList<>();
              for (int i = 0; i < steps.size(); i++) {
                mine.add(CollectiveScript.play(c, seed, steps.get(i), i));
              }
              return mine;
            });
    for (int i = 0; i < steps.size(); i++) {
      int[] expected = bits(CollectiveScript.expected(seed, size, steps.get(i), i));
      for (int r = 0; r < size; r++) {
        assertArrayEquals(
            expected,
            bits(results.get(r).get(i)),
            "step " + i + " " + steps.get(i) + " on rank " + r + " of " + size);
      }
    }
    assertTrue(
        steps.stream().anyMatch(s -> s.length() > 2 * maxFloats),
        "the script must exercise chunking");
  }

  @Test
  void shouldUseInputsWhoseSumsDependOnTheOrder() {
    // The check above could not tell rank order from another order if the sums did not differ.
    long seed = 13;
    int differing = 0;
    for (int i = 0; i < 20; i++) {
      float[][] v = new float[4][];
      for (int r = 0; r < 4; r++) {
        v[r] = CollectiveScript.values(seed, i, r, 100);
      }
      for (int j = 0; j < 100; j++) {
        float forward = ((v[0][j] + v[1][j]) + v[2][j]) + v[3][j];
        float backward = ((v[3][j] + v[2][j]) + v[1][j]) + v[0][j];
        if (Float.floatToRawIntBits(forward) != Float.floatToRawIntBits(backward)) {
          differing++;
        }
      }
    }
    assertTrue(differing > 20, "only " + differing + " of 2000 sums depend on the order");
  }

  @Test
  void shouldFailNamingTheRanksThatDidNotArriveWithinTheTimeout() throws Exception {
    Duration timeout = Duration.ofMillis(400);
    // Rank 1 opens but never calls, rank 2 never opens.
    try (SharedMemoryCollective rank0 = SharedMemoryCollective.open(file(), 0, 3, 8, timeout);
        SharedMemoryCollective rank1 = SharedMemoryCollective.open(file(), 1, 3, 8, timeout)) {
      long start = System.nanoTime();
      CollectiveException e =
          assertThrows(CollectiveException.class, () -> rank0.allReduceSum(new float[4], 0, 4));
      long elapsedMs = (System.nanoTime() - start) / 1_000_000;
      assertTrue(e.getMessage().contains("ranks 1, 2 did not arrive"), e.getMessage());
      assertTrue(e.getMessage().contains("operation 0"), e.getMessage());
      assertTrue(e.getMessage().contains("rank 2 never opened"), e.getMessage());
      assertTrue(elapsedMs >= 350 && elapsedMs < 5_000, "failed after " + elapsedMs + " ms");
      // The failure sticks, and reached rank 1 through the file.
      CollectiveException again =
          assertThrows(CollectiveException.class, () -> rank0.allReduceSum(new float[4], 0, 4));
      assertEquals(e.getMessage(), again.getMessage());
      CollectiveException seen = assertThrows(CollectiveException.class, rank1::barrier);
      assertTrue(seen.getMessage().startsWith("rank 0 aborted the collective"), seen.getMessage());
      assertTrue(seen.getMessage().contains("ranks 1, 2 did not arrive"), seen.getMessage());
    }
  }

  @Test
  void shouldFailEveryWaitingRankPromptlyWhenOneAborts() throws Exception {
    try (SharedMemoryCollective rank0 = SharedMemoryCollective.open(file(), 0, 3, 8, LONG)) {
      List<Future<CollectiveException>> waiting = new ArrayList<>();
      for (int r = 1; r < 3; r++) {
        int rank = r;
        waiting.add(
            threads.submit(
                () -> {
                  try (SharedMemoryCollective c =
                      SharedMemoryCollective.open(file(), rank, 3, 8, LONG)) {
                    return assertThrows(
                        CollectiveException.class, () -> c.allReduceSum(new float[20], 0, 20));
                  }
                }));
      }
      Thread.sleep(200);
      long start = System.nanoTime();
      rank0.abort("out of device memory");
      for (int r = 1; r < 3; r++) {
        CollectiveException e = waiting.get(r - 1).get(10, TimeUnit.SECONDS);
        assertTrue(
            e.getMessage().startsWith("rank 0 aborted the collective: out of device memory"),
            e.getMessage());
      }
      long elapsedMs = (System.nanoTime() - start) / 1_000_000;
      assertTrue(elapsedMs < LONG.toMillis() / 2, "the waits ended only after " + elapsedMs);
      CollectiveException own = assertThrows(CollectiveException.class, rank0::barrier);
      assertEquals("rank 0 aborted: out of device memory", own.getMessage());
    }
  }

  @Test
  void shouldEndThisRanksOwnWaitWhenAbortedFromAnotherThread() throws Exception {
    try (SharedMemoryCollective rank0 = SharedMemoryCollective.open(file(), 0, 2, 8, LONG)) {
      Future<CollectiveException> waiting =
          threads.submit(
              () ->
                  assertThrows(
                      CollectiveException.class,
                      () -> rank0.allGather(new float[1], new int[] {1, 1}, new float[2])));
      Thread.sleep(200);
      rank0.abort("watchdog");
      CollectiveException e = waiting.get(10, TimeUnit.SECONDS);
      assertEquals("rank 0 aborted: watchdog", e.getMessage());
      // A rank that opens afterwards fails at its first call, naming rank 0.
      try (SharedMemoryCollective rank1 = SharedMemoryCollective.open(file(), 1, 2, 8, LONG)) {
        CollectiveException late = assertThrows(CollectiveException.class, rank1::barrier);
        assertTrue(late.getMessage().startsWith("rank 0 aborted the collective: watchdog"));
      }
    }
  }

  @Test
  void shouldFailTheWaitingRankPromptlyWhenTheOtherCloses() throws Exception {
    SharedMemoryCollective rank1 = SharedMemoryCollective.open(file(), 1, 2, 8, LONG);
    try (SharedMemoryCollective rank0 = SharedMemoryCollective.open(file(), 0, 2, 8, LONG)) {
      Future<?> partner = threads.submit((Runnable) rank1::barrier);
      rank0.barrier();
      partner.get(10, TimeUnit.SECONDS);
      Future<CollectiveException> waiting =
          threads.submit(
              () ->
                  assertThrows(
                      CollectiveException.class, () -> rank0.allReduceSum(new float[3], 0, 3)));
      Thread.sleep(200);
      long start = System.nanoTime();
      rank1.close();
      CollectiveException e = waiting.get(10, TimeUnit.SECONDS);
      long elapsedMs = (System.nanoTime() - start) / 1_000_000;
      assertTrue(e.getMessage().startsWith("rank 1 closed before operation 1"), e.getMessage());
      assertTrue(elapsedMs < LONG.toMillis() / 2, "the wait ended only after " + elapsedMs);
      CollectiveException closed = assertThrows(CollectiveException.class, rank1::barrier);
      assertTrue(closed.getMessage().contains("rank 1 closed"), closed.getMessage());
    }
  }

  @Test
  void shouldFailOnEveryRankWhenTheirCallsDiverge() throws Exception {
    List<String> messages =
        ranks(
            2,
            16,
            c -> {
              CollectiveException e =
                  assertThrows(
                      CollectiveException.class,
                      () -> {
                        if (c.rank() == 0) {
                          c.allReduceSum(new float[10], 0, 10);
                        } else {
                          c.allReduceSum(new float[11], 0, 11);
                        }
                      });
              return e.getMessage();
            });
    for (String message : messages) {
      assertTrue(message.contains("operation 0 diverged"), message);
      assertTrue(message.contains("allReduceSum of 10 floats"), message);
      assertTrue(message.contains("allReduceSum of 11 floats"), message);
    }
  }

  @Test
  void shouldRefuseAFileOfAnotherGeometryNamingBoth() throws Exception {
    SharedMemoryCollective creator = SharedMemoryCollective.open(file(), 0, 2, 64, LONG);
    try {
      CollectiveException longer =
          assertThrows(
              CollectiveException.class,
              () -> SharedMemoryCollective.open(file(), 1, 2, 128, LONG));
      assertTrue(
          longer
              .getMessage()
              .contains(
                  "holds a collective of 2 ranks of 64 floats (layout version 1), but rank 1"
                      + " opens it as a collective of 2 ranks of 128 floats (layout version 1)"),
          longer.getMessage());
    } finally {
      creator.close();
    }
    // Two geometries of the same file length: the header tells them apart.
    assertEquals(SharedMemoryCollective.fileBytes(2, 16), SharedMemoryCollective.fileBytes(1, 48));
    Path same = dir.resolve("same-length");
    SharedMemoryCollective sameCreator = SharedMemoryCollective.open(same, 0, 2, 16, LONG);
    try {
      CollectiveException e =
          assertThrows(
              CollectiveException.class, () -> SharedMemoryCollective.open(same, 0, 1, 48, LONG));
      assertTrue(
          e.getMessage().contains("holds a collective of 2 ranks of 16 floats"), e.getMessage());
      assertTrue(
          e.getMessage().contains("opens it as a collective of 1 rank of 48 floats"),
          e.getMessage());
    } finally {
      sameCreator.close();
    }
    // A file of the right length that is something else.
    Path other = dir.resolve("other");
    ByteBuffer junk =
        ByteBuffer.allocate((int) SharedMemoryCollective.fileBytes(2, 16))
            .order(ByteOrder.nativeOrder());
    junk.putLong(0, 0x1234_5678_9ABC_DEF0L);
    Files.write(other, junk.array());
    CollectiveException e =
        assertThrows(
            CollectiveException.class, () -> SharedMemoryCollective.open(other, 0, 2, 16, LONG));
    assertTrue(
        e.getMessage().contains("is not a collective file (magic 0x123456789abcdef0)"),
        e.getMessage());
  }

  @Test
  void shouldRefuseARankThatIsAlreadyOpenOrLeftFromAnEarlierReplica() throws Exception {
    SharedMemoryCollective first = SharedMemoryCollective.open(file(), 0, 2, 8, LONG);
    try {
      CollectiveException e =
          assertThrows(
              CollectiveException.class, () -> SharedMemoryCollective.open(file(), 0, 2, 8, LONG));
      assertTrue(e.getMessage().contains("rank 0 is already open"), e.getMessage());
    } finally {
      first.close();
    }
    CollectiveException stale =
        assertThrows(
            CollectiveException.class, () -> SharedMemoryCollective.open(file(), 0, 2, 8, LONG));
    assertTrue(stale.getMessage().contains("rank 0 is already closed"), stale.getMessage());
    assertTrue(SharedMemoryCollective.remove(file()));
    assertFalse(SharedMemoryCollective.remove(file()));
    SharedMemoryCollective.open(file(), 0, 2, 8, LONG).close();
  }

  @Test
  void shouldKeepExchangingAfterTheFileIsRemoved() throws Exception {
    List<float[]> results =
        ranks(
            2,
            4,
            c -> {
              c.barrier();
              if (c.rank() == 0) {
                try {
                  SharedMemoryCollective.remove(c.file());
                } catch (IOException e) {
                  throw new AssertionError(e);
                }
              }
              c.barrier();
              float[] data = {c.rank() + 1, 10, 0.5f, 1e8f, 3, 4, 5, 6, 7};
              c.allReduceSum(data, 0, data.length);
              return data;
            });
    assertFalse(Files.exists(file()));
    float[] expected = {3, 20, 1, 2e8f, 6, 8, 10, 12, 14};
    assertArrayEquals(expected, results.get(0));
    assertArrayEquals(expected, results.get(1));
  }

  @Test
  void shouldRejectBadArgumentsAndStayUsable() throws Exception {
    assertThrows(
        IllegalArgumentException.class, () -> SharedMemoryCollective.open(file(), 2, 2, 8, LONG));
    assertThrows(
        IllegalArgumentException.class, () -> SharedMemoryCollective.open(file(), -1, 2, 8, LONG));
    assertThrows(
        IllegalArgumentException.class, () -> SharedMemoryCollective.open(file(), 0, 0, 8, LONG));
    assertThrows(
        IllegalArgumentException.class, () -> SharedMemoryCollective.open(file(), 0, 2, 0, LONG));
    assertThrows(
        IllegalArgumentException.class,
        () -> SharedMemoryCollective.open(file(), 0, 2, 8, Duration.ZERO));
    assertFalse(Files.exists(file()), "a refused open must not create the file");
    List<float[]> results =
        ranks(
            2,
            8,
            c -> {
              float[] data = new float[10];
              assertThrows(IllegalArgumentException.class, () -> c.allReduceSum(data, 5, 6));
              assertThrows(IllegalArgumentException.class, () -> c.allReduceSum(data, -1, 2));
              assertThrows(IllegalArgumentException.class, () -> c.allReduceSum(data, 0, -1));
              float[] local = new float[3];
              assertThrows(
                  IllegalArgumentException.class,
                  () -> c.allGather(local, new int[] {3}, new float[9]));
              assertThrows(
                  IllegalArgumentException.class,
                  () -> c.allGather(local, new int[] {3, -1}, new float[9]));
              int[] tooMany = c.rank() == 0 ? new int[] {4, 1} : new int[] {1, 4};
              assertThrows(
                  IllegalArgumentException.class, () -> c.allGather(local, tooMany, new float[9]));
              assertThrows(
                  IllegalArgumentException.class,
                  () -> c.allGather(local, new int[] {3, 3}, new float[5]));
              assertThrows(
                  IllegalArgumentException.class,
                  () -> c.allGather(local, new int[] {1, 1}, local));
              // Nothing was published: both ranks still meet at operation 0.
              float[] gathered = new float[6];
              float[] mine = {c.rank(), c.rank() + 0.5f, -(float) c.rank()};
              c.allGather(mine, new int[] {3, 3}, gathered);
              return gathered;
            });
    float[] expected = {0, 0.5f, -0f, 1, 1.5f, -1};
    assertArrayEquals(bits(expected), bits(results.get(0)));
    assertArrayEquals(bits(expected), bits(results.get(1)));
  }

  @ParameterizedTest(name = "{0} ranks as threads")
  @CsvSource({"2, 20000", "4, 2000"})
  void shouldLogTheLatencyOfASmallAllReduce(int size, int calls) throws Exception {
    int floats = 16;
    float total = size * (size + 1) / 2f;
    List<Long> nanos =
        ranks(
            size,
            floats,
            c -> {
              float[] data = new float[floats];
              long start = 0;
              for (int i = -calls / 2; i < calls; i++) {
                if (i == 0) {
                  start = System.nanoTime();
                }
                Arrays.fill(data, c.rank() + 1);
                c.allReduceSum(data, 0, floats);
                if (data[0] != total || data[floats - 1] != total) {
                  throw new AssertionError("call " + i + " gave " + data[0]);
                }
              }
              return System.nanoTime() - start;
            });
    long worst = nanos.stream().mapToLong(Long::longValue).max().orElseThrow();
    System.out.printf(
        "SharedMemoryCollective: allReduceSum of %d floats, %d ranks as threads on %d cores:"
            + " %.2f us per call (%d calls)%n",
        floats, size, Runtime.getRuntime().availableProcessors(), worst / 1e3 / calls, calls);
    assertEquals(size, nanos.size());
  }

  private static int[] bits(float[] values) {
    int[] bits = new int[values.length];
    for (int i = 0; i < values.length; i++) {
      bits[i] = Float.floatToRawIntBits(values[i]);
    }
    return bits;
  }
}
