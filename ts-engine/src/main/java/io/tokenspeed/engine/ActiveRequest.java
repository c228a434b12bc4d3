package io.tokenspeed.engine;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.RetractionImage;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.model.sampling.SamplingState;
import java.util.Arrays;

/**
 * One request the loop serves: its tokens (prompt, then what it generated), its sampling state,
 * what the Device holds of it, and its figures. Only the loop thread touches it once it is in the
 * intake queue.
 */
final class ActiveRequest {
  final long id;
  final RequestHandle handle;
  final int promptTokens;
  final SamplingState sampling;
  final long submittedNs;
  int[] tokens;
  int known;
  long admittedNs;
  long firstTokenNs;
  long lastTokenNs;
  int reusedDevice = -1;
  int reusedHost;
  int reusedStorage;
  PromptKeys keys;
  Admission admission;

  /**
   * The scheduler's block tables of {@link #admission} as of its {@link #tablesChanges}-th change,
   * and their translation into the model's blocks ({@link ForwardStep}: a decode round reuses them
   * until the scheduler's tables change); null until the first forward of an admission.
   */
  int[][] cacheTables;

  int[][] modelTables;
  int tablesChanges;

  /** Whether the State groups' running state lives in the working slot (after a forward). */
  boolean stateInWorkingSlot;

  /** Leading tokens whose KV the request's Device blocks hold (reused, loaded or computed). */
  int kvTokens;

  /** The exact image of its last retraction, until the loop hands it to the scheduler. */
  RetractionImage image;

  /** Tokens the forward computed for it so far. */
  long computedTokens;

  /** The disaggregated half it is (docs/pd.md), or null for an ordinary request. */
  PdTicket ticket;

  ActiveRequest(long id, RequestHandle handle, int[] prompt, SamplingState sampling, long nowNs) {
    this.id = id;
    this.handle = handle;
    this.promptTokens = prompt.length;
    this.sampling = sampling;
    this.submittedNs = nowNs;
    this.tokens = Arrays.copyOf(prompt, prompt.length + sampling.params().maxTokens());
    this.known = prompt.length;
  }

  int generated() {
    return known - promptTokens;
  }

  /** The request's result as it stands: the tokens it generated and its figures. */
  GenerationResult result(String reason, String error) {
    int n = generated();
    long tpot = n >= 2 && firstTokenNs != 0 ? (lastTokenNs - firstTokenNs) / (n - 1) : 0;
    RequestMetrics m =
        new RequestMetrics(
            admittedNs == 0 ? 0 : admittedNs - submittedNs,
            firstTokenNs == 0 ? 0 : firstTokenNs - submittedNs,
            tpot,
            promptTokens,
            Math.max(0, reusedDevice),
            reusedHost,
            reusedStorage,
            computedTokens);
    return new GenerationResult(
        id, Arrays.copyOfRange(tokens, promptTokens, known), reason, error, m);
  }
}
