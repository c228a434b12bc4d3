package io.tokenspeed.core.control;

import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import java.util.ArrayList;
import java.util.List;

/**
 * The output of one relay exchange, identical on every cache-owning rank of a replica: the round's
 * tick (the TP leader's monotonic clock), the MAX-reduced pressure, the leader's frontend messages,
 * and the operations that every owner has now reported, reduced to their agreed facts.
 *
 * <p>Apply it with {@link #applyTo(LoopHeadFeedback)}, which fixes the loop-head order (tick, then
 * frontend messages, then completions). A round with nothing but a tick is normal: the exchange
 * runs in idle and frozen rounds too, so time and cancellations keep flowing.
 *
 * <p>Every rank's {@link RankEvents} of this round are decision inputs like the rest: the events a
 * rank put in its report of this round are here, at its index, identical on every rank, and in no
 * other round (see {@link RankEvents} for the whole guarantee). {@link #applyTo} does not feed
 * them; the caller reads {@link #events(int)} and applies their consequences the same way on every
 * rank.
 *
 * @param round the exchange's round number, counting from 1
 * @param tickNs the agreed tick: the leader's monotonic clock when it entered this round
 * @param pressure the component-wise maximum of every owner's pressure observations
 * @param frontend the leader's frontend messages, in the order it drained them
 * @param completions agreed completion facts, in strictly ascending operation id
 * @param statuses every rank's {@link RankStatus} of this round, indexed by rank ({@link
 *     RankStatus#EMPTY} for a rank that sent none); an empty list when no rank sent one.
 *     Observations only: nothing the loop decides reads them
 * @param events every rank's {@link RankEvents} of this round, indexed by rank ({@link
 *     RankEvents#EMPTY} for a rank that sent none); an empty list when no rank sent any. Decision
 *     inputs, identical on every rank that receives this round
 */
public record AgreedRound(
    long round,
    long tickNs,
    PressureSnapshot pressure,
    List<FrontendMessage> frontend,
    List<AgreedCompletion> completions,
    List<RankStatus> statuses,
    List<RankEvents> events) {

  public AgreedRound {
    if (round < 1) {
      throw new IllegalArgumentException("round=" + round + " must be >= 1");
    }
    if (pressure == null
        || frontend == null
        || completions == null
        || statuses == null
        || events == null) {
      throw new IllegalArgumentException("round " + round + " is incomplete");
    }
    frontend = List.copyOf(frontend);
    completions = List.copyOf(completions);
    statuses = List.copyOf(statuses);
    events = List.copyOf(events);
    for (int i = 1; i < completions.size(); i++) {
      long previous = completions.get(i - 1).operationId();
      long next = completions.get(i).operationId();
      if (next <= previous) {
        throw new IllegalArgumentException(
            "round "
                + round
                + " completions must ascend by operation id: "
                + previous
                + " then "
                + next);
      }
    }
  }

  /** A round in which no rank sent events. */
  public AgreedRound(
      long round,
      long tickNs,
      PressureSnapshot pressure,
      List<FrontendMessage> frontend,
      List<AgreedCompletion> completions,
      List<RankStatus> statuses) {
    this(round, tickNs, pressure, frontend, completions, statuses, List.of());
  }

  /** A round in which no rank sent a status or events. */
  public AgreedRound(
      long round,
      long tickNs,
      PressureSnapshot pressure,
      List<FrontendMessage> frontend,
      List<AgreedCompletion> completions) {
    this(round, tickNs, pressure, frontend, completions, List.of(), List.of());
  }

  /** The status rank {@code rank} sent this round ({@link RankStatus#EMPTY} for none). */
  public RankStatus status(int rank) {
    return rank >= 0 && rank < statuses.size() ? statuses.get(rank) : RankStatus.EMPTY;
  }

  /**
   * The events rank {@code rank} sent this round ({@link RankEvents#EMPTY} for none, and for a rank
   * outside the list).
   */
  public RankEvents events(int rank) {
    return rank >= 0 && rank < events.size() ? events.get(rank) : RankEvents.EMPTY;
  }

  /** The request ids the client cancelled this round, in the leader's order. */
  public List<Long> cancellations() {
    List<Long> ids = new ArrayList<>();
    for (FrontendMessage m : frontend) {
      if (m.kind() == FrontendMessage.Kind.CANCEL) {
        ids.add(m.requestId());
      }
    }
    return List.copyOf(ids);
  }

  /** The new requests of this round, in the leader's order. */
  public List<FrontendMessage> newRequests() {
    List<FrontendMessage> out = new ArrayList<>();
    for (FrontendMessage m : frontend) {
      if (m.kind() == FrontendMessage.Kind.NEW_REQUEST) {
        out.add(m);
      }
    }
    return List.copyOf(out);
  }

  /** The administrative commands among the frontend messages, in order. */
  public List<FrontendMessage> adminCommands() {
    List<FrontendMessage> out = new ArrayList<>();
    for (FrontendMessage m : frontend) {
      if (m.kind() == FrontendMessage.Kind.ADMIN) {
        out.add(m);
      }
    }
    return List.copyOf(out);
  }

  /**
   * Feeds this round to the loop head in the contract's order: {@link LoopHeadFeedback#onTick}
   * first, then every frontend message in the leader's order, then every completion in ascending
   * operation id.
   */
  public void applyTo(LoopHeadFeedback head) {
    head.onTick(round, tickNs, pressure);
    for (FrontendMessage m : frontend) {
      switch (m.kind()) {
        case NEW_REQUEST -> head.onNewRequest(m);
        case CANCEL -> head.onCancel(m.requestId());
      }
    }
    for (AgreedCompletion c : completions) {
      head.onCompletion(c);
    }
  }
}
