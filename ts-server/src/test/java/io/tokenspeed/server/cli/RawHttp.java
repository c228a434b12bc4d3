package io.tokenspeed.server.cli;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Locale;

/**
 * One HTTP/1.1 POST over a plain loopback socket, read as it arrives: the test decides exactly when
 * the connection closes (right after the request, or after a few events of the answer), which a
 * client library hides. Every read waits at most the read timeout given, so a server that never
 * answers fails the test instead of hanging it.
 *
 * <p>It reads what {@code serve} and {@code router} write: a status line, headers, and a body of
 * {@code Content-Length} bytes, chunked, or up to the connection's close.
 */
final class RawHttp implements AutoCloseable {
  /** A whole answer. */
  record Answer(int status, String contentType, String body) {}

  private final Socket socket;
  private final InputStream in;

  private int status = -1;
  private String contentType;
  private boolean chunked;
  private long remaining = -1; // of a Content-Length body, or of the current chunk
  private boolean ended;

  private RawHttp(Socket socket) throws IOException {
    this.socket = socket;
    this.in = new BufferedInputStream(socket.getInputStream());
  }

  /** Sends {@code POST path} with the JSON {@code body} to {@code 127.0.0.1:port}. */
  static RawHttp post(int port, String path, String body, Duration readTimeout) throws IOException {
    Socket s = new Socket(InetAddress.getLoopbackAddress(), port);
    s.setSoTimeout((int) readTimeout.toMillis());
    RawHttp h = new RawHttp(s);
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    OutputStream out = s.getOutputStream();
    out.write(
        ("POST "
                + path
                + " HTTP/1.1\r\nHost: 127.0.0.1:"
                + port
                + "\r\nContent-Type: application/json\r\nContent-Length: "
                + bytes.length
                + "\r\n\r\n")
            .getBytes(StandardCharsets.US_ASCII));
    out.write(bytes);
    out.flush();
    return h;
  }

  /** The answer's status (reads the status line and headers the first time). */
  int status() throws IOException {
    if (status < 0) {
      readHead();
    }
    return status;
  }

  /** The answer's {@code Content-Type}, or null. */
  String contentType() throws IOException {
    status();
    return contentType;
  }

  /**
   * The data of the next event of an event stream (the text after {@code data: }), or null once the
   * body ended. An event cut off by the body's end is returned as it is.
   */
  String nextEvent() throws IOException {
    status();
    ByteArrayOutputStream event = new ByteArrayOutputStream();
    int previous = -1;
    while (true) {
      int b = bodyByte();
      if (b < 0) {
        return event.size() == 0 ? null : data(event);
      }
      if (b == '\n' && previous == '\n') {
        return data(event);
      }
      if (!(b == '\n' && event.size() == 0)) {
        event.write(b);
      }
      previous = b;
    }
  }

  private static String data(ByteArrayOutputStream event) {
    String text = event.toString(StandardCharsets.UTF_8).strip();
    return text.startsWith("data: ") ? text.substring("data: ".length()) : text;
  }

  /** The rest of the body. */
  String body() throws IOException {
    status();
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (int b = bodyByte(); b >= 0; b = bodyByte()) {
      out.write(b);
    }
    return out.toString(StandardCharsets.UTF_8);
  }

  /** Closes the connection, with whatever of the answer is unread. */
  @Override
  public void close() throws IOException {
    socket.close();
  }

  // ---------------------------------------------------------------- the wire

  private void readHead() throws IOException {
    String line = line();
    String[] parts = line.split(" ", 3);
    if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
      throw new IOException("not an HTTP/1.x status line: " + line);
    }
    status = Integer.parseInt(parts[1]);
    for (String h = line(); !h.isEmpty(); h = line()) {
      int colon = h.indexOf(':');
      String name = h.substring(0, colon).trim().toLowerCase(Locale.ROOT);
      String value = h.substring(colon + 1).trim();
      switch (name) {
        case "content-type" -> contentType = value;
        case "content-length" -> remaining = Long.parseLong(value);
        case "transfer-encoding" -> chunked = value.toLowerCase(Locale.ROOT).contains("chunked");
        default -> {}
      }
    }
    if (chunked) {
      remaining = 0; // read the first chunk's size first
    }
  }

  /** The next byte of the body, de-chunked, or -1 at its end. */
  private int bodyByte() throws IOException {
    if (ended) {
      return -1;
    }
    if (chunked) {
      if (remaining == 0) {
        String size = line();
        if (size.isEmpty()) {
          size = line(); // the CRLF that ends the previous chunk's data
        }
        int semicolon = size.indexOf(';');
        remaining = Long.parseLong(semicolon < 0 ? size : size.substring(0, semicolon), 16);
        if (remaining == 0) {
          ended = true; // the trailer is not read: nothing of ours is in it
          return -1;
        }
      }
      remaining--;
      return requireByte();
    }
    if (remaining == 0) {
      ended = true;
      return -1;
    }
    int b = in.read();
    if (b < 0) {
      if (remaining > 0) {
        throw new EOFException(remaining + " bytes of the body never came");
      }
      ended = true;
      return -1;
    }
    if (remaining > 0) {
      remaining--;
    }
    return b;
  }

  private int requireByte() throws IOException {
    int b = in.read();
    if (b < 0) {
      throw new EOFException("the connection closed inside a chunk");
    }
    return b;
  }

  /** A CRLF-terminated line, without it. */
  private String line() throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    while (true) {
      int b = in.read();
      if (b < 0) {
        throw new EOFException(
            "the connection closed in the answer's head or a chunk size: " + out);
      }
      if (b == '\n') {
        String s = out.toString(StandardCharsets.ISO_8859_1);
        return s.endsWith("\r") ? s.substring(0, s.length() - 1) : s;
      }
      out.write(b);
    }
  }
}
