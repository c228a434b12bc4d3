package io.tokenspeed.engine;

import io.tokenspeed.control.ControlConfig;
import io.tokenspeed.control.ControlPlaneException;
import io.tokenspeed.control.LocalRelayHub;
import io.tokenspeed.control.LocalReport;
import io.tokenspeed.control.MeshException;
import io.tokenspeed.control.RelayExchange;
import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.control.RankEvents;
import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.l3.L3Poll;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.SamplingState;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.OptionalLong;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.function.LongConsumer;
import java.util.function.LongSupplier;

/**
 * One rank's view of its tensor-parallel replica: the relay exchange every round goes through, and
 * the leader's frontend riding it. Every rank runs the same loop; what differs is who feeds it.
 *
 * <pre>
 *   leader (rank 0)                                   every rank, the same round
 *   intake: new requests, cancellations,              exchange(report) ──► agreed round n-1:
 *   administrative commands                              tick, pressure, L3 completions,
 *      └─► frontend messages of round n ───────────►    new requests, cancellations, commands
 *                                                            └─► the same scheduler input
 * </pre>
 *
 * <p>A new request leaves the leader as a message carrying its prompt, its resolved sampling
 * parameters (the seed included) and its logprobs setting; every rank, the leader included, admits
 * it when the round that carried it is agreed, so every rank's scheduler sees the same requests in
 * the same round and plans the same batch. Only the leader's requests have callers: a follower's
 * copies of them stream to nobody.
 *
 * <p>A single engine is a replica of one rank ({@link #solo}): the same exchange over an in-memory
 * one-rank transport, which returns each round from the call that gathered it. Its intake and
 * commands do not ride the frame (there is nobody to send them to): the call returns them as they
 * came, in the same round, so a single engine admits a request in the round after its submission,
 * with no encoding, as a replica's leader would one exchange later.
 *
 * <p>Only the loop thread calls the exchange; {@link #command} is called from any thread.
 */
final class Replica implements AutoCloseable {
  /** What a command asks every rank to do. */
  enum Kind {
    /** A full cache clear. */
    CLEAR_ALL,
    /** An L1-only (Device) clear. */
    CLEAR_DEVICE,
    /** The replica stops. */
    STOP,
    /** A namespace rotation: a full clear, then every later key under the version's namespace. */
    ROTATE,
    /** A weight update's fence: outstanding storage operations are rejected, none starts. */
    FENCE_STORAGE,
    /** The fence lifts: an abandoned weight update. */
    LIFT_FENCE,
    /** A weight update's switch: a rotation that also lifts the fence. */
    SWITCH,
    /** An administrative freeze: rounds go on with forward and storage permissions off. */
    FREEZE,
    /** The freeze lifts. */
    UNFREEZE,
    /** The replica closes: rounds go on without forward while its L3 work drains. */
    DRAIN,
    /**
     * The leader's newest measurements of what a restore and a recomputation cost: every rank's
     * scheduler decides with them from this round on ({@link CostReporter}).
     */
    COST_FIGURES
  }

  /**
   * A command every rank applies in the same round: its kind and, for {@link Kind#ROTATE} and
   * {@link Kind#SWITCH}, the weight version whose namespace later keys are built under, for {@link
   * Kind#COST_FIGURES} the figures (null for the others). It travels as one byte of kind followed
   * by the version's UTF-8 or the figures' wire form.
   */
  record Command(Kind kind, String weightVersion, CostFigures figures) {
    /** The longest weight version a command carries, in UTF-8 bytes. */
    static final int MAX_VERSION_BYTES = 1024;

    static final Command CLEAR_ALL = new Command(Kind.CLEAR_ALL, null);
    static final Command CLEAR_DEVICE = new Command(Kind.CLEAR_DEVICE, null);
    static final Command STOP = new Command(Kind.STOP, null);
    static final Command FENCE_STORAGE = new Command(Kind.FENCE_STORAGE, null);
    static final Command LIFT_FENCE = new Command(Kind.LIFT_FENCE, null);
    static final Command FREEZE = new Command(Kind.FREEZE, null);
    static final Command UNFREEZE = new Command(Kind.UNFREEZE, null);
    static final Command DRAIN = new Command(Kind.DRAIN, null);

    Command {
      boolean versioned = kind == Kind.ROTATE || kind == Kind.SWITCH;
      if (versioned != (weightVersion != null)) {
        throw new IllegalArgumentException(
            kind + (versioned ? " needs a weight version" : " carries no weight version"));
      }
      if ((kind == Kind.COST_FIGURES) != (figures != null)) {
        throw new IllegalArgumentException(
            kind + (figures == null ? " needs cost figures" : " carries no cost figures"));
      }
      if (versioned
          && (weightVersion.isBlank()
              || weightVersion.getBytes(StandardCharsets.UTF_8).length > MAX_VERSION_BYTES)) {
        throw new IllegalArgumentException(
            "weight_version must be a non-empty string of at most "
                + MAX_VERSION_BYTES
                + " UTF-8 bytes");
      }
    }

    Command(Kind kind, String weightVersion) {
      this(kind, weightVersion, null);
    }

    static Command rotate(String weightVersion) {
      return new Command(Kind.ROTATE, weightVersion);
    }

    static Command switchTo(String weightVersion) {
      return new Command(Kind.SWITCH, weightVersion);
    }

    static Command costFigures(CostFigures figures) {
      return new Command(Kind.COST_FIGURES, null, figures);
    }

    byte[] encode() {
      byte[] body =
          figures != null
              ? figures.encode()
              : weightVersion == null
                  ? new byte[0]
                  : weightVersion.getBytes(StandardCharsets.UTF_8);
      byte[] out = new byte[1 + body.length];
      out[0] = (byte) kind.ordinal();
      System.arraycopy(body, 0, out, 1, body.length);
      return out;
    }

    /** The command of an agreed message; a payload this build cannot read stops the replica. */
    static Command decode(long sequence, byte[] payload) {
      if (payload.length == 0 || payload[0] < 0 || payload[0] >= Kind.values().length) {
        throw new IllegalStateException(
            "administrative command "
                + sequence
                + " has kind "
                + (payload.length == 0 ? "none" : Byte.toString(payload[0]))
                + ", which this build does not know");
      }
      Kind kind = Kind.values()[payload[0]];
      boolean versioned = kind == Kind.ROTATE || kind == Kind.SWITCH;
      try {
        if (kind == Kind.COST_FIGURES) {
          return costFigures(
              CostFigures.decode(java.util.Arrays.copyOfRange(payload, 1, payload.length)));
        }
        String version =
            versioned ? new String(payload, 1, payload.length - 1, StandardCharsets.UTF_8) : null;
        return new Command(kind, version);
      } catch (IllegalArgumentException e) {
        throw new IllegalStateException(
            "administrative command " + sequence + " is malformed: " + e.getMessage(), e);
      }
    }
  }

  /** A command the leader sent, and the future its caller waits on. */
  private record Pending(Command command, CompletableFuture<Void> done) {}

  private final RelayExchange exchange;

  /** Times the exchange (a diagnostic: {@link #takeExchangeNanos}). */
  private final LongSupplier nanoClock;

  private final int rank;
  private final int size;

  /** Leader: requests sent in a round not yet agreed, by id (their handles have callers). */
  private final Map<Long, ActiveRequest> sent = new HashMap<>();

  /** Leader: commands asked for and not yet sent. */
  private final ConcurrentLinkedQueue<Pending> commands = new ConcurrentLinkedQueue<>();

  /** Leader: commands sent and not yet agreed, by sequence. */
  private final Map<Long, Pending> sentCommands = new HashMap<>();

  private long commandSequence;
  private boolean stopSent;

  /** The digest of the plan this rank ran in its last round (0 before the first). */
  private long planDigest;

  private Replica(RelayExchange exchange, LongSupplier nanoClock) {
    this.exchange = exchange;
    this.nanoClock = nanoClock;
    this.rank = exchange.config().rank();
    this.size = exchange.config().worldSize();
  }

  /**
   * Joins the replica's mesh (blocks until every rank is connected, or the connect timeout).
   *
   * @throws MeshException when the mesh cannot form
   */
  static Replica join(ControlConfig control, LongSupplier nanoClock) throws MeshException {
    return new Replica(RelayExchange.connect(control), nanoClock);
  }

  /**
   * A single engine's replica of one rank, over a one-rank in-memory transport (no socket), its
   * agreement window from {@code control} (one rank's, sized by the caller); a simulation's planted
   * bugs reach its exchange when {@code simulation} is not null.
   */
  static Replica solo(ControlConfig control, LongSupplier nanoClock, Simulation simulation)
      throws MeshException {
    if (control.worldSize() != 1) {
      throw new IllegalArgumentException(
          "a single engine is a replica of one rank, not " + control.worldSize());
    }
    RelayExchange exchange = RelayExchange.connect(control, new LocalRelayHub(1));
    if (simulation != null) {
      simulation.planting().exchange(exchange);
    }
    return new Replica(exchange, nanoClock);
  }

  /** Joins the replica's in-memory hub, as the whole-loop simulation runs it. */
  static Replica join(ControlConfig control, LongSupplier nanoClock, Simulation simulation)
      throws MeshException {
    RelayExchange exchange = RelayExchange.connect(control, simulation.hub());
    simulation.planting().exchange(exchange);
    return new Replica(exchange, nanoClock);
  }

  int rank() {
    return rank;
  }

  long lateCompletionReports() {
    return exchange.lateReports();
  }

  int size() {
    return size;
  }

  boolean leader() {
    return rank == 0;
  }

  /**
   * Whether the exchange returns each round one call late (several ranks); a single rank's returns
   * it from the call that gathered it.
   */
  boolean deliversLate() {
    return size > 1;
  }

  /** The round timeout: the longest one rank waits for another in any exchange. */
  long roundTimeoutMs() {
    return exchange.config().roundTimeoutMs();
  }

  /**
   * Asks every rank to apply {@code command} in the same round (leader only, any thread); completes
   * once the leader applied it.
   */
  CompletableFuture<Void> command(Command command) {
    CompletableFuture<Void> done = new CompletableFuture<>();
    if (!leader()) {
      done.completeExceptionally(
          new IllegalStateException(
              "rank " + rank + " is not the leader: administration goes to rank 0"));
      return done;
    }
    commands.add(new Pending(command, done));
    return done;
  }

  /** True while commands wait to be sent (the leader runs a round for them). */
  boolean commandsPending() {
    return !commands.isEmpty();
  }

  /**
   * Leader: true while requests or commands it sent wait for the round that agrees on them (one
   * exchange later): the loop runs that round at once rather than at the next heartbeat. Loop
   * thread only.
   */
  boolean awaitingAgreement() {
    return !sent.isEmpty() || !sentCommands.isEmpty();
  }

  /** What one agreed round asks of this rank's loop. */
  record Agreed(
      Optional<AgreedRound> round,
      List<ActiveRequest> newRequests,
      List<Long> cancellations,
      List<Command> commands) {

    /** Every rank's events of the round, by rank (empty for none, and on a single rank). */
    List<RankEvents> events() {
      return round.map(AgreedRound::events).orElse(List.of());
    }

    /** The status rank {@code rank} sent in this round (empty for none, or before the first). */
    RankStatus status(int rank) {
      return round.map(r -> r.status(rank)).orElse(RankStatus.EMPTY);
    }
  }

  /**
   * The round's exchange. The leader sends {@code newRequests} (taken from its intake), {@code
   * cancellations} and the commands asked for since; every rank sends its clock, {@code status} and
   * {@code events} (empty for none: a single rank's events never leave it) and, with L3, its
   * executor's poll. Returns what the agreed round (one exchange late) brings: new requests (the
   * leader's own objects there, decoded copies elsewhere), cancellations and commands, in the
   * leader's order, and every rank's status. A single rank's round is the one just gathered, and it
   * brings the intake and commands of this call as they came.
   *
   * @throws ControlPlaneException when a rank is silent past the round timeout, leaves, or the
   *     reports contradict each other: the replica must stop
   */
  Agreed exchange(
      long nowNs,
      L3Poll poll,
      List<ActiveRequest> newRequests,
      List<Long> cancellations,
      RankStatus status,
      RankEvents events,
      LongConsumer cancel,
      OptionalInt eosId)
      throws ControlPlaneException {
    if (size == 1) {
      return soloExchange(nowNs, poll, newRequests, cancellations);
    }
    List<FrontendMessage> frontend = new ArrayList<>();
    if (leader()) {
      for (ActiveRequest a : newRequests) {
        frontend.add(FrontendMessage.newRequest(a.id, encode(a)));
        sent.put(a.id, a);
      }
      for (long id : cancellations) {
        frontend.add(FrontendMessage.cancel(id));
      }
      for (Pending p; (p = commands.poll()) != null; ) {
        long seq = ++commandSequence;
        frontend.add(FrontendMessage.admin(seq, p.command().encode()));
        sentCommands.put(seq, p);
      }
    } else if (!newRequests.isEmpty() || !cancellations.isEmpty()) {
      throw new IllegalStateException("rank " + rank + " is not the leader: it takes no requests");
    }
    LocalReport report =
        poll == null
            ? new LocalReport(nowNs, PressureSnapshot.IDLE, List.of(), frontend, null)
            : new LocalReport(nowNs, poll.pressure(), poll.completions(), frontend, null);
    long t0 = nanoClock.getAsLong();
    Optional<AgreedRound> agreed =
        exchange.exchange(report.withPlanDigest(planDigest).withStatus(status).withEvents(events));
    recordExchange(nanoClock.getAsLong() - t0);
    if (agreed.isEmpty()) {
      return new Agreed(agreed, List.of(), List.of(), List.of());
    }
    AgreedRound round = agreed.get();
    List<ActiveRequest> admitted = new ArrayList<>();
    for (FrontendMessage m : round.newRequests()) {
      ActiveRequest a =
          leader()
              ? sent.remove(m.requestId())
              : decode(m.requestId(), m.payload(), cancel, eosId, nowNs);
      if (a == null) {
        throw new IllegalStateException(
            "round "
                + round.round()
                + " admits request "
                + m.requestId()
                + " the leader never sent");
      }
      admitted.add(a);
    }
    List<Command> applied = new ArrayList<>();
    for (FrontendMessage m : round.adminCommands()) {
      applied.add(Command.decode(m.requestId(), m.payload()));
    }
    return new Agreed(agreed, admitted, round.cancellations(), applied);
  }

  /**
   * A single rank's exchange: the report carries the clock and the poll; the intake and the
   * commands stay local and come back with the round (the commands' callers complete in {@link
   * #commandsApplied}, as a leader's do).
   */
  private Agreed soloExchange(
      long nowNs, L3Poll poll, List<ActiveRequest> newRequests, List<Long> cancellations)
      throws ControlPlaneException {
    LocalReport report =
        poll == null
            ? LocalReport.idle(nowNs)
            : LocalReport.of(nowNs, poll.pressure(), poll.completions());
    Optional<AgreedRound> agreed = exchange.exchange(report);
    List<Command> applied = new ArrayList<>();
    for (Pending p; (p = commands.poll()) != null; ) {
      applied.add(p.command());
      soloApplied.add(p);
    }
    return new Agreed(agreed, List.copyOf(newRequests), List.copyOf(cancellations), applied);
  }

  /** A single rank: the commands its latest exchange returned, completed once applied. */
  private final List<Pending> soloApplied = new ArrayList<>();

  /**
   * Completes the callers of the commands of {@code agreed} (leader; after the loop applied them).
   */
  void commandsApplied(Optional<AgreedRound> agreed) {
    if (size == 1) {
      soloApplied.forEach(p -> p.done().complete(null));
      soloApplied.clear();
      return;
    }
    if (!leader() || agreed.isEmpty()) {
      return;
    }
    for (FrontendMessage m : agreed.get().adminCommands()) {
      Pending p = sentCommands.remove(m.requestId());
      if (p != null) {
        p.done().complete(null);
      }
    }
  }

  /** The most exchange durations kept between two reads of {@link #takeExchangeNanos}. */
  private static final int EXCHANGE_RECORD = 1 << 16;

  private final long[] exchangeNanos = new long[EXCHANGE_RECORD];
  private int exchangeCount;

  private synchronized void recordExchange(long ns) {
    if (exchangeCount < EXCHANGE_RECORD) {
      exchangeNanos[exchangeCount++] = ns;
    }
  }

  /**
   * The time each round since the last call spent in the exchange (the round's agreement: this
   * rank's report out, every report in), in nanoseconds, oldest first (at most {@value
   * #EXCHANGE_RECORD}; any thread); none on a single rank, which waits for nobody.
   */
  synchronized long[] takeExchangeNanos() {
    long[] out = java.util.Arrays.copyOf(exchangeNanos, exchangeCount);
    exchangeCount = 0;
    return out;
  }

  /** Records the digest of the plan this rank just ran, for the next round's report. */
  void notePlan(long digest) {
    planDigest = digest;
  }

  /** Asks the replica to stop (leader): every rank ends in the round that agrees on it. */
  void stop() {
    if (leader() && !stopSent) {
      stopSent = true;
      commands.add(new Pending(Command.STOP, new CompletableFuture<>()));
    }
  }

  /** Fails the callers of commands that were never applied (after the loop ended). */
  void failPending(Throwable why) {
    for (Pending p; (p = commands.poll()) != null; ) {
      p.done().completeExceptionally(why);
    }
    for (Pending p : sentCommands.values()) {
      p.done().completeExceptionally(why);
    }
    sentCommands.clear();
    for (Pending p : soloApplied) {
      p.done().completeExceptionally(why);
    }
    soloApplied.clear();
  }

  /** Requests sent and not yet agreed (leader): their callers wait on them. */
  Iterable<ActiveRequest> unagreed() {
    return sent.values();
  }

  /** How many requests were sent and not yet agreed (leader; 0 on the other ranks). */
  int unagreedCount() {
    return sent.size();
  }

  @Override
  public void close() {
    exchange.close();
  }

  // ---------------------------------------------------------------- the request codec

  /**
   * Version 2 added the three penalties after {@code ignoreEos}; version 3 the disaggregated half's
   * ticket after the logprobs setting.
   */
  private static final int CODEC_VERSION = 3;

  /** A ticket's first byte: none, a prefill half, a decode half. */
  private static final int NO_TICKET = 0;

  private static final int PREFILL_TICKET = 1;
  private static final int DECODE_TICKET = 2;

  /**
   * A new request as every rank needs it: prompt, resolved sampling parameters (penalties included,
   * so a follower penalizes and samples its rows as the leader does), logprobs.
   */
  static byte[] encode(ActiveRequest a) {
    SamplingParams p = a.sampling.params();
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(64 + a.promptTokens * 4);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(CODEC_VERSION);
      out.writeInt(a.promptTokens);
      for (int i = 0; i < a.promptTokens; i++) {
        out.writeInt(a.tokens[i]);
      }
      out.writeDouble(p.temperature());
      out.writeInt(p.topK());
      out.writeDouble(p.topP());
      out.writeDouble(p.minP());
      out.writeBoolean(p.seed().isPresent());
      out.writeLong(p.seed().orElse(0));
      out.writeInt(p.maxTokens());
      out.writeInt(p.stopTokenIds().size());
      for (int id : new TreeSet<>(p.stopTokenIds())) {
        out.writeInt(id);
      }
      out.writeBoolean(p.ignoreEos());
      out.writeDouble(p.presencePenalty());
      out.writeDouble(p.frequencyPenalty());
      out.writeDouble(p.repetitionPenalty());
      out.writeInt(a.handle.topLogprobs());
      switch (a.ticket) {
        case null -> out.writeByte(NO_TICKET);
        case PdTicket.Prefill t -> {
          out.writeByte(PREFILL_TICKET);
          out.writeLong(t.room());
          out.writeInt(t.decodeRanks().size());
          for (java.net.InetSocketAddress to : t.decodeRanks()) {
            out.writeUTF(to.getHostString());
            out.writeInt(to.getPort());
          }
        }
        case PdTicket.Decode t -> {
          out.writeByte(DECODE_TICKET);
          out.writeLong(t.room());
          out.writeInt(t.prefillRanks());
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  /** A follower's copy of a request the leader sent (its handle streams to nobody). */
  static ActiveRequest decode(
      long id, byte[] payload, LongConsumer cancel, OptionalInt eosId, long nowNs) {
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(payload))) {
      int version = in.readUnsignedByte();
      if (version != CODEC_VERSION) {
        throw new IllegalStateException(
            "request " + id + " is encoded in version " + version + ", not " + CODEC_VERSION);
      }
      int[] prompt = new int[in.readInt()];
      for (int i = 0; i < prompt.length; i++) {
        prompt[i] = in.readInt();
      }
      double temperature = in.readDouble();
      int topK = in.readInt();
      double topP = in.readDouble();
      double minP = in.readDouble();
      boolean seeded = in.readBoolean();
      long seed = in.readLong();
      int maxTokens = in.readInt();
      java.util.Set<Integer> stops = new java.util.HashSet<>();
      for (int n = in.readInt(); n > 0; n--) {
        stops.add(in.readInt());
      }
      boolean ignoreEos = in.readBoolean();
      double presencePenalty = in.readDouble();
      double frequencyPenalty = in.readDouble();
      double repetitionPenalty = in.readDouble();
      int topLogprobs = in.readInt();
      PdTicket ticket =
          switch (in.readUnsignedByte()) {
            case NO_TICKET -> null;
            case PREFILL_TICKET -> {
              long room = in.readLong();
              List<java.net.InetSocketAddress> to = new ArrayList<>();
              for (int n = in.readInt(); n > 0; n--) {
                to.add(new java.net.InetSocketAddress(in.readUTF(), in.readInt()));
              }
              yield new PdTicket.Prefill(room, to);
            }
            case DECODE_TICKET -> new PdTicket.Decode(in.readLong(), in.readInt());
            default -> throw new IllegalStateException("request " + id + " has an unknown ticket");
          };
      SamplingParams params =
          new SamplingParams(
              temperature,
              topK,
              topP,
              minP,
              seeded ? OptionalLong.of(seed) : OptionalLong.empty(),
              maxTokens,
              stops,
              ignoreEos,
              presencePenalty,
              frequencyPenalty,
              repetitionPenalty);
      ActiveRequest a =
          new ActiveRequest(
              id,
              new RequestHandle(id, cancel, topLogprobs),
              prompt,
              new SamplingState(params, eosId, prompt),
              nowNs);
      a.ticket = ticket;
      return a;
    } catch (IOException e) {
      throw new UncheckedIOException("request " + id + " is cut short", e);
    }
  }
}
