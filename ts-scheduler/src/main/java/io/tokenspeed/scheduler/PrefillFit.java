package io.tokenspeed.scheduler;

import java.util.List;
import java.util.Objects;

/**
 * The prefill rate of the engine's forward pass, fitted to measured forward times: {@code ns =
 * forwardNs + tokenNs × N + pairNs × Q} for a forward computing {@code N} tokens with {@code Q}
 * attention pairs ({@link io.tokenspeed.core.storage.CostFigures}). Prefill grows superlinearly
 * with the context, and the pair term is what carries that: a chunk of {@code k} tokens at position
 * {@code s} has {@code k·s + k(k+1)/2} pairs under full-history attention, fewer under sliding
 * windows and none in recurrent layers ({@link AttentionPairs}, the same count the cost model
 * extrapolates with).
 *
 * <p>An exponentially weighted least-squares fit: every observation decays the earlier ones by
 * {@link #DECAY}, so the fit follows a machine whose speed changes (another process, a clock, a
 * different batch mix) over a few dozen forwards. The three coefficients are kept non-negative by
 * solving every subset of them and keeping the feasible one of least residual (a non-negative least
 * squares of three unknowns, exactly); a tiny ridge keeps a subset solvable when its features are
 * collinear (every chunk the same size). Only forwards that compute prompt tokens are observed:
 * decode rounds, many more of them, would otherwise decide the fit the prefill estimate is for.
 *
 * <p>The fixed cost per forward is fitted only once the forwards seen differ in size by at least
 * {@link #CONSTANT_SPAN} times in their token counts. Before that, a forward's time is explained by
 * its tokens and pairs alone: from forwards of one size the constant and the per-token cost cannot
 * be told apart, and a fit that puts the time into the constant predicts that a long prompt costs
 * what a short forward did, which would send a restore that is many times faster than recomputing
 * to recomputation (it did, on a fresh engine's first forwards of a small model). Without the
 * constant, recomputing is expected to grow with the prompt, the conservative reading for the cost
 * model (a restore stays the default until the store is measured to be slower).
 *
 * <p>Used by the TP leader's engine on its loop thread; the scheduler reads only the coefficients,
 * agreed as {@link io.tokenspeed.core.storage.CostFigures}.
 */
public final class PrefillFit {

  /** The weight an observation keeps per later observation: about 30 forwards of memory. */
  public static final double DECAY = 0.97;

  /** Features are scaled to keep the normal equations near unit size: tokens/1e3, pairs/1e6. */
  private static final double TOKEN_SCALE = 1e3;

  private static final double PAIR_SCALE = 1e6;

  /** Nanoseconds per scaled unit of the target: milliseconds. */
  private static final double NS_SCALE = 1e6;

  private static final double RIDGE = 1e-9;

  /** How many times the largest forward's tokens must exceed the smallest's to fit the constant. */
  public static final double CONSTANT_SPAN = 2;

  private final AttentionPairs attention;

  /** A fit over full-history attention pairs. */
  public PrefillFit() {
    this(AttentionPairs.FULL);
  }

  /** A fit whose pairs are counted by {@code attention} (the model's cache groups). */
  public PrefillFit(AttentionPairs attention) {
    this.attention = Objects.requireNonNull(attention, "attention");
  }

  /** The fewest and most tokens of an observed forward. */
  private double minTokens = Double.POSITIVE_INFINITY;

  private double maxTokens;

  private final double[][] xtx = new double[3][3];
  private final double[] xty = new double[3];
  private double yty;
  private long samples;

  /**
   * Observes one forward of {@code items} that took {@code ns}; a forward without prompt tokens
   * (only decodes) or that took no time is left out. Returns whether it was observed.
   */
  public boolean observe(List<ExecutionPlan.ForwardItem> items, long ns) {
    long tokens = 0;
    double pairs = 0;
    boolean prefill = false;
    for (ExecutionPlan.ForwardItem f : items) {
      long k = f.numTokens();
      long s = f.startToken();
      tokens += k;
      pairs += attention.between(s, s + k);
      prefill |= !f.decode();
    }
    if (!prefill || ns <= 0) {
      return false;
    }
    observe(tokens, pairs, ns);
    return true;
  }

  /** Observes a forward of {@code tokens} tokens and {@code pairs} attention pairs that took ns. */
  public void observe(double tokens, double pairs, double ns) {
    minTokens = Math.min(minTokens, tokens);
    maxTokens = Math.max(maxTokens, tokens);
    double[] x = {1, tokens / TOKEN_SCALE, pairs / PAIR_SCALE};
    double y = ns / NS_SCALE;
    for (int i = 0; i < 3; i++) {
      for (int j = 0; j < 3; j++) {
        xtx[i][j] = DECAY * xtx[i][j] + x[i] * x[j];
      }
      xty[i] = DECAY * xty[i] + x[i] * y;
    }
    yty = DECAY * yty + y * y;
    samples++;
  }

  /** Forwards observed so far. */
  public long samples() {
    return samples;
  }

  /**
   * The fitted {@code {forwardNs, tokenNs, pairNs}}, each non-negative; zeros before the first
   * observation; {@code forwardNs} 0 until the forwards' sizes span {@link #CONSTANT_SPAN}.
   */
  public double[] coefficients() {
    double[] best = new double[3];
    if (samples == 0) {
      return best;
    }
    double bestSse = yty; // the empty subset: every coefficient 0
    // subsets from the fullest down: a later one replaces an earlier only when clearly better;
    // those with the constant (bit 0b100) only once the forwards' sizes tell it apart
    boolean constant = maxTokens >= CONSTANT_SPAN * minTokens;
    int[] order = {0b111, 0b110, 0b101, 0b011, 0b100, 0b010, 0b001};
    for (int mask : order) {
      if (!constant && (mask & 0b100) != 0) {
        continue;
      }
      double[] beta = solve(mask);
      if (beta == null) {
        continue;
      }
      double sse = sse(beta);
      if (sse < bestSse - 1e-12 * Math.max(1, Math.abs(bestSse))) {
        bestSse = sse;
        best = beta;
      }
    }
    return new double[] {
      best[0] * NS_SCALE, best[1] * NS_SCALE / TOKEN_SCALE, best[2] * NS_SCALE / PAIR_SCALE
    };
  }

  /** The least-squares coefficients over the features in {@code mask}, or null if any is < 0. */
  private double[] solve(int mask) {
    int[] idx = new int[3];
    int m = 0;
    for (int i = 0; i < 3; i++) {
      if ((mask & (1 << (2 - i))) != 0) {
        idx[m++] = i;
      }
    }
    double[][] a = new double[m][m + 1];
    double trace = 0;
    for (int i = 0; i < m; i++) {
      trace += xtx[idx[i]][idx[i]];
    }
    for (int i = 0; i < m; i++) {
      for (int j = 0; j < m; j++) {
        a[i][j] = xtx[idx[i]][idx[j]];
      }
      a[i][i] += RIDGE * Math.max(trace, 1e-30);
      a[i][m] = xty[idx[i]];
    }
    // Gaussian elimination with partial pivoting
    for (int c = 0; c < m; c++) {
      int p = c;
      for (int r = c + 1; r < m; r++) {
        if (Math.abs(a[r][c]) > Math.abs(a[p][c])) {
          p = r;
        }
      }
      double[] t = a[c];
      a[c] = a[p];
      a[p] = t;
      if (a[c][c] == 0) {
        return null;
      }
      for (int r = c + 1; r < m; r++) {
        double f = a[r][c] / a[c][c];
        for (int k = c; k <= m; k++) {
          a[r][k] -= f * a[c][k];
        }
      }
    }
    double[] sol = new double[m];
    for (int r = m - 1; r >= 0; r--) {
      double v = a[r][m];
      for (int k = r + 1; k < m; k++) {
        v -= a[r][k] * sol[k];
      }
      sol[r] = v / a[r][r];
    }
    double[] beta = new double[3];
    for (int i = 0; i < m; i++) {
      if (!(sol[i] >= 0) || Double.isInfinite(sol[i])) {
        return null;
      }
      beta[idx[i]] = sol[i];
    }
    return beta;
  }

  /** The weighted residual sum of squares of {@code beta}. */
  private double sse(double[] beta) {
    double s = yty;
    for (int i = 0; i < 3; i++) {
      s -= 2 * beta[i] * xty[i];
      for (int j = 0; j < 3; j++) {
        s += beta[i] * xtx[i][j] * beta[j];
      }
    }
    return s;
  }
}
