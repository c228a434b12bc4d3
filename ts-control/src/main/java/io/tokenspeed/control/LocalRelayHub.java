package io.tokenspeed.control;

import io.tokenspeed.control.MeshException.Reason;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongSupplier;

/**
 * The relay exchange's transport among the ranks of one replica that run as threads of one JVM (a
 * simulation of the engine): the same frames, the same all-gather, the same failures and the same
 * settling as the TCP {@link Mesh}, with queues of frames in place of sockets.
 *
 * <pre>
 *   links[from][to]: the frames rank `from` sent to rank `to`, oldest first, then maybe
 *                    end of stream (`from` closed or was killed)
 *
 *   rank r, round n                 every peer p ≠ r, in rank order
 *   ---------------                 ------------------------------------------------------
 *   own ─► links[r][p] for all p    links[p][r] head: REPORT ─► frames[p]      (one per round)
 *                                                     FINAL  ─► PEER_STOPPED
 *                                                     other  ─► MALFORMED_FRAME
 *                                   empty and ended          ─► DISCONNECTED
 *                                   empty past the deadline  ─► TIMEOUT naming every silent p
 * </pre>
 *
 * <p><b>Why queues of frames.</b> A TCP connection is an ordered byte stream per direction, and the
 * mesh never reads past one frame per peer per round. A queue per direction, from which a round
 * takes exactly one frame, keeps both properties: a peer one round ahead leaves its next frame (or
 * its FINAL) for the next round, and frames sent before a rank left are read before its end of
 * stream, as a socket delivers them before its FIN. Frames are the encoder's bytes and are decoded
 * by the exchange as over TCP, so nothing above the transport can tell the difference. Sending
 * never blocks (a socket buffer always holds the one or two frames a round has in flight), so the
 * mesh's "did not take this rank's whole frame" timeout never happens here.
 *
 * <p><b>What a simulation does to a rank.</b> {@link #kill} is a process that died: its links end
 * after what it sent, its peers see it disconnect, and its own thread's exchange fails at once.
 * {@link #hold} freezes a rank as a stopped or descheduled process: it takes and sends nothing
 * until {@link #release}, so its peers time out on it, settle, and it later finds their FINALs.
 * {@link RelayExchange#close()} of a rank ends its links as the mesh's close does.
 *
 * <p><b>Time.</b> Deadlines follow the hub's clock: {@link System#nanoTime} by default, or a
 * simulation's clock, which must be readable from every rank's thread. Under a simulated clock a
 * waiting rank rechecks its deadline whenever something happens on the hub and whenever the
 * simulation calls {@link #timeAdvanced()}, so a deadline passes exactly when the simulated time
 * passes it, however long that takes in wall time. {@link #waiting()} tells the simulation when
 * every rank inside a round waits on the hub, so that only moving the clock (or a release) lets the
 * round go on: a simulation that moves its clock only then replays exactly.
 *
 * <p>Thread-safe: one lock guards every link, and each rank's thread calls only its own transport.
 */
public final class LocalRelayHub {

  private final int worldSize;
  private final LongSupplier nanoClock;
  private final boolean simulatedClock;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition changed = lock.newCondition();

  /** {@code links[from][to]}: frames sent and not yet taken. */
  private final List<List<ArrayDeque<byte[]>>> links = new ArrayList<>();

  /** {@code ended[from][to]}: {@code from} sends nothing more to {@code to}. */
  private final boolean[][] ended;

  private final boolean[] joined;
  private final boolean[] killed;
  private final boolean[] held;

  /**
   * {@code parked[r]}: rank r waits on the hub and nothing woke it since it began to wait (a wake
   * clears every flag; a rank that finds nothing to do parks again).
   */
  private final boolean[] parked;

  /** The first config that joined: the others must agree with it as a handshake checks. */
  private ControlConfig first;

  /** A hub for {@code worldSize} ranks whose deadlines follow {@link System#nanoTime}. */
  public LocalRelayHub(int worldSize) {
    this(worldSize, System::nanoTime, false);
  }

  /**
   * A hub for {@code worldSize} ranks whose deadlines follow {@code nanoClock}, a simulation's
   * clock: call {@link #timeAdvanced()} after moving it.
   */
  public LocalRelayHub(int worldSize, LongSupplier nanoClock) {
    this(worldSize, nanoClock, true);
  }

  private LocalRelayHub(int worldSize, LongSupplier nanoClock, boolean simulatedClock) {
    if (worldSize < 1 || worldSize > ControlConfig.MAX_WORLD_SIZE) {
      throw new IllegalArgumentException(
          "world_size=" + worldSize + " must be in [1, " + ControlConfig.MAX_WORLD_SIZE + "]");
    }
    if (nanoClock == null) {
      throw new IllegalArgumentException("the hub's clock is missing");
    }
    this.worldSize = worldSize;
    this.nanoClock = nanoClock;
    this.simulatedClock = simulatedClock;
    this.ended = new boolean[worldSize][worldSize];
    this.joined = new boolean[worldSize];
    this.killed = new boolean[worldSize];
    this.held = new boolean[worldSize];
    this.parked = new boolean[worldSize];
    for (int from = 0; from < worldSize; from++) {
      List<ArrayDeque<byte[]>> row = new ArrayList<>(worldSize);
      for (int to = 0; to < worldSize; to++) {
        row.add(new ArrayDeque<>(4));
      }
      links.add(row);
    }
  }

  /** The number of ranks. */
  public int worldSize() {
    return worldSize;
  }

  /**
   * Kills {@code rank} as its process would die: its peers read what it sent, then see it
   * disconnect; its own exchange fails at once (a local I/O failure) and sends no FINAL.
   */
  public void kill(int rank) {
    check(rank);
    lock.lock();
    try {
      killed[rank] = true;
      held[rank] = false;
      for (int to = 0; to < worldSize; to++) {
        ended[rank][to] = true;
      }
      wake();
    } finally {
      lock.unlock();
    }
  }

  /** Freezes {@code rank}: it sends and takes nothing until {@link #release}. */
  public void hold(int rank) {
    check(rank);
    lock.lock();
    try {
      held[rank] = !killed[rank];
    } finally {
      lock.unlock();
    }
  }

  /** Lets a held {@code rank} go on where it stopped. */
  public void release(int rank) {
    check(rank);
    lock.lock();
    try {
      held[rank] = false;
      wake();
    } finally {
      lock.unlock();
    }
  }

  /** Whether {@code rank} is held. */
  public boolean held(int rank) {
    check(rank);
    lock.lock();
    try {
      return held[rank];
    } finally {
      lock.unlock();
    }
  }

  /**
   * Wakes every waiting rank to compare its deadline with the clock again; a simulation calls it
   * after advancing its clock. Nothing to do under {@link System#nanoTime}.
   */
  public void timeAdvanced() {
    lock.lock();
    try {
      wake();
    } finally {
      lock.unlock();
    }
  }

  /**
   * How many ranks wait on the hub for something only another rank, the clock or a {@link #release}
   * can bring: a frame, a FINAL, a deadline, their release. When every rank still inside a round
   * waits here, nothing happens until the simulated time moves (or a held rank is released).
   */
  public int waiting() {
    lock.lock();
    try {
      int n = 0;
      for (boolean p : parked) {
        n += p ? 1 : 0;
      }
      return n;
    } finally {
      lock.unlock();
    }
  }

  /** Wakes every waiting rank. Holds the lock. */
  private void wake() {
    Arrays.fill(parked, false);
    changed.signalAll();
  }

  private void check(int rank) {
    if (rank < 0 || rank >= worldSize) {
      throw new IllegalArgumentException(
          "rank=" + rank + " is not in [0, " + worldSize + ") of this hub");
    }
  }

  /** Claims {@code config}'s rank; refuses what a handshake would refuse. */
  RelayTransport join(ControlConfig config) throws MeshException {
    lock.lock();
    try {
      String mismatch = null;
      if (config.worldSize() != worldSize) {
        mismatch = "world_size=" + config.worldSize() + ", the hub has " + worldSize + " ranks";
      } else if (joined[config.rank()]) {
        mismatch = "rank " + config.rank() + " has already joined";
      } else if (first != null) {
        mismatch = sharedMismatch(first, config);
      }
      if (mismatch != null) {
        throw new MeshException(
            Reason.HANDSHAKE,
            -1,
            0,
            "rank " + config.rank() + " cannot join the local relay hub: " + mismatch);
      }
      if (first == null) {
        first = config;
      }
      joined[config.rank()] = true;
      return new Transport(config);
    } finally {
      lock.unlock();
    }
  }

  /** What differs between two ranks' settings that must be equal on every rank, or null. */
  private static String sharedMismatch(ControlConfig a, ControlConfig b) {
    if (a.replicaId() != b.replicaId()) {
      return "replica_id=" + b.replicaId() + ", rank " + a.rank() + " has " + a.replicaId();
    }
    if (a.maxFrameBytes() != b.maxFrameBytes()
        || a.maxPendingOperations() != b.maxPendingOperations()
        || a.maxPendingKeys() != b.maxPendingKeys()) {
      return "max_frame_bytes, max_pending_operations or max_pending_keys differ from rank "
          + a.rank()
          + "'s (these must be equal on every rank)";
    }
    return null;
  }

  /** One rank's end of the hub. Called by that rank's thread only. */
  private final class Transport implements RelayTransport {
    private final ControlConfig config;
    private final int rank;
    private final FrameDecoder decoder;
    private final long roundTimeoutNs;

    /** The peer's link ended (or carried garbage): nothing more is sent to or taken from it. */
    private final boolean[] dead;

    /** The peer's FINAL, once taken. */
    private final Frame.Final[] last;

    Transport(ControlConfig config) {
      this.config = config;
      this.rank = config.rank();
      this.decoder = new FrameDecoder(config.maxFrameBytes());
      this.roundTimeoutNs = TimeUnit.MILLISECONDS.toNanos(config.roundTimeoutMs());
      this.dead = new boolean[worldSize];
      this.last = new Frame.Final[worldSize];
    }

    @Override
    public byte[][] allGather(long round, byte[] own) throws MeshException {
      byte[][] frames = new byte[worldSize][];
      frames[rank] = own;
      if (worldSize == 1) {
        return frames;
      }
      lock.lock();
      try {
        awaitUnheld(round);
        for (int p = 0; p < worldSize; p++) {
          if (p != rank && !ended[rank][p]) {
            links.get(rank).get(p).addLast(own);
          }
        }
        wake();
        long deadlineNs = nanoClock.getAsLong() + roundTimeoutNs;
        int missing = worldSize - 1;
        while (true) {
          for (int p = 0; p < worldSize; p++) {
            if (p != rank && frames[p] == null) {
              frames[p] = take(p, round);
              missing -= frames[p] == null ? 0 : 1;
            }
          }
          if (missing == 0) {
            return frames;
          }
          long leftNs = deadlineNs - nanoClock.getAsLong();
          if (leftNs <= 0) {
            List<Integer> silent = new ArrayList<>();
            for (int p = 0; p < worldSize; p++) {
              if (frames[p] == null) {
                silent.add(p);
              }
            }
            throw Mesh.timeout(config, round, silent, List.of());
          }
          await(leftNs, round);
          awaitUnheld(round);
        }
      } finally {
        lock.unlock();
      }
    }

    /** The next frame from {@code p} in {@code round}: its report, or null while none is there. */
    private byte[] take(int p, long round) throws MeshException {
      byte[] f = links.get(p).get(rank).pollFirst();
      if (f == null) {
        if (ended[p][rank]) {
          dead[p] = true;
          throw Mesh.disconnected(config, p, round, "end of stream", null);
        }
        return null;
      }
      int type = FrameDecoder.frameType(f, 0);
      if (type == FrameDescriptor.TYPE_FINAL) {
        last[p] = finalOf(p, f, round);
        throw Mesh.peerStopped(config, p, round, last[p]);
      }
      if (type != FrameDescriptor.TYPE_REPORT) {
        dead[p] = true;
        throw Mesh.notAReport(p, round, type);
      }
      return f;
    }

    private Frame.Final finalOf(int p, byte[] f, long round) throws MeshException {
      try {
        return Mesh.finalOf(decoder, p, f, round);
      } catch (MeshException e) {
        dead[p] = true;
        throw e;
      }
    }

    @Override
    public Map<Integer, Long> settle(long round, long gatheredRound, int blamedRank) {
      Map<Integer, Long> heard = new TreeMap<>();
      lock.lock();
      try {
        if (killed[rank]) {
          return heard;
        }
        byte[] own = Mesh.finalFrame(config, gatheredRound, blamedRank);
        List<Integer> live = new ArrayList<>();
        for (int p = 0; p < worldSize; p++) {
          if (p != rank && !dead[p]) {
            live.add(p);
            if (!ended[rank][p]) {
              links.get(rank).get(p).addLast(own);
            }
          }
        }
        wake();
        long deadlineNs = nanoClock.getAsLong() + 2 * roundTimeoutNs;
        while (true) {
          boolean pending = false;
          for (int p : live) {
            if (!dead[p] && last[p] == null) {
              settleStep(p, round);
              pending |= !dead[p] && last[p] == null;
            }
          }
          long leftNs = deadlineNs - nanoClock.getAsLong();
          if (!pending || leftNs <= 0 || killed[rank]) {
            break;
          }
          try {
            await(leftNs, round);
            awaitUnheld(round);
          } catch (MeshException e) {
            break; // interrupted or killed: settle with what was heard
          }
        }
        for (int p : live) {
          if (last[p] != null) {
            heard.put(p, last[p].gatheredRound());
          }
        }
        return heard;
      } finally {
        lock.unlock();
      }
    }

    /** Takes {@code p}'s frames up to its FINAL, skipping reports still in flight. */
    private void settleStep(int p, long round) {
      ArrayDeque<byte[]> in = links.get(p).get(rank);
      byte[] f;
      while ((f = in.pollFirst()) != null) {
        int type = FrameDecoder.frameType(f, 0);
        if (type == FrameDescriptor.TYPE_FINAL) {
          try {
            last[p] = finalOf(p, f, round);
          } catch (MeshException e) {
            return; // dead
          }
          return;
        }
        if (type != FrameDescriptor.TYPE_REPORT) {
          dead[p] = true;
          return;
        }
      }
      if (ended[p][rank]) {
        dead[p] = true;
      }
    }

    /** Waits while this rank is held; fails once it is killed. Holds the lock. */
    private void awaitUnheld(long round) throws MeshException {
      while (held[rank]) {
        parked[rank] = true;
        try {
          changed.await();
        } catch (InterruptedException e) {
          throw interrupted(round);
        } finally {
          parked[rank] = false;
        }
      }
      if (killed[rank]) {
        throw new MeshException(
            Reason.IO, -1, round, "rank " + rank + " was killed in round " + round);
      }
    }

    /** Waits for a change on the hub, or up to {@code leftNs} of wall time. Holds the lock. */
    private void await(long leftNs, long round) throws MeshException {
      parked[rank] = true;
      try {
        if (simulatedClock) {
          changed.await();
        } else {
          changed.awaitNanos(leftNs);
        }
      } catch (InterruptedException e) {
        throw interrupted(round);
      } finally {
        parked[rank] = false;
      }
    }

    private MeshException interrupted(long round) {
      Thread.currentThread().interrupt();
      return new MeshException(
          Reason.IO, -1, round, "rank " + rank + " interrupted in round " + round);
    }

    @Override
    public void close() {
      lock.lock();
      try {
        for (int to = 0; to < worldSize; to++) {
          ended[rank][to] = true;
        }
        wake();
      } finally {
        lock.unlock();
      }
    }
  }
}
