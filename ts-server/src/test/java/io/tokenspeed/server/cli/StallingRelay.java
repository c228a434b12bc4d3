package io.tokenspeed.server.cli;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * A loopback TCP relay in front of a Redis server that can hold one command's transfer half way, so
 * that a fault injected then (the server killed) hits that command in flight and not before or
 * after it. Without a trap it forwards bytes both ways unchanged; a server restarted on the same
 * port is reached by the next connection, as a client reaches it directly.
 *
 * <pre>
 *   serve ──▶ relay (port P) ──▶ redis-server
 *
 *   trap(GET, REPLY, n):   the first client bytes carrying the bulk string GET are forwarded; the
 *                          server's next n bytes on that connection are forwarded, then held
 *   trap(SET, REQUEST, n): the client's bytes up to n past the bulk string SET are forwarded, then
 *                          held (the server has part of the value)
 * </pre>
 *
 * <p>A held direction keeps reading its source and discards what it reads, so when the server dies
 * the relay sees it at once and resets the client's connection (SO_LINGER 0), as a dead peer on the
 * same host would: the held bytes never arrive. The future {@link #trap} returns completes when the
 * trap holds.
 */
final class StallingRelay implements AutoCloseable {

  /** Which direction of the trapped connection is held. */
  enum Hold {
    /** The server's reply to the trapped command (and anything after it). */
    REPLY,
    /** The client's request from inside the trapped command on. */
    REQUEST
  }

  private record Trap(byte[] command, Hold hold, long passBytes) {}

  private final int upstreamPort;
  private final ServerSocket listener;
  private final List<Socket> sockets = new ArrayList<>();
  private final Thread acceptor;
  private volatile Trap trap;
  private volatile CompletableFuture<Void> tripped = new CompletableFuture<>();
  private volatile boolean closed;

  StallingRelay(int upstreamPort) throws IOException {
    this.upstreamPort = upstreamPort;
    this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    this.acceptor = Thread.ofPlatform().daemon().name("relay-accept").start(this::acceptLoop);
  }

  /** The relay's loopback port. */
  int port() {
    return listener.getLocalPort();
  }

  /** {@code redis://127.0.0.1:port} of the relay. */
  String uri() {
    return "redis://127.0.0.1:" + port();
  }

  /**
   * Arms a one-shot trap on the first connection whose client sends {@code command} (upper case, as
   * clients send it): {@code passBytes} more bytes go through in the held direction, then it is
   * held until the connection ends. Returns the future that completes when it holds.
   */
  synchronized CompletableFuture<Void> trap(String command, Hold hold, long passBytes) {
    tripped = new CompletableFuture<>();
    byte[] name = command.getBytes(StandardCharsets.US_ASCII);
    byte[] bulk =
        ("$" + name.length + "\r\n" + command + "\r\n").getBytes(StandardCharsets.US_ASCII);
    trap = new Trap(bulk, hold, passBytes);
    return tripped;
  }

  private void acceptLoop() {
    while (!closed) {
      Socket client;
      try {
        client = listener.accept();
      } catch (IOException e) {
        return; // closed
      }
      Socket server = new Socket();
      try {
        server.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), upstreamPort), 2000);
      } catch (IOException e) {
        reset(client); // the server is down: refuse as it would
        continue;
      }
      Connection c = new Connection(client, server);
      synchronized (this) {
        sockets.add(client);
        sockets.add(server);
      }
      Thread.ofPlatform().daemon().name("relay-up").start(c::pumpRequests);
      Thread.ofPlatform().daemon().name("relay-down").start(c::pumpReplies);
    }
  }

  /** One client connection and its server connection. */
  private final class Connection {
    private final Socket client;
    private final Socket server;

    /** Bytes the held direction may still forward; -1 while nothing is held. */
    private volatile long requestAllowance = -1;

    private volatile long replyAllowance = -1;

    Connection(Socket client, Socket server) {
      this.client = client;
      this.server = server;
    }

    void pumpRequests() {
      byte[] buf = new byte[64 * 1024];
      byte[] window = new byte[0];
      try (InputStream in = client.getInputStream();
          OutputStream out = server.getOutputStream()) {
        int n;
        while ((n = in.read(buf)) > 0) {
          int forward = n;
          Trap t = trap;
          if (t != null && requestAllowance < 0 && replyAllowance < 0) {
            byte[] seen = concat(window, buf, n);
            int at = indexOf(seen, t.command());
            if (at >= 0 && claim(t)) {
              int end = at + t.command().length - window.length; // in buf, may be <= 0
              if (t.hold() == Hold.REQUEST) {
                requestAllowance = Math.max(0, end) + t.passBytes();
              } else {
                replyAllowance = t.passBytes();
              }
            }
            window = tail(seen, t.command().length - 1);
          }
          long allowance = requestAllowance;
          if (allowance >= 0) {
            forward = (int) Math.min(n, allowance);
            requestAllowance = allowance - forward;
            if (requestAllowance == 0) {
              tripped.complete(null);
            }
          }
          if (forward > 0) {
            out.write(buf, 0, forward);
            out.flush();
          }
        }
      } catch (IOException e) {
        // either side ended
      } finally {
        end();
      }
    }

    void pumpReplies() {
      byte[] buf = new byte[64 * 1024];
      try (InputStream in = server.getInputStream();
          OutputStream out = client.getOutputStream()) {
        int n;
        while ((n = in.read(buf)) > 0) {
          int forward = n;
          long allowance = replyAllowance;
          if (allowance >= 0) {
            forward = (int) Math.min(n, allowance);
            replyAllowance = allowance - forward;
            if (replyAllowance == 0) {
              tripped.complete(null);
            }
          }
          if (forward > 0) {
            out.write(buf, 0, forward);
            out.flush();
          }
        }
      } catch (IOException e) {
        // either side ended
      } finally {
        end();
      }
    }

    private void end() {
      reset(client);
      reset(server);
    }
  }

  /** Takes the armed trap for one connection; false when another connection took it first. */
  private synchronized boolean claim(Trap t) {
    if (trap != t) {
      return false;
    }
    trap = null;
    return true;
  }

  private static byte[] concat(byte[] head, byte[] buf, int n) {
    byte[] out = new byte[head.length + n];
    System.arraycopy(head, 0, out, 0, head.length);
    System.arraycopy(buf, 0, out, head.length, n);
    return out;
  }

  private static byte[] tail(byte[] bytes, int n) {
    int from = Math.max(0, bytes.length - n);
    byte[] out = new byte[bytes.length - from];
    System.arraycopy(bytes, from, out, 0, out.length);
    return out;
  }

  private static int indexOf(byte[] haystack, byte[] needle) {
    outer:
    for (int i = 0; i + needle.length <= haystack.length; i++) {
      for (int j = 0; j < needle.length; j++) {
        if (haystack[i + j] != needle[j]) {
          continue outer;
        }
      }
      return i;
    }
    return -1;
  }

  /** Closes with a reset, as a dead peer's kernel answers. */
  private static void reset(Socket s) {
    try {
      if (!s.isClosed()) {
        s.setSoLinger(true, 0);
        s.close();
      }
    } catch (IOException e) {
      // already gone
    }
  }

  @Override
  public void close() throws IOException {
    closed = true;
    listener.close();
    synchronized (this) {
      sockets.forEach(StallingRelay::reset);
    }
    try {
      acceptor.join(2000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
