package io.tokenspeed.engine;

import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.cache.HeldBlock;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.CopyFence;
import io.tokenspeed.engine.memory.HostCacheStorage;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.sampling.FinishReason;
import io.tokenspeed.model.sampling.TokenLogprobs;
import io.tokenspeed.pd.Ack;
import io.tokenspeed.pd.Bootstrap;
import io.tokenspeed.pd.CachedTokens;
import io.tokenspeed.pd.Destinations;
import io.tokenspeed.pd.DoneInfo;
import io.tokenspeed.pd.FirstLogprobs;
import io.tokenspeed.pd.KvReceiver;
import io.tokenspeed.pd.KvSender;
import io.tokenspeed.pd.Landed;
import io.tokenspeed.pd.PdException;
import io.tokenspeed.pd.PdFrameDescriptor;
import io.tokenspeed.pd.PdMetrics;
import io.tokenspeed.pd.Registration;
import io.tokenspeed.pd.Transfer;
import io.tokenspeed.scheduler.RequestState;
import io.tokenspeed.scheduler.Scheduler;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;

/**
 * The loop's side of disaggregated serving (docs/pd.md): a prefill engine's rooms, which send the
 * prompt's KV and first token to a decode engine, and a decode engine's rooms, which land them.
 *
 * <p>The transport ({@code ts-pd}) calls back on its own threads; every callback only queues an
 * event here and wakes the loop, which runs the events at its next head ({@link #head}), so the
 * scheduler, the tiers and the requests stay the loop thread's. The requests' submissions run on
 * the caller's thread ({@link #prepare}): they only open the room on the transport.
 *
 * <pre>
 *   prefill   submitted pd (Bootstrapping; L3 may be prepared meanwhile) ─ACK─▶ Submitted ─▶ the
 *             ordinary prefill ─▶ first token: the prompt's blocks copied Device → Host into
 *             private Host blocks, sent from there with DONE; the scheduler lets the request go,
 *             and the Host blocks stay held until the transfer's fence (RECEIVED or CANCEL
 *             answered), when the handle ends
 *   decode    registered at submission; admitted into Landing (Device blocks for the prompt and
 *             its headroom); the BOOTSTRAP's reservation takes private Host blocks for the
 *             prompt's rows, the bytes land there; landed: Host → Device into the request's
 *             blocks, awaited, then published as its prefix (Landing ─▶ PrefillDone), the first
 *             token emitted, RECEIVED written; it decodes as any request
 * </pre>
 *
 * <p>What moves is what the next token reads, per cache group ({@link #promptRows}): every row of a
 * full-history group, the rows of a sliding window the next token still attends to, and a State
 * group's running state (the prefill side's working slot into the decode side's).
 */
final class PdPort implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger(PdPort.class.getName());

  /** What the loop does for the port: end a request, finish one its first token ended. */
  interface Ends {
    /** Ends a request the loop served (its handle, the round's count). */
    void end(ActiveRequest a, GenerationResult r);

    /**
     * Cancels a request the port ended (taken out of the active requests): the next round's input
     * carries the cancellation to the scheduler, which lets its resources go.
     */
    void cancel(long id);

    /** Ends a landed request whose first token finished it, as a sampled token would. */
    void finished(ActiveRequest a, FinishReason reason);
  }

  private final EngineRole role;
  private final CacheLayout layout;
  private final CacheCoordinator cache;
  private final Scheduler scheduler;
  private final HostCacheStorage host;
  private final Map<Long, ActiveRequest> active;
  private final ModelIdentity model;
  private final java.util.function.Supplier<String> weightVersion;
  private final String attentionBackend;
  private final int vocabSize;

  /** This rank's place in its replica, and how its KV splits into the pairs' units. */
  private final int rank;

  private final int ranks;
  private final boolean leader;
  private final PdShards shards;

  /** Whether the layout has State groups, whose running state lands in the working slot. */
  private final boolean hasStateGroups;

  private final KvSender sender;
  private final KvReceiver receiver;
  private final ConcurrentLinkedQueue<Runnable> inbox = new ConcurrentLinkedQueue<>();
  private volatile Runnable wake = () -> {};
  private Copies copies;
  private Ends ends;

  /** The ranks' agreement on what the transfers did (applied at once on a single rank). */
  private final PdEvents events;

  /** A decode replica's ranks' KV endpoints as the ranks reported them (index: rank). */
  private final InetSocketAddress[] endpoints;

  /** A prefill engine's rooms, by request id (opened on callers' threads). */
  private final Map<Long, PrefillRoom> prefillRooms = new ConcurrentHashMap<>();

  /** A decode engine's rooms, by request id (opened on callers' threads). */
  private final Map<Long, DecodeRoom> decodeRooms = new ConcurrentHashMap<>();

  /** The decode rooms' pairs by their room on the transport (the receiver names rooms). */
  private final Map<Long, PairLanding> landingsByRoom = new ConcurrentHashMap<>();

  /** Rooms whose blocks are held: sent and not yet fenced, reserved and not yet released. */
  private final Set<PrefillRoom> sent = new HashSet<>();

  private final Set<DecodeRoom> staged = new HashSet<>();

  /** A prefill request's room: its pairs' transfers, and the Host blocks they send from. */
  private static final class PrefillRoom {
    final long id;
    final List<PairSending> pairs;
    int acked; // pairs whose ACK reserved what the prompt needs
    String failure; // the first pair's failure before the ACK
    boolean failureCancelled; // that failure is the decode half's client cancelling
    boolean reported; // ACKED or FAILED reported
    boolean failed; // ended with an error; the room waits for the cancellation
    int[][] hostBlocks; // set when sent; freed at the agreed fence
    int[][] pinned; // the Device blocks the Device -> Host copy reads, until agreed copied
    ActiveRequest request; // set when sent: the handle ends at the fence
    boolean ended; // the handle ended already (cancelled while the fence stands)
    int fenced; // pairs whose fence stands
    String fenceError;
    boolean fenceCancelled; // that error is the decode half's client cancelling

    PrefillRoom(long id, List<PairSending> pairs) {
      this.id = id;
      this.pairs = pairs;
    }
  }

  /** One pair of a prefill room: the transfer to one decode rank. */
  private record PairSending(PdShards.Pair pair, Transfer transfer) {}

  /** A decode request's room: its pairs and, from its admission, its blocks. */
  private static final class DecodeRoom {
    final long id;
    final List<PairLanding> pairs = new ArrayList<>();
    int[][] hostBlocks; // the staging blocks the pairs land in, from the admission into Landing
    int[][] pinned; // the Device blocks they are copied into, from the admission
    int holding; // pairs whose destinations the receiver holds or that landed and wait for the copy
    int landed; // pairs landed
    boolean copying; // the Host -> Device copy runs
    boolean reported; // LANDED or FAILED reported
    boolean releaseReported; // RELEASED reported
    boolean ended; // the request ended on every rank (cancelled, failed)
    String failure; // a pair's failure, reported once the request is in (FAILED)
    boolean failureCancelled; // that failure is the prefill half's client cancelling

    DecodeRoom(long id) {
      this.id = id;
    }
  }

  /** One pair of a decode room: what one prefill rank sends. */
  private static final class PairLanding {
    final DecodeRoom room;
    final PdShards.Pair pair;
    final long transportRoom;
    volatile Registration registration; // set right after the pair is registered
    Bootstrap bootstrap;
    CompletableFuture<Destinations> reservation; // pending until the request is in Landing
    boolean checked; // the BOOTSTRAP matched the request
    boolean held; // the receiver holds its destinations
    Landed landed;

    PairLanding(DecodeRoom room, PdShards.Pair pair, long transportRoom) {
      this.room = room;
      this.pair = pair;
      this.transportRoom = transportRoom;
    }
  }

  /**
   * The port of an engine in a prefill or decode role ({@code options}); a fused engine has none.
   *
   * @param kvHeads the model's KV heads (how its attention KV splits over ranks)
   * @param shard this rank's place in its replica
   * @param leader whether this rank is its replica's leader (the one that takes requests)
   * @param vocabSize the model's vocabulary: a first token outside it is refused
   * @throws UncheckedIOException when a decode engine cannot bind its KV port
   */
  PdPort(
      PdOptions options,
      CacheLayout layout,
      CacheCoordinator cache,
      Scheduler scheduler,
      HostCacheStorage host,
      Map<Long, ActiveRequest> active,
      ModelIdentity model,
      java.util.function.Supplier<String> weightVersion,
      String attentionBackend,
      int vocabSize,
      int kvHeads,
      io.tokenspeed.model.parallel.Shard shard) {
    if (options.role() == EngineRole.FUSED) {
      throw new IllegalArgumentException("a fused engine has no PD port");
    }
    this.role = options.role();
    this.vocabSize = vocabSize;
    this.layout = layout;
    this.cache = cache;
    this.scheduler = scheduler;
    this.host = host;
    this.active = active;
    this.model = model;
    this.weightVersion = weightVersion;
    this.attentionBackend = attentionBackend;
    this.rank = shard.rank();
    this.ranks = shard.size();
    this.leader = shard.rank() == 0;
    this.shards = new PdShards(layout, kvHeads, shard, role == EngineRole.PREFILL);
    this.hasStateGroups =
        layout.groups().stream().anyMatch(g -> g.kind() instanceof GroupKind.StateCheckpoints);
    this.events = new PdEvents(ranks, this::apply);
    this.endpoints = new InetSocketAddress[ranks];
    if (role == EngineRole.PREFILL) {
      this.sender = KvSender.open(options.secret(), options.settings());
      this.receiver = null;
    } else {
      this.sender = null;
      try {
        this.receiver =
            KvReceiver.open(options.listen(), options.secret(), options.settings(), this::reserve);
      } catch (IOException e) {
        throw new UncheckedIOException(
            "the decode engine cannot listen for KV connections on " + options.listen(), e);
      }
      InetSocketAddress mine = receiver.address();
      endpoints[rank] = mine;
      if (ranks > 1) {
        events.report(PdEvents.Kind.ENDPOINT, rank, mine.getHostString() + ":" + mine.getPort());
      }
    }
  }

  /** The loop's copies and ends, once the round exists. */
  void bind(Copies copies, Ends ends, Runnable wake, java.util.function.LongSupplier nanoClock) {
    this.copies = copies;
    this.ends = ends;
    this.wake = wake;
    this.nanoClock = nanoClock;
  }

  private java.util.function.LongSupplier nanoClock = System::nanoTime;

  EngineRole role() {
    return role;
  }

  /** A decode engine's KV endpoint: this rank's. */
  Optional<InetSocketAddress> endpoint() {
    return receiver == null ? Optional.empty() : Optional.of(receiver.address());
  }

  /**
   * A decode replica's KV endpoints, by rank, once every rank's is known (a prefill half's ticket
   * names them all); empty before, and for a prefill engine.
   */
  List<InetSocketAddress> endpoints() {
    if (receiver == null) {
      return List.of();
    }
    for (InetSocketAddress a : endpoints) {
      if (a == null) {
        return List.of();
      }
    }
    return List.of(endpoints);
  }

  /** The transport's counters. */
  PdMetrics metrics() {
    return receiver != null ? receiver.metrics() : sender.metrics();
  }

  /** The events this rank sends with the round's report. */
  io.tokenspeed.core.control.RankEvents outgoing() {
    return events.take();
  }

  /** The agreed round's events of every rank (a replica of several ranks; the loop's head). */
  void agreed(List<io.tokenspeed.core.control.RankEvents> byRank) {
    events.agreed(byRank);
  }

  /** The identity digest of {@code pair}'s BOOTSTRAP (see {@link PdShards#identity}). */
  private byte[] identity(PdShards.Pair pair, int prefillRanks, int decodeRanks) {
    return shards.identity(
        model.modelId(),
        model.checkpointRevision(),
        weightVersion.get(),
        attentionBackend,
        pair,
        prefillRanks,
        decodeRanks);
  }

  // ------------------------------------------------------------------ submission

  /**
   * Opens the transport's side of a ticketed request: on the leader before the request is queued
   * (the caller's thread), on the other ranks as the agreed round takes it in (the loop). Returns
   * what is wrong with the ticket for this engine, or null. On null, {@link #abandon} must follow
   * if the request is not queued after all.
   */
  String prepare(ActiveRequest a, PdTicket ticket, int topLogprobs) {
    switch (ticket) {
      case PdTicket.Prefill p -> {
        if (role != EngineRole.PREFILL) {
          return wrongRole(ticket);
        }
        List<PdShards.Pair> pairs;
        try {
          pairs = shards.pairs(p.decodeRanks().size());
        } catch (IllegalArgumentException e) {
          return e.getMessage();
        }
        List<PairSending> sending = new ArrayList<>();
        for (PdShards.Pair pair : pairs) {
          InetSocketAddress to = p.decodeRanks().get(pair.decodeRank());
          long sub = PdShards.room(p.room(), rank, pair.decodeRank());
          try {
            Bootstrap b =
                new Bootstrap(
                    prompt(a), identity(pair, ranks, p.decodeRanks().size()), pair.unitBytes());
            sending.add(new PairSending(pair, sender.bootstrap(sub, to, b)));
          } catch (IllegalArgumentException | IllegalStateException e) {
            sending.forEach(s -> s.transfer().cancel("a pair of the room could not open"));
            return "the KV transfer to " + to + " cannot open room " + sub + ": " + e.getMessage();
          }
        }
        PrefillRoom room = new PrefillRoom(a.id, List.copyOf(sending));
        prefillRooms.put(a.id, room);
        for (PairSending s : room.pairs) {
          s.transfer()
              .acknowledged()
              .whenComplete((ack, ex) -> post(() -> onAck(room, s, ack, ex)));
        }
        return null;
      }
      case PdTicket.Decode d -> {
        if (role != EngineRole.DECODE) {
          return wrongRole(ticket);
        }
        List<PdShards.Pair> pairs;
        try {
          pairs = shards.pairs(d.prefillRanks());
        } catch (IllegalArgumentException e) {
          return e.getMessage();
        }
        // known before it is registered: a BOOTSTRAP already waiting is answered at once
        DecodeRoom room = new DecodeRoom(a.id);
        for (PdShards.Pair pair : pairs) {
          long sub = PdShards.room(d.room(), pair.prefillRank(), rank);
          PairLanding pl = new PairLanding(room, pair, sub);
          if (landingsByRoom.putIfAbsent(sub, pl) != null) {
            room.pairs.forEach(x -> landingsByRoom.remove(x.transportRoom, x));
            return "room " + d.room() + " is already expected";
          }
          room.pairs.add(pl);
        }
        decodeRooms.put(a.id, room);
        for (PairLanding pl : room.pairs) {
          Registration reg;
          try {
            reg = receiver.expect(pl.transportRoom);
          } catch (IllegalStateException e) {
            cancelRegistrations(room, "the room could not be registered");
            forget(room);
            return e.getMessage();
          }
          pl.registration = reg;
          reg.landed().whenComplete((l, ex) -> post(() -> onPairLanded(pl, l, ex)));
        }
        return null;
      }
    }
  }

  /** A prepared request that was not queued after all (the intake was full). */
  void abandon(long id) {
    PrefillRoom p = prefillRooms.remove(id);
    if (p != null) {
      p.pairs.forEach(s -> s.transfer().cancel("the prefill engine's intake is full"));
    }
    DecodeRoom d = decodeRooms.get(id);
    if (d != null) {
      forget(d);
      cancelRegistrations(d, "the decode engine's intake is full");
    }
  }

  /**
   * A request the agreed round brought to a rank other than the leader: its transport side opens
   * here; a ticket this rank cannot serve fails the request on every rank.
   */
  void takenIn(ActiveRequest a) {
    String refusal = prepare(a, a.ticket, a.handle.topLogprobs());
    if (refusal != null) {
      events.report(PdEvents.Kind.FAILED, a.id, "rank " + rank + ": " + refusal);
    }
  }

  /** A decode room ends on the engine's side. */
  private void forget(DecodeRoom d) {
    decodeRooms.remove(d.id, d);
    for (PairLanding pl : d.pairs) {
      landingsByRoom.remove(pl.transportRoom, pl);
    }
  }

  private void cancelRegistrations(DecodeRoom d, String why) {
    for (PairLanding pl : d.pairs) {
      if (pl.registration != null) {
        pl.registration.cancel(why);
      }
      if (pl.reservation != null) {
        pl.reservation.completeExceptionally(new IllegalStateException(why));
        pl.reservation = null;
      }
    }
  }

  private String wrongRole(PdTicket ticket) {
    return "this engine's role is "
        + role.wireName()
        + ": it serves no "
        + (ticket instanceof PdTicket.Prefill ? "prefill" : "decode")
        + " half of a disaggregated request";
  }

  private static int[] prompt(ActiveRequest a) {
    return Arrays.copyOf(a.tokens, a.promptTokens);
  }

  // ------------------------------------------------------------------ the loop

  private void post(Runnable event) {
    inbox.add(event);
    wake.run();
  }

  /** Whether transport events or reports wait for the loop. */
  boolean pending() {
    return !inbox.isEmpty() || events.outgoing();
  }

  /**
   * Whether a request waits on the transport alone (an ACK, a landing), so that a round without a
   * forward may wait for an event instead of running again at once.
   */
  boolean waiting() {
    return !prefillRooms.isEmpty() || !decodeRooms.isEmpty() || !staged.isEmpty();
  }

  /**
   * The loop's head, after the round's new requests and the agreed events: the transport's events,
   * in arrival order.
   */
  void head() throws InterruptedException {
    for (PrefillRoom p : prefillRooms.values()) {
      if (!p.reported) {
        reportAnswer(p); // the request was taken in after its answers came
      }
    }
    for (DecodeRoom d : decodeRooms.values()) {
      if (d.failure != null && !d.reported) {
        reportFailure(d); // the request was taken in after its pair failed
      }
    }
    for (Runnable e; (e = inbox.poll()) != null; ) {
      if (e instanceof LoopEvent le) {
        le.run(this);
      } else {
        e.run();
      }
    }
    holding = sent.size() + staged.size();
  }

  /** The rooms holding blocks as of the last head or plan (any thread; tests and figures). */
  int roomsHoldingBlocks() {
    return holding;
  }

  private volatile int holding;

  /** An event that may wait for copies (the landing's). */
  @FunctionalInterface
  private interface LoopEvent extends Runnable {
    void run(PdPort port) throws InterruptedException;

    @Override
    default void run() {
      throw new UnsupportedOperationException("run on the loop thread through head()");
    }
  }

  /**
   * After the plan: the round's cancellations of ticketed requests; the requests the round admitted
   * into Landing take their staging blocks and pin their Device blocks (the same round on every
   * rank); then the reservations that waited for that.
   *
   * @param closing whether the engine is closing (draining, the same round on every rank): its
   *     cancellations are then its own, and the peers' halves fail; otherwise they are the clients'
   *     ({@link io.tokenspeed.engine.RequestHandle#cancel}), and the peer's half ends cancelled too
   */
  void afterPlan(List<Long> cancelled, boolean closing) {
    String why =
        closing
            ? "the " + role.wireName() + " engine is closing"
            : PdFrameDescriptor.clientCancelled(null);
    for (long id : cancelled) {
      PrefillRoom p = prefillRooms.get(id);
      if (p != null) {
        cancelPrefill(p, why);
      }
      DecodeRoom d = decodeRooms.get(id);
      if (d != null && !d.ended) {
        endDecode(d, why);
      }
    }
    for (long id : scheduler.landingsAdmitted()) {
      DecodeRoom d = decodeRooms.get(id);
      ActiveRequest a = active.get(id);
      if (d != null && !d.ended && a != null && d.hostBlocks == null) {
        admitted(d, a);
      }
    }
    for (DecodeRoom d : decodeRooms.values()) {
      for (PairLanding pl : d.pairs) {
        if (pl.reservation != null) {
          tryReserve(pl);
        }
      }
    }
    holding = sent.size() + staged.size();
  }

  /**
   * A prefill request cancelled by its client: the transfers are cancelled; before its first token,
   * a request that waits for the ACK ends in the scheduler now (the ACK will not come), else the
   * scheduler already let it go and its blocks wait for the fence.
   */
  private void cancelPrefill(PrefillRoom p, String reason) {
    p.pairs.forEach(s -> s.transfer().cancel(reason));
    if (p.hostBlocks == null) {
      prefillRooms.remove(p.id);
      events.forget(p.id);
      scheduler.onBootstrapAck(p.id); // ends a request that waited for the ACK when cancelled
    } else if (!p.ended) {
      p.ended = true;
      ends.end(p.request, p.request.result("cancelled", null));
    }
  }

  /**
   * The blocks of each group the transfer moves for a prompt of {@code n} tokens: every row of a
   * group that keeps full history; the rows of a sliding window that the next token still attends
   * to (those from {@link #firstRow}); the running state of a State group (one block).
   */
  private int[] promptRows(int n) {
    int[] rows = new int[layout.numGroups()];
    for (var g : layout.groups()) {
      int gid = g.groupId();
      rows[gid] =
          g.kind() instanceof GroupKind.StateCheckpoints ? 1 : g.rowsFor(n) - firstRow(gid, n);
    }
    return rows;
  }

  /** The block-table row of a group's first transferred block (0 for a State group). */
  private int firstRow(int group, int n) {
    var g = layout.group(group);
    return g.kind() instanceof GroupKind.SlidingWindow ? g.firstNeededRow(n) : 0;
  }

  /**
   * The Device block that holds block {@code index} of {@code group} in {@code tables}: the row
   * {@link #firstRow} + index, or a State group's running state, which is in the working slot (row
   * 1) after a forward ({@code workingSlot}) and before it in row 0.
   */
  private int deviceBlock(int[][] tables, int group, int index, int n, boolean workingSlot) {
    if (layout.group(group).kind() instanceof GroupKind.StateCheckpoints) {
      return tables[group][workingSlot ? 1 : 0];
    }
    return tables[group][firstRow(group, n) + index];
  }

  /** The segment of unit {@code k} of group {@code g} of {@code pair} in this rank's blocks. */
  private MemorySegment unit(PdShards.Pair pair, int[][] hostBlocks, int g, int k) {
    int perRow = pair.unitsPerRow()[g];
    MemorySegment block = host.memory().block(g, hostBlocks[g][k / perRow]);
    return perRow == 1 && pair.offsets()[g][0] == 0 && pair.unitBytes()[g] == block.byteSize()
        ? block
        : block.asSlice(pair.offsets()[g][k % perRow], pair.unitBytes()[g]);
  }

  // ------------------------------------------------------------------ agreed events

  /** Applies an agreed event (every rank, the same round; at once on a single rank). */
  private void apply(PdEvents.Event e) {
    switch (e.kind()) {
      case ACKED -> {
        PrefillRoom p = prefillRooms.get(e.id());
        if (p != null && !p.failed && active.containsKey(e.id())) {
          scheduler.onBootstrapAck(p.id);
        }
      }
      case FAILED -> {
        PrefillRoom p = prefillRooms.get(e.id());
        ActiveRequest a = active.get(e.id());
        if (p != null && !p.failed && p.hostBlocks == null && a != null) {
          failPrefill(p, a, e.text(), e.cancelled());
        }
        DecodeRoom d = decodeRooms.get(e.id());
        if (d != null && !d.ended) {
          if (a != null) {
            active.remove(a.id);
            ends.end(a, a.result(e.cancelled() ? "cancelled" : "error", e.text()));
            if (leader) {
              ends.cancel(a.id);
            }
          }
          endDecode(
              d,
              e.cancelled()
                  ? PdFrameDescriptor.clientCancelled(
                      "the prefill half of the request was cancelled by its client")
                  : "the request failed");
        }
      }
      case COPIED -> {
        PrefillRoom p = prefillRooms.get(e.id());
        if (p != null) {
          unpin(p.pinned);
          p.pinned = null;
        }
      }
      case FENCED -> fenced(e.id(), e.text(), e.cancelled());
      case LANDED -> landedEverywhere(e.id());
      case RELEASED -> {
        DecodeRoom d = decodeRooms.get(e.id());
        if (d != null) {
          freeDecode(d);
        }
      }
      case ENDPOINT -> {
        int r = (int) e.id();
        int colon = e.text().lastIndexOf(':');
        if (r >= 0 && r < endpoints.length && colon > 0) {
          endpoints[r] =
              new InetSocketAddress(
                  e.text().substring(0, colon), Integer.parseInt(e.text().substring(colon + 1)));
        }
      }
    }
  }

  // ------------------------------------------------------------------ prefill

  /**
   * A pair's ACK (or its failure before it) reached the loop. The rooms open before the request is
   * queued, so the answers may come before the loop has taken the request in: the report then waits
   * for the next head.
   */
  private void onAck(PrefillRoom p, PairSending s, Ack ack, Throwable ex) {
    if (prefillRooms.get(p.id) != p || p.failed || p.reported) {
      return; // cancelled or failed meanwhile
    }
    if (ex != null) {
      if (p.failure == null) {
        p.failureCancelled = peerClientCancelled(ex);
        p.failure =
            p.failureCancelled
                ? decodeHalfCancelled(s)
                : "the decode engine at " + s.transfer().decode() + " " + describe(ex);
      }
    } else {
      String mismatch = null;
      // the counts are checked once the request is in: its prompt is known from the start
      int[] needs = promptRows(s.transfer().bootstrap().numTokens());
      for (int g = 0; g < needs.length && mismatch == null; g++) {
        int units = s.pair().units(g, needs[g]);
        if (ack.numBlocks(g) != units) {
          mismatch =
              "the decode engine reserved "
                  + ack
                  + " blocks where the prompt of "
                  + s.transfer().bootstrap().numTokens()
                  + " tokens needs "
                  + units
                  + " in group "
                  + g;
        }
      }
      if (mismatch != null) {
        if (p.failure == null) {
          p.failure = mismatch;
        }
      } else {
        p.acked++;
      }
    }
    reportAnswer(p);
  }

  /** Reports the room's answer once the request is in and every pair answered (or one failed). */
  private void reportAnswer(PrefillRoom p) {
    if (p.reported || p.failed || !active.containsKey(p.id)) {
      return; // reported, or not taken in yet (or its cancellation is on its way)
    }
    if (p.failure != null) {
      p.reported = true;
      events.report(PdEvents.Kind.FAILED, p.id, p.failure, p.failureCancelled);
    } else if (p.acked == p.pairs.size()) {
      p.reported = true;
      events.report(PdEvents.Kind.ACKED, p.id, null);
    }
  }

  /**
   * Ends a prefill request whose transfer failed before its first token, or whose decode half was
   * cancelled by its client ({@code cancelled}: the request ends cancelled, not with an error). Its
   * room stays until the cancellation reaches the scheduler ({@link #afterPlan}), which then ends a
   * request that waits for the ACK that will not come.
   */
  private void failPrefill(PrefillRoom p, ActiveRequest a, String error, boolean cancelled) {
    p.failed = true;
    active.remove(a.id);
    ends.end(a, a.result(cancelled ? "cancelled" : "error", error));
    String why =
        cancelled
            ? PdFrameDescriptor.clientCancelled(
                "the decode half of the request was cancelled by its client")
            : error;
    p.pairs.forEach(s -> s.transfer().cancel(why));
    if (leader) {
      ends.cancel(a.id);
    }
  }

  /**
   * The prefill requests of the round that sampled their first token, taken out of {@code
   * finished}: the caller writes their prefixes through, lets the scheduler go of them and calls
   * {@link #send}.
   */
  List<ActiveRequest> firstTokens(
      io.tokenspeed.scheduler.ExecutionPlan plan, List<ForwardStep.Finished> finished) {
    if (prefillRooms.isEmpty()) {
      return List.of();
    }
    List<ActiveRequest> out = new ArrayList<>();
    for (var item : plan.forward()) {
      ActiveRequest a = active.get(item.requestId());
      if (a != null && a.generated() == 1 && prefillRooms.containsKey(a.id)) {
        out.add(a);
      }
    }
    finished.removeIf(f -> out.contains(f.request()));
    return out;
  }

  /**
   * Sends a prefill request's prompt KV and first token: its blocks are copied Device → Host into
   * private Host blocks in the background, the Device blocks pinned until the ranks agree the copy
   * ran (the scheduler lets the request go right after); then every pair's units are queued from
   * the Host blocks, then DONE. The Host blocks are held until the ranks agree every fence stands,
   * when the handle ends.
   */
  void send(ActiveRequest a) {
    PrefillRoom p = prefillRooms.get(a.id);
    int[][] tables = scheduler.blockTables(a.id);
    int[] needs = p.pairs.isEmpty() ? new int[layout.numGroups()] : promptRows(a.promptTokens);
    int[][] hostBlocks = cache.host().allocate(needs);
    if (hostBlocks == null || tables == null) {
      String error =
          hostBlocks == null
              ? "the prefill engine's Host tier has no room for the "
                  + Arrays.stream(needs).sum()
                  + " blocks the transfer sends from"
              : "the request holds no Device blocks";
      if (hostBlocks != null) {
        unref(hostBlocks);
      }
      p.pairs.forEach(s -> s.transfer().cancel(error));
      prefillRooms.remove(a.id);
      events.forget(a.id);
      ends.end(a, a.result("error", error));
      return;
    }
    List<BlockTransfer> stores = new ArrayList<>();
    int[][] pinned = new int[needs.length][];
    for (int g = 0; g < needs.length; g++) {
      pinned[g] = new int[needs[g]];
      for (int r = 0; r < needs[g]; r++) {
        pinned[g][r] = deviceBlock(tables, g, r, a.promptTokens, a.stateInWorkingSlot);
        cache.device().ref(pinned[g][r]); // the scheduler lets the request go right after
        stores.add(new BlockTransfer.Store(g, pinned[g][r], hostBlocks[g][r]));
      }
    }
    p.hostBlocks = hostBlocks;
    p.pinned = pinned;
    p.request = a;
    sent.add(p);
    whenCopied(copies.submitBackground(stores), port -> port.sendCopied(p));
  }

  /**
   * Runs {@code then} on the loop once {@code fence} completed: a virtual thread waits for it and
   * posts the event, so that neither the loop nor a round waits for a transfer's copies.
   */
  private void whenCopied(CopyFence fence, LoopEvent then) {
    if (fence == null) {
      post(then); // nothing to copy (a rank whose pairs move nothing)
      return;
    }
    Thread.ofVirtual()
        .name("ts-pd-copy-" + fence.sequence())
        .start(
            () -> {
              try {
                fence.await();
              } catch (InterruptedException e) {
                return; // the engine is closing
              }
              post(
                  (LoopEvent)
                      port -> {
                        Copies.await(fence); // done: throws when the copy failed
                        then.run(port);
                      });
            });
  }

  /** The prompt's KV is in the Host blocks: every pair's units are queued, then its DONE. */
  private void sendCopied(PrefillRoom p) {
    events.report(PdEvents.Kind.COPIED, p.id, null);
    ActiveRequest a = p.request;
    int[] needs = promptRows(a.promptTokens);
    int first = a.tokens[a.promptTokens];
    CachedTokens cached =
        new CachedTokens(Math.max(0, a.reusedDevice), a.reusedHost, a.reusedStorage);
    FirstLogprobs logprobs = firstLogprobs(a);
    for (PairSending s : p.pairs) {
      boolean queued = true;
      for (int g = 0; g < needs.length && queued; g++) {
        int units = s.pair().units(g, needs[g]);
        for (int k = 0; k < units && queued; k++) {
          queued = s.transfer().send(g, k, unit(s.pair(), p.hostBlocks, g, k));
        }
      }
      if (queued) {
        s.transfer().done(new DoneInfo(first, cached, logprobs));
      }
      s.transfer().received().whenComplete((v, ex) -> post(() -> onPairFenced(p, s, ex)));
    }
    if (p.pairs.isEmpty()) {
      events.report(PdEvents.Kind.FENCED, p.id, null);
    }
  }

  /** The first token's log probabilities for DONE, when the request asked for them. */
  private static FirstLogprobs firstLogprobs(ActiveRequest a) {
    if (a.handle.topLogprobs() == TokenLogprobs.NO_LOGPROBS) {
      return null;
    }
    TokenLogprobs lp = a.handle.logprobs(0);
    return new FirstLogprobs(lp.logprob(), lp.topTokens(), lp.topLogprobs());
  }

  /**
   * The first token's log probabilities as the decode half asked for them, from what DONE carried;
   * null when it asked for none.
   *
   * @throws IllegalArgumentException when it asked for more than the prefill half sent
   */
  private static TokenLogprobs firstLogprobs(ActiveRequest a, int first, FirstLogprobs sent) {
    int k = a.handle.topLogprobs();
    if (k == TokenLogprobs.NO_LOGPROBS) {
      return null;
    }
    if (sent == null || sent.topTokens().length < k) {
      throw new IllegalArgumentException(
          "the decode half asked for the log probabilities of "
              + k
              + " alternatives, the prefill engine sent "
              + (sent == null ? "none" : sent.topTokens().length + " alternatives"));
    }
    return new TokenLogprobs(
        first,
        sent.logprob(),
        Arrays.copyOf(sent.topTokens(), k),
        Arrays.copyOf(sent.topLogprobs(), k));
  }

  /** One pair's fence: once every pair's stands, the rank reports it. */
  private void onPairFenced(PrefillRoom p, PairSending s, Throwable ex) {
    if (ex != null && p.fenceError == null) {
      p.fenceCancelled = peerClientCancelled(ex);
      p.fenceError =
          p.fenceCancelled
              ? decodeHalfCancelled(s)
              : "the KV transfer to " + s.transfer().decode() + " " + describe(ex);
    }
    if (++p.fenced == p.pairs.size()) {
      events.report(PdEvents.Kind.FENCED, p.id, p.fenceError, p.fenceCancelled);
    }
  }

  /** Why a prefill half ends whose decode half was cancelled by its client. */
  private static String decodeHalfCancelled(PairSending s) {
    return "the decode half of the request (at "
        + s.transfer().decode()
        + ") was cancelled by its client";
  }

  /**
   * Every rank's fences stand: the Host blocks go back, the handle ends (cancelled when the error
   * is the decode half's client cancelling).
   */
  private void fenced(long id, String error, boolean cancelled) {
    PrefillRoom p = prefillRooms.remove(id);
    if (p == null) {
      return;
    }
    sent.remove(p);
    unpin(p.pinned);
    p.pinned = null;
    unref(p.hostBlocks);
    if (!p.ended) {
      p.ended = true;
      ActiveRequest a = p.request;
      ends.end(
          a,
          error == null
              ? a.result("length", null)
              : a.result(cancelled ? "cancelled" : "error", error));
    }
  }

  // ------------------------------------------------------------------ decode

  /** The receiver's reservation (a receiver thread): the loop answers it. */
  private CompletionStage<Destinations> reserve(long room, Bootstrap bootstrap) {
    CompletableFuture<Destinations> f = new CompletableFuture<>();
    post(() -> onReserve(room, bootstrap, f));
    return f;
  }

  private void onReserve(long room, Bootstrap bootstrap, CompletableFuture<Destinations> f) {
    PairLanding pl = landingsByRoom.get(room);
    if (pl == null || pl.room.ended) {
      f.completeExceptionally(new IllegalStateException("the request of room " + room + " ended"));
      return;
    }
    pl.bootstrap = bootstrap;
    pl.reservation = f;
    tryReserve(pl);
  }

  /**
   * A BOOTSTRAP waits for its reservation: checked against the request once the loop has taken the
   * request in (the registration is made before the request is queued, so the BOOTSTRAP may come
   * first), then answered once the request holds its staging blocks (from its admission into
   * Landing).
   */
  private void tryReserve(PairLanding pl) {
    DecodeRoom d = pl.room;
    ActiveRequest a = active.get(d.id);
    if (a == null) {
      return; // still in the intake queue: the next rounds look again
    }
    if (!pl.checked) {
      String refusal = refusal(pl, a);
      if (refusal != null) {
        pl.reservation.completeExceptionally(new IllegalArgumentException(refusal));
        pl.reservation = null;
        return;
      }
      pl.checked = true;
    }
    if (d.hostBlocks != null) {
      reserveNow(pl);
    }
  }

  /** Why a pair's BOOTSTRAP cannot land for {@code a}, or null. */
  private String refusal(PairLanding pl, ActiveRequest a) {
    Bootstrap bootstrap = pl.bootstrap;
    PdTicket.Decode ticket = (PdTicket.Decode) a.ticket;
    if (!Arrays.equals(
        bootstrap.identityDigest(), identity(pl.pair, ticket.prefillRanks(), ranks))) {
      return "the prefill engine serves another model or cache layout (identity digests differ)";
    }
    if (!Arrays.equals(bootstrap.blockBytes(), pl.pair.unitBytes())) {
      return "the prefill engine's bytes per block "
          + Arrays.toString(bootstrap.blockBytes())
          + " differ from this engine's "
          + Arrays.toString(pl.pair.unitBytes());
    }
    if (!Arrays.equals(bootstrap.promptTokens(), prompt(a))) {
      return "the prefill engine's prompt of "
          + bootstrap.numTokens()
          + " tokens differs from the decode request's of "
          + a.promptTokens;
    }
    return null;
  }

  /**
   * The request entered Landing (the same round on every rank): its staging Host blocks are taken
   * and the Device blocks they are copied into pinned, until the ranks agree the room landed or
   * ended.
   */
  private void admitted(DecodeRoom d, ActiveRequest a) {
    int n = a.promptTokens;
    int[] needs = promptRows(n);
    int[][] blocks = cache.host().allocate(needs);
    if (blocks == null) {
      // the tiers are the same on every rank: every rank fails it in this round
      String error =
          "the decode engine's Host tier has no room for the "
              + Arrays.stream(needs).sum()
              + " blocks the KV lands in";
      active.remove(a.id);
      ends.end(a, a.result("error", error));
      if (leader) {
        ends.cancel(a.id);
      }
      endDecode(d, error);
      return;
    }
    int[][] tables = scheduler.blockTables(d.id);
    int[][] pinned = new int[needs.length][];
    for (int g = 0; g < needs.length; g++) {
      pinned[g] = new int[needs[g]];
      for (int r = 0; r < needs[g]; r++) {
        // a State group's running state lands in the working slot (the landing's row 0 is empty)
        pinned[g][r] =
            plantedLandsWindowFromRowZero
                    && layout.group(g).kind() instanceof GroupKind.SlidingWindow
                ? tables[g][r]
                : deviceBlock(tables, g, r, n, true);
        cache.device().ref(pinned[g][r]); // a cancellation meanwhile frees no block it writes
      }
    }
    d.hostBlocks = blocks;
    d.pinned = pinned;
    staged.add(d);
  }

  /** A pair's blocks: slices of the room's staging blocks, for the receiver to land into. */
  private void reserveNow(PairLanding pl) {
    CompletableFuture<Destinations> f = pl.reservation;
    pl.reservation = null;
    DecodeRoom d = pl.room;
    int[] rows = promptRows(pl.bootstrap.numTokens());
    int[][] blocks = d.hostBlocks;
    pl.held = true;
    d.holding++;
    f.complete(
        new Destinations() {
          @Override
          public int numGroups() {
            return rows.length;
          }

          @Override
          public int numBlocks(int group) {
            return pl.pair.units(group, rows[group]);
          }

          @Override
          public MemorySegment block(int group, int index) {
            return unit(pl.pair, blocks, group, index);
          }

          @Override
          public void release() {
            post(() -> released(pl));
          }
        });
  }

  /** The receiver gave a pair's destinations back: no more bytes land in them. */
  private void released(PairLanding pl) {
    if (pl.held) {
      pl.held = false;
      pl.room.holding--;
      maybeReleased(pl.room);
    }
  }

  /** A pair landed (or failed). */
  private void onPairLanded(PairLanding pl, Landed landed, Throwable ex) {
    DecodeRoom d = pl.room;
    if (ex != null) {
      if (!d.ended && !d.reported && d.failure == null) {
        d.failureCancelled = peerClientCancelled(ex);
        d.failure =
            d.failureCancelled
                ? "the prefill half of the request was cancelled by its client ("
                    + message(ex)
                    + ")"
                : timedOut(ex)
                    ? PdTicket.PREFILL_NEVER_CAME + ": " + describe(ex)
                    : "the KV transfer from the prefill engine failed: " + describe(ex);
        reportFailure(d);
      }
      maybeReleased(d);
      return;
    }
    pl.landed = landed; // its destinations are ours now: held until the copy ran
    if (d.ended) {
      landed.acknowledge();
      released(pl);
      return;
    }
    if (++d.landed == d.pairs.size()) {
      List<BlockTransfer> loads = new ArrayList<>();
      for (int g = 0; g < d.hostBlocks.length; g++) {
        for (int r = 0; r < d.hostBlocks[g].length; r++) {
          loads.add(new BlockTransfer.Load(g, d.hostBlocks[g][r], d.pinned[g][r]));
        }
      }
      d.copying = true;
      whenCopied(copies.submitBackground(loads), port -> port.loaded(d));
    }
  }

  /**
   * Reports a pair's failure once the request is in (a pair may fail before the loop took the
   * request in: a room the prefill side cancelled before the request came fails its registration at
   * once); the request ends on every rank when the ranks agree ({@link #apply}).
   */
  private void reportFailure(DecodeRoom d) {
    if (d.reported || d.ended || !active.containsKey(d.id)) {
      return;
    }
    d.reported = true;
    events.report(PdEvents.Kind.FAILED, d.id, d.failure, d.failureCancelled);
  }

  /**
   * The landed KV is in the request's Device blocks: RECEIVED is written for every pair and the
   * rank reports it; once every rank has, the request publishes its prefix and takes its first
   * token ({@link #landedEverywhere}).
   */
  private void loaded(DecodeRoom d) {
    d.copying = false;
    for (PairLanding pl : d.pairs) {
      pl.landed.acknowledge();
      pl.held = false;
    }
    d.holding = 0;
    if (d.ended) {
      maybeReleased(d);
    } else if (!d.reported) {
      d.reported = true;
      events.report(PdEvents.Kind.LANDED, d.id, null);
    }
  }

  /** Every rank landed the room: the request publishes its prefix and takes its first token. */
  private void landedEverywhere(long id) {
    DecodeRoom d = decodeRooms.get(id);
    if (d == null || d.ended) {
      return;
    }
    Landed landed = d.pairs.isEmpty() ? null : d.pairs.get(0).landed;
    freeDecode(d);
    ActiveRequest a = active.get(id);
    if (a == null || !(scheduler.state(id) instanceof RequestState.Landing) || landed == null) {
      return;
    }
    scheduler.onLanded(id);
    a.admission = scheduler.admission(id);
    a.kvTokens = a.promptTokens;
    a.stateInWorkingSlot = hasStateGroups; // the running state landed in the working slot
    CachedTokens cached = landed.cachedTokens();
    a.reusedDevice = (int) Math.min(cached.device(), a.promptTokens);
    a.reusedHost = (int) Math.min(cached.host(), a.promptTokens);
    a.reusedStorage = (int) Math.min(cached.storage(), a.promptTokens);
    int first = landed.firstToken();
    TokenLogprobs logprobs;
    try {
      if (first < 0 || first >= vocabSize) {
        throw new IllegalArgumentException("the prefill engine sent first token id=" + first);
      }
      logprobs = firstLogprobs(a, first, landed.logprobs());
    } catch (IllegalArgumentException e) {
      active.remove(a.id);
      ends.end(a, a.result("error", e.getMessage()));
      if (leader) {
        ends.cancel(a.id);
      }
      return;
    }
    if (logprobs != null) {
      a.handle.addLogprobs(0, logprobs);
    }
    Optional<FinishReason> done = a.sampling.onToken(first);
    a.tokens[a.known++] = first;
    long now = nanoClock.getAsLong();
    a.firstTokenNs = now;
    a.lastTokenNs = now;
    a.handle.emit(first);
    done.ifPresent(reason -> ends.finished(a, reason));
  }

  /**
   * The request ended on every rank (cancelled or failed, the same round everywhere): the pairs'
   * registrations are cancelled; its blocks go back once every rank's receiver let go of them.
   */
  private void endDecode(DecodeRoom d, String why) {
    d.ended = true;
    cancelRegistrations(d, why);
    for (PairLanding pl : d.pairs) {
      if (pl.landed != null && !d.copying && pl.held) {
        pl.landed.acknowledge();
        pl.held = false;
        d.holding--;
      }
    }
    maybeReleased(d);
  }

  /**
   * An ended room whose blocks nothing writes any more (no pair's destinations held, no copy
   * running) reports so; once every rank has, its blocks go back ({@link #freeDecode}).
   */
  private void maybeReleased(DecodeRoom d) {
    if (!d.ended || d.copying || d.holding > 0 || decodeRooms.get(d.id) != d) {
      return;
    }
    if (d.hostBlocks == null) {
      forget(d); // never admitted: nothing to give back (the same on every rank)
      return;
    }
    if (!d.releaseReported) {
      d.releaseReported = true;
      events.report(PdEvents.Kind.RELEASED, d.id, null);
    }
  }

  /** Gives a decode room's staging and pinned blocks back and forgets it. */
  private void freeDecode(DecodeRoom d) {
    forget(d);
    events.forget(d.id);
    if (staged.remove(d)) {
      unpin(d.pinned);
      unref(d.hostBlocks);
      d.pinned = null;
    }
  }

  /**
   * Planted bug (the tests that prove they see it, never set elsewhere): a landing writes a sliding
   * window's rows from row 0 instead of the window's first row.
   */
  private boolean plantedLandsWindowFromRowZero;

  void plantLandWindowFromRowZero() {
    plantedLandsWindowFromRowZero = true;
  }

  /** The Host references the port holds (the invariant checkers; the loop thread). */
  List<HeldBlock> heldBlocks() {
    List<HeldBlock> out = new ArrayList<>();
    for (PrefillRoom p : sent) {
      held(Tier.HOST, p.hostBlocks, out);
      held(Tier.DEVICE, p.pinned, out);
    }
    for (DecodeRoom d : staged) {
      held(Tier.HOST, d.hostBlocks, out);
      held(Tier.DEVICE, d.pinned, out);
    }
    return out;
  }

  private static void held(Tier tier, int[][] blocks, List<HeldBlock> out) {
    if (blocks == null) {
      return;
    }
    for (int[] g : blocks) {
      for (int b : g) {
        out.add(new HeldBlock(tier, b));
      }
    }
  }

  private void unpin(int[][] blocks) {
    if (blocks != null) {
      for (int[] g : blocks) {
        for (int b : g) {
          cache.device().unref(b);
        }
      }
    }
  }

  private void unref(int[][] blocks) {
    for (int[] g : blocks) {
      for (int b : g) {
        cache.host().unref(b);
      }
    }
  }

  /**
   * Whether the peer ended a pair's room because its half of the request was cancelled by its
   * client (its CANCEL or REFUSE said so): nothing failed.
   */
  private static boolean peerClientCancelled(Throwable ex) {
    Throwable t = ex instanceof CompletionException && ex.getCause() != null ? ex.getCause() : ex;
    return t instanceof PdException p && p.peerClientCancelled();
  }

  /** Whether a registration failed because its BOOTSTRAP never came. */
  private static boolean timedOut(Throwable ex) {
    Throwable t = ex instanceof CompletionException && ex.getCause() != null ? ex.getCause() : ex;
    return t instanceof PdException p && p.kind() == PdException.Kind.TIMEOUT;
  }

  /** The message of the {@link PdException} (or other cause) behind {@code ex}. */
  private static String message(Throwable ex) {
    Throwable t = ex instanceof CompletionException && ex.getCause() != null ? ex.getCause() : ex;
    return t.getMessage() != null ? t.getMessage() : t.toString();
  }

  private static String describe(Throwable ex) {
    Throwable t = ex instanceof CompletionException && ex.getCause() != null ? ex.getCause() : ex;
    if (t instanceof PdException p) {
      return "failed ("
          + p.kind().name().toLowerCase(java.util.Locale.ROOT)
          + "): "
          + p.getMessage();
    }
    return "failed: " + t;
  }

  /**
   * The loop stopped (closed or failed): the requests whose transfer was sent and not yet fenced
   * are no longer the loop's (the scheduler let them go), so no round would end them; they end here
   * with {@code why}, and their transfers are cancelled.
   */
  void endSent(String why) {
    for (PrefillRoom p : List.copyOf(sent)) {
      p.pairs.forEach(s -> s.transfer().cancel(why));
      if (!p.ended) {
        p.ended = true;
        p.request.handle.end(p.request.result("error", why));
      }
    }
  }

  /**
   * Closes the transport (open rooms fail; their events are not run any more) and ends what the
   * loop left (see {@link #endSent}). After the loop ended.
   */
  @Override
  public void close() {
    endSent("the prefill engine closed before its transfer completed");
    if (sender != null) {
      sender.close();
    }
    if (receiver != null) {
      receiver.close();
    }
  }
}
