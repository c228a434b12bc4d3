package io.tokenspeed.control;

import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import java.nio.channels.ServerSocketChannel;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The replica's relay exchange: once per round, every cache-owning rank contributes one report and
 * receives everyone's, and every rank turns the same gathered reports into the same {@link
 * AgreedRound}.
 *
 * <pre>
 *   rank r, round n                                      (every rank, every round: idle and
 *   ---------------                                       frozen rounds included)
 *   LocalReport ──validate──► REPORT frame  ─┐
 *        │  invalid                          ├─ all-gather over the mesh ─► reports[0..W-1]
 *        └────────────────► ERROR report   ─┘                                  │
 *                                                                             ▼
 *   any ERROR report? ── yes ─► ProtocolException (same round, same message, every rank)
 *        │ no
 *        ▼
 *   plan digests differ? ── yes ─► ProtocolException: the plans of round n-1 diverged
 *        │ no
 *        ▼
 *   tick = reports[0].clock (must not go backwards)     pressure = MAX over reports
 *   frontend = reports[0].frontend (others must send none)
 *   statuses = every report's status, by rank (observations, never agreed on)
 *   events = every report's events, by rank (decision inputs, the same on every rank)
 *   completions = Agreement.apply(records by rank)      ─► AgreedRound n
 * </pre>
 *
 * <p><b>Why one exchange per round.</b> A collective entered only on some data-dependent path is
 * how multi-rank caches deadlock. Here the exchange is unconditional: the loop calls {@link
 * #exchange} exactly once per round whether it has completions or not, so every rank enters the
 * same collective the same number of times. The report carries facts (records keyed by operation id
 * and rank), never counts that assume ranks move in lockstep.
 *
 * <p><b>Why every rank agrees.</b> Each rank decodes the same bytes — its own frame included — and
 * feeds them to its own {@link Agreement} in rank order. The tick, pressure, frontend messages,
 * completions, the late records dropped and any {@link ProtocolException} are therefore identical
 * on every rank. A local report that fails validation (a poll error, a record contradicting the
 * window, frontend messages from a rank other than the leader, a report larger than a frame) is not
 * withheld: it is sent as an error report, so that every rank raises the same error in the same
 * round instead of one rank leaving the collective.
 *
 * <p><b>Events arrive in their own round, exactly once.</b> The events a rank puts in its report of
 * round n ({@link LocalReport#events()}) appear in {@link AgreedRound} n at its index, identical on
 * every rank, and in no other round. Each step keeps this: the exchange sends one frame per rank
 * per round and the transport takes exactly one frame per peer per round, in order, from a
 * connection that delivers a peer's frames in the order it sent them (a peer one round ahead leaves
 * its next frame for the next round, over the TCP mesh and the {@link LocalRelayHub} alike); a
 * frame whose rank or round is not the one expected fails the round ({@link
 * MeshException.Reason#DESYNC}) rather than being taken into it; and round n's {@link AgreedRound}
 * is built once, from round n's frames only, and handed out once (returned by one exchange, or as
 * {@link ControlPlaneException#finalRound()}). Nothing holds events back across rounds: unlike
 * completion records, which wait in the {@link Agreement} until every owner reported their
 * operation (and whose late duplicates it drops), events are copied from the round's reports into
 * the round. A report too late for its round's deadline does not move to a later round either: the
 * round fails ({@link MeshException.Reason#TIMEOUT}). What can happen is that a round is never
 * delivered: when any report of round n is an error report — its rank's poll failed, its records
 * contradict the window, or its report does not fit in a frame, which a status and events alone
 * never cause (see {@link ControlConfig#MIN_MAX_FRAME_BYTES}) — every rank fails round n with the
 * same {@link ProtocolException} and no rank receives it; after a transport failure, a round above
 * the survivors' settled last round ({@link ControlPlaneException#lastAppliedRound()}) reaches none
 * of them. Either way the round's events go with the whole round and are never delivered apart from
 * it: on every rank alike after a protocol error, and on every survivor that settled on the same
 * round after a transport failure (a survivor that hears from no other settles on its own round, as
 * below). A replica of one rank delivers round n, with its events, from the exchange that gathered
 * it.
 *
 * <p><b>Plans are compared every round.</b> Each report carries {@link LocalReport#planDigest()},
 * the digest of the plan its rank executed in its previous round. Every rank of a healthy replica
 * runs the same scheduler on the same agreed rounds and reports the same digest. When the reports
 * of round n are all valid but their digests are not all equal, every rank throws the same {@link
 * ProtocolException} in round n: {@code protocol error in round n: the plans of round n-1 diverged:
 * rank 0: D0, rank 1: D1, ...}, with every rank's digest as 16 lowercase hex digits, in rank order.
 * The check reads only the gathered reports, so it is identical on every rank; a round with an
 * error report fails on that report instead, and its digests are not compared. A single-rank
 * replica has nothing to compare and accepts any digest. The exchange does not interpret the
 * digest: a replica whose ranks report 0 throughout is never flagged.
 *
 * <p><b>A round is delivered one exchange late.</b> The call that gathers round n returns round
 * n-1, so that no rank applies a round that another rank might not apply. Round n's frames from
 * every rank prove that every rank gathered round n-1 (a rank starts round n only after it gathered
 * n-1), so when a rank returns round n-1, every rank holds it. If a rank failed while gathering
 * round n, the survivors settle: each sends its newest gathered round to every peer it still
 * reaches (see {@link RelayTransport#settle}) and stops at the smallest round among itself and
 * those it heard from — its own when it heard from none. That is either the round it last returned
 * or the one it held back, which the exception then carries ({@link
 * ControlPlaneException#finalRound()}) for the caller to apply before it stops:
 *
 * <pre>
 *   gathered G (every rank's G is within one of every other's), returned G-1
 *   settle:  S = min(G over this rank and the peers that answered)     S is G-1 or G
 *   S = G  ─►  finalRound() = round G (held back until now)      lastAppliedRound() = G
 *   S = G-1 ─► finalRound() empty                                lastAppliedRound() = G-1
 * </pre>
 *
 * Every survivor that hears from another survivor computes the same S, including a rank that was
 * frozen past the timeout and resumes: it finds its peers' FINAL frames in its sockets and stops at
 * their round. A protocol error is gathered identically everywhere, so it needs no settling: every
 * rank stops having applied round n-1. A loop that ends on its own (an agreed stop) runs one more
 * exchange with an idle report to receive its last round.
 *
 * <p><b>One rank delivers at once.</b> A replica of one rank has no other rank that might not hold
 * the round it gathered, so its exchange returns round n from the call that gathers round n: the
 * tick is the caller's clock and its completions are agreed in the round that polled them. A single
 * engine's loop goes through the same exchange as a replica's ranks, with nothing to wait for.
 *
 * <p><b>Failure.</b> The first {@link ControlPlaneException} ends the exchange: later calls throw
 * it again. Sockets stay open until {@link #close()}.
 *
 * <p>Single-threaded: one event loop thread calls {@link #exchange}; nothing here is thread-safe.
 */
public final class RelayExchange implements AutoCloseable {

  private static final Logger LOG = Logger.getLogger(RelayExchange.class.getName());

  private final ControlConfig config;
  private final RelayTransport mesh;
  private final FrameDecoder decoder;
  private final Agreement agreement;
  private long round;
  private long lastTickNs;
  private AgreedRound held;
  private long delivered;
  private ControlPlaneException failure;
  private boolean closed;

  private RelayExchange(ControlConfig config, RelayTransport mesh) {
    this.config = config;
    this.mesh = mesh;
    this.decoder = new FrameDecoder(config.maxFrameBytes());
    this.agreement =
        new Agreement(config.worldSize(), config.windowOperations(), config.windowKeys());
  }

  /**
   * Joins the mesh: listens on this rank's configured address, connects to every other rank and
   * checks their handshakes. Blocks until all ranks are connected or {@code connectTimeoutMs}
   * passes.
   */
  public static RelayExchange connect(ControlConfig config) throws MeshException {
    return new RelayExchange(config, Mesh.open(config, null));
  }

  /**
   * Like {@link #connect(ControlConfig)}, but listens on {@code listener}, already bound (for
   * example to port 0, with the chosen port handed to the peers). The mesh takes ownership of it.
   */
  public static RelayExchange connect(ControlConfig config, ServerSocketChannel listener)
      throws MeshException {
    return new RelayExchange(config, Mesh.open(config, listener));
  }

  /**
   * Joins {@code hub}, the in-memory transport among the ranks of one replica in this JVM (a
   * simulation's): the exchange runs exactly as over TCP, on frames of the same bytes. Returns at
   * once; the ranks meet in their first exchange.
   *
   * @throws MeshException HANDSHAKE when {@code config} disagrees with the hub or with a rank that
   *     joined before (world size, replica, shared limits), or its rank has joined already
   */
  public static RelayExchange connect(ControlConfig config, LocalRelayHub hub)
      throws MeshException {
    return new RelayExchange(config, hub.join(config));
  }

  /** The owner agreement (the simulation's planted-bug tests reach it). */
  Agreement agreement() {
    return agreement;
  }

  /** This rank's settings. */
  public ControlConfig config() {
    return config;
  }

  /** The last round this exchange entered (0 before the first). */
  public long round() {
    return round;
  }

  /** The last round {@link #exchange} returned (0 before it returned one). */
  public long deliveredRound() {
    return delivered;
  }

  /** Operations some but not all owners have reported so far. */
  public int pendingOperations() {
    return agreement.pendingOperations();
  }

  /** Keys of those operations. */
  public long pendingKeys() {
    return agreement.pendingKeys();
  }

  /**
   * Completion records dropped because their operation was already agreed: an owner's second
   * report, arriving late. Every rank drops the same ones; the first is logged, the rest counted.
   */
  public long lateReports() {
    return agreement.lateReports();
  }

  /**
   * Runs one round: contributes {@code local}, gathers every rank's report, and returns the round
   * before it — the newest round that every rank is known to hold (empty on the first call); a
   * replica of one rank returns the round just gathered (see the class essay). Call it exactly once
   * per event-loop round, idle and frozen rounds included, and apply what it returns.
   *
   * @throws ProtocolException when any rank's report was invalid, the ranks' plan digests differ,
   *     or the reports contradict each other (identically on every rank)
   * @throws MeshException when a peer is silent past the round timeout, disconnects, stops or sends
   *     a malformed frame; the survivors have settled on their last round by then
   */
  public Optional<AgreedRound> exchange(LocalReport local) throws ControlPlaneException {
    if (closed) {
      throw new IllegalStateException("rank " + config.rank() + "'s relay exchange is closed");
    }
    if (failure != null) {
      throw failure;
    }
    long n = ++round;
    AgreedRound agreed;
    try {
      byte[] own = FrameEncoder.encode(ownReport(n, local), config.maxFrameBytes());
      byte[][] frames = mesh.allGather(n, own);
      Frame.Report[] reports = new Frame.Report[frames.length];
      for (int r = 0; r < frames.length; r++) {
        reports[r] = decodeReport(n, r, frames[r]);
      }
      agreed = agree(n, reports);
    } catch (ProtocolException e) {
      // Gathered identically everywhere: every rank stops having applied round n-1.
      stop(e, held);
      throw e;
    } catch (MeshException e) {
      long gathered = n - 1;
      Map<Integer, Long> heard = mesh.settle(n, gathered, e.peerRank());
      long settled = gathered;
      for (long theirs : heard.values()) {
        settled = Math.min(settled, theirs);
      }
      stop(e, settled == gathered ? held : null);
      throw e;
    }
    AgreedRound out;
    if (config.worldSize() == 1) {
      out = agreed; // no other rank to wait for
    } else {
      out = held;
      held = agreed;
    }
    if (out != null) {
      delivered = out.round();
    }
    return Optional.ofNullable(out);
  }

  private void stop(ControlPlaneException e, AgreedRound last) {
    if (last != null) {
      delivered = last.round();
    }
    held = null;
    e.stopAt(last, delivered);
    failure = e;
  }

  /** This rank's report for round {@code n}, or an error report when {@code local} is invalid. */
  private Frame.Report ownReport(long n, LocalReport local) {
    int rank = config.rank();
    String error = null;
    if (local.pollError() != null) {
      error = "local poll failed: " + local.pollError();
    } else if (!config.leader() && !local.frontend().isEmpty()) {
      error =
          "rank "
              + rank
              + " is not the TP leader but brought "
              + local.frontend().size()
              + " frontend messages";
    } else {
      error = agreement.checkLocal(rank, local.completions());
    }
    if (error == null) {
      Frame.Report report =
          new Frame.Report(
              rank,
              n,
              local.clockNs(),
              local.pressure(),
              local.planDigest(),
              null,
              local.frontend(),
              local.completions(),
              local.status(),
              local.events());
      long length = FrameEncoder.encodedLength(report);
      if (length <= config.maxFrameBytes()) {
        return report;
      }
      error =
          "report of "
              + local.completions().size()
              + " records"
              + (local.frontend().isEmpty()
                  ? ""
                  : ", " + local.frontend().size() + " frontend messages")
              + (local.status().isEmpty()
                  ? ""
                  : ", a status of " + local.status().length() + " bytes")
              + (local.events().isEmpty()
                  ? ""
                  : ", events of " + local.events().length() + " bytes")
              + " is "
              + length
              + " bytes, more than max_frame_bytes="
              + config.maxFrameBytes();
    }
    return Frame.Report.ofError(
        rank,
        n,
        local.clockNs(),
        local.pressure(),
        local.planDigest(),
        FrameEncoder.clipReason(error));
  }

  private Frame.Report decodeReport(long n, int rank, byte[] frame) throws MeshException {
    Decoded decoded = decoder.decode(frame);
    if (!(decoded instanceof Decoded.Ok(Frame.Report report))) {
      if (rank == config.rank()) {
        throw new IllegalStateException(
            "rank " + rank + " cannot decode its own frame: " + decoded);
      }
      throw new MeshException(
          MeshException.Reason.MALFORMED_FRAME,
          rank,
          n,
          "rank " + rank + " sent a malformed frame in round " + n + ": " + decoded);
    }
    if (report.rank() != rank || report.round() != n) {
      throw new MeshException(
          MeshException.Reason.DESYNC,
          rank,
          n,
          "the connection of rank "
              + rank
              + " carried the report of rank "
              + report.rank()
              + " for round "
              + report.round()
              + " while this rank is in round "
              + n);
    }
    return report;
  }

  private AgreedRound agree(long n, Frame.Report[] reports) throws ProtocolException {
    List<String> errors = new ArrayList<>();
    for (Frame.Report r : reports) {
      if (r.failed()) {
        errors.add("rank " + r.rank() + ": " + r.error());
      } else if (r.rank() != 0 && !r.frontend().isEmpty()) {
        errors.add("rank " + r.rank() + ": frontend messages from a rank other than the leader");
      }
    }
    if (!errors.isEmpty()) {
      throw new ProtocolException(n, "invalid report from " + String.join("; ", errors));
    }
    checkPlanDigests(n, reports);
    Frame.Report leader = reports[0];
    long tickNs = leader.clockNs();
    if (n > 1 && tickNs - lastTickNs < 0) {
      throw new ProtocolException(
          n, "the leader's clock went backwards from " + lastTickNs + " to " + tickNs);
    }
    PressureSnapshot pressure = leader.pressure();
    List<List<StorageDone>> byRank = new ArrayList<>(reports.length);
    for (Frame.Report r : reports) {
      pressure = pressure.max(r.pressure());
      byRank.add(r.completions());
    }
    long lateBefore = agreement.lateReports();
    List<AgreedCompletion> completions = agreement.apply(n, byRank);
    if (lateBefore == 0 && agreement.lateReports() > 0) {
      LOG.log(
          Level.WARNING,
          "rank {0} dropped a late report of an agreed {1}; later ones are only counted",
          new Object[] {config.rank(), agreement.firstLateReport()});
    }
    lastTickNs = tickNs;
    List<FrontendMessage> frontend = leader.frontend();
    return new AgreedRound(
        n, tickNs, pressure, frontend, completions, statuses(reports), events(reports));
  }

  /** Every rank's status, by rank; an empty list when no rank sent one (an idle round). */
  private static List<RankStatus> statuses(Frame.Report[] reports) {
    boolean any = false;
    for (Frame.Report r : reports) {
      any |= !r.status().isEmpty();
    }
    if (!any) {
      return List.of();
    }
    List<RankStatus> out = new ArrayList<>(reports.length);
    for (Frame.Report r : reports) {
      out.add(r.status());
    }
    return out;
  }

  /**
   * Every rank's events, by rank, taken from this round's reports only; an empty list when no rank
   * sent any (an idle round).
   */
  private static List<RankEvents> events(Frame.Report[] reports) {
    boolean any = false;
    for (Frame.Report r : reports) {
      any |= !r.events().isEmpty();
    }
    if (!any) {
      return List.of();
    }
    List<RankEvents> out = new ArrayList<>(reports.length);
    for (Frame.Report r : reports) {
      out.add(r.events());
    }
    return out;
  }

  /**
   * Throws when the valid reports of round {@code n} do not all carry the same plan digest: the
   * plans the ranks executed in round {@code n-1} diverged. Reads only the gathered reports.
   */
  private static void checkPlanDigests(long n, Frame.Report[] reports) throws ProtocolException {
    long first = reports[0].planDigest();
    boolean agree = true;
    for (Frame.Report r : reports) {
      agree &= r.planDigest() == first;
    }
    if (agree) {
      return;
    }
    HexFormat hex = HexFormat.of();
    StringBuilder digests = new StringBuilder();
    for (Frame.Report r : reports) {
      if (!digests.isEmpty()) {
        digests.append(", ");
      }
      digests.append("rank ").append(r.rank()).append(": ").append(hex.toHexDigits(r.planDigest()));
    }
    throw new ProtocolException(n, "the plans of round " + (n - 1) + " diverged: " + digests);
  }

  /** Closes the connections; peers still in the mesh see this rank leave. */
  @Override
  public void close() {
    if (!closed) {
      closed = true;
      mesh.close();
    }
  }
}
