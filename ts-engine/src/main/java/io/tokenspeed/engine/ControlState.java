package io.tokenspeed.engine;

/**
 * The control state every rank of a replica holds alike, from which each round's forward and
 * storage permissions come (the specification's "Completion agreement and ordering"). It changes
 * only when an administrative command is applied at the round's head: on a single rank between
 * rounds on the loop thread, on a replica in the agreed round that carried the command, the same on
 * every rank, so every scheduler plans with the same permissions.
 *
 * <pre>
 *   state      set by          forward   storage   what still flows
 *   normal     -               yes       yes       everything
 *   frozen     FREEZE          no        no        completions, ticks (deadlines), cancellations
 *   fenced     FENCE_STORAGE   yes       no        requests without L3 (the fence's bypass)
 *   draining   DRAIN (close)   no        yes       cancellations, completions, pending backups
 * </pre>
 *
 * <p>A frozen or draining round still runs the whole planner: the tick expires soft deadlines and
 * Ready holds, cancellations end requests, agreed completions publish what retired; only admission,
 * the batch, demotions and new storage work wait for permission. Draining keeps storage permitted
 * so that the backups close lets finish are still written ({@link Engine#close}); every request is
 * cancelled by then, so no read starts.
 *
 * @param frozen an administrative freeze ({@link Engine#freeze}) stands
 * @param fenced a weight update's fence stands ({@link Engine#updateWeightVersion})
 * @param draining the replica is closing: its requests are cancelled and its L3 work drains
 */
record ControlState(boolean frozen, boolean fenced, boolean draining) {
  /** Nothing stands: every round may forward and start storage work. */
  static final ControlState NORMAL = new ControlState(false, false, false);

  /** Whether this round's plan may admit, batch and demote. */
  boolean forwardPermitted() {
    return !frozen && !draining;
  }

  /** Whether this round may start new storage work (queries, GETs, backups). */
  boolean storagePermitted() {
    return !frozen && !fenced;
  }

  ControlState withFrozen(boolean on) {
    return new ControlState(on, fenced, draining);
  }

  ControlState withFenced(boolean on) {
    return new ControlState(frozen, on, draining);
  }

  ControlState withDraining() {
    return new ControlState(frozen, fenced, true);
  }
}
