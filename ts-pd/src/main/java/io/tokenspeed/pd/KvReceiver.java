package io.tokenspeed.pd;

import io.tokenspeed.core.OneLine;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The decode engine's end of the KV transfer: it accepts prefill engines' connections on its KV
 * port, matches each BOOTSTRAP with the engine's registration of the same room ({@link #expect}),
 * has the engine reserve Host staging blocks ({@link Landing}), and lands every DATA frame's bytes
 * straight into them.
 *
 * <p><b>What it guarantees.</b>
 *
 * <ul>
 *   <li>A room's landing completes ({@link Registration#landed}) only after DONE arrived, every
 *       reserved block arrived exactly once, and DONE's CRC32C matched the bytes in the order they
 *       arrived; otherwise nothing is handed over.
 *   <li>Destinations are released exactly once by the receiver, and only once no more bytes can
 *       land in them, unless they were handed over with {@link Landed}: from then on they are the
 *       engine's.
 *   <li>Every open room of a connection that fails (closed, broken, silent for {@code
 *       silence_timeout_ms}, or carrying a malformed frame) fails, within the silence timeout at
 *       most.
 *   <li>A BOOTSTRAP that no registration claims within {@code bootstrap_deadline_ms} is refused
 *       ({@code unknown room}); a registration that no BOOTSTRAP claims within it fails with {@link
 *       PdException.Kind#TIMEOUT}. A room the prefill side cancelled before any registration
 *       claimed it is remembered for as long: a registration of it fails at once, with the CANCEL's
 *       reason ({@link PdException.Kind#CANCELLED}).
 *   <li>Nothing unauthenticated is read beyond HELLO- and PROOF-sized frames, and nothing
 *       authenticated beyond the limits of {@link PdSettings}.
 * </ul>
 *
 * <p><b>How.</b> Each connection has a reader thread (which also shook hands) and a writer thread.
 * Room state lives in {@link ReceiverRoom}s and changes only under this receiver's one lock, which
 * is never held across I/O or a call into the engine: stages complete, destinations are released
 * and {@link Landing#reserve} is called after it is let go. Only a connection's reader writes into
 * destinations, and destinations that may still receive bytes (ACK written, no CANCEL from the
 * peer, connection up) are released only by that reader; the other releases happen where no DATA
 * can come (before the ACK, or after DONE).
 */
public final class KvReceiver implements AutoCloseable {

  private static final Logger LOG = Logger.getLogger(KvReceiver.class.getName());

  /** A thread that owns no segment: a segment it may access is accessible from any thread. */
  static final Thread ANY_OTHER_THREAD = Thread.ofVirtual().unstarted(() -> {});

  final PdSecret secret;
  final PdSettings settings;
  final Counters counters = new Counters();
  private final Landing landing;
  private final ServerSocketChannel server;
  private final InetSocketAddress address;
  private final ScheduledExecutorService timer;
  private final Thread acceptor;
  private final Set<ReceiverLink> links = ConcurrentHashMap.newKeySet();

  private final Object lock = new Object();

  // Guarded by lock.
  private final Map<Long, ReceiverRoom> rooms = new HashMap<>();
  private final Map<Long, Registration> waiting = new HashMap<>();
  private final Map<Long, Cancelled> cancelledBeforeBootstrap = new HashMap<>();

  /** Unclaimed rooms the prefill side cancelled: a registration of one fails at once. */
  private final Map<Long, Cancelled> cancelledUnclaimed = new HashMap<>();

  private boolean closed;

  /**
   * A room cancelled before the other side's claim on it came, remembered until {@code untilNs}
   * (the bootstrap deadline): why, in words, and whether its half was cancelled by its client
   * ({@link PdFrameDescriptor#isClientCancelled}).
   */
  private record Cancelled(long untilNs, String text, boolean byClient) {}

  /** A room cancelled now with {@code reason}, said as {@code text}. */
  private Cancelled cancelledNow(String text, String reason) {
    return new Cancelled(
        System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.bootstrapDeadlineMs()),
        text,
        PdFrameDescriptor.isClientCancelled(reason));
  }

  private KvReceiver(
      ServerSocketChannel server, PdSecret secret, PdSettings settings, Landing landing)
      throws IOException {
    this.server = server;
    this.secret = secret;
    this.settings = settings;
    this.landing = landing;
    this.address = (InetSocketAddress) server.getLocalAddress();
    this.timer =
        Executors.newSingleThreadScheduledExecutor(
            Thread.ofPlatform().daemon().name("ts-pd-receiver-timer").factory());
    long tick = settings.tickMs();
    timer.scheduleWithFixedDelay(this::tick, tick, tick, TimeUnit.MILLISECONDS);
    this.acceptor =
        Thread.ofVirtual().name("ts-pd-accept-" + address.getPort()).start(this::acceptLoop);
  }

  /**
   * Listens on {@code bind} (port 0: any free port; see {@link #address}) for prefill engines that
   * prove {@code secret}, landing rooms through {@code landing}.
   */
  public static KvReceiver open(
      InetSocketAddress bind, PdSecret secret, PdSettings settings, Landing landing)
      throws IOException {
    Objects.requireNonNull(secret);
    Objects.requireNonNull(settings);
    Objects.requireNonNull(landing);
    ServerSocketChannel server = ServerSocketChannel.open();
    try {
      server.bind(bind);
      return new KvReceiver(server, secret, settings, landing);
    } catch (IOException | RuntimeException e) {
      server.close();
      throw e;
    }
  }

  /** The address the receiver listens on (the decode engine's KV endpoint). */
  public InetSocketAddress address() {
    return address;
  }

  /**
   * Registers the engine's claim on {@code room}: the router's request for it arrived. If its
   * BOOTSTRAP is waiting already, the landing starts now.
   *
   * @throws IllegalStateException when the room is expected already, or the receiver is closed
   */
  public Registration expect(long room) {
    Registration reg = new Registration(room, this);
    ReceiverRoom start = null;
    Cancelled gone;
    synchronized (lock) {
      if (closed) {
        throw new IllegalStateException("the KV receiver is closed");
      }
      ReceiverRoom open = rooms.get(room);
      if (waiting.containsKey(room) || (open != null && open.registration != null)) {
        throw new IllegalStateException("room " + room + " is already expected");
      }
      cancelledBeforeBootstrap.remove(room);
      gone = cancelledUnclaimed.remove(room);
      if (open != null && open.state == ReceiverRoom.State.UNCLAIMED) {
        gone = null;
        open.deadline.cancel(false);
        claim(open, reg);
        start = open;
      } else if (gone == null) {
        waiting.put(room, reg);
        counters.registrationsWaiting.incrementAndGet();
        reg.deadline = afterBootstrapDeadline(() -> onRegistrationDeadline(reg));
      }
    }
    if (start != null) {
      reserve(start);
    }
    if (gone != null) {
      reg.landed.completeExceptionally(
          new PdException(
              PdException.Kind.CANCELLED,
              "the prefill side cancelled room "
                  + room
                  + " before this decode engine's request for it came: "
                  + gone.text(),
              gone.byClient()));
    }
    return reg;
  }

  /** The counters now. */
  public PdMetrics metrics() {
    return counters.snapshot();
  }

  /** Rooms open on connections plus registrations waiting for their BOOTSTRAP. */
  public int openRooms() {
    synchronized (lock) {
      return rooms.size() + waiting.size();
    }
  }

  /**
   * Stops accepting, fails every waiting registration and closes every connection (their rooms fail
   * with {@link PdException.Kind#CLOSED}, their destinations released), waiting a bounded time for
   * the connections' threads to end.
   */
  @Override
  public void close() {
    List<Registration> orphans;
    synchronized (lock) {
      if (closed) {
        return;
      }
      closed = true;
      orphans = new ArrayList<>(waiting.values());
      waiting.clear();
      counters.registrationsWaiting.addAndGet(-orphans.size());
      for (Registration r : orphans) {
        r.deadline.cancel(false);
      }
    }
    for (Registration r : orphans) {
      r.landed.completeExceptionally(
          new PdException(PdException.Kind.CLOSED, "the KV receiver was closed"));
    }
    try {
      server.close();
    } catch (IOException e) {
      LOG.log(Level.FINE, "closing the KV listener", e);
    }
    List<ReceiverLink> all = List.copyOf(links);
    for (ReceiverLink l : all) {
      l.fail(new PdException(PdException.Kind.CLOSED, "the KV receiver was closed"));
    }
    try {
      acceptor.join(java.time.Duration.ofSeconds(5));
      for (ReceiverLink l : all) {
        l.join(5_000);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    timer.shutdownNow();
  }

  // ---------------------------------------------------------------------------------------------
  // Connections

  private void acceptLoop() {
    while (true) {
      SocketChannel ch;
      try {
        ch = server.accept();
      } catch (IOException e) {
        if (server.isOpen()) {
          LOG.log(Level.WARNING, "the KV receiver at " + address + " failed to accept", e);
          continue;
        }
        return;
      }
      String remote;
      try {
        remote = String.valueOf(ch.getRemoteAddress());
      } catch (IOException e) {
        remote = "(unknown address)";
      }
      ReceiverLink link = new ReceiverLink(this, ch, remote);
      boolean stopped;
      boolean full;
      synchronized (lock) {
        stopped = closed;
        full = !stopped && links.size() >= settings.maxConnections();
        if (!stopped && !full) {
          links.add(link);
        }
      }
      if (stopped || full) {
        try {
          ch.close();
        } catch (IOException ignored) {
          // Closing anyway.
        }
        if (stopped) {
          return;
        }
        // a bound on what connecting costs the receiver, authenticated or not: a flood of
        // connections that never finish their handshake holds at most this many, each for at
        // most the handshake timeout
        if (counters.connectionsRefused.getAndIncrement() % 1000 == 0) {
          LOG.warning(
              "the KV receiver at "
                  + address
                  + " holds "
                  + settings.maxConnections()
                  + " connections already: closed one from "
                  + remote
                  + " unread ("
                  + counters.connectionsRefused.get()
                  + " so far)");
        }
        continue;
      }
      link.start();
    }
  }

  private void tick() {
    try {
      long now = System.nanoTime();
      for (ReceiverLink l : links) {
        l.tick(now);
      }
      synchronized (lock) {
        for (Map<Long, Cancelled> m : List.of(cancelledBeforeBootstrap, cancelledUnclaimed)) {
          for (Iterator<Cancelled> it = m.values().iterator(); it.hasNext(); ) {
            if (now - it.next().untilNs() >= 0) {
              it.remove();
            }
          }
        }
      }
    } catch (RuntimeException e) {
      // A later tick must still run: log, and go on.
      LOG.log(Level.SEVERE, "the KV receiver's timer failed", e);
    }
  }

  /** The reader of {@code link} stopped: every room on it fails, its destinations released. */
  void onLinkDown(ReceiverLink link, PdException cause) {
    List<Runnable> after = new ArrayList<>();
    synchronized (lock) {
      links.remove(link);
      for (ReceiverRoom r : List.copyOf(link.rooms.values())) {
        after.add(failRegistration(r, cause));
        after.add(releaseHeld(r));
        close(r, Counters.End.FAILED);
      }
    }
    runAll(after);
  }

  // ---------------------------------------------------------------------------------------------
  // Frames, on the reader thread of their connection

  void onOpen(ReceiverLink link, PdFrame.Open f) throws PdProtocolException {
    long id = f.room();
    ReceiverRoom start = null;
    synchronized (lock) {
      if (link.rooms.containsKey(id)) {
        throw new PdProtocolException("sent a second BOOTSTRAP for room " + id);
      }
      counters.roomOpened();
      String refusal = null;
      if (closed) {
        refusal = "the decode engine is shutting down";
      } else if (link.rooms.size() >= settings.maxRoomsPerConnection()) {
        refusal = "busy";
      } else if (rooms.containsKey(id)) {
        refusal = "duplicate room: room " + id + " is open on another connection";
      } else {
        Cancelled c = cancelledBeforeBootstrap.remove(id);
        if (c != null) {
          String why = "the decode engine cancelled room " + id + " before its BOOTSTRAP";
          refusal =
              c.byClient()
                  ? PdFrameDescriptor.clientCancelled(why + " (its client cancelled the request)")
                  : "cancelled: " + why;
        }
      }
      if (refusal != null) {
        counters.roomEnded(Counters.End.REFUSED);
        link.enqueue(PdFrameEncoder.refuse(id, refusal));
        return;
      }
      ReceiverRoom r = new ReceiverRoom(id, this, link, f.bootstrap());
      rooms.put(id, r);
      if (link.rooms.isEmpty()) {
        link.quietSinceNs = System.nanoTime();
      }
      link.rooms.put(id, r);
      link.roomCount = link.rooms.size();
      Registration reg = waiting.remove(id);
      if (reg != null) {
        counters.registrationsWaiting.decrementAndGet();
        reg.deadline.cancel(false);
        claim(r, reg);
        start = r;
      } else {
        r.deadline = afterBootstrapDeadline(() -> onUnclaimedDeadline(r));
      }
    }
    if (start != null) {
      reserve(start);
    }
  }

  /** Checks a DATA frame against its room; returns the room whose destination it lands in. */
  ReceiverRoom roomForData(ReceiverLink link, PdFrame.Data d) throws PdProtocolException {
    synchronized (lock) {
      ReceiverRoom r = link.rooms.get(d.room());
      if (r == null) {
        throw new PdProtocolException("sent DATA for room " + d.room() + ", which is not open");
      }
      if (!r.ackQueued || r.doneRead || r.destinations == null || !r.holdsDestinations) {
        throw new PdProtocolException(
            "sent DATA for room "
                + r.id
                + (r.doneRead ? " after its DONE" : " before its ACK")
                + " ("
                + r.state
                + ")");
      }
      int g = d.group();
      if (g >= r.reserved.length || d.index() < 0 || d.index() >= r.reserved[g]) {
        throw new PdProtocolException(dataBlock(r, d) + ", outside its ACK");
      }
      if (d.blockBytes() != r.bootstrap.blockBytes(g)) {
        throw new PdProtocolException(
            dataBlock(r, d)
                + " of "
                + d.blockBytes()
                + " bytes; the group's blocks have "
                + r.bootstrap.blockBytes(g));
      }
      if (r.landed[g].get(d.index())) {
        throw new PdProtocolException(dataBlock(r, d) + " twice");
      }
      return r;
    }
  }

  /** The block a DATA frame names, as messages name it (an index read as unsigned). */
  private static String dataBlock(ReceiverRoom r, PdFrame.Data d) {
    return "sent DATA for room "
        + r.id
        + " block (group="
        + d.group()
        + ", index="
        + Integer.toUnsignedString(d.index())
        + ")";
  }

  void onDone(ReceiverLink link, PdFrame.Done f) throws PdProtocolException {
    List<Runnable> after = new ArrayList<>();
    synchronized (lock) {
      ReceiverRoom r = link.rooms.get(f.room());
      if (r == null) {
        throw new PdProtocolException("sent DONE for room " + f.room() + ", which is not open");
      }
      if (r.doneRead || !r.ackQueued) {
        throw new PdProtocolException(
            "sent DONE for room " + r.id + (r.doneRead ? " twice" : " before its ACK"));
      }
      r.doneRead = true;
      if (r.state != ReceiverRoom.State.RECEIVING) {
        return; // CANCELLING: our CANCEL crossed the DONE; the peer's answer closes the room.
      }
      int crc = (int) r.crc.getValue();
      String broken = null;
      if (r.landedBlocks != r.expectedBlocks) {
        broken =
            "incomplete: DONE came after "
                + r.landedBlocks
                + " of the "
                + r.expectedBlocks
                + " reserved blocks";
      } else if (crc != f.crc32c()) {
        broken =
            "checksum mismatch: DONE says CRC32C 0x"
                + Integer.toHexString(f.crc32c())
                + ", the landed bytes give 0x"
                + Integer.toHexString(crc);
      }
      if (broken != null) {
        LOG.warning(
            OneLine.of("room " + r.id + " from " + link.peer() + " did not land: " + broken));
        after.add(releaseHeld(r));
        after.add(
            failRegistration(
                r,
                new PdException(
                    PdException.Kind.INTEGRITY,
                    "room " + r.id + " from " + link.peer() + " did not land: " + broken)));
        r.endAs = Counters.End.FAILED;
        r.state = ReceiverRoom.State.CANCELLING;
        link.enqueue(PdFrameEncoder.cancel(r.id, broken));
      } else {
        r.state = ReceiverRoom.State.LANDED;
        r.holdsDestinations = false;
        Landed landed = new Landed(r, f.info(), r.destinations);
        CompletableFuture<Landed> stage = r.registration.landed;
        after.add(() -> stage.complete(landed));
      }
    }
    runAll(after);
  }

  void onCancel(ReceiverLink link, PdFrame.Cancel f) throws PdProtocolException {
    List<Runnable> after = new ArrayList<>();
    synchronized (lock) {
      ReceiverRoom r = link.rooms.get(f.room());
      if (r == null) {
        // It crossed our REFUSE or RECEIVED: the room is over on both sides.
        return;
      }
      if (r.cancelRead) {
        throw new PdProtocolException("sent a second CANCEL for room " + r.id);
      }
      r.cancelRead = true;
      if (r.state == ReceiverRoom.State.CANCELLING) {
        after.add(releaseHeld(r));
        close(r, r.endAs);
      } else {
        String reason = OneLine.of(f.reason());
        if (r.state == ReceiverRoom.State.UNCLAIMED) {
          // the engine's registration may still come: it fails at once, for this reason
          cancelledUnclaimed.put(r.id, cancelledNow(link.peer() + " said " + reason, reason));
        }
        after.add(releaseHeld(r));
        after.add(
            failRegistration(
                r,
                new PdException(
                    PdException.Kind.CANCELLED,
                    link.peer() + " cancelled room " + r.id + ": " + reason,
                    PdFrameDescriptor.isClientCancelled(reason))));
        close(r, Counters.End.CANCELLED);
        link.enqueue(PdFrameEncoder.cancel(r.id, "answering the prefill side's cancel"));
      }
    }
    runAll(after);
  }

  // ---------------------------------------------------------------------------------------------
  // The engine's calls and completions

  boolean cancel(Registration reg, String reason) {
    PdException e =
        new PdException(
            PdException.Kind.CANCELLED,
            "room " + reg.room + " was cancelled by this side: " + OneLine.of(reason));
    synchronized (lock) {
      ReceiverRoom r = reg.matched;
      if (r == null) {
        if (!waiting.remove(reg.room, reg)) {
          return false;
        }
        counters.registrationsWaiting.decrementAndGet();
        reg.deadline.cancel(false);
        cancelledBeforeBootstrap.put(reg.room, cancelledNow(reason, reason));
      } else {
        switch (r.state) {
          case RESERVING, RECEIVING, LANDED -> {
            r.state = ReceiverRoom.State.CANCELLING;
            r.link.enqueue(PdFrameEncoder.cancel(r.id, reason));
          }
          case UNCLAIMED, CANCELLING, CLOSED -> {
            return false;
          }
        }
      }
    }
    reg.landed.completeExceptionally(e);
    return true;
  }

  boolean acknowledge(ReceiverRoom r) {
    synchronized (lock) {
      if (r.state != ReceiverRoom.State.LANDED) {
        return false;
      }
      // Counted before the peer can see it: the prefill side may look at once.
      close(r, Counters.End.LANDED);
      r.link.enqueue(PdFrameEncoder.received(r.id));
      return true;
    }
  }

  private void reserve(ReceiverRoom r) {
    CompletionStage<Destinations> stage;
    try {
      stage = landing.reserve(r.id, r.bootstrap);
      if (stage == null) {
        throw new IllegalStateException("the Landing returned no stage");
      }
    } catch (RuntimeException e) {
      stage = CompletableFuture.failedStage(e);
    }
    stage.whenComplete((d, e) -> onReserved(r, d, e));
  }

  private void onReserved(ReceiverRoom r, Destinations d, Throwable error) {
    String refusal = null;
    if (error != null || d == null) {
      Throwable cause =
          error instanceof CompletionException c && c.getCause() != null ? c.getCause() : error;
      refusal =
          cause == null
              ? "the decode engine reserved nothing"
              : cause.getMessage() != null ? cause.getMessage() : cause.toString();
    } else {
      String mismatch = shapeMismatch(d, r.bootstrap);
      if (mismatch != null) {
        refusal = "the decode engine's blocks do not match the layout: " + mismatch;
        LOG.severe(OneLine.of("room " + r.id + ": " + refusal));
      }
    }
    // Read before taking the lock: the engine's code never runs under it.
    int[] blocks = new int[refusal == null ? d.numGroups() : 0];
    for (int g = 0; g < blocks.length; g++) {
      blocks[g] = d.numBlocks(g);
    }
    List<Runnable> after = new ArrayList<>();
    synchronized (lock) {
      if (r.state != ReceiverRoom.State.RESERVING) {
        // Cancelled or failed while the engine reserved: nothing can land, give them back.
        if (d != null) {
          after.add(d::release);
        }
      } else if (refusal != null) {
        if (d != null) {
          after.add(d::release);
        }
        after.add(
            failRegistration(
                r,
                new PdException(
                    PdException.Kind.REFUSED,
                    "this decode engine refused room " + r.id + ": " + OneLine.of(refusal))));
        close(r, Counters.End.REFUSED);
        r.link.enqueue(PdFrameEncoder.refuse(r.id, refusal));
      } else {
        r.destinations = d;
        r.holdsDestinations = true;
        r.landed = new BitSet[blocks.length];
        long expected = 0;
        for (int g = 0; g < blocks.length; g++) {
          r.landed[g] = new BitSet(blocks[g]);
          expected += blocks[g];
        }
        r.expectedBlocks = expected;
        r.reserved = blocks;
        r.ackQueued = true;
        r.state = ReceiverRoom.State.RECEIVING;
        r.link.enqueue(PdFrameEncoder.ack(r.id, new Ack(blocks)));
      }
    }
    runAll(after);
  }

  private String shapeMismatch(Destinations d, Bootstrap b) {
    try {
      if (d.numGroups() != b.numGroups()) {
        return d.numGroups() + " cache groups, the BOOTSTRAP has " + b.numGroups();
      }
      for (int g = 0; g < b.numGroups(); g++) {
        int n = d.numBlocks(g);
        if (n < 0 || n > settings.maxBlocksPerGroup()) {
          return "group "
              + g
              + " has "
              + n
              + " blocks (max_blocks_per_group="
              + settings.maxBlocksPerGroup()
              + ")";
        }
        for (int i = 0; i < n; i++) {
          MemorySegment block = d.block(g, i);
          if (block.byteSize() != b.blockBytes(g)) {
            return "block ("
                + g
                + ", "
                + i
                + ") has "
                + block.byteSize()
                + " bytes, the BOOTSTRAP says "
                + b.blockBytes(g);
          }
          if (block.isReadOnly() || !block.isAccessibleBy(ANY_OTHER_THREAD)) {
            return "block ("
                + g
                + ", "
                + i
                + ") is read-only or confined to one thread; the connection's reader writes it";
          }
        }
      }
      return null;
    } catch (RuntimeException e) {
      return "reading them failed: " + e;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Deadlines, on the timer thread

  /** Runs {@code action} on the timer once {@code bootstrap_deadline_ms} passed. */
  private ScheduledFuture<?> afterBootstrapDeadline(Runnable action) {
    return timer.schedule(action, settings.bootstrapDeadlineMs(), TimeUnit.MILLISECONDS);
  }

  private void onUnclaimedDeadline(ReceiverRoom r) {
    synchronized (lock) {
      if (r.state != ReceiverRoom.State.UNCLAIMED) {
        return;
      }
      close(r, Counters.End.REFUSED);
      r.link.enqueue(
          PdFrameEncoder.refuse(
              r.id,
              "unknown room: no request for room "
                  + r.id
                  + " reached this decode engine within bootstrap_deadline_ms="
                  + settings.bootstrapDeadlineMs()));
    }
  }

  private void onRegistrationDeadline(Registration reg) {
    synchronized (lock) {
      if (!waiting.remove(reg.room, reg)) {
        return;
      }
      counters.registrationsWaiting.decrementAndGet();
      counters.registrationsExpired.incrementAndGet();
    }
    reg.landed.completeExceptionally(
        new PdException(
            PdException.Kind.TIMEOUT,
            "no BOOTSTRAP for room "
                + reg.room
                + " reached this decode engine within bootstrap_deadline_ms="
                + settings.bootstrapDeadlineMs()));
  }

  // ---------------------------------------------------------------------------------------------
  // Holding lock

  private static void claim(ReceiverRoom r, Registration reg) {
    r.registration = reg;
    reg.matched = r;
    r.state = ReceiverRoom.State.RESERVING;
  }

  /** Ends {@code r}: out of every table, counted once. */
  private void close(ReceiverRoom r, Counters.End end) {
    if (r.state == ReceiverRoom.State.CLOSED) {
      return;
    }
    r.state = ReceiverRoom.State.CLOSED;
    if (r.deadline != null) {
      r.deadline.cancel(false);
    }
    rooms.remove(r.id, r);
    r.link.rooms.remove(r.id, r);
    r.link.roomCount = r.link.rooms.size();
    counters.roomEnded(end);
  }

  /** The release of {@code r}'s destinations if the receiver still holds them, to run after. */
  private static Runnable releaseHeld(ReceiverRoom r) {
    if (!r.holdsDestinations) {
      return null;
    }
    r.holdsDestinations = false;
    Destinations d = r.destinations;
    return d::release;
  }

  /** The failure of {@code r}'s landing stage, to run after. */
  private static Runnable failRegistration(ReceiverRoom r, PdException e) {
    Registration reg = r.registration;
    return reg == null ? null : () -> reg.landed.completeExceptionally(e);
  }

  /** Runs {@code actions} (nulls skipped); one that throws (an engine bug) is logged. */
  private static void runAll(List<Runnable> actions) {
    for (Runnable a : actions) {
      if (a == null) {
        continue;
      }
      try {
        a.run();
      } catch (RuntimeException e) {
        LOG.log(Level.SEVERE, "a KV landing callback failed", e);
      }
    }
  }
}
