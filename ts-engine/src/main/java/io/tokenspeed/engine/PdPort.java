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
import io.tokenspeed.pd.PdMetrics;
import io.tokenspeed.pd.Registration;
import io.tokenspeed.pd.Transfer;
import io.tokenspeed.scheduler.RequestState;
import io.tokenspeed.scheduler.Scheduler;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
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
  private final int[] blockBytes;
  private final int vocabSize;

  /** Whether the layout has State groups, whose running state lands in the working slot. */
  private final boolean hasStateGroups;

  private final KvSender sender;
  private final KvReceiver receiver;
  private final ConcurrentLinkedQueue<Runnable> inbox = new ConcurrentLinkedQueue<>();
  private volatile Runnable wake = () -> {};
  private Copies copies;
  private Ends ends;

  /** A prefill engine's rooms, by request id (opened on callers' threads). */
  private final Map<Long, PrefillRoom> prefillRooms = new ConcurrentHashMap<>();

  /** A decode engine's rooms, by request id (opened on callers' threads). */
  private final Map<Long, DecodeRoom> decodeRooms = new ConcurrentHashMap<>();

  /** The same rooms by room id (the receiver names rooms). */
  private final Map<Long, DecodeRoom> decodeByRoom = new ConcurrentHashMap<>();

  /** Rooms whose Host blocks are held: sent and not yet fenced, staged and not yet released. */
  private final Set<PrefillRoom> sent = new HashSet<>();

  private final Set<DecodeRoom> staged = new HashSet<>();

  /** A prefill request's room: its transfer, and the Host blocks it sends from once sent. */
  private static final class PrefillRoom {
    final long id;
    final Transfer transfer;
    boolean answered; // an answer waits for the loop to take the request in
    Ack answer;
    Throwable answerFailure;
    boolean failed; // ended with an error; the room waits for the cancellation
    int[][] hostBlocks; // set when sent; freed at the fence
    int[][] pinned; // the Device blocks the Device -> Host copy reads, until it completed
    ActiveRequest request; // set when sent: the handle ends at the fence
    boolean ended; // the handle ended already (cancelled while the fence stands)

    PrefillRoom(long id, Transfer transfer) {
      this.id = id;
      this.transfer = transfer;
    }
  }

  /** A decode request's room: its registration and, once reserved, its Host staging blocks. */
  private static final class DecodeRoom {
    final long id;
    final long room;
    volatile Registration registration; // set right after the room is registered
    Bootstrap bootstrap;
    CompletableFuture<Destinations> reservation; // pending until the request is in Landing
    boolean checked; // the BOOTSTRAP matched the request
    int[][] hostBlocks;
    int[][] pinned; // the Device blocks the Host -> Device copy writes, until it completed
    boolean released;

    DecodeRoom(long id, long room) {
      this.id = id;
      this.room = room;
    }
  }

  /**
   * The port of an engine in a prefill or decode role ({@code options}); a fused engine has none.
   *
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
      int vocabSize) {
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
    this.hasStateGroups =
        layout.groups().stream().anyMatch(g -> g.kind() instanceof GroupKind.StateCheckpoints);
    this.blockBytes = new int[layout.numGroups()];
    for (int g = 0; g < blockBytes.length; g++) {
      blockBytes[g] = Math.toIntExact(host.geometry().bytesPerBlock(g));
    }
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

  /** A decode engine's KV endpoint. */
  Optional<InetSocketAddress> endpoint() {
    return receiver == null ? Optional.empty() : Optional.of(receiver.address());
  }

  /** The transport's counters. */
  PdMetrics metrics() {
    return receiver != null ? receiver.metrics() : sender.metrics();
  }

  /**
   * The digest a BOOTSTRAP carries, read for each request: the model's identity (id, checkpoint
   * revision, the current weight version), the attention implementation the deployment identity
   * names (deterministic mode's kernel families included: their numbers differ) and the cache
   * layout with its bytes per block, so that a decode engine lands only KV that its own model
   * computes the same way in its own layout.
   */
  byte[] identity() {
    return identityDigest(model, weightVersion.get(), attentionBackend, layout, host);
  }

  static byte[] identityDigest(
      ModelIdentity model,
      String weightVersion,
      String attentionBackend,
      CacheLayout layout,
      HostCacheStorage host) {
    try {
      MessageDigest md = MessageDigest.getInstance("SHA-256");
      StringBuilder s = new StringBuilder("tokenspeed-pd-identity-v1\n");
      s.append(model.modelId()).append('\n');
      s.append(model.checkpointRevision()).append('\n');
      s.append(weightVersion).append('\n');
      s.append(attentionBackend).append('\n');
      s.append(layout).append('\n');
      for (int g = 0; g < layout.numGroups(); g++) {
        s.append(host.geometry().bytesPerBlock(g)).append(' ');
      }
      return md.digest(s.toString().getBytes(StandardCharsets.UTF_8));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is missing from this JDK", e);
    }
  }

  // ------------------------------------------------------------------ submission (caller's thread)

  /**
   * Opens the transport's side of a ticketed request before it is queued: what is wrong with the
   * ticket for this engine, or null. On null, {@link #abandon} must follow if the request is not
   * queued after all.
   */
  String prepare(ActiveRequest a, PdTicket ticket, int topLogprobs) {
    switch (ticket) {
      case PdTicket.Prefill p -> {
        if (role != EngineRole.PREFILL) {
          return wrongRole(ticket);
        }
        Transfer t;
        try {
          t =
              sender.bootstrap(
                  p.room(), p.decode(), new Bootstrap(prompt(a), identity(), blockBytes));
        } catch (IllegalArgumentException | IllegalStateException e) {
          return "the KV transfer to "
              + p.decode()
              + " cannot open room "
              + p.room()
              + ": "
              + e.getMessage();
        }
        PrefillRoom room = new PrefillRoom(a.id, t);
        prefillRooms.put(a.id, room);
        t.acknowledged().whenComplete((ack, ex) -> post(() -> onAck(room, ack, ex)));
        return null;
      }
      case PdTicket.Decode d -> {
        if (role != EngineRole.DECODE) {
          return wrongRole(ticket);
        }
        // known before it is registered: a BOOTSTRAP already waiting is reserved at once
        DecodeRoom room = new DecodeRoom(a.id, d.room());
        if (decodeByRoom.putIfAbsent(d.room(), room) != null) {
          return "room " + d.room() + " is already expected";
        }
        decodeRooms.put(a.id, room);
        Registration reg;
        try {
          reg = receiver.expect(d.room());
        } catch (IllegalStateException e) {
          forget(room);
          return e.getMessage();
        }
        room.registration = reg;
        reg.landed().whenComplete((l, ex) -> post(() -> onLanded(room, l, ex)));
        return null;
      }
    }
  }

  /** A prepared request that was not queued after all (the intake was full). */
  void abandon(long id) {
    PrefillRoom p = prefillRooms.remove(id);
    if (p != null) {
      p.transfer.cancel("the prefill engine's intake is full");
    }
    DecodeRoom d = decodeRooms.get(id);
    if (d != null) {
      forget(d);
      d.registration.cancel("the decode engine's intake is full");
    }
  }

  /** A decode room ends on the engine's side. */
  private void forget(DecodeRoom d) {
    decodeRooms.remove(d.id, d);
    decodeByRoom.remove(d.room, d);
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

  /** Whether transport events wait for the loop. */
  boolean pending() {
    return !inbox.isEmpty();
  }

  /**
   * Whether a request waits on the transport alone (an ACK, a landing), so that a round without a
   * forward may wait for an event instead of running again at once.
   */
  boolean waiting() {
    return !prefillRooms.isEmpty() || !decodeRooms.isEmpty() || !staged.isEmpty();
  }

  /** The loop's head, after the round's new requests: the transport's events, in arrival order. */
  void head() throws InterruptedException {
    for (PrefillRoom p : prefillRooms.values()) {
      if (p.answered) {
        applyAck(p); // the request was taken in after its answer came
      }
    }
    for (Runnable e; (e = inbox.poll()) != null; ) {
      if (e instanceof LoopEvent le) {
        le.run(this);
      } else {
        e.run();
      }
    }
  }

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
   * After the plan: the round's cancellations of ticketed requests, then the reservations that
   * waited for their request's admission into Landing.
   */
  void afterPlan(List<Long> cancelled) {
    for (long id : cancelled) {
      PrefillRoom p = prefillRooms.get(id);
      if (p != null) {
        cancelPrefill(p, "the client cancelled the request");
      }
      DecodeRoom d = decodeRooms.get(id);
      if (d != null) {
        forget(d);
        d.registration.cancel("the client cancelled the request");
        if (d.reservation != null) {
          d.reservation.completeExceptionally(
              new IllegalStateException("the request was cancelled"));
          d.reservation = null;
        }
      }
    }
    for (DecodeRoom d : decodeRooms.values()) {
      if (d.reservation != null) {
        tryReserve(d);
      }
    }
  }

  /**
   * A prefill request cancelled (by its client, or because its transfer failed): the transfer is
   * cancelled; before its first token, a request that waits for the ACK ends in the scheduler now
   * (the ACK will not come), else the scheduler already let it go and its Host blocks wait for the
   * fence.
   */
  private void cancelPrefill(PrefillRoom p, String reason) {
    p.transfer.cancel(reason);
    if (p.hostBlocks == null) {
      prefillRooms.remove(p.id);
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

  /**
   * The ACK (or the transfer's failure before it) reached the loop. The room is opened before the
   * request is queued, so the answer may come before the loop has taken the request in: it then
   * waits on the room for the next head.
   */
  private void onAck(PrefillRoom p, Ack ack, Throwable ex) {
    if (prefillRooms.get(p.id) != p || p.failed) {
      return; // cancelled or failed meanwhile
    }
    p.answer = ack;
    p.answerFailure = ex;
    p.answered = true;
    applyAck(p);
  }

  private void applyAck(PrefillRoom p) {
    ActiveRequest a = active.get(p.id);
    if (a == null) {
      return; // not taken in yet (or its cancellation is on its way: afterPlan ends it)
    }
    p.answered = false;
    Ack ack = p.answer;
    String error = null;
    if (p.answerFailure != null) {
      error = "the decode engine at " + p.transfer.decode() + " " + describe(p.answerFailure);
    } else {
      int[] needs = promptRows(a.promptTokens);
      for (int g = 0; g < needs.length && error == null; g++) {
        int rows = needs[g];
        if (ack.numBlocks(g) != rows) {
          error =
              "the decode engine reserved "
                  + ack
                  + " blocks where the prompt of "
                  + a.promptTokens
                  + " tokens needs "
                  + rows
                  + " in group "
                  + g;
        }
      }
    }
    if (error != null) {
      failPrefill(p, a, error);
      return;
    }
    scheduler.onBootstrapAck(p.id);
  }

  /**
   * Ends a prefill request whose transfer failed before its first token. Its room stays until the
   * cancellation reaches the scheduler ({@link #afterPlan}), which then ends a request that waits
   * for the ACK that will not come.
   */
  private void failPrefill(PrefillRoom p, ActiveRequest a, String error) {
    p.failed = true;
    active.remove(a.id);
    ends.end(a, a.result("error", error));
    p.transfer.cancel(error);
    ends.cancel(a.id);
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
   * private Host blocks (awaited: the scheduler lets the Device blocks go right after), then every
   * block is queued from its Host block, then DONE. The Host blocks are held until the transfer's
   * fence, when the handle ends.
   */
  void send(ActiveRequest a) throws InterruptedException {
    PrefillRoom p = prefillRooms.get(a.id);
    int[][] tables = scheduler.blockTables(a.id);
    int[] needs = promptRows(a.promptTokens);
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
      p.transfer.cancel(error);
      prefillRooms.remove(a.id);
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

  /** The prompt's KV is in the Host blocks: its frames are queued, then DONE. */
  private void sendCopied(PrefillRoom p) {
    unpin(p.pinned);
    p.pinned = null;
    ActiveRequest a = p.request;
    int[] needs = promptRows(a.promptTokens);
    int[][] hostBlocks = p.hostBlocks;
    boolean queued = true;
    for (int g = 0; g < needs.length && queued; g++) {
      for (int r = 0; r < needs[g] && queued; r++) {
        queued = p.transfer.send(g, r, host.memory().block(g, hostBlocks[g][r]));
      }
    }
    if (queued) {
      int first = a.tokens[a.promptTokens];
      CachedTokens cached =
          new CachedTokens(Math.max(0, a.reusedDevice), a.reusedHost, a.reusedStorage);
      p.transfer.done(new DoneInfo(first, cached, firstLogprobs(a)));
    }
    p.transfer.received().whenComplete((v, ex) -> post(() -> onReceived(p, ex)));
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

  /** The transfer's fence: the Host blocks go back, the handle ends. */
  private void onReceived(PrefillRoom p, Throwable ex) {
    prefillRooms.remove(p.id);
    sent.remove(p);
    unref(p.hostBlocks);
    if (!p.ended) {
      p.ended = true;
      ActiveRequest a = p.request;
      ends.end(
          a,
          ex == null
              ? a.result("length", null)
              : a.result(
                  "error", "the KV transfer to " + p.transfer.decode() + " " + describe(ex)));
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
    DecodeRoom d = decodeByRoom.get(room);
    if (d == null) {
      f.completeExceptionally(new IllegalStateException("the request of room " + room + " ended"));
      return;
    }
    d.bootstrap = bootstrap;
    d.reservation = f;
    tryReserve(d);
  }

  /**
   * A BOOTSTRAP waits for its reservation: checked against the request once the loop has taken the
   * request in (the registration is made before the request is queued, so the BOOTSTRAP may come
   * first), then reserved once the request is in Landing.
   */
  private void tryReserve(DecodeRoom d) {
    ActiveRequest a = active.get(d.id);
    if (a == null) {
      return; // still in the intake queue: the next rounds look again
    }
    if (!d.checked) {
      String refusal = refusal(d.bootstrap, a);
      if (refusal != null) {
        d.reservation.completeExceptionally(new IllegalArgumentException(refusal));
        d.reservation = null;
        return;
      }
      d.checked = true;
    }
    if (scheduler.state(d.id) instanceof RequestState.Landing) {
      reserveNow(d);
    }
  }

  /** Why a BOOTSTRAP cannot land for {@code a}, or null. */
  private String refusal(Bootstrap bootstrap, ActiveRequest a) {
    if (!Arrays.equals(bootstrap.identityDigest(), identity())) {
      return "the prefill engine serves another model or cache layout (identity digests differ)";
    }
    if (!Arrays.equals(bootstrap.blockBytes(), blockBytes)) {
      return "the prefill engine's bytes per block "
          + Arrays.toString(bootstrap.blockBytes())
          + " differ from this engine's "
          + Arrays.toString(blockBytes);
    }
    if (!Arrays.equals(bootstrap.promptTokens(), prompt(a))) {
      return "the prefill engine's prompt of "
          + bootstrap.numTokens()
          + " tokens differs from the decode request's of "
          + a.promptTokens;
    }
    return null;
  }

  /** The request is in Landing: its Host staging blocks, for the receiver to land into. */
  private void reserveNow(DecodeRoom d) {
    CompletableFuture<Destinations> f = d.reservation;
    d.reservation = null;
    int n = d.bootstrap.numTokens();
    int[] needs = promptRows(n);
    int[][] blocks = cache.host().allocate(needs);
    if (blocks == null) {
      f.completeExceptionally(
          new IllegalStateException(
              "the decode engine's Host tier has no room for the "
                  + Arrays.stream(needs).sum()
                  + " blocks the KV lands in"));
      return;
    }
    d.hostBlocks = blocks;
    staged.add(d);
    f.complete(
        new Destinations() {
          @Override
          public int numGroups() {
            return needs.length;
          }

          @Override
          public int numBlocks(int group) {
            return needs[group];
          }

          @Override
          public MemorySegment block(int group, int index) {
            return host.memory().block(group, blocks[group][index]);
          }

          @Override
          public void release() {
            post(() -> releaseStaging(d));
          }
        });
  }

  private void releaseStaging(DecodeRoom d) {
    if (!d.released && d.hostBlocks != null) {
      d.released = true;
      staged.remove(d);
      unref(d.hostBlocks);
    }
  }

  /** The landing completed (or failed). */
  private void onLanded(DecodeRoom d, Landed landed, Throwable ex) {
    // a LoopEvent could not be posted from the completion (it waits for copies): queue one
    post((LoopEvent) port -> port.land(d, landed, ex));
  }

  private void land(DecodeRoom d, Landed landed, Throwable ex) {
    boolean ours = decodeRooms.get(d.id) == d;
    forget(d);
    ActiveRequest a = ours ? active.get(d.id) : null;
    if (ex != null) {
      if (a != null) {
        active.remove(a.id);
        ends.end(
            a,
            a.result(
                "error",
                timedOut(ex)
                    ? PdTicket.PREFILL_NEVER_CAME + ": " + describe(ex)
                    : "the KV transfer from the prefill engine failed: " + describe(ex)));
        ends.cancel(a.id);
      }
      return;
    }
    if (a == null || !(scheduler.state(d.id) instanceof RequestState.Landing)) {
      releaseStaging(d); // the request ended meanwhile: the landed blocks are ours to free
      landed.acknowledge();
      return;
    }
    int[][] tables = scheduler.blockTables(d.id);
    List<BlockTransfer> loads = new ArrayList<>();
    int[][] pinned = new int[d.hostBlocks.length][];
    int n = d.bootstrap.numTokens();
    for (int g = 0; g < d.hostBlocks.length; g++) {
      pinned[g] = new int[d.hostBlocks[g].length];
      for (int r = 0; r < d.hostBlocks[g].length; r++) {
        // a State group's running state lands in the working slot (the landing's row 0 is empty)
        pinned[g][r] =
            plantedLandsWindowFromRowZero
                    && layout.group(g).kind() instanceof GroupKind.SlidingWindow
                ? tables[g][r]
                : deviceBlock(tables, g, r, n, true);
        cache.device().ref(pinned[g][r]); // a cancellation meanwhile frees no block it writes
        loads.add(new BlockTransfer.Load(g, d.hostBlocks[g][r], pinned[g][r]));
      }
    }
    d.pinned = pinned;
    whenCopied(copies.submitBackground(loads), port -> port.landCopied(d, landed));
  }

  /**
   * The landed KV is in the request's Device blocks: they are published as its prefix, the first
   * token is emitted and RECEIVED written; or, when the request ended while the copy ran, only
   * RECEIVED.
   */
  private void landCopied(DecodeRoom d, Landed landed) {
    unpin(d.pinned);
    d.pinned = null;
    releaseStaging(d);
    ActiveRequest a = active.get(d.id);
    if (a == null || !(scheduler.state(d.id) instanceof RequestState.Landing)) {
      landed.acknowledge();
      return;
    }
    scheduler.onLanded(d.id);
    a.admission = scheduler.admission(d.id);
    a.kvTokens = a.promptTokens;
    a.stateInWorkingSlot = hasStateGroups; // the running state landed in the working slot
    CachedTokens cached = landed.cachedTokens();
    a.reusedDevice = (int) Math.min(cached.device(), a.promptTokens);
    a.reusedHost = (int) Math.min(cached.host(), a.promptTokens);
    a.reusedStorage = (int) Math.min(cached.storage(), a.promptTokens);
    int first = landed.firstToken();
    landed.acknowledge();
    TokenLogprobs logprobs;
    try {
      if (first < 0 || first >= vocabSize) {
        throw new IllegalArgumentException("the prefill engine sent first token id=" + first);
      }
      logprobs = firstLogprobs(a, first, landed.logprobs());
    } catch (IllegalArgumentException e) {
      active.remove(a.id);
      ends.end(a, a.result("error", e.getMessage()));
      ends.cancel(a.id);
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

  /** Whether a registration failed because its BOOTSTRAP never came. */
  private static boolean timedOut(Throwable ex) {
    Throwable t = ex instanceof CompletionException && ex.getCause() != null ? ex.getCause() : ex;
    return t instanceof PdException p && p.kind() == PdException.Kind.TIMEOUT;
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
      p.transfer.cancel(why);
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
