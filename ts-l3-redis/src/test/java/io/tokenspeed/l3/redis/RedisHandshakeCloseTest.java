package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A server that closes the connection during the handshake, before answering it: the store's
 * startup error when the handshake carried credentials names them (a Redis server under load may
 * close a refused password's connection before its WRONGPASS reply arrives), and is an I/O error
 * naming the address when it did not. The server is a loopback socket that reads the client's first
 * command whole (HELLO, with AUTH when a password is set) and then closes, so the close always
 * comes after the credentials were sent and before any answer.
 */
class RedisHandshakeCloseTest {

  private static final String PASSWORD = "s3cret-pw";

  /** How the fake server ends a connection after reading its first command. */
  enum Close {
    /** An orderly close (FIN). */
    ORDERLY,
    /** A reset (RST: linger 0). */
    RESET
  }

  private ClosingServer server;

  @BeforeEach
  void startServer() throws IOException {
    server = new ClosingServer();
  }

  @AfterEach
  void stopServer() throws IOException {
    server.close();
  }

  @ParameterizedTest(name = "{0}")
  @EnumSource(Close.class)
  void shouldNameTheCredentialsWhenTheServerClosesDuringAuth(Close how) {
    server.close = how;
    RedisStoreSettings settings =
        settings(RedisStoreSettings.standalone(server.address()))
            .withCredentials("tenant", PASSWORD);
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> RedisStore.open(settings).close());
    assertEquals(
        "redis at "
            + server.address()
            + " closed the connection during the handshake that authenticates username=tenant"
            + " (HELLO with AUTH), before answering it: it refused the credentials (a server may"
            + " close before its WRONGPASS reply arrives) or it is not a Redis server; check the"
            + " username and password settings",
        e.getMessage());
    assertFalse(e.getMessage().contains(PASSWORD), e.getMessage());
    assertSawAuth("tenant");
  }

  @Test
  void shouldNameTheDefaultUserWhenOnlyAPasswordIsSet() {
    RedisStoreSettings settings =
        settings(RedisStoreSettings.standalone(server.address())).withCredentials("", PASSWORD);
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> RedisStore.open(settings).close());
    assertTrue(e.getMessage().contains("authenticates username=default"), e.getMessage());
    assertTrue(e.getMessage().endsWith("check the username and password settings"), e.getMessage());
  }

  @Test
  void shouldNameTheCredentialsWhenAClusterSeedClosesDuringAuth() {
    RedisStoreSettings settings =
        settings(RedisStoreSettings.cluster(List.of(server.address())))
            .withCredentials("tenant", PASSWORD);
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> RedisStore.open(settings).close());
    assertTrue(
        e.getMessage()
            .startsWith(
                "redis at "
                    + server.address()
                    + " closed the connection during the handshake that authenticates"
                    + " username=tenant"),
        e.getMessage());
    assertSawAuth("tenant");
  }

  @Test
  void shouldGiveAnIoErrorNamingTheAddressWhenAHandshakeWithoutCredentialsIsClosed() {
    RedisStoreSettings settings = settings(RedisStoreSettings.standalone(server.address()));
    IOException e = assertThrows(IOException.class, () -> RedisStore.open(settings).close());
    assertEquals(
        "redis cannot connect to "
            + server.address()
            + " within connect_timeout_ms=10000: it closed the connection during the handshake"
            + " (HELLO), before answering it: is it a Redis server without TLS?",
        e.getMessage());
    assertEquals("HELLO", server.firstCommand().getFirst(), server.commands.toString());
  }

  private static RedisStoreSettings settings(RedisStoreSettings base) {
    return base.withConnections(1).withTimeouts(10_000, 2_000);
  }

  /** The first command the server read was the handshake, carrying AUTH for {@code user}. */
  private void assertSawAuth(String user) {
    List<String> hello = server.firstCommand();
    assertEquals(List.of("HELLO", "3", "AUTH", user, PASSWORD), hello, server.commands.toString());
  }

  /**
   * Accepts connections on a loopback port until closed; reads each one's first command (a RESP
   * array of bulk strings), records it, and closes the connection without answering.
   */
  static final class ClosingServer implements AutoCloseable {
    final List<List<String>> commands = new CopyOnWriteArrayList<>();
    volatile Close close = Close.ORDERLY;
    private final ServerSocket socket;
    private final Thread acceptor;

    ClosingServer() throws IOException {
      socket = new ServerSocket(0, 16, InetAddress.getLoopbackAddress());
      acceptor = Thread.ofPlatform().daemon().name("closing-redis").start(this::serve);
    }

    String address() {
      return "127.0.0.1:" + socket.getLocalPort();
    }

    List<String> firstCommand() {
      assertFalse(commands.isEmpty(), "the client sent no command");
      return commands.getFirst();
    }

    private void serve() {
      while (!socket.isClosed()) {
        try (Socket s = socket.accept()) {
          s.setSoTimeout(10_000);
          commands.add(readCommand(new BufferedInputStream(s.getInputStream())));
          if (close == Close.RESET) {
            s.setSoLinger(true, 0);
          }
        } catch (IOException e) {
          if (socket.isClosed()) {
            return;
          }
          commands.add(List.of("unreadable: " + e));
        }
      }
    }

    private static List<String> readCommand(InputStream in) throws IOException {
      String head = line(in);
      if (!head.startsWith("*")) {
        return List.of(head); // an inline command
      }
      int n = Integer.parseInt(head.substring(1));
      List<String> args = new ArrayList<>(n);
      for (int i = 0; i < n; i++) {
        int length = Integer.parseInt(line(in).substring(1));
        args.add(new String(in.readNBytes(length), StandardCharsets.UTF_8));
        line(in);
      }
      return args;
    }

    private static String line(InputStream in) throws IOException {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      int b;
      while ((b = in.read()) != '\n') {
        if (b < 0) {
          throw new IOException("the client closed mid-command");
        }
        if (b != '\r') {
          out.write(b);
        }
      }
      return out.toString(StandardCharsets.UTF_8);
    }

    @Override
    public void close() throws IOException {
      socket.close();
      try {
        acceptor.join(10_000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }
}
