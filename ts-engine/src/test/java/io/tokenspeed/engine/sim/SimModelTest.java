package io.tokenspeed.engine.sim;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.device.DeviceBytes;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.LocalCollective;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The sim model over hand-built block tables: it generates its reference tokens over a correct
 * cache, prefix reuse included, at TP 1–4, and one wrong KV byte changes the next token.
 */
class SimModelTest {

  private static final int VOCAB = 1021;
  private static final int PAGE_TOKENS = 16;
  private static final int BLOCK_TOKENS = 4;
  private static final int BLOCKS_PER_GROUP = 256;

  /** One rank's cache: the model's pools over its own allocation, blocks handed out in order. */
  private static final class Rank {
    final SimModel model;
    final CacheLayout layout;
    final DeviceBytes kv;
    final int[] nextBlock;

    Rank(SimModel model) {
      this.model = model;
      this.layout = model.cacheLayout(PAGE_TOKENS, BLOCK_TOKENS);
      int groups = layout.numGroups();
      int[] poolBlocks = new int[groups];
      Arrays.fill(poolBlocks, 1 + groups * BLOCKS_PER_GROUP);
      long bpb = layout.group(0).bytesPerBlock();
      this.kv = model.allocate(layout, bpb, groups * BLOCKS_PER_GROUP * bpb, poolBlocks);
      this.nextBlock = new int[groups];
      for (int g = 0; g < groups; g++) {
        nextBlock[g] = 1 + g * BLOCKS_PER_GROUP; // the groups' blocks never share bytes
      }
    }

    /** {@code tables} extended with new blocks to cover {@code numTokens} tokens. */
    int[][] cover(int[][] tables, int numTokens) {
      int[][] out = new int[tables.length][];
      for (int g = 0; g < tables.length; g++) {
        int rows = layout.group(g).rowsFor(numTokens);
        out[g] = Arrays.copyOf(tables[g], Math.max(rows, tables[g].length));
        for (int r = tables[g].length; r < rows; r++) {
          out[g][r] = nextBlock[g]++;
        }
      }
      return out;
    }

    /** Runs one request's chunk; returns the argmax of its last logits row. */
    int step(int[] tokens, int start, int[][] tables, boolean allLogits) {
      ForwardResult result =
          model.forward(ForwardBatch.of(new ForwardRequest(tokens, start, tables, allLogits)), kv);
      return argmax(result.last(0));
    }

    /** Flips byte {@code at} of the row of {@code position} in group {@code g}. */
    void flip(int[][] tables, int g, int position, int at, int xor) {
      int block = tables[g][position / BLOCK_TOKENS];
      long offset =
          (long) (block - 1) * layout.group(g).bytesPerBlock()
              + model.wordOffset(BLOCK_TOKENS, position % BLOCK_TOKENS, at / Long.BYTES)
              + at % Long.BYTES;
      try (Arena a = Arena.ofConfined()) {
        MemorySegment one = a.allocate(1);
        kv.copyToHost(offset, one);
        one.set(ValueLayout.JAVA_BYTE, 0, (byte) (one.get(ValueLayout.JAVA_BYTE, 0) ^ xor));
        kv.copyFromHost(one, offset);
      }
    }
  }

  private static int argmax(float[] row) {
    int best = 0;
    for (int i = 1; i < row.length; i++) {
      if (row[i] > row[best]) {
        best = i;
      }
    }
    return best;
  }

  private static int[] prompt(SplittableRandom rnd, int length) {
    int[] p = new int[length];
    for (int i = 0; i < length; i++) {
      p[i] = rnd.nextInt(VOCAB);
    }
    return p;
  }

  /**
   * Generates {@code numTokens} after {@code prompt} on {@code k}: prefill in seeded chunks from
   * {@code start} (whose KV the tables already hold), then greedy decode steps.
   */
  private static int[] generate(
      Rank k, int[] prompt, int start, int[][] tables, int numTokens, long seed) {
    SplittableRandom chunks = new SplittableRandom(seed);
    int[] out = new int[numTokens];
    int next = -1;
    for (int at = start; at < prompt.length; ) {
      int n = Math.min(prompt.length - at, 1 + chunks.nextInt(2 * PAGE_TOKENS));
      tables = k.cover(tables, at + n);
      next = k.step(Arrays.copyOfRange(prompt, at, at + n), at, tables, chunks.nextBoolean());
      at += n;
    }
    for (int i = 0; i < numTokens; i++) {
      out[i] = next;
      int position = prompt.length + i;
      tables = k.cover(tables, position + 1);
      next = k.step(new int[] {next}, position, tables, false);
    }
    return out;
  }

  static Stream<Arguments> replicas() {
    return Stream.of(1, 2, 3, 4)
        .flatMap(tp -> Stream.of(0, 1, 6).map(window -> Arguments.of(tp, window)));
  }

  /** Runs {@code body} on every rank of a replica of {@code tp} ranks; returns rank 0's answer. */
  private static int[] onEveryRank(int tp, int window, long seed, RankBody body) throws Exception {
    Collective[] collectives = tp == 1 ? new Collective[] {Collective.single()} : group(tp);
    ExecutorService threads = Executors.newFixedThreadPool(tp);
    try {
      List<Future<int[]>> futures = new ArrayList<>();
      for (int r = 0; r < tp; r++) {
        SimModel model = new SimModel(VOCAB, 2, window, seed, collectives[r]);
        futures.add(threads.submit(() -> body.run(new Rank(model))));
      }
      int[] first = futures.getFirst().get(60, TimeUnit.SECONDS);
      for (Future<int[]> f : futures) {
        assertArrayEquals(first, f.get(60, TimeUnit.SECONDS), "every rank samples the same");
      }
      return first;
    } finally {
      threads.shutdownNow();
    }
  }

  private static Collective[] group(int tp) {
    return LocalCollective.group(tp);
  }

  /** The reference tokens of a replica of {@code tp} ranks. */
  private static int[] reference(int tp, int window, long seed, int[] prompt, int numTokens) {
    return new SimModel(VOCAB, 2, window, seed, group(tp)[0]).reference(prompt, numTokens);
  }

  @FunctionalInterface
  private interface RankBody {
    int[] run(Rank k) throws Exception;
  }

  @ParameterizedTest(name = "tp={0} window={1}")
  @MethodSource("replicas")
  void shouldGenerateTheReferenceTokensWhenTheCacheIsCorrect(int tp, int window) throws Exception {
    for (long seed = 1; seed <= 5; seed++) {
      SplittableRandom rnd = new SplittableRandom(seed * 97 + tp * 13 + window);
      int[] prompt = prompt(rnd, 1 + rnd.nextInt(60));
      int[] reference = reference(tp, window, seed, prompt, 24);
      long chunking = seed;
      int[] generated =
          onEveryRank(
              tp,
              window,
              seed,
              k -> generate(k, prompt, 0, new int[k.layout.numGroups()][0], 24, chunking));
      assertArrayEquals(reference, generated, "seed " + seed);
    }
  }

  @ParameterizedTest(name = "tp={0} window={1}")
  @MethodSource("replicas")
  void shouldGenerateTheReferenceTokensWhenASecondRequestReusesTheFirstOnesPages(int tp, int window)
      throws Exception {
    long seed = 11;
    SplittableRandom rnd = new SplittableRandom(seed + tp * 7 + window);
    int[] first = prompt(rnd, 2 * PAGE_TOKENS + 5);
    int[] second = Arrays.copyOf(first, 2 * PAGE_TOKENS + 9);
    for (int i = 2 * PAGE_TOKENS; i < second.length; i++) {
      second[i] = rnd.nextInt(VOCAB);
    }
    int[] reference = reference(tp, window, seed, second, 16);
    int[] generated =
        onEveryRank(
            tp,
            window,
            seed,
            k -> {
              int[][] tables = k.cover(new int[k.layout.numGroups()][0], first.length);
              generate(k, first, 0, tables, 4, 1);
              // The second request's first two pages are the first one's blocks: a cache hit.
              int[][] shared = new int[tables.length][];
              for (int g = 0; g < tables.length; g++) {
                shared[g] = Arrays.copyOf(tables[g], 2 * PAGE_TOKENS / BLOCK_TOKENS);
              }
              return generate(k, second, 2 * PAGE_TOKENS, shared, 16, 2);
            });
    assertArrayEquals(reference, generated);
  }

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 300);
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldChangeTheNextTokenWhenOneKvByteIsWrong(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    int tp = 1 + (int) (seed % 3);
    int window = seed % 2 == 0 ? 0 : 2 + rnd.nextInt(8);
    int[] prompt = prompt(rnd, 2 + rnd.nextInt(50));
    int[] reference = reference(tp, window, seed, prompt, 2);
    int wrongRank = rnd.nextInt(tp);
    int g = window == 0 ? 0 : rnd.nextInt(2);
    int n = prompt.length;
    int lowest = g == 0 ? 0 : Math.max(0, n - window + 1);
    int position = lowest + rnd.nextInt(n - lowest); // a row the next step reads
    int at = rnd.nextInt(2 * Long.BYTES);
    int xor = 1 + rnd.nextInt(255);
    int[] generated =
        onEveryRank(
            tp,
            window,
            seed,
            k -> {
              int[][] tables = k.cover(new int[k.layout.numGroups()][0], n + 1);
              int first = k.step(prompt, 0, tables, false);
              assertEquals(reference[0], first);
              if (k.model.shard().rank() == wrongRank) {
                k.flip(tables, g, position, at, xor);
              }
              return new int[] {k.step(new int[] {first}, n, tables, false)};
            });
    assertNotEquals(
        reference[1],
        generated[0],
        "group " + g + " position " + position + " byte " + at + " of rank " + wrongRank);
  }

  @ParameterizedTest(name = "window={0}")
  @ValueSource(ints = {0, 1, 6})
  void shouldRefuseAHoleWhereTheStepReadsOrWritesARow(int window) {
    Rank k = new Rank(new SimModel(VOCAB, 1, window, 3));
    int[][] tables = k.cover(new int[k.layout.numGroups()][0], 8);
    tables[0][0] = 0;
    assertThrows(IllegalStateException.class, () -> k.step(new int[] {5}, 4, tables, false));
  }
}
