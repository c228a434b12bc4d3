package io.tokenspeed.model.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.PagedRunner;
import io.tokenspeed.model.kernel.ComputePool;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The sharded forward pass against the single-rank one, on the Hugging Face fixtures of every
 * architecture: TP = 2 and 4 ranks as threads, each holding its share of the heads, MLP columns and
 * vocabulary, joined by a collective. A chunked prefill and greedy decode steps must give the same
 * ids as TP = 1, logits within 1e-4 of it (the ranks' partial sums are added in another order), and
 * every rank the same logits bit for bit (each samples from its own copy).
 */
class TensorParallelForwardTest {
  private static final int BLOCK_TOKENS = 16;
  private static final int STEPS = 8;

  /** What one rank computed: every logit of the prefill and of each decode step, and the ids. */
  private record Run(List<float[]> logits, int[] ids) {}

  @ParameterizedTest(name = "{0} TP={1}")
  @CsvSource({
    "llama, 2",
    "llama, 4",
    "qwen2, 2",
    "qwen2, 4",
    "gemma3, 2",
    "gemma3, 4",
    "jamba, 2",
    "jamba, 4",
    "mamba, 2",
    "mamba, 4"
  })
  void shouldMatchTheSingleRankForward(String fixture, int tp) throws Exception {
    compareWithSingleRank(fixture, tp, Shard.KvSplit.HEADS);
  }

  /**
   * The KV split by pages: every rank holds every head, the full-history groups are page-cyclic
   * over the ranks, and a rank's block tables name only the pages it owns (virtual block v on rank
   * (v−1) mod T; the others' entries are 0). The ranks attend over their own pages and combine the
   * partial results with their log-sum-exps: the same ids as TP = 1, logits within 1e-4, every rank
   * the same bits.
   */
  @ParameterizedTest(name = "{0} TP={1} pages")
  @CsvSource({"llama, 2", "llama, 4", "qwen2, 2", "qwen2, 4", "gemma3, 2", "jamba, 2"})
  void shouldMatchTheSingleRankForwardWithTheKvSplitByPages(String fixture, int tp)
      throws Exception {
    compareWithSingleRank(fixture, tp, Shard.KvSplit.PAGES);
  }

  /** A page-cyclic layout at TP > 1 only: one rank keeps its groups as they are. */
  @ParameterizedTest(name = "{0} TP={1}")
  @CsvSource({"llama, 1, head_partitioned", "llama, 2, page_cyclic", "gemma3, 2, replicated"})
  void shouldMakeFullHistoryGroupsPageCyclicWhenTheKvIsSplitByPages(
      String fixture, int tp, String firstFullOrSliding) throws Exception {
    LocalCollective[] ranks = LocalCollective.group(tp);
    try (CausalLm model =
        CausalLm.load(
            Fixtures.folder(fixture),
            fixture,
            ModelIdentity.DEFAULT_WEIGHT_VERSION,
            ranks[0],
            Shard.KvSplit.PAGES)) {
      var layout = model.cacheLayout(64, 16);
      assertEquals(firstFullOrSliding, layout.group(0).sharding().wireName());
      for (var g : layout.groups()) {
        if (g.kind() instanceof io.tokenspeed.core.GroupKind.FullHistory && tp > 1) {
          assertEquals(new io.tokenspeed.core.Sharding.PageCyclic(tp), g.sharding());
        }
      }
    }
  }

  private static void compareWithSingleRank(String fixture, int tp, Shard.KvSplit split)
      throws Exception {
    Path folder = Fixtures.folder(fixture);
    int[] prompt = new SplittableRandom(fixture.hashCode()).ints(37, 0, 512).toArray();
    Run want;
    try (CausalLm model = CausalLm.load(folder);
        ComputePool pool = ComputePool.ofThreads(1)) {
      want = run(model, prompt, pool);
    }
    LocalCollective[] ranks = LocalCollective.group(tp);
    ExecutorService threads = Executors.newFixedThreadPool(tp);
    try {
      List<Future<Run>> futures = new ArrayList<>();
      for (LocalCollective rank : ranks) {
        futures.add(
            threads.submit(
                () -> {
                  try (CausalLm model =
                          CausalLm.load(
                              folder, fixture, ModelIdentity.DEFAULT_WEIGHT_VERSION, rank, split);
                      ComputePool pool = ComputePool.ofThreads(1)) {
                    return run(model, prompt, pool);
                  }
                }));
      }
      List<Run> got = new ArrayList<>();
      for (Future<Run> f : futures) {
        got.add(f.get(2, TimeUnit.MINUTES));
      }
      double maxDelta = 0;
      for (int r = 0; r < tp; r++) {
        Run run = got.get(r);
        assertArrayEquals(want.ids(), run.ids(), "rank " + r + " greedy ids vs TP=1");
        for (int i = 0; i < want.logits().size(); i++) {
          float[] a = want.logits().get(i);
          float[] b = run.logits().get(i);
          assertEquals(a.length, b.length);
          for (int j = 0; j < a.length; j++) {
            maxDelta = Math.max(maxDelta, Math.abs(a[j] - b[j]));
          }
          assertArrayEquals(
              got.get(0).logits().get(i), b, "rank " + r + " vs rank 0, forward " + i);
        }
      }
      System.out.printf(
          "%s TP=%d KV by %s: max |dlogit| vs TP=1 %.3g%n", fixture, tp, split.label(), maxDelta);
      assertTrue(maxDelta <= 1e-4, fixture + " TP=" + tp + " max |dlogit|=" + maxDelta);
    } finally {
      threads.shutdownNow();
    }
  }

  /** Prefill in chunks of 16 (every position's logits), then greedy decode steps. */
  private static Run run(CausalLm model, int[] prompt, ComputePool pool) {
    List<float[]> logits = new ArrayList<>();
    int[] ids = new int[STEPS];
    try (PagedRunner runner = new PagedRunner(model, BLOCK_TOKENS, 64, 3)) {
      int[][] table = ownedPages(model, runner.table(runner.rowsFor(prompt.length + STEPS)));
      float[] all = runner.prefill(prompt, table, 16, pool);
      logits.add(all);
      int vocab = model.vocabSize();
      float[] last = java.util.Arrays.copyOfRange(all, all.length - vocab, all.length);
      for (int s = 0; s < STEPS; s++) {
        ids[s] = PagedRunner.argmax(last);
        last = runner.decode(ids[s], prompt.length + s, table, pool);
        logits.add(last);
      }
    }
    return new Run(logits, ids);
  }

  /**
   * {@code tables} as this rank sees them: in a page-cyclic group of D owners, the entries of
   * virtual blocks owned by another rank ((v−1) mod D ≠ rank) become 0.
   */
  private static int[][] ownedPages(CausalLm model, int[][] tables) {
    var layout = model.cacheLayout(BLOCK_TOKENS * 4, BLOCK_TOKENS);
    int rank = model.collective().rank();
    int[][] out = new int[tables.length][];
    for (int g = 0; g < tables.length; g++) {
      out[g] = tables[g].clone();
      if (layout.group(g).sharding() instanceof io.tokenspeed.core.Sharding.PageCyclic pc) {
        for (int i = 0; i < out[g].length; i++) {
          if (out[g][i] != 0 && pc.ownerOf(out[g][i]) != rank) {
            out[g][i] = 0;
          }
        }
      }
    }
    return out;
  }

  @ParameterizedTest(name = "{0} TP={1}")
  @CsvSource({"llama, 3, num_attention_heads=4", "gemma3, 8, num_attention_heads=4"})
  void shouldRefuseASizeThatDoesNotSplitTheModel(String fixture, int tp, String named) {
    LocalCollective[] ranks = LocalCollective.group(tp);
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                CausalLm.load(
                    Fixtures.folder(fixture),
                    fixture,
                    ModelIdentity.DEFAULT_WEIGHT_VERSION,
                    ranks[0]));
    assertTrue(e.getMessage().contains(named), e.getMessage());
  }
}
