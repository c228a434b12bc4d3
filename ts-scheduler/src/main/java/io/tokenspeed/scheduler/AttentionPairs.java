package io.tokenspeed.scheduler;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;

/**
 * The attention work of computing tokens {@code [from, to)} of a request, in (query, key) pairs, as
 * the model's cache groups do it: a full-history layer attends token {@code p} to {@code p + 1}
 * keys, a sliding window of {@code W} to {@code min(p + 1, W)}, a state (recurrent) layer to none.
 * The groups' pairs are weighted by their K and V bytes per token (the layers and KV heads each
 * pair reads) and normalized by the sum over the attention groups, so that a model of full-history
 * groups alone counts exactly {@code Σ (p + 1)} and its prefill fit is what it was without this.
 *
 * <pre>
 *   model                    pairs of one token at position p
 *   Llama (full)             p + 1
 *   Gemma 3 (3 full, 15 SWA) 3/18 · (p + 1) + 15/18 · min(p + 1, W)    (equal bytes per layer)
 *   Jamba (full + state)     p + 1                                     (the state group: no pairs)
 *   Mamba (state alone)      0: the prefill is linear in its tokens
 * </pre>
 *
 * <p>Why: {@link PrefillFit} fits a forward's time to its tokens and its pairs, and {@link
 * CostModel} extrapolates that fit to the whole prompt. Counted as full-history pairs, the forwards
 * of short prompts on a windowed model (every position within the window) teach the fit that each
 * later position costs ever more keys, and it predicts a long prefill more than twice too slow
 * (AttentionPairsTest: 3 full-history and 15 windowed layers, prompts of up to 1,024 tokens, an
 * 8,192-token prefill). Where every position sits beyond the window the two counts differ by a
 * multiple of the tokens and fit alike; a recurrent model's forwards fit a pair term of zero either
 * way, but its prediction then has no quadratic term to misfit at all.
 */
public final class AttentionPairs {

  /** Full-history attention alone: {@code Σ (p + 1)}. */
  public static final AttentionPairs FULL = new AttentionPairs(new double[] {1}, new int[] {0});

  /** Per attention group: its share of the pairs' work, summing to 1. */
  private final double[] weights;

  /** Per attention group: its window in tokens, 0 for full history. */
  private final int[] windows;

  private AttentionPairs(double[] weights, int[] windows) {
    this.weights = weights;
    this.windows = windows;
  }

  /** The pairs of {@code layout}'s attention groups (full-history and sliding-window ones). */
  public static AttentionPairs of(CacheLayout layout) {
    int n = 0;
    for (CacheGroupSpec g : layout.groups()) {
      n += g.kind() instanceof GroupKind.StateCheckpoints ? 0 : 1;
    }
    double[] weights = new double[n];
    int[] windows = new int[n];
    double total = 0;
    int i = 0;
    for (CacheGroupSpec g : layout.groups()) {
      switch (g.kind()) {
        case GroupKind.StateCheckpoints s -> {
          continue;
        }
        case GroupKind.SlidingWindow(int w) -> windows[i] = w;
        case GroupKind.FullHistory f -> windows[i] = 0;
      }
      weights[i] = (double) g.bytesPerBlock() / g.blockGranularity();
      total += weights[i];
      i++;
    }
    for (int k = 0; k < n; k++) {
      weights[k] /= total;
    }
    return n == 1 && windows[0] == 0 ? FULL : new AttentionPairs(weights, windows);
  }

  /** The weighted pairs of computing tokens {@code [from, to)}; 0 when {@code to <= from}. */
  public double between(long from, long to) {
    if (to <= from) {
      return 0;
    }
    double pairs = 0;
    for (int g = 0; g < weights.length; g++) {
      pairs += weights[g] * (windows[g] == 0 ? full(from, to) : window(from, to, windows[g]));
    }
    return pairs;
  }

  /** {@code Σ_{p=from}^{to-1} (p + 1)}. */
  private static double full(long from, long to) {
    return ((double) to * (to + 1) - (double) from * (from + 1)) / 2;
  }

  /** {@code Σ_{p=from}^{to-1} min(p + 1, w)}: full below position w - 1, w keys from there. */
  private static double window(long from, long to, int w) {
    long split = Math.clamp(w, from, to); // positions below split attend to p + 1 <= w keys
    return full(from, split) + (double) w * (to - split);
  }
}
