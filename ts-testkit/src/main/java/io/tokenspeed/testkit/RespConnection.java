package io.tokenspeed.testkit;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A blocking RESP2 client small enough to read in one sitting, for the harness's own commands
 * (PING, CLUSTER, ACL, FLUSHALL): the harness must not depend on the client under test.
 *
 * <pre>
 *   request   *N\r\n  then N times  $len\r\n bytes \r\n
 *   replies   +text\r\n        -> String
 *             -ERR text\r\n    -> RedisErrorReply (thrown at the top level, kept inside arrays)
 *             :123\r\n         -> Long
 *             $len\r\n bytes   -> String (UTF-8), $-1 -> null
 *             *N\r\n ...       -> List, *-1 -> null
 * </pre>
 *
 * <p>Every connect and read is bounded by the timeout given at construction.
 */
final class RespConnection implements AutoCloseable {

  private final Socket socket;
  private final InputStream in;
  private final OutputStream out;

  RespConnection(int port, Duration timeout) throws IOException {
    int timeoutMs = Math.toIntExact(Math.max(1, timeout.toMillis()));
    socket = new Socket();
    try {
      socket.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), timeoutMs);
      socket.setSoTimeout(timeoutMs);
      socket.setTcpNoDelay(true);
      in = new BufferedInputStream(socket.getInputStream());
      out = new BufferedOutputStream(socket.getOutputStream());
    } catch (IOException | RuntimeException e) {
      socket.close();
      throw e;
    }
  }

  /** Sends one command and returns its decoded reply; an error reply is thrown. */
  Object call(String... args) throws IOException {
    ByteArrayOutputStream request = new ByteArrayOutputStream();
    ascii(request, "*" + args.length + "\r\n");
    for (String arg : args) {
      byte[] bytes = arg.getBytes(StandardCharsets.UTF_8);
      ascii(request, "$" + bytes.length + "\r\n");
      request.write(bytes);
      ascii(request, "\r\n");
    }
    request.writeTo(out);
    out.flush();
    Object reply = read();
    if (reply instanceof RedisErrorReply error) {
      throw error;
    }
    return reply;
  }

  private Object read() throws IOException {
    int type = in.read();
    if (type < 0) {
      throw new EOFException("redis-server closed the connection");
    }
    String line = readLine();
    return switch (type) {
      case '+' -> line;
      case '-' -> new RedisErrorReply(line);
      case ':' -> Long.parseLong(line);
      case '$' -> {
        int length = Integer.parseInt(line);
        if (length < 0) {
          yield null;
        }
        byte[] bytes = in.readNBytes(length);
        if (bytes.length < length || in.read() != '\r' || in.read() != '\n') {
          throw new EOFException("redis-server reply ended inside a bulk string");
        }
        yield new String(bytes, StandardCharsets.UTF_8);
      }
      case '*' -> {
        int count = Integer.parseInt(line);
        if (count < 0) {
          yield null;
        }
        List<Object> items = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
          items.add(read());
        }
        yield items;
      }
      default -> throw new IOException("unexpected RESP reply type '" + (char) type + "'");
    };
  }

  private String readLine() throws IOException {
    ByteArrayOutputStream line = new ByteArrayOutputStream();
    while (true) {
      int b = in.read();
      if (b < 0) {
        throw new EOFException("redis-server reply ended inside a line");
      }
      if (b == '\r') {
        if (in.read() != '\n') {
          throw new IOException("redis-server reply line is not terminated by CRLF");
        }
        return line.toString(StandardCharsets.UTF_8);
      }
      line.write(b);
    }
  }

  private static void ascii(ByteArrayOutputStream out, String text) {
    out.writeBytes(text.getBytes(StandardCharsets.US_ASCII));
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}
