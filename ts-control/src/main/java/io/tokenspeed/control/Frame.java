package io.tokenspeed.control;

import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import java.util.List;

/**
 * A message of the control protocol, as {@link FrameEncoder} writes it and {@link FrameDecoder}
 * reads it back. The byte layout is drawn in {@link FrameDescriptor}.
 */
public sealed interface Frame {

  /**
   * The handshake's first message, sent both ways when a connection opens: the dialer sends its
   * own, the acceptor checks it and only then answers with its own. Each side checks every field
   * against its own settings; a disagreement is a {@link MeshException.Reason#HANDSHAKE} error. The
   * nonce is fresh per connection; both sides' proofs of the replica secret ({@link Proof}) cover
   * both HELLOs, so a proof cannot be replayed on another connection.
   *
   * @param replicaId the sender's replica id
   * @param worldSize the sender's number of ranks
   * @param rank the sender's rank
   * @param maxFrameBytes the sender's frame limit (must be equal everywhere)
   * @param maxPendingOperations the sender's window limit on operations (must be equal)
   * @param maxPendingKeys the sender's window limit on keys (must be equal)
   * @param nonce 32 random bytes of the sender's, fresh for this connection
   */
  record Hello(
      long replicaId,
      int worldSize,
      int rank,
      int maxFrameBytes,
      int maxPendingOperations,
      long maxPendingKeys,
      Bytes32 nonce)
      implements Frame {

    public Hello {
      if (replicaId < 0
          || worldSize < 1
          || worldSize > ControlConfig.MAX_WORLD_SIZE
          || rank < 0
          || rank >= worldSize
          || maxFrameBytes < ControlConfig.MIN_MAX_FRAME_BYTES
          || maxPendingOperations < 1
          || maxPendingKeys < 1
          || nonce == null) {
        throw new IllegalArgumentException(
            "hello replica_id="
                + replicaId
                + " world_size="
                + worldSize
                + " rank="
                + rank
                + " max_frame_bytes="
                + maxFrameBytes
                + " max_pending_operations="
                + maxPendingOperations
                + " max_pending_keys="
                + maxPendingKeys
                + " is out of range");
      }
    }

    /** This rank's handshake under {@code config}, with a fresh nonce. */
    static Hello of(ControlConfig config, Bytes32 nonce) {
      return new Hello(
          config.replicaId(),
          config.worldSize(),
          config.rank(),
          config.maxFrameBytes(),
          config.windowOperations(),
          config.windowKeys(),
          nonce);
    }
  }

  /**
   * The handshake's second message, sent both ways after the HELLOs: an HMAC-SHA256 under the
   * replica secret over a role label and both HELLO frames as sent (see {@link ReplicaSecret}). The
   * dialer proves first; the acceptor proves only after it checked the dialer's proof.
   *
   * @param mac the 32-byte HMAC
   */
  record Proof(Bytes32 mac) implements Frame {
    public Proof {
      if (mac == null) {
        throw new IllegalArgumentException("proof without a mac");
      }
    }
  }

  /**
   * A rank's last word after its exchange failed: the newest round it gathered completely. Every
   * survivor sends one to every peer it still has a connection with and settles on the smallest
   * round of those it hears from (see {@link RelayExchange}).
   *
   * @param rank the sender's rank
   * @param gatheredRound the newest round whose every report the sender holds (0 for none)
   * @param blamedRank the rank whose failure stopped the sender, or -1
   */
  record Final(int rank, long gatheredRound, int blamedRank) implements Frame {
    public Final {
      if (rank < 0 || gatheredRound < 0 || blamedRank < -1) {
        throw new IllegalArgumentException(
            "final rank="
                + rank
                + " gathered_round="
                + gatheredRound
                + " blamed_rank="
                + blamedRank
                + " is out of range");
      }
    }
  }

  /**
   * One rank's contribution to one round of the relay exchange. A valid report carries the rank's
   * clock, pressure, plan digest, newly completed storage records, (the leader only) frontend
   * messages, and optionally its status and its events; an error report carries the reason its
   * local poll or records were invalid, and nothing else but the clock, pressure and plan digest.
   * An error report's digest travels and round-trips like any other field, but the exchange never
   * compares it: the round fails on the error report.
   *
   * @param rank the sender's rank
   * @param round the exchange round, counting from 1
   * @param clockNs the sender's monotonic clock when it entered the round
   * @param pressure the sender's executor pressure observations
   * @param planDigest the digest of the plan the sender executed in its previous round ({@link
   *     LocalReport#planDigest()}); any value, 0 before the first plan
   * @param error null for a valid report; otherwise why the local report was invalid
   * @param frontend the leader's frontend messages (empty on other ranks and in error reports)
   * @param completions the sender's newly completed storage records (empty in error reports)
   * @param status the sender's status for every rank ({@link RankStatus#EMPTY} for none, and in
   *     error reports)
   * @param events the sender's events of this round ({@link RankEvents#EMPTY} for none, and in
   *     error reports)
   */
  record Report(
      int rank,
      long round,
      long clockNs,
      PressureSnapshot pressure,
      long planDigest,
      String error,
      List<FrontendMessage> frontend,
      List<StorageDone> completions,
      RankStatus status,
      RankEvents events)
      implements Frame {

    public Report {
      if (rank < 0 || round < 1 || pressure == null || frontend == null || completions == null) {
        throw new IllegalArgumentException(
            "report rank=" + rank + " round=" + round + " is incomplete");
      }
      frontend = List.copyOf(frontend);
      completions = List.copyOf(completions);
      status = status == null ? RankStatus.EMPTY : status;
      events = events == null ? RankEvents.EMPTY : events;
      if (error != null && error.isEmpty()) {
        throw new IllegalArgumentException(
            "error report of rank " + rank + " round " + round + " must give a reason");
      }
      if (error != null
          && (!frontend.isEmpty()
              || !completions.isEmpty()
              || !status.isEmpty()
              || !events.isEmpty())) {
        throw new IllegalArgumentException(
            "error report of rank " + rank + " round " + round + " must carry no records");
      }
    }

    /** A report without events. */
    public Report(
        int rank,
        long round,
        long clockNs,
        PressureSnapshot pressure,
        long planDigest,
        String error,
        List<FrontendMessage> frontend,
        List<StorageDone> completions,
        RankStatus status) {
      this(
          rank,
          round,
          clockNs,
          pressure,
          planDigest,
          error,
          frontend,
          completions,
          status,
          RankEvents.EMPTY);
    }

    /** A report without a status or events. */
    public Report(
        int rank,
        long round,
        long clockNs,
        PressureSnapshot pressure,
        long planDigest,
        String error,
        List<FrontendMessage> frontend,
        List<StorageDone> completions) {
      this(
          rank,
          round,
          clockNs,
          pressure,
          planDigest,
          error,
          frontend,
          completions,
          RankStatus.EMPTY);
    }

    /** A report whose plan digest is 0. */
    public Report(
        int rank,
        long round,
        long clockNs,
        PressureSnapshot pressure,
        String error,
        List<FrontendMessage> frontend,
        List<StorageDone> completions) {
      this(rank, round, clockNs, pressure, 0, error, frontend, completions);
    }

    /** An error report whose plan digest is 0: the reason replaces the records. */
    static Report ofError(
        int rank, long round, long clockNs, PressureSnapshot pressure, String error) {
      return ofError(rank, round, clockNs, pressure, 0, error);
    }

    /** An error report: the reason replaces the records. */
    static Report ofError(
        int rank,
        long round,
        long clockNs,
        PressureSnapshot pressure,
        long planDigest,
        String error) {
      return new Report(rank, round, clockNs, pressure, planDigest, error, List.of(), List.of());
    }

    /** True for an error report. */
    boolean failed() {
      return error != null;
    }
  }
}
