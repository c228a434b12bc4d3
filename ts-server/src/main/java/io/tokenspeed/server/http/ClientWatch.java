package io.tokenspeed.server.http;

import java.io.IOException;
import java.net.Inet4Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Notices, within {@link #periodMs} or so, that the client of a request in flight went away, while
 * the request's thread waits on the engine and writes nothing: a non-streamed request, or a stream
 * whose text is held back (a stop string). The web server reads a connection only between requests,
 * so a client's close is otherwise seen at the next failed write, or never.
 *
 * <p>It asks the kernel, not the socket: one poller reads the TCP table of this network namespace
 * ({@code /proc/net/tcp} and {@code /proc/net/tcp6}) every period while any request is watched, and
 * finds each watched connection by its four addresses. A connection that the client closed is in
 * {@code CLOSE_WAIT} (the client's FIN arrived), {@code LAST_ACK} or {@code CLOSE}, or gone from
 * the table (a reset); its watch then fires once. A watch arms only once the poller has seen its
 * connection established, so a connection it cannot find (another table layout, a proxy's socket)
 * is never taken for a closed one: such requests are noticed at their next write, as before. A
 * watch arms once the poller has found its connection in the table, in any state; one it never
 * finds within {@code ARM_POLLS} polls is dropped. Where the table cannot be read (not Linux),
 * nothing is watched.
 *
 * <p>A client that half-closes its side after sending the request (legal in HTTP/1.1, done by no
 * common client) is taken for one that left.
 *
 * <p>Thread-safe; the callbacks run on the poller's thread and must be quick.
 */
final class ClientWatch implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(ClientWatch.class.getName());

  /** How often the table is read while requests are watched. */
  static final long DEFAULT_PERIOD_MS = 250;

  /** Polls after which a watch whose connection never appeared stops being looked for. */
  private static final int ARM_POLLS = 8;

  /** TCP states of /proc/net/tcp (include/net/tcp_states.h). */
  private static final int CLOSE = 0x07;

  private static final int CLOSE_WAIT = 0x08;
  private static final int LAST_ACK = 0x09;

  /** One connection's four addresses, each address as 16 bytes (IPv4 mapped into IPv6). */
  record Endpoints(byte[] local, int localPort, byte[] remote, int remotePort) {
    String key() {
      return hex(local) + ":" + localPort + "-" + hex(remote) + ":" + remotePort;
    }
  }

  /** A watched request; closing it ends the watch. */
  interface Registration extends AutoCloseable {
    @Override
    void close();
  }

  private static final class Watch implements Registration {
    final String key;
    final Runnable onGone;
    final Set<Watch> owner;
    boolean armed;
    int polls;

    Watch(String key, Runnable onGone, Set<Watch> owner) {
      this.key = key;
      this.onGone = onGone;
      this.owner = owner;
    }

    @Override
    public void close() {
      owner.remove(this);
    }
  }

  private final long periodMs;
  private final Supplier<List<String>> table;
  private final Set<Watch> watches = ConcurrentHashMap.newKeySet();
  private final ScheduledExecutorService poller;
  private volatile boolean warned;

  /**
   * @param periodMs how often the table is read while requests are watched
   * @param table the lines of the TCP tables (both files, headers included), read afresh each call
   */
  ClientWatch(long periodMs, Supplier<List<String>> table) {
    this.periodMs = periodMs;
    this.table = table;
    this.poller =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "ts-http-client-watch");
              t.setDaemon(true);
              return t;
            });
    poller.scheduleWithFixedDelay(this::poll, periodMs, periodMs, TimeUnit.MILLISECONDS);
  }

  /** A watch over this machine's TCP tables, or one that watches nothing where they are missing. */
  static ClientWatch ofKernel() {
    Path v4 = Path.of("/proc/net/tcp");
    Path v6 = Path.of("/proc/net/tcp6");
    if (!Files.isReadable(v4) && !Files.isReadable(v6)) {
      return new ClientWatch(DEFAULT_PERIOD_MS, null);
    }
    return new ClientWatch(
        DEFAULT_PERIOD_MS,
        () -> {
          List<String> lines = new ArrayList<>();
          for (Path p : List.of(v4, v6)) {
            try {
              lines.addAll(Files.readAllLines(p, java.nio.charset.StandardCharsets.US_ASCII));
            } catch (IOException e) {
              // a missing tcp6 (IPv6 off) is fine; the other table still answers
            }
          }
          return lines;
        });
  }

  /** The period of the poll. */
  long periodMs() {
    return periodMs;
  }

  /**
   * Watches the connection between {@code local} and {@code remote} (the server's and the client's
   * socket addresses); {@code onGone} runs once if the client closes it before the registration is
   * closed. Returns a registration that watches nothing when the addresses are not IP sockets or no
   * table is readable.
   */
  Registration watch(SocketAddress local, SocketAddress remote, Runnable onGone) {
    if (table == null
        || !(local instanceof InetSocketAddress l)
        || !(remote instanceof InetSocketAddress r)
        || l.getAddress() == null
        || r.getAddress() == null) {
      return () -> {};
    }
    Endpoints e =
        new Endpoints(mapped(l.getAddress()), l.getPort(), mapped(r.getAddress()), r.getPort());
    Watch w = new Watch(e.key(), onGone, watches);
    watches.add(w);
    return w;
  }

  /** Watches in progress (for tests). */
  int watched() {
    return watches.size();
  }

  private void poll() {
    if (watches.isEmpty()) {
      return;
    }
    try {
      Map<String, Integer> states = parse(table.get());
      for (Watch w : watches) {
        Integer state = states.get(w.key);
        w.polls++;
        if (!w.armed) {
          if (state != null) {
            w.armed = true; // the table shows this connection: its state can be trusted
          } else {
            if (w.polls >= ARM_POLLS) {
              watches.remove(w); // never seen: this table does not show it; rely on writes
            }
            continue;
          }
        }
        if (state == null || state == CLOSE_WAIT || state == LAST_ACK || state == CLOSE) {
          watches.remove(w);
          w.onGone.run();
        }
      }
    } catch (RuntimeException e) {
      if (!warned) {
        warned = true;
        LOG.log(Level.WARNING, "reading the TCP table to watch for departed clients failed", e);
      }
    }
  }

  /**
   * The state of every socket in the tables' lines, by {@link Endpoints#key}. A line is {@code sl
   * local_address rem_address st ...}, each address {@code HEX:PORT} with the address in 32-bit
   * words in host byte order (8 hex digits for IPv4, 32 for IPv6).
   */
  static Map<String, Integer> parse(List<String> lines) {
    Map<String, Integer> out = new HashMap<>();
    for (String line : lines) {
      String[] f = line.trim().split("\\s+");
      if (f.length < 4 || !f[0].endsWith(":") || f[0].equals("sl")) {
        continue;
      }
      try {
        Endpoints e = endpoints(f[1], f[2]);
        out.put(e.key(), Integer.parseInt(f[3], 16));
      } catch (IllegalArgumentException notAnEntry) {
        // a header or a line of an unknown layout: not a socket we could be watching
      }
    }
    return out;
  }

  private static Endpoints endpoints(String local, String remote) {
    int lc = local.indexOf(':');
    int rc = remote.indexOf(':');
    if (lc < 0 || rc < 0) {
      throw new IllegalArgumentException("not an address: " + local + " " + remote);
    }
    return new Endpoints(
        address(local.substring(0, lc)),
        Integer.parseInt(local.substring(lc + 1), 16),
        address(remote.substring(0, rc)),
        Integer.parseInt(remote.substring(rc + 1), 16));
  }

  /** A table address (8 or 32 hex digits, 32-bit words in host order) as 16 bytes. */
  static byte[] address(String hex) {
    if (hex.length() != 8 && hex.length() != 32) {
      throw new IllegalArgumentException("address of " + hex.length() + " hex digits");
    }
    byte[] raw = new byte[hex.length() / 2];
    boolean little = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN;
    for (int w = 0; w < raw.length / 4; w++) {
      long word = Long.parseLong(hex.substring(w * 8, w * 8 + 8), 16);
      for (int b = 0; b < 4; b++) {
        int shift = little ? 8 * b : 8 * (3 - b);
        raw[w * 4 + b] = (byte) (word >>> shift);
      }
    }
    return raw.length == 4 ? mapped(raw) : raw;
  }

  private static byte[] mapped(InetAddress a) {
    byte[] raw = a.getAddress();
    return a instanceof Inet4Address ? mapped(raw) : raw;
  }

  private static byte[] mapped(byte[] v4) {
    byte[] out = new byte[16];
    out[10] = (byte) 0xff;
    out[11] = (byte) 0xff;
    System.arraycopy(v4, 0, out, 12, 4);
    return out;
  }

  private static String hex(byte[] b) {
    return java.util.HexFormat.of().formatHex(b);
  }

  @Override
  public void close() {
    poller.shutdownNow();
  }
}
