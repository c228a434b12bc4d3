package io.tokenspeed.server.cli;

import java.io.BufferedInputStream;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Locale;

/**
 * A lean HTTP/1.1 client on one kept-alive loopback connection (TCP_NODELAY), for {@code bench
 * serve --mode overhead}: the request is written in one piece and the response read straight off
 * the socket (status line, headers, then a {@code Content-Length} or chunked body), so that what it
 * measures is the server's path, not a general-purpose client's. One request at a time; not
 * thread-safe.
 */
final class KeepAliveClient implements AutoCloseable {
  private final String hostHeader;
  private final Socket socket;
  private final InputStream in;
  private final OutputStream out;

  KeepAliveClient(URI base) throws IOException {
    this.hostHeader = base.getHost() + ":" + base.getPort();
    this.socket = new Socket();
    socket.setTcpNoDelay(true);
    socket.connect(new InetSocketAddress(base.getHost(), base.getPort()), 10_000);
    socket.setSoTimeout(600_000);
    this.in = new BufferedInputStream(socket.getInputStream(), 1 << 16);
    this.out = socket.getOutputStream();
  }

  /**
   * Sends one streamed completion of {@code prompt} to {@code path} and reads it to its end; the
   * figures as {@link StreamClient#complete} gives them.
   */
  StreamClient.Completion complete(String path, int[] prompt, int maxTokens) throws IOException {
    byte[] body = StreamClient.body(prompt, maxTokens, 0).getBytes(StandardCharsets.UTF_8);
    StreamClient.Reading r = new StreamClient.Reading();
    r.sentNs = System.nanoTime();
    send("POST", path, body);
    int status = readStatus();
    Headers h = readHeaders();
    r.headersNs = System.nanoTime();
    InputStream bodyIn = h.chunked ? new Chunked(in) : new Bounded(in, h.contentLength);
    BufferedReader reader =
        new BufferedReader(new InputStreamReader(bodyIn, StandardCharsets.UTF_8));
    if (status != 200) {
      String text = new String(bodyIn.readAllBytes(), StandardCharsets.UTF_8);
      return r.failed("status " + status + ": " + text);
    }
    StreamClient.Completion c = StreamClient.read(reader, r, maxTokens, 0);
    bodyIn.transferTo(OutputStream.nullOutputStream()); // to the body's end: the connection stays
    return c;
  }

  /** The round trip of a {@code GET path} to the end of its body, in milliseconds. */
  double roundTripMs(String path) throws IOException {
    long t0 = System.nanoTime();
    send("GET", path, null);
    int status = readStatus();
    Headers h = readHeaders();
    (h.chunked ? new Chunked(in) : new Bounded(in, h.contentLength))
        .transferTo(OutputStream.nullOutputStream());
    long t1 = System.nanoTime();
    if (status != 200) {
      throw new IOException("GET " + path + " answered " + status);
    }
    return (t1 - t0) / 1e6;
  }

  private void send(String method, String path, byte[] body) throws IOException {
    StringBuilder head =
        new StringBuilder(160)
            .append(method)
            .append(' ')
            .append(path)
            .append(" HTTP/1.1\r\nHost: ")
            .append(hostHeader)
            .append("\r\n");
    if (body != null) {
      head.append("Content-Type: application/json\r\nContent-Length: ")
          .append(body.length)
          .append("\r\n");
    }
    byte[] h = head.append("\r\n").toString().getBytes(StandardCharsets.US_ASCII);
    byte[] all = new byte[h.length + (body == null ? 0 : body.length)];
    System.arraycopy(h, 0, all, 0, h.length);
    if (body != null) {
      System.arraycopy(body, 0, all, h.length, body.length);
    }
    out.write(all);
    out.flush();
  }

  private int readStatus() throws IOException {
    String line = line(in);
    String[] parts = line.split(" ", 3);
    if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
      throw new IOException("not an HTTP/1.1 status line: " + line);
    }
    return Integer.parseInt(parts[1]);
  }

  private record Headers(boolean chunked, long contentLength, boolean close) {}

  private Headers readHeaders() throws IOException {
    boolean chunked = false;
    boolean close = false;
    long length = 0;
    for (String line; !(line = line(in)).isEmpty(); ) {
      int colon = line.indexOf(':');
      if (colon < 0) {
        throw new IOException("not a header line: " + line);
      }
      String name = line.substring(0, colon).trim().toLowerCase(Locale.ROOT);
      String value = line.substring(colon + 1).trim().toLowerCase(Locale.ROOT);
      switch (name) {
        case "transfer-encoding" -> chunked = value.contains("chunked");
        case "content-length" -> length = Long.parseLong(value);
        case "connection" -> close = value.contains("close");
        default -> {}
      }
    }
    if (close) {
      throw new IOException("the server closes the connection; this client keeps it");
    }
    return new Headers(chunked, length, close);
  }

  /** One CRLF-terminated ASCII line, without its terminator. */
  private static String line(InputStream in) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream(64);
    for (int c; (c = in.read()) != '\n'; ) {
      if (c < 0) {
        throw new IOException("the connection closed mid-line");
      }
      if (c != '\r') {
        b.write(c);
      }
    }
    return b.toString(StandardCharsets.US_ASCII);
  }

  /** A body of a known length. */
  private static final class Bounded extends InputStream {
    private final InputStream in;
    private long left;

    Bounded(InputStream in, long length) {
      this.in = in;
      this.left = length;
    }

    @Override
    public int read() throws IOException {
      byte[] one = new byte[1];
      return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (left == 0) {
        return -1;
      }
      int n = in.read(b, off, (int) Math.min(len, left));
      if (n < 0) {
        throw new IOException("the connection closed " + left + " bytes before the body's end");
      }
      left -= n;
      return n;
    }
  }

  /** A chunked body: ends after the last chunk and its (empty) trailer. */
  private static final class Chunked extends InputStream {
    private final InputStream in;
    private long left;
    private boolean done;

    Chunked(InputStream in) {
      this.in = in;
    }

    @Override
    public int read() throws IOException {
      byte[] one = new byte[1];
      return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (done) {
        return -1;
      }
      if (left == 0) {
        String size = line(in);
        int ext = size.indexOf(';');
        left = Long.parseLong((ext < 0 ? size : size.substring(0, ext)).trim(), 16);
        if (left == 0) {
          while (!line(in).isEmpty()) {} // the trailer, to its empty line
          done = true;
          return -1;
        }
      }
      int n = in.read(b, off, (int) Math.min(len, left));
      if (n < 0) {
        throw new IOException("the connection closed inside a chunk");
      }
      left -= n;
      if (left == 0 && !line(in).isEmpty()) {
        throw new IOException("a chunk does not end with CRLF");
      }
      return n;
    }
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}
