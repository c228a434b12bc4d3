package io.tokenspeed.l3.redis;

import io.tokenspeed.l3.spi.RowResult;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.channels.ClosedChannelException;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * One store call on the direct path: its keys spread over lanes (leased links), each lane with a
 * window of commands in flight, all driven by the calling thread until every key has its answer.
 *
 * <pre>
 *   keys 0..n-1 ──route──▶ node A: lanes A0 A1 .. (up to `connections`; key j of A's group on
 *                          node B: lanes B0 ..      lane j mod lanes)
 *
 *   send up to `pipeline_depth` commands on every lane (STRLEN: {@value #QUERY_WINDOW})
 *   until every lane is answered, round-robin over the lanes:
 *       read one reply on the lane (a GET value straight into its destination)
 *       when half its window is answered, send the lane's next commands
 *   keys answered MOVED or ASK (cluster), and keys of a stale pooled link: another round
 * </pre>
 *
 * <p>Reading one reply per lane in turn keeps every lane's commands queued at its server while this
 * thread copies another lane's value; the servers never wait for this thread to send the next
 * command, and the kernel's socket buffers hold what the thread has not read yet.
 *
 * <h2>What it guarantees</h2>
 *
 * <ul>
 *   <li><b>Nothing touches a segment after the call returns.</b> Every read into a destination and
 *       every write from a source happens on the calling thread, inside {@link #run}. A call that
 *       throws closes the links it could not leave clean; no reply is ever read on them again.
 *   <li><b>A destination is written only with a value of exactly its length.</b> A GET reply of
 *       another length is read past ({@code Invalid(n)}); a nil leaves it alone ({@code Missing}).
 *       A call that fails mid-value may leave the destination partly written, and then throws: the
 *       executor never publishes the rows of a failed call.
 *   <li><b>Bounded.</b> The reaper closes a lane's link once the call's deadline passes, and the
 *       thread checks the deadline between replies; redirections are followed for at most {@value
 *       #MAX_ROUNDS} rounds.
 * </ul>
 *
 * <p>Answers are kept per key: a row, or a server error the store turns into the call's exception
 * (see {@link RedisStore}). Error replies do not spoil a link: every command is answered in turn.
 */
final class DirectCall implements DirectLink.Lease {

  /** The command a call sends per key. */
  enum Op {
    QUERY,
    GET,
    PUT
  }

  /** Commands in flight per lane for STRLEN, whose replies are a few bytes each. */
  static final int QUERY_WINDOW = 128;

  /** The most rounds one call runs (the first, then redirections and retries). */
  static final int MAX_ROUNDS = 8;

  private final DirectPath path;
  final Op op;
  private final List<String> keys;
  private final List<MemorySegment> segments;
  private final long deadlineNs;
  private final int depth;

  /** Per key: its row, or null while unanswered or when {@link #errors} holds its answer. */
  final RowResult[] rows;

  /** Per key: the server's error reply that the store must turn into an exception, else null. */
  final String[] errors;

  /** Per key: the node an ASK redirected it to for its next round, else null. */
  private final DirectPath.Node[] asking;

  private int answered;
  private boolean retried;

  /** One lane: a leased link and the keys it carries, in order. */
  private static final class Lane {
    final DirectLink link;
    final int[] keys;
    int count;
    int sent;
    int received;

    Lane(DirectLink link, int capacity) {
      this.link = link;
      this.keys = new int[capacity];
    }
  }

  DirectCall(
      DirectPath path, Op op, List<String> keys, List<MemorySegment> segments, long deadlineNs) {
    this.path = path;
    this.op = op;
    this.keys = keys;
    this.segments = segments;
    this.deadlineNs = deadlineNs;
    this.depth = op == Op.QUERY ? QUERY_WINDOW : path.settings().pipelineDepth();
    this.rows = new RowResult[keys.size()];
    this.errors = new String[keys.size()];
    this.asking = new DirectPath.Node[keys.size()];
  }

  @Override
  public long deadlineNs() {
    return deadlineNs;
  }

  /** Keys without an answer. */
  int pending() {
    return keys.size() - answered;
  }

  // ------------------------------------------------------------------ rounds

  void run() throws IOException {
    int n = keys.size();
    int[] round = new int[n];
    for (int i = 0; i < n; i++) {
      round[i] = i;
    }
    int roundSize = n;
    for (int r = 0; roundSize > 0; r++) {
      if (r == MAX_ROUNDS) {
        throw new IOException(
            "redis kept redirecting "
                + roundSize
                + " key(s) (MOVED/ASK) after "
                + MAX_ROUNDS
                + " rounds, e.g. key "
                + keys.get(round[0]));
      }
      List<Lane> lanes;
      try {
        lanes = lanes(round, roundSize);
      } catch (IOException e) {
        if (System.nanoTime() - deadlineNs >= 0 && !(e instanceof DirectLink.HandshakeRefused)) {
          throw new RedisStore.TimedOut(pending(), e); // a connection attempt the reaper ended
        }
        throw e;
      }
      int[] next = new int[roundSize];
      int nextSize;
      try {
        nextSize = pump(lanes, next);
      } catch (IOException | RuntimeException | Error e) {
        abandon(lanes);
        if (e instanceof IOException io
            && !(e instanceof RedisStore.TimedOut)
            && expiredAny(lanes)) {
          throw new RedisStore.TimedOut(pending(), io);
        }
        throw e;
      }
      for (Lane lane : lanes) {
        path.giveBack(lane.link, this);
      }
      round = next;
      roundSize = nextSize;
    }
  }

  /** Leases the lanes of one round: per node, up to {@code connections} links. */
  private List<Lane> lanes(int[] round, int roundSize) throws IOException {
    Map<DirectPath.Node, int[]> groups = new IdentityHashMap<>();
    Map<DirectPath.Node, Integer> sizes = new IdentityHashMap<>();
    List<DirectPath.Node> order = new ArrayList<>();
    for (int j = 0; j < roundSize; j++) {
      int key = round[j];
      DirectPath.Node node = asking[key] != null ? asking[key] : path.route(keys.get(key));
      int[] group = groups.get(node);
      if (group == null) {
        group = new int[roundSize];
        groups.put(node, group);
        sizes.put(node, 0);
        order.add(node);
      }
      int size = sizes.get(node);
      group[size] = key;
      sizes.put(node, size + 1);
    }
    List<Lane> lanes = new ArrayList<>();
    try {
      for (DirectPath.Node node : order) {
        int[] group = groups.get(node);
        int size = sizes.get(node);
        int perLane = op == Op.QUERY ? QUERY_WINDOW : 1;
        int count =
            Math.max(1, Math.min(path.settings().connections(), (size + perLane - 1) / perLane));
        int first = lanes.size();
        for (int l = 0; l < count; l++) {
          lanes.add(new Lane(path.take(node, this), (size + count - 1) / count));
        }
        for (int j = 0; j < size; j++) {
          Lane lane = lanes.get(first + j % count);
          lane.keys[lane.count++] = group[j];
        }
      }
    } catch (IOException | RuntimeException | Error e) {
      for (Lane lane : lanes) {
        path.giveBack(lane.link, this);
      }
      throw e;
    }
    return lanes;
  }

  /** Runs one round's lanes to the end; returns how many keys it put into {@code next}. */
  private int pump(List<Lane> lanes, int[] next) throws IOException {
    int nextSize = 0;
    boolean staleSeen = false;
    for (Lane lane : lanes) {
      try {
        send(lane);
      } catch (IOException e) {
        nextSize = dropStale(lane, e, next, nextSize);
        staleSeen = true;
      }
    }
    int live = 0;
    for (Lane lane : lanes) {
      if (lane.received < lane.count) {
        live++;
      }
    }
    while (live > 0) {
      for (Lane lane : lanes) {
        if (lane.received == lane.count) {
          continue;
        }
        try {
          int key = lane.keys[lane.received];
          boolean again = receive(lane.link, key);
          lane.received++;
          if (again) {
            next[nextSize++] = key;
          } else {
            answered++;
          }
          if (lane.sent < lane.count && lane.sent - lane.received <= depth / 2) {
            send(lane);
          }
        } catch (IOException e) {
          nextSize = dropStale(lane, e, next, nextSize);
          staleSeen = true;
        }
        if (lane.received == lane.count) {
          live--;
        }
      }
      if (live > 0 && System.nanoTime() - deadlineNs >= 0) {
        throw new RedisStore.TimedOut(pending(), null);
      }
    }
    retried |= staleSeen;
    return nextSize;
  }

  /**
   * A lane failed: rethrows unless its pooled link was merely stale (see {@link #stale}); then
   * closes it and the node's other idle links, and moves its unanswered keys to the next round.
   */
  private int dropStale(Lane lane, IOException e, int[] next, int nextSize) throws IOException {
    if (!stale(lane, e)) {
      throw e;
    }
    lane.link.close();
    lane.link.node.closeIdle();
    for (int j = lane.received; j < lane.count; j++) {
      next[nextSize++] = lane.keys[j];
    }
    lane.received = lane.count;
    lane.sent = lane.count;
    return nextSize;
  }

  /**
   * Whether a lane failed only because its pooled link had died before this call: it was taken
   * idle, nothing was read on it in this call, the failure is an I/O error (not a timeout or a
   * malformed reply), and the call has not retried before.
   */
  private boolean stale(Lane lane, IOException e) {
    DirectLink link = lane.link;
    return !retried
        && link.reused
        && link.replies.bytesRead() == link.bytesReadAtLease
        && !(e instanceof ReplyDecoder.ProtocolException)
        && !(e instanceof ClosedChannelException)
        && !link.expired();
  }

  /** Sends the lane's next commands, up to its window. */
  private void send(Lane lane) throws IOException {
    DirectLink link = lane.link;
    CommandEncoder out = link.commands;
    while (lane.sent < lane.count && lane.sent - lane.received < depth) {
      int key = lane.keys[lane.sent++];
      if (asking[key] != null) {
        out.asking();
      }
      switch (op) {
        case QUERY -> out.strlen(keys.get(key));
        case GET -> out.get(keys.get(key));
        case PUT -> {
          MemorySegment source = segments.get(key);
          out.setHeader(keys.get(key), source.byteSize());
          out.sendWithValue(link.channel(), source.asByteBuffer());
        }
      }
      path.counters().commands.increment();
    }
    if (out.pendingBytes() > 0) {
      out.send(link.channel());
    }
  }

  /**
   * Reads the reply to {@code key}'s command on {@code link} and records its answer; returns true
   * when the key must go again in another round (MOVED, ASK).
   */
  private boolean receive(DirectLink link, int key) throws IOException {
    ReplyDecoder in = link.replies;
    if (asking[key] != null) {
      asking[key] = null;
      ReplyDecoder.Kind kind = in.next();
      if (kind != ReplyDecoder.Kind.SIMPLE) {
        if (kind == ReplyDecoder.Kind.BULK) {
          in.skipBulk();
        }
        // the command after it is answered as if ASKING was not sent: MOVED, most likely
      }
    }
    ReplyDecoder.Kind kind = in.next();
    if (kind == ReplyDecoder.Kind.ERROR) {
      return onError(key, in.text());
    }
    rows[key] =
        switch (op) {
          case QUERY -> {
            if (kind != ReplyDecoder.Kind.INTEGER) {
              throw unexpected(link, kind, "STRLEN");
            }
            yield in.integer() > 0 ? new RowResult.Ok(in.integer(), false) : RowResult.MISSING;
          }
          case GET -> {
            if (kind == ReplyDecoder.Kind.NIL) {
              yield RowResult.MISSING;
            }
            if (kind == ReplyDecoder.Kind.SIMPLE) {
              // a status reply is no value this store wrote: an invalid object, nothing copied
              yield new RowResult.Invalid(in.text().length());
            }
            if (kind != ReplyDecoder.Kind.BULK) {
              throw unexpected(link, kind, "GET");
            }
            long length = in.length();
            MemorySegment destination = segments.get(key);
            if (length != destination.byteSize()) {
              in.skipBulk();
              yield new RowResult.Invalid(length);
            }
            in.readBulk(destination);
            yield new RowResult.Ok(length, false);
          }
          case PUT -> {
            long length = segments.get(key).byteSize();
            if (kind == ReplyDecoder.Kind.SIMPLE && "OK".equals(in.text())) {
              yield new RowResult.Ok(length, false);
            }
            if (kind == ReplyDecoder.Kind.NIL) {
              yield new RowResult.Ok(length, true); // SET NX found the key
            }
            if (kind == ReplyDecoder.Kind.BULK) {
              in.skipBulk();
            }
            throw unexpected(link, kind, "SET");
          }
        };
    return false;
  }

  /** An error reply: a redirection, an answer that is a row, or an error the call throws. */
  private boolean onError(int key, String text) {
    if (text.startsWith("MOVED ") || text.startsWith("ASK ")) {
      Redirect to = Redirect.parse(text);
      if (to != null) {
        path.counters().redirects.increment();
        if (to.ask()) {
          asking[key] = path.node(to.host(), to.port());
        } else {
          path.onMoved(to.slot(), to.host(), to.port());
        }
        return true;
      }
    }
    if (op != Op.PUT && isCode(text, "WRONGTYPE")) {
      rows[key] = new RowResult.Invalid(0);
    } else if (op == Op.PUT && isCode(text, "OOM")) {
      rows[key] = RowResult.Rejected.noSpace(text); // the server's OOM reply
    } else {
      errors[key] = text;
    }
    return false;
  }

  /** Whether an error reply carries {@code code}: the whole text, or its first word. */
  static boolean isCode(String text, String code) {
    return text.equals(code) || text.startsWith(code + " ");
  }

  private static ReplyDecoder.ProtocolException unexpected(
      DirectLink link, ReplyDecoder.Kind kind, String command) {
    return new ReplyDecoder.ProtocolException(
        "redis at " + link.node.name() + " answered " + command + " with a " + kind + " reply");
  }

  /** A failed round: counts the GET keys left without an answer, closes every lane's link. */
  private void abandon(List<Lane> lanes) {
    if (op == Op.GET) {
      path.counters().abandonedReads.add(pending());
    }
    boolean ioFailed = false;
    for (Lane lane : lanes) {
      if (lane.received < lane.sent || lane.link.replies.hasBuffered()) {
        ioFailed |= !lane.link.expired();
        lane.link.close();
      } else {
        path.giveBack(lane.link, this);
      }
    }
    if (ioFailed) {
      for (Lane lane : lanes) {
        lane.link.node.closeIdle();
      }
    }
  }

  private static boolean expiredAny(List<Lane> lanes) {
    for (Lane lane : lanes) {
      if (lane.link.expired()) {
        return true;
      }
    }
    return false;
  }

  /** A {@code MOVED slot host:port} or {@code ASK slot host:port} reply. */
  record Redirect(boolean ask, int slot, String host, int port) {

    /** The redirection, or null when the text is not one. */
    static Redirect parse(String text) {
      String[] parts = text.split(" ");
      if (parts.length != 3 || !(parts[0].equals("MOVED") || parts[0].equals("ASK"))) {
        return null;
      }
      int colon = parts[2].lastIndexOf(':');
      if (colon < 0) {
        return null;
      }
      try {
        int slot = Integer.parseInt(parts[1]);
        int port = Integer.parseInt(parts[2].substring(colon + 1));
        String host = parts[2].substring(0, colon);
        if (slot < 0 || slot >= DirectPath.SLOTS || port < 1 || port > 65535) {
          return null;
        }
        if (host.startsWith("[") && host.endsWith("]")) {
          host = host.substring(1, host.length() - 1);
        }
        return new Redirect(parts[0].equals("ASK"), slot, host, port);
      } catch (NumberFormatException e) {
        return null;
      }
    }
  }
}
