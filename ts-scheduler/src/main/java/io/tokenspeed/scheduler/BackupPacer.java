package io.tokenspeed.scheduler;

import java.util.concurrent.TimeUnit;

/**
 * The store-wide pace of backups: how many backup keys may be in flight, decided from the store's
 * answers to earlier PUTs. A PUT the store refused (any row not acknowledged, after retirement: no
 * space, a full server, an ACL, a cooldown or a full executor queue — the agreed fact does not say
 * which) holds every backup back, not only the refused keys: a store that answered "full" a moment
 * ago is sent nothing but one small probe until it takes one.
 *
 * <pre>
 *                fresh refusal                        tick at or past the hold's end
 *   OPEN ───────────────────────────▶ HELD ─────────────────────────────▶ PROBING
 *    ▲                                 ▲ ▲  nothing dispatched              │ window: one key
 *    │                                 │ └──────── fresh refusal ◀──────────┤ (level + 1)
 *    │                                 │                                    │ fresh success
 *    │ window reaches the backup       └── fresh refusal ─── RAMPING ◀──────┘ (level 0)
 *    └───────── Host credits ─────────────────────────────── window += keys accepted
 * </pre>
 *
 * <ul>
 *   <li><b>The hold</b> lasts {@code 100 ms · 2^(level - 1)}, capped at {@code
 *       max_backup_backoff_ms}, where the level counts the store's consecutive fresh refusals. It
 *       starts at the first tick applied after the round that learned the refusal (the timers rule
 *       of {@link StorageTransferManager}), and ends at an agreed tick: every rank holds the same
 *       rounds, from the same facts.
 *   <li><b>The probe</b>: when the hold ends the window is one key, so one PUT of one page goes;
 *       its refusal holds again, longer. The bytes sent to a store that keeps refusing are one page
 *       per hold, whatever the traffic.
 *   <li><b>The ramp</b>: a probe the store takes resets the level (the next refusal holds for the
 *       base again) and opens the window by the keys it took, then by the keys of every fresh PUT
 *       the store takes, doubling it each round trip, until it reaches the backup Host credits and
 *       writes are open. A store that takes some and refuses again is sent at most about twice what
 *       it took before holding again, so the backups re-offered after a recovery are bounded by
 *       what the store showed it can take, not by the candidates that piled up.
 *   <li><b>Fresh answers only.</b> Each PUT carries the write epoch of its dispatch, advanced by
 *       every fresh refusal. The answers of PUTs already in flight when a refusal came (the burst
 *       sent before the store said no) are stale: they neither hold longer nor reopen.
 *   <li><b>Persistent refusal.</b> From {@link StorageConfig#DEFAULT_MAX_BACKUP_ATTEMPTS}
 *       consecutive refusals (the store refused at 0, 100, 300, 700 and 1,500 ms) the store is
 *       taken to refuse until something changes: candidates it holds are no longer pending work (an
 *       idle engine stays idle and close() does not wait for them), though probes go on at the
 *       capped backoff and a probe it takes reopens writes as above.
 * </ul>
 *
 * <p>Single-threaded and deterministic: no clock of its own, agreed ticks and agreed facts only.
 */
final class BackupPacer {

  /** The pacer's states (see the class essay). */
  enum State {
    /** Writes flow; backups are bounded by their credits only. */
    OPEN,
    /** The store refused: nothing is dispatched until the hold ends. */
    HELD,
    /** The hold ended: one key may be in flight; its answer decides. */
    PROBING,
    /** The store took the probe: the window grows by the keys it takes. */
    RAMPING
  }

  /** Keys a probe carries: one page, the least a PUT can prove. */
  static final int PROBE_KEYS = 1;

  /** The level's cap: past any doubling that stays below the backoff's cap. */
  private static final int MAX_LEVEL = 62;

  private final long maxBackoffMs;
  private final int openWindow;

  private State state = State.OPEN;
  private int level;
  private long epoch;
  private boolean holdPending;
  private long holdUntilNs;
  private int window = Integer.MAX_VALUE;

  /**
   * @param maxBackoffMs the longest hold ({@code max_backup_backoff_ms})
   * @param openWindow the window at which writes are open again: the backup Host credits
   */
  BackupPacer(long maxBackoffMs, int openWindow) {
    this.maxBackoffMs = maxBackoffMs;
    this.openWindow = Math.max(PROBE_KEYS, openWindow);
  }

  /**
   * The hold after the {@code level}th consecutive refusal: {@link
   * StorageConfig#DEFAULT_BACKUP_RETRY_BACKOFF_MS} doubled per earlier one, at most {@code
   * maxBackoffMs}.
   */
  static long backoffNs(int level, long maxBackoffMs) {
    if (level < 1) {
      throw new IllegalArgumentException("level=" + level + " must be >= 1");
    }
    long base = TimeUnit.MILLISECONDS.toNanos(StorageConfig.DEFAULT_BACKUP_RETRY_BACKOFF_MS);
    long max = TimeUnit.MILLISECONDS.toNanos(maxBackoffMs);
    int shift = Math.min(level - 1, 30); // 100 ms << 30 is years: past any cap, far from overflow
    return Math.min(max, base << shift);
  }

  // ---------------------------------------------------------------- transitions

  /**
   * The agreed PUT answer of an operation dispatched under {@code putEpoch}: {@code refused} when
   * any of its keys was not acknowledged, else {@code acceptedKeys} keys the store took. Stale
   * answers (an earlier epoch) change nothing. The one transition method with {@link #onTick}.
   */
  void onPutAnswered(long putEpoch, boolean refused, int acceptedKeys) {
    if (putEpoch != epoch) {
      return;
    }
    if (refused) {
      epoch++;
      level = Math.min(level + 1, MAX_LEVEL);
      holdPending = true; // starts at the next tick
      window = PROBE_KEYS;
      state = State.HELD;
    } else if (state == State.PROBING || state == State.RAMPING) {
      level = 0;
      window = (int) Math.min((long) window + acceptedKeys, Integer.MAX_VALUE);
      if (window >= openWindow) {
        window = Integer.MAX_VALUE;
        state = State.OPEN;
      } else {
        state = State.RAMPING;
      }
    }
  }

  /** The agreed tick: a hold learned last round starts; a hold that is over ends in a probe. */
  void onTick(long tickNs) {
    if (state != State.HELD) {
      return;
    }
    if (holdPending) {
      holdPending = false;
      holdUntilNs = tickNs + backoffNs(level, maxBackoffMs);
    }
    if (tickNs - holdUntilNs >= 0) {
      state = State.PROBING;
      window = PROBE_KEYS;
    }
  }

  /** A full clear, namespace rotation or weight update: writes start open, earlier PUTs stale. */
  void reset() {
    epoch++;
    level = 0;
    holdPending = false;
    window = Integer.MAX_VALUE;
    state = State.OPEN;
  }

  // ---------------------------------------------------------------- reading

  State state() {
    return state;
  }

  /** The write epoch a PUT dispatched now carries. */
  long epoch() {
    return epoch;
  }

  /** Backup keys that may be in flight now, credits aside: 0 while held. */
  int window() {
    return state == State.HELD ? 0 : window;
  }

  /** Whether a PUT dispatched now is a probe: the store's latest fresh answer was a refusal. */
  boolean probing() {
    return level > 0;
  }

  /** Whether backups are held back now (nothing is dispatched). */
  boolean held() {
    return state == State.HELD;
  }

  /** Whether the store refused so many times in a row that it is taken to refuse persistently. */
  boolean persistent() {
    return level >= StorageConfig.DEFAULT_MAX_BACKUP_ATTEMPTS;
  }

  /** Consecutive fresh refusals: 0 once the store took a probe. */
  int level() {
    return level;
  }

  /**
   * The agreed tick from which the hold is over ({@link #onTick} at or after it ends it), {@link
   * Long#MAX_VALUE} when not held; {@code nowNs} while the hold has yet to start (one more round is
   * due).
   */
  long holdEndNs(long nowNs) {
    if (state != State.HELD) {
      return Long.MAX_VALUE;
    }
    return holdPending ? nowNs : holdUntilNs;
  }

  /** The current hold's length (a gauge): 0 while the store's latest answers were successes. */
  long backoffNs() {
    return level == 0 ? 0 : backoffNs(level, maxBackoffMs);
  }

  /** Checks the pacer's own consistency. */
  void checkInvariants() {
    boolean ok =
        switch (state) {
          case OPEN -> level == 0 && window == Integer.MAX_VALUE && !holdPending;
          case HELD -> level > 0 && window == PROBE_KEYS;
          case PROBING -> level > 0 && window == PROBE_KEYS && !holdPending;
          case RAMPING -> level == 0 && window > PROBE_KEYS - 1 && window < openWindow;
        };
    if (!ok) {
      throw new AssertionError(
          "backup pacer broken: state="
              + state
              + " level="
              + level
              + " window="
              + window
              + " hold_pending="
              + holdPending);
    }
  }
}
