package io.tokenspeed.l3;

/**
 * The executor's private view of backend health. It has no thread and no public control: the
 * executor asks it whether to admit a submission and tells it how finished calls went.
 *
 * <pre>
 *             outage signal                  cooldown over: the next
 *   HEALTHY ─────────────────▶ COOLDOWN ──── submission is the probe ───▶ PROBING
 *      ▲                          ▲  (rejects)                              │
 *      │                          └──────────── probe signals an outage ────┤
 *      └────────────────────────────────────── probe succeeds ──────────────┘
 * </pre>
 *
 * <p>Every outage advances the health epoch. A call remembers the epoch at which it was admitted,
 * and its success heals only if no newer outage happened since: a slow call that started before an
 * outage and succeeds after it must not undo it. Reading the state ({@link #state}) never consumes
 * the probe. Misses, retired GET misses and retired PUT rejections are not outages; the executor
 * only reports exceptions, unretired results and unknown native failures as such.
 *
 * <pre>
 *   finished call                                 reached backend?   tells the monitor
 *   outage signal                                 yes                onOutage (new epoch)
 *   success, miss, retired rejection              yes                onSuccess(epoch)
 *   configuration failure (permission, creds)     yes                onSuccess(epoch): the
 *                                                                    backend answered; no outage
 *   nothing owned on this rank                    no                 nothing: never a probe,
 *                                                                    never heals
 *   cancelled while queued (a probe)              no                 onProbeAbandoned
 *   queued when an outage was recorded            no                 nothing: rejected by the
 *                                                                    executor, never run
 * </pre>
 *
 * <p>Guarded by the executor's lock.
 */
final class HealthMonitor {

  /** The externally visible states. */
  enum State {
    HEALTHY,
    COOLDOWN,
    PROBING
  }

  /** The answer to an admission request. */
  enum Admission {
    ADMIT,
    ADMIT_AS_PROBE,
    REJECT
  }

  private final long cooldownNs;
  private State state = State.HEALTHY;
  private long epoch;
  private long cooldownUntilNs;
  private long outages;

  HealthMonitor(long cooldownNs) {
    this.cooldownNs = cooldownNs;
  }

  /** Whether a submission may go to the backend now. At most one probe is in flight. */
  Admission admit(long nowNs) {
    return switch (state) {
      case HEALTHY -> Admission.ADMIT;
      case PROBING -> Admission.REJECT;
      case COOLDOWN -> {
        if (nowNs - cooldownUntilNs < 0) {
          yield Admission.REJECT;
        }
        state = State.PROBING;
        yield Admission.ADMIT_AS_PROBE;
      }
    };
  }

  /**
   * A call admitted at {@code callEpoch} reached the backend and finished without an outage signal.
   * Never called for a job that made no store call.
   */
  void onSuccess(long callEpoch) {
    if (callEpoch == epoch && state != State.COOLDOWN) {
      state = State.HEALTHY;
    }
  }

  /** A call signalled an outage: start a new cooldown under a new epoch. */
  void onOutage(long nowNs) {
    epoch++;
    outages++;
    state = State.COOLDOWN;
    cooldownUntilNs = nowNs + cooldownNs;
  }

  /** The probe never reached the backend (cancelled while queued): allow another probe. */
  void onProbeAbandoned(long probeEpoch) {
    if (probeEpoch == epoch && state == State.PROBING) {
      state = State.COOLDOWN;
    }
  }

  State state() {
    return state;
  }

  long epoch() {
    return epoch;
  }

  long outages() {
    return outages;
  }
}
