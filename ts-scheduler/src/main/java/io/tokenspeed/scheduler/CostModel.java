package io.tokenspeed.scheduler;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.storage.CostFigures;

/**
 * Whether restoring a request's prefix from L3 is expected to beat recomputing it, and up to which
 * boundary (issue 40, "Know when restoring loses"). It decides with the replica's agreed {@link
 * CostFigures} only, in the scheduler's single thread, so every rank of a replica makes the same
 * decision in the same round; it reads no clock and no metric.
 *
 * <h2>The two paths of a request</h2>
 *
 * <pre>
 *   tokens   0 ........ local ................ B ..................... n   (n: prompt length)
 *            [ Device / Host hit ][ restored from L3 ][  computed          ]
 *
 *   restore to B:   (2·latency + bytes(local, B) / bandwidth) × (1 + margin)  +  prefill(B, n)
 *   recompute:                                                                   prefill(local, n)
 *
 *   prefill(x, n) = forwardNs · ceil((n - x) / token_budget)
 *                 + tokenNs   · (n - x)
 *                 + pairNs    · pairs(x, n)                  attention pairs of tokens x..n-1
 *
 *   pairs(x, n): (n(n+1) - x(x+1)) / 2 for full-history attention; sliding windows and state
 *   groups count fewer ({@link AttentionPairs})
 * </pre>
 *
 * <p>A restore is a QUERY then a GET: two store calls, each paying the fixed latency. {@code
 * bytes(local, B)} are the bytes one owner reads for the rows above the local hit that boundary
 * {@code B} needs, group by group (a full-history group every row, a window only its rows, a state
 * group the one checkpoint; a page-cyclic group its share of the pages); the bandwidth was measured
 * over the same owner's GETs. The chosen boundary is the candidate of least expected time, the
 * local hit included: {@code local} itself means "compute everything" (a bypass), a candidate below
 * the longest a partial restore (the first blocks from L3, the rest computed). A tie goes to the
 * shorter boundary, which reads less.
 *
 * <p>Under this model a partial restore wins only where the prefill's cost is not smooth in the
 * boundary: restoring just enough tokens to save a whole forward pass of the chunked prefill, or a
 * window group whose bytes stop growing with the boundary. Restoring costs the same per token at
 * every boundary while recomputing a token costs more the later it sits (it attends to everything
 * before it), so between those steps the cheaper path is one of the two ends.
 *
 * <p>The figures are unknown until measured: the model then decides nothing, and preparation
 * follows the fixed rules exactly, so that the first restores are issued and measured. A prior
 * bandwidth ({@code async.cost_model_prior_mbps}) stands in for the store until its first GET.
 */
public final class CostModel {

  private final StorageConfig config;

  /** Bytes one owner reads per row, by group: its block, or its share of a page-cyclic group's. */
  private final double[] ownerBytesPerRow;

  private final CacheLayout layout;

  /** The attention pairs of a span of tokens, as this model's groups compute them. */
  private final AttentionPairs attention;

  /** Tokens one forward computes at most (the scheduler's chunk of a prefill). */
  private int tokenBudget = Integer.MAX_VALUE;

  private CostFigures figures = CostFigures.UNKNOWN;

  public CostModel(StorageConfig config, CacheLayout layout) {
    this.config = config;
    this.layout = layout;
    this.attention = AttentionPairs.of(layout);
    this.ownerBytesPerRow = new double[layout.numGroups()];
    for (CacheGroupSpec g : layout.groups()) {
      ownerBytesPerRow[g.groupId()] = (double) g.bytesPerBlock() / g.sharding().shardCount();
    }
  }

  /** Whether the model is on ({@code async.cost_model}). */
  public boolean enabled() {
    return config.costModel();
  }

  /** The prefix length the break-even bandwidth is exported for. */
  public int referenceTokens() {
    return config.costModelReferenceTokens();
  }

  /** How long the model may bypass L3 before a restore is issued to measure the store again. */
  long exploreMs() {
    return config.costModelExploreMs();
  }

  /** The scheduler's token budget: a prefill runs in chunks of at most this many tokens. */
  void tokenBudget(int tokens) {
    if (tokens < 1) {
      throw new IllegalArgumentException("token_budget=" + tokens + " must be >= 1");
    }
    this.tokenBudget = tokens;
  }

  /** New agreed figures (the same on every rank, applied in the same round). */
  public void onFigures(CostFigures agreed) {
    this.figures = agreed;
  }

  /** The figures the model decides with: the agreed ones, the prior standing in for the store. */
  public CostFigures figures() {
    if (!figures.storeKnown() && config.costModelPriorMbps() > 0) {
      return figures.withStore(figures.storeLatencyNs(), config.costModelPriorMbps() * 1e6);
    }
    return figures;
  }

  /** Whether the model decides: it is on and both the store and the prefill are known. */
  public boolean decides() {
    CostFigures f = figures();
    return config.costModel() && f.storeKnown() && f.prefillKnown();
  }

  /**
   * Expected nanoseconds to compute tokens {@code [from, to)} of a prompt whose first are cached.
   */
  public double prefillNs(int from, int to) {
    if (to <= from) {
      return 0;
    }
    CostFigures f = figures();
    long n = to - from;
    long chunks = (n + tokenBudget - 1) / tokenBudget;
    return f.forwardNs() * chunks + f.tokenNs() * n + f.pairNs() * attention.between(from, to);
  }

  /** How this model counts attention pairs: the prefill fit must count them the same way. */
  public AttentionPairs attentionPairs() {
    return attention;
  }

  /** Bytes one owner reads to restore from {@code local} to {@code boundary} (see the essay). */
  public double ownerBytes(int local, int boundary) {
    double bytes = 0;
    for (CacheGroupSpec g : layout.groups()) {
      int end = g.rowsFor(boundary);
      int from = Math.max(g.firstNeededRow(boundary), g.rowsFor(local));
      if (end > from) {
        bytes += ownerBytesPerRow[g.groupId()] * (end - from);
      }
    }
    return bytes;
  }

  /** Expected nanoseconds of a restore of {@code bytes}: a QUERY and a GET. */
  public double restoreNs(double bytes) {
    CostFigures f = figures();
    return 2 * f.storeLatencyNs() + bytes / f.storeBytesPerSecond() * 1e9;
  }

  /**
   * The boundary to restore up to for a prompt of {@code promptTokens} tokens whose local hit is
   * {@code local}, among {@code candidates} (ascending, the first being {@code local}): {@code
   * local} when recomputing is expected to be faster. Only when {@link #decides}.
   */
  public int chooseBoundary(int promptTokens, int local, int[] candidates) {
    double margin = 1 + config.costModelMarginPercent() / 100.0;
    int best = local;
    double bestNs = prefillNs(local, promptTokens);
    for (int b : candidates) {
      if (b <= local) {
        continue;
      }
      double ns = restoreNs(ownerBytes(local, b)) * margin + prefillNs(b, promptTokens);
      if (ns < bestNs) {
        bestNs = ns;
        best = b;
      }
    }
    return best;
  }

  /**
   * The restore bandwidth, in bytes per second of one owner's bytes, at which restoring a prefix of
   * {@code referenceTokens} tokens (nothing local, the prompt one token longer) takes exactly as
   * long as recomputing it: {@code bytes(0, R) / (prefill(0, R+1) - prefill(R, R+1) - 2·latency)},
   * no margin. Infinite when the latency alone exceeds the recomputation; NaN while the prefill is
   * unknown. Before the store's first measurement its latency counts as 0.
   */
  public double breakEvenBytesPerSecond(int referenceTokens) {
    CostFigures f = figures();
    if (!f.prefillKnown()) {
      return Double.NaN;
    }
    int r = referenceTokens;
    double saved = prefillNs(0, r + 1) - prefillNs(r, r + 1) - 2 * f.storeLatencyNs();
    if (saved <= 0) {
      return Double.POSITIVE_INFINITY;
    }
    return ownerBytes(0, r) / (saved / 1e9);
  }
}
