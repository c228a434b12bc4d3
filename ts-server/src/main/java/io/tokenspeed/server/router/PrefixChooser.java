package io.tokenspeed.server.router;

import java.util.ArrayList;
import java.util.List;

/**
 * The prefix-aware choice among a role's ready backends: each is priced by the work that stands
 * between the request and its first token there, and the cheapest is chosen (docs/serving.md
 * "Prefix-aware routing").
 *
 * <pre>
 *   prompt of n tokens; reusable: the first n − 1 (the engine computes at least the last token)
 *   |◀── device ──▶|◀── host ──▶|◀──── store ────▶|◀──────── compute ────────▶|
 *    Device tier     Host tier    only L3 holds      nobody holds
 *    (or pending)                 (any backend may restore it)
 *
 *   cost(b) = compute·c + host·c·HOST_RATIO + restore + load·LOAD_TOKENS·c
 *     c        the backend's prefill seconds per token
 *     restore  min(store·c·ρ + 2·lat, store·c)   (the engine recomputes when that is cheaper)
 *     ρ, lat   the backend's restore-to-recompute ratio and store latency
 *     load     requests it runs or holds waiting, and the router's own in flight to it
 * </pre>
 *
 * <p>Each backend's figures come from its {@link LoadReport}; a figure one backend lacks is the
 * mean of the others' (the backends of a role serve one model on like hardware), and without any
 * the defaults here. Scores within a relative {@value #TIE} are ties, broken round robin.
 *
 * <p>The reason counted for a choice is the best the chosen backend offered: a Device prefix, else
 * a Host prefix, else a prefix only the store holds, else nothing: {@code load} when its score was
 * the only lowest, {@code round_robin} when tied.
 *
 * <p>Stateless and thread-safe; the caller passes the round-robin turn.
 */
final class PrefixChooser {
  /** Prefill seconds per token when no backend measured it (10,000 tokens a second). */
  static final double DEFAULT_PREFILL_SECONDS_PER_TOKEN = 1e-4;

  /** A restored token's cost over a recomputed one's when no backend measured it. */
  static final double DEFAULT_RESTORE_RATIO = 0.5;

  /**
   * A token loaded from the Host tier over a recomputed one: a Host → Device copy, about a
   * twentieth of a prefill on the GPUs measured (no engine exports it).
   */
  static final double HOST_RATIO = 0.05;

  /**
   * The default of {@code --load-tokens}: the prefill tokens one queued or running request costs.
   */
  static final int DEFAULT_LOAD_TOKENS = 256;

  /** Scores within this relative distance of the lowest are ties. */
  static final double TIE = 1e-9;

  /** Why a backend was chosen ({@code reason} in the router's metrics). */
  enum Reason {
    DEVICE_PREFIX("device_prefix"),
    HOST_PREFIX("host_prefix"),
    L3_PREFIX("l3_prefix"),
    LOAD("load"),
    ROUND_ROBIN("round_robin");

    private final String label;

    Reason(String label) {
      this.label = label;
    }

    String label() {
      return label;
    }
  }

  /**
   * One ready backend as the choice sees it.
   *
   * @param pageTokens P, its block size (0: no live events, nothing known of its tiers)
   * @param devicePages the prompt's longest prefix on its Device tier (or pending there), in pages
   * @param localPages the longest in Device or Host (at least {@code devicePages})
   * @param storePages the pages past {@code localPages} that only the store holds
   * @param load requests it runs or holds waiting, and the router's in flight to it
   * @param report its figures
   */
  record Candidate(
      int pageTokens,
      int devicePages,
      int localPages,
      int storePages,
      double load,
      LoadReport report) {
    Candidate {
      if (pageTokens < 0
          || devicePages < 0
          || localPages < devicePages
          || storePages < 0
          || (pageTokens == 0 && localPages + storePages > 0)) {
        throw new IllegalArgumentException(
            "pageTokens="
                + pageTokens
                + ", devicePages="
                + devicePages
                + ", localPages="
                + localPages
                + ", storePages="
                + storePages
                + ": no pages without a block size, device <= local");
      }
    }

    /** A backend of which only the load is known. */
    static Candidate loadOnly(double load, LoadReport report) {
      return new Candidate(0, 0, 0, 0, load, report);
    }
  }

  /**
   * A choice.
   *
   * @param index the chosen candidate's index
   * @param reason why
   * @param deviceTokens the prompt tokens it is expected to reuse from its Device tier
   * @param hostTokens from its Host tier
   * @param storeTokens to restore from the store
   * @param scores every candidate's cost, seconds
   */
  record Choice(
      int index,
      Reason reason,
      int deviceTokens,
      int hostTokens,
      int storeTokens,
      double[] scores) {}

  private PrefixChooser() {}

  /** Chooses among {@code candidates} (at least one) for a prompt of {@code promptTokens}. */
  static Choice choose(int promptTokens, List<Candidate> candidates, int loadTokens, long turn) {
    if (candidates.isEmpty()) {
      throw new IllegalArgumentException("no candidates");
    }
    double meanPerToken = mean(candidates, true);
    double meanRatio = mean(candidates, false);
    double[] scores = new double[candidates.size()];
    int[][] tokens = new int[candidates.size()][];
    double lowest = Double.POSITIVE_INFINITY;
    for (int i = 0; i < scores.length; i++) {
      Candidate c = candidates.get(i);
      LoadReport r = c.report();
      double perToken =
          r.prefillSecondsPerToken() > 0
              ? r.prefillSecondsPerToken()
              : Double.isNaN(meanPerToken) ? DEFAULT_PREFILL_SECONDS_PER_TOKEN : meanPerToken;
      double ratio =
          r.restoreRatio() > 0
              ? r.restoreRatio()
              : Double.isNaN(meanRatio) ? DEFAULT_RESTORE_RATIO : meanRatio;
      double latency = r.restoreLatencySeconds() >= 0 ? r.restoreLatencySeconds() : 0;
      tokens[i] = split(promptTokens, c);
      int device = tokens[i][0];
      int host = tokens[i][1];
      int store = tokens[i][2];
      int compute = Math.max(0, promptTokens - device - host - store);
      double restore =
          store == 0 ? 0 : Math.min(store * perToken * ratio + 2 * latency, store * perToken);
      scores[i] =
          compute * perToken
              + host * perToken * HOST_RATIO
              + restore
              + Math.max(0, c.load()) * loadTokens * perToken;
      lowest = Math.min(lowest, scores[i]);
    }
    double slack = Math.abs(lowest) * TIE + 1e-15;
    List<Integer> tied = new ArrayList<>();
    for (int i = 0; i < scores.length; i++) {
      if (scores[i] <= lowest + slack) {
        tied.add(i);
      }
    }
    int index = tied.get((int) Math.floorMod(turn, (long) tied.size()));
    int[] t = tokens[index];
    Reason reason;
    if (t[0] > 0) {
      reason = Reason.DEVICE_PREFIX;
    } else if (t[1] > 0) {
      reason = Reason.HOST_PREFIX;
    } else if (t[2] > 0) {
      reason = Reason.L3_PREFIX;
    } else {
      reason = tied.size() > 1 ? Reason.ROUND_ROBIN : Reason.LOAD;
    }
    return new Choice(index, reason, t[0], t[1], t[2], scores);
  }

  /** The prompt's reusable tokens on {@code c}: {device, host, store}. */
  static int[] split(int promptTokens, Candidate c) {
    int reusable = Math.max(0, promptTokens - 1);
    long p = c.pageTokens();
    int device = (int) Math.min(reusable, c.devicePages() * p);
    int local = (int) Math.min(reusable, c.localPages() * p);
    int stored = (int) Math.min(reusable, (c.localPages() + (long) c.storePages()) * p);
    return new int[] {device, local - device, stored - local};
  }

  private static double mean(List<Candidate> candidates, boolean perToken) {
    double sum = 0;
    int n = 0;
    for (Candidate c : candidates) {
      double v = perToken ? c.report().prefillSecondsPerToken() : c.report().restoreRatio();
      if (v > 0 && Double.isFinite(v)) {
        sum += v;
        n++;
      }
    }
    return n == 0 ? Double.NaN : sum / n;
  }
}
