package io.tokenspeed.server.cli;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * The workload of {@code bench route} (and of its integration test): {@code groups} groups of
 * prompts, each group sharing a prefix of {@code prefixTokens} token ids, each prompt ending in
 * {@code suffixTokens} ids of its own, {@code perGroup} prompts a group, in a random order.
 *
 * <pre>
 *   prompt = [ the group's prefix (prefixTokens) | its own suffix (suffixTokens) ]
 *   order  = a seeded shuffle of the groups' prompts: g3 g0 g3 g7 g1 g0 ...
 * </pre>
 *
 * <p>The order comes from {@code orderSeed} and the ids from a content seed given per run: runs of
 * one workload send their groups in the same order with other ids, so that one routing's run reuses
 * nothing another run left in a cache or the store, and the runs compare like for like.
 *
 * @param groups how many groups (prefixes)
 * @param perGroup prompts per group
 * @param prefixTokens the shared prefix's length
 * @param suffixTokens each prompt's own tail
 * @param vocab ids are drawn from [0, vocab)
 * @param orderSeed the order's seed
 */
record RouteWorkload(
    int groups, int perGroup, int prefixTokens, int suffixTokens, int vocab, long orderSeed) {

  RouteWorkload {
    if (groups < 1 || perGroup < 1 || prefixTokens < 0 || suffixTokens < 1 || vocab < 2) {
      throw new IllegalArgumentException(
          "groups="
              + groups
              + ", perGroup="
              + perGroup
              + ", prefixTokens="
              + prefixTokens
              + ", suffixTokens="
              + suffixTokens
              + ", vocab="
              + vocab
              + ": groups, prompts per group and suffix at least 1, prefix at least 0, vocab 2");
    }
  }

  /** One prompt: its group and its token ids. */
  record Prompt(int group, int[] ids) {}

  /** The prompts of a run whose ids come from {@code contentSeed}, in the workload's order. */
  List<Prompt> prompts(long contentSeed) {
    SplittableRandom content = new SplittableRandom(contentSeed);
    int[][] prefixes = new int[groups][prefixTokens];
    for (int[] p : prefixes) {
      for (int i = 0; i < p.length; i++) {
        p[i] = content.nextInt(vocab);
      }
    }
    int[] order = order();
    List<Prompt> out = new ArrayList<>(order.length);
    for (int g : order) {
      int[] ids = new int[prefixTokens + suffixTokens];
      System.arraycopy(prefixes[g], 0, ids, 0, prefixTokens);
      for (int i = prefixTokens; i < ids.length; i++) {
        ids[i] = content.nextInt(vocab);
      }
      out.add(new Prompt(g, ids));
    }
    return out;
  }

  /** The groups in arrival order: each group {@code perGroup} times, shuffled. */
  int[] order() {
    int[] order = new int[groups * perGroup];
    for (int i = 0; i < order.length; i++) {
      order[i] = i % groups;
    }
    SplittableRandom r = new SplittableRandom(orderSeed);
    for (int i = order.length - 1; i > 0; i--) {
      int j = r.nextInt(i + 1);
      int t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    return order;
  }
}
