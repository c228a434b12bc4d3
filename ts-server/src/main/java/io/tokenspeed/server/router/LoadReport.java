package io.tokenspeed.server.router;

import io.tokenspeed.scheduler.StorageConfig;

/**
 * What a backend's {@code GET /metrics} says of its load and its prices (docs/metrics.md): the
 * requests it runs and holds waiting, and the L3 cost model's gauges, from which the router prices
 * a prefix it would recompute or restore there.
 *
 * <pre>
 *   tokenspeed:num_requests_running                         running
 *   tokenspeed:num_requests_waiting                         waiting
 *   tokenspeed:l3_reference_prefill_seconds                 T  (recomputing R tokens)
 *   tokenspeed:l3_break_even_bandwidth_bytes_per_second     B* (= bytes(R) / (T − 2·lat))
 *   tokenspeed:l3_restore_bandwidth_bytes_per_second        bw
 *   tokenspeed:l3_restore_latency_seconds                   lat (one store call)
 *
 *   prefill seconds per token   = T / R                    (R = the engine's default reference,
 *                                                            cost_model_reference_tokens)
 *   restore ÷ recompute, a token = bytes(R) / bw / T = B*·(T − 2·lat) / (bw·T)
 *   a restore's fixed cost      = 2·lat                    (a QUERY and a GET)
 * </pre>
 *
 * <p>A figure the backend does not export, or exports as NaN, 0 (L3 off) or infinite where a finite
 * one is needed, is unknown ({@code NaN} here); the router then uses the other backends' figures or
 * its defaults ({@link PrefixChooser}). A break-even of {@code +Inf} (the store's latency alone
 * exceeds the recomputation) makes a restore never worth it: the ratio is 1, as the engine would
 * recompute.
 *
 * @param running {@code num_requests_running}, or NaN
 * @param waiting {@code num_requests_waiting}, or NaN
 * @param prefillSecondsPerToken T / R, or NaN
 * @param restoreRatio a restored token's cost over a recomputed one's, in (0, 1], or NaN
 * @param restoreLatencySeconds lat, or NaN
 */
record LoadReport(
    double running,
    double waiting,
    double prefillSecondsPerToken,
    double restoreRatio,
    double restoreLatencySeconds) {

  /** Nothing known. */
  static final LoadReport UNKNOWN =
      new LoadReport(Double.NaN, Double.NaN, Double.NaN, Double.NaN, Double.NaN);

  /**
   * R: the tokens {@code l3_reference_prefill_seconds} recomputes, the engine's default ({@code
   * async.cost_model_reference_tokens}); the router assumes its backends keep it.
   */
  static final int REFERENCE_TOKENS = StorageConfig.DEFAULT_COST_MODEL_REFERENCE_TOKENS;

  /** Running plus waiting, 0 when unknown. */
  double queued() {
    return (Double.isFinite(running) ? running : 0) + (Double.isFinite(waiting) ? waiting : 0);
  }

  /** Reads the figures out of a Prometheus text exposition; what is missing is NaN. */
  static LoadReport parse(String text) {
    double running = Double.NaN;
    double waiting = Double.NaN;
    double reference = Double.NaN;
    double breakEven = Double.NaN;
    double bandwidth = Double.NaN;
    double latency = Double.NaN;
    int from = 0;
    int n = text.length();
    while (from < n) {
      int end = text.indexOf('\n', from);
      if (end < 0) {
        end = n;
      }
      if (text.charAt(from) == 't') { // every series wanted starts with "tokenspeed:"
        String line = text.substring(from, end);
        running = first(running, line, "tokenspeed:num_requests_running");
        waiting = first(waiting, line, "tokenspeed:num_requests_waiting");
        reference = first(reference, line, "tokenspeed:l3_reference_prefill_seconds");
        breakEven = first(breakEven, line, "tokenspeed:l3_break_even_bandwidth_bytes_per_second");
        bandwidth = first(bandwidth, line, "tokenspeed:l3_restore_bandwidth_bytes_per_second");
        latency = first(latency, line, "tokenspeed:l3_restore_latency_seconds");
      }
      from = end + 1;
    }
    double perToken =
        Double.isFinite(reference) && reference > 0 ? reference / REFERENCE_TOKENS : Double.NaN;
    double lat = Double.isFinite(latency) && latency >= 0 ? latency : Double.NaN;
    double ratio = Double.NaN;
    if (breakEven == Double.POSITIVE_INFINITY && perToken > 0) {
      ratio = 1;
    } else if (Double.isFinite(breakEven)
        && breakEven > 0
        && Double.isFinite(bandwidth)
        && bandwidth > 0
        && perToken > 0) {
      double fixed = Double.isFinite(lat) ? 2 * lat : 0;
      double bytes = breakEven * Math.max(0, reference - fixed);
      ratio = Math.min(1, Math.max(1e-6, bytes / bandwidth / reference));
    }
    return new LoadReport(running, waiting, perToken, ratio, lat);
  }

  /**
   * {@code current} if known, else the value of {@code line} when it is a sample of {@code name}.
   */
  private static double first(double current, String line, String name) {
    if (!Double.isNaN(current) || !line.startsWith(name)) {
      return current;
    }
    int after = name.length();
    if (after >= line.length()) {
      return current;
    }
    char c = line.charAt(after);
    int valueFrom;
    if (c == '{') {
      int close = line.lastIndexOf('}');
      if (close < 0) {
        return current;
      }
      valueFrom = close + 1;
    } else if (c == ' ') {
      valueFrom = after;
    } else {
      return current; // another series whose name starts with this one
    }
    String[] parts = line.substring(valueFrom).trim().split(" ");
    if (parts.length == 0 || parts[0].isEmpty()) {
      return current;
    }
    return switch (parts[0]) {
      case "+Inf", "Inf" -> Double.POSITIVE_INFINITY;
      case "-Inf" -> Double.NEGATIVE_INFINITY;
      case "NaN" -> Double.NaN;
      default -> {
        try {
          yield Double.parseDouble(parts[0]);
        } catch (NumberFormatException e) {
          yield current;
        }
      }
    };
  }
}
