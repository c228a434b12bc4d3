package io.tokenspeed.l3.store.mooncake;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

class ListeningSocketsTest {

  @Test
  void shouldDecodeProcAddressesWordByWordInHostOrder() {
    assertEquals(
        new ListeningSockets.Listener("127.0.0.1", 8080, false),
        ListeningSockets.listener("0100007F", 8080));
    assertEquals(
        new ListeningSockets.Listener("0.0.0.0", 50051, true),
        ListeningSockets.listener("00000000", 50051));
    assertEquals(
        new ListeningSockets.Listener("0:0:0:0:0:0:0:1", 9003, false),
        ListeningSockets.listener("00000000000000000000000001000000", 9003));
    ListeningSockets.Listener any =
        ListeningSockets.listener("00000000000000000000000000000000", 15127);
    assertTrue(any.allInterfaces());
    assertEquals("[0:0:0:0:0:0:0:0]:15127", any.toString());
    // a v4-mapped v6 address (a dual-stack socket's), ::ffff:10.1.2.3, reads as 10.1.2.3
    assertEquals(
        new ListeningSockets.Listener("10.1.2.3", 1, false),
        ListeningSockets.listener("0000000000000000FFFF00000302010A", 1));
  }

  @Test
  void shouldKeepOnlyListeningRowsOfThisProcessesInodes() {
    List<String> table =
        List.of(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
                + "  timeout inode",
            "   0: 00000000:3B45 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
                + "        0 111 1 0000000000000000 100 0 0 10 0",
            "   1: 0100007F:C383 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
                + "        0 222 1 0000000000000000 100 0 0 10 0",
            "   2: 0100007F:9E0C 0100007F:C383 01 00000000:00000000 00:00000000 00000000     0"
                + "        0 111 1 0000000000000000 20 4 30 10 -1");
    Set<ListeningSockets.Listener> out = new LinkedHashSet<>();
    ListeningSockets.parse(table, Set.of("111"), out);
    // row 1 is another process's socket, row 2 an established connection
    assertEquals(Set.of(new ListeningSockets.Listener("0.0.0.0", 0x3B45, true)), out);
  }

  @Test
  void shouldSeeASocketThisProcessListensOnAndNotAfterItCloses() throws IOException {
    String name;
    try (ServerSocket socket = new ServerSocket()) {
      socket.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
      name = InetAddress.getLoopbackAddress().getHostAddress() + ":" + socket.getLocalPort();
      assertTrue(names().contains(name), () -> name + " not in " + names());
    }
    assertFalse(names().contains(name), name);
  }

  private static List<String> names() {
    return ListeningSockets.ofThisProcess().orElseThrow().stream()
        .map(ListeningSockets.Listener::toString)
        .toList();
  }
}
