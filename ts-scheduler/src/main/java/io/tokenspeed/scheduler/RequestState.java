package io.tokenspeed.scheduler;

import io.tokenspeed.cache.Admission;

/**
 * The request FSM. Only {@link Prefilling}, {@link PrefillDone}, {@link Decoding} and {@link
 * Landing} own Device blocks; {@link Prefetching} owns a storage lease and nothing on the Device,
 * and is never a forward candidate.
 *
 * <pre>
 *   Bootstrapping ─ack─▶ Submitted ─admit─▶ Prefilling ─▶ PrefillDone ─▶ Decoding ─▶ Finished
 *        │                 │   ▲                 │            ▲             │
 *        │       prepare L3│   └── Retracted ◀───┴────────────┼── Device short
 *        └──────▶ Prefetching(continuation) ── completion / deadline ──▶ continuation
 *
 *   PD decode: Submitted ─admit─▶ Landing ─landed─▶ PrefillDone (its KV came from a prefill engine)
 * </pre>
 */
public sealed interface RequestState
    permits RequestState.Bootstrapping,
        RequestState.Submitted,
        RequestState.Prefetching,
        RequestState.Prefilling,
        RequestState.PrefillDone,
        RequestState.Landing,
        RequestState.Decoding,
        RequestState.Retracted,
        RequestState.Finished {

  /** Where a Prefetching request resumes. */
  enum Continuation {
    BOOTSTRAPPING,
    SUBMITTED
  }

  /** PD: waiting for the peer's bootstrap acknowledgement. */
  record Bootstrapping(AdmissionResources resources) implements RequestState {}

  /** Waiting for ordinary admission. */
  record Submitted(AdmissionResources resources) implements RequestState {}

  /** Waiting for L3 (QUERY/GET); owns the lease, no Device pages, no slot. */
  record Prefetching(Continuation continuation, StorageLease lease, AdmissionResources resources)
      implements RequestState {}

  /** Admitted: computing the prompt from {@code computed} on. */
  record Prefilling(Admission admission, int computed) implements RequestState {}

  /** The prompt is computed; the first decode step comes next. */
  record PrefillDone(Admission admission) implements RequestState {}

  /**
   * PD decode: Device blocks reserved for a prompt whose KV a prefill engine computes and sends;
   * never a forward candidate, never retracted. Its KV landed, it continues as {@link PrefillDone}
   * (the prefill engine sampled the first token).
   */
  record Landing(Admission admission) implements RequestState {}

  /** Gave its blocks back because the Device ran short; waits for admission again. */
  record Retracted(AdmissionResources resources) implements RequestState {}

  /** Generating tokens. */
  record Decoding(Admission admission, int generated) implements RequestState {}

  /** Done; every resource released. */
  record Finished(String reason) implements RequestState {}
}
