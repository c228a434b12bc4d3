package io.tokenspeed.l3.redis;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A loopback stand-in for a Redis server, for tests of the direct path that need replies no real
 * server sends on demand: a value cut off mid-way, a server that stalls mid-value or dies, MOVED
 * and ASK, replies cut into small pieces.
 *
 * <pre>
 *   command          default answer (from the map of objects)
 *   GET k            $n value | $-1
 *   SET k v NX       +OK (stored) | $-1 (k exists)
 *   STRLEN k         :n | :0
 *   ASKING, AUTH     +OK
 * </pre>
 *
 * A {@link Script} may answer any command itself (bytes to send, then optionally stop: close the
 * connection or stall until released). Every reply is written in pieces of random sizes (seeded),
 * each flushed on its own, so that the client sees replies split at arbitrary byte boundaries. Each
 * connection is served by its own thread; every command received is recorded with the index of its
 * connection.
 */
final class FakeRedisServer implements AutoCloseable {

  /** What the server does with one command: bytes, then what, then (after a stall) more bytes. */
  record Answer(byte[] bytes, Then then, byte[] afterStall) {
    static Answer of(byte[] bytes) {
      return new Answer(bytes, Then.CONTINUE, new byte[0]);
    }
  }

  /** After an answer's bytes: go on, close the connection, or stall until {@link #release()}. */
  enum Then {
    CONTINUE,
    CLOSE,
    STALL_THEN_CONTINUE
  }

  /** Answers a command itself, or returns null for the default answer. */
  interface Script {
    Answer answer(int connection, List<byte[]> command);
  }

  /** One command as received. */
  record Received(int connection, String name, String key) {}

  final Map<String, byte[]> objects = new ConcurrentHashMap<>();
  final List<Received> received = new CopyOnWriteArrayList<>();
  final AtomicInteger accepted = new AtomicInteger();
  final AtomicInteger connectionsEnded = new AtomicInteger();
  volatile Script script = (c, command) -> null;

  private final ServerSocket socket;
  private final long seed;
  private final int maxPieceBytes;
  private final List<Socket> connections = new CopyOnWriteArrayList<>();
  private final Thread acceptor;
  private final Object stallLock = new Object();
  private boolean released;

  /** Accept thread only. */
  private int acceptedSoFar;

  /** Serves on a free loopback port; replies go out in pieces of 1..maxPieceBytes bytes. */
  FakeRedisServer(long seed, int maxPieceBytes) throws IOException {
    this.seed = seed;
    this.maxPieceBytes = maxPieceBytes;
    this.socket = new ServerSocket(0, 64, InetAddress.getLoopbackAddress());
    this.acceptor = Thread.ofPlatform().daemon(true).name("fake-redis-accept").start(this::accept);
  }

  int port() {
    return socket.getLocalPort();
  }

  String address() {
    return "127.0.0.1:" + port();
  }

  /** Ends every stall, present and future. */
  void release() {
    synchronized (stallLock) {
      released = true;
      stallLock.notifyAll();
    }
  }

  /** Closes every connection from the server's side (as a server's idle timeout would). */
  void dropConnections() throws IOException {
    for (Socket s : connections) {
      s.close();
    }
  }

  /** The keys of the commands named {@code name} that connection {@code connection} received. */
  List<String> keysOn(int connection, String name) {
    List<String> keys = new ArrayList<>();
    for (Received r : received) {
      if (r.connection() == connection && r.name().equals(name)) {
        keys.add(r.key());
      }
    }
    return keys;
  }

  private void accept() {
    while (!socket.isClosed()) {
      try {
        Socket s = socket.accept();
        s.setTcpNoDelay(true);
        connections.add(s);
        int index = acceptedSoFar++;
        // counted after the connection is listed, so dropConnections sees it, and before it is
        // served, so a client that has its first reply sees it counted
        accepted.incrementAndGet();
        Thread.ofPlatform()
            .daemon(true)
            .name("fake-redis-" + index)
            .start(() -> serve(s, index, new SplittableRandom(seed * 31 + index)));
      } catch (IOException e) {
        return; // closed
      }
    }
  }

  private void serve(Socket s, int index, SplittableRandom random) {
    try (s) {
      InputStream in = new BufferedInputStream(s.getInputStream());
      OutputStream out = s.getOutputStream();
      while (true) {
        List<byte[]> command = readCommand(in);
        if (command == null) {
          connectionsEnded.incrementAndGet();
          return;
        }
        String name = text(command.getFirst()).toUpperCase(java.util.Locale.ROOT);
        received.add(new Received(index, name, command.size() > 1 ? text(command.get(1)) : ""));
        Answer answer = script.answer(index, command);
        if (answer == null) {
          answer = Answer.of(defaultAnswer(name, command));
        }
        writeInPieces(out, answer.bytes(), random);
        switch (answer.then()) {
          case CONTINUE -> {}
          case CLOSE -> {
            return;
          }
          case STALL_THEN_CONTINUE -> {
            stall();
            writeInPieces(out, answer.afterStall(), random);
          }
        }
      }
    } catch (IOException e) {
      connectionsEnded.incrementAndGet(); // reset by the client, or closed by this server
    }
  }

  private void stall() {
    synchronized (stallLock) {
      while (!released) {
        try {
          stallLock.wait();
        } catch (InterruptedException e) {
          return;
        }
      }
    }
  }

  private byte[] defaultAnswer(String name, List<byte[]> command) {
    return switch (name) {
      case "GET" -> bulk(objects.get(text(command.get(1))));
      case "STRLEN" -> {
        byte[] v = objects.get(text(command.get(1)));
        yield ascii(":" + (v == null ? 0 : v.length) + "\r\n");
      }
      case "SET" -> {
        boolean created = objects.putIfAbsent(text(command.get(1)), command.get(2)) == null;
        yield created ? ascii("+OK\r\n") : ascii("$-1\r\n");
      }
      case "ASKING", "AUTH" -> ascii("+OK\r\n");
      default -> ascii("-ERR unknown command '" + name + "'\r\n");
    };
  }

  private void writeInPieces(OutputStream out, byte[] bytes, SplittableRandom random)
      throws IOException {
    int at = 0;
    while (at < bytes.length) {
      int n = Math.min(bytes.length - at, 1 + random.nextInt(maxPieceBytes));
      out.write(bytes, at, n);
      out.flush();
      at += n;
    }
  }

  static byte[] bulk(byte[] value) {
    if (value == null) {
      return ascii("$-1\r\n");
    }
    ByteArrayOutputStream b = new ByteArrayOutputStream(value.length + 32);
    b.writeBytes(ascii("$" + value.length + "\r\n"));
    b.writeBytes(value);
    b.writeBytes(ascii("\r\n"));
    return b.toByteArray();
  }

  static byte[] ascii(String text) {
    return text.getBytes(StandardCharsets.US_ASCII);
  }

  private static String text(byte[] bytes) {
    return new String(bytes, StandardCharsets.UTF_8);
  }

  /** Reads one {@code *N $len bytes ...} command; null at a clean end of stream. */
  private static List<byte[]> readCommand(InputStream in) throws IOException {
    int first = in.read();
    if (first < 0) {
      return null;
    }
    if (first != '*') {
      throw new IOException("not a command: 0x" + Integer.toHexString(first));
    }
    int n = Integer.parseInt(line(in));
    List<byte[]> args = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      if (in.read() != '$') {
        throw new IOException("not a bulk argument");
      }
      int length = Integer.parseInt(line(in));
      byte[] arg = in.readNBytes(length);
      if (arg.length != length || in.read() != '\r' || in.read() != '\n') {
        throw new EOFException("argument cut short");
      }
      args.add(arg);
    }
    return args;
  }

  private static String line(InputStream in) throws IOException {
    StringBuilder b = new StringBuilder();
    int c;
    while ((c = in.read()) != '\r') {
      if (c < 0) {
        throw new EOFException("line cut short");
      }
      b.append((char) c);
    }
    if (in.read() != '\n') {
      throw new IOException("CR without LF");
    }
    return b.toString();
  }

  @Override
  public void close() throws IOException {
    release();
    socket.close();
    for (Socket s : connections) {
      s.close();
    }
    try {
      acceptor.join(5000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
