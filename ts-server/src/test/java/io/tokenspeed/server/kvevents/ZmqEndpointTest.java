package io.tokenspeed.server.kvevents;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** {@code tcp://HOST:PORT} as the options take it. */
class ZmqEndpointTest {

  @Test
  void shouldParseHostsAndPorts() {
    assertEquals(new ZmqEndpoint("127.0.0.1", 5557), ZmqEndpoint.parse("tcp://127.0.0.1:5557"));
    assertEquals(new ZmqEndpoint("*", 0), ZmqEndpoint.parse("tcp://*:0"));
    assertEquals(new ZmqEndpoint("::1", 5558), ZmqEndpoint.parse("tcp://[::1]:5558"));
    assertEquals("tcp://[::1]:5558", ZmqEndpoint.parse("tcp://[::1]:5558").toString());
    assertEquals("tcp://router.local:1", ZmqEndpoint.parse("tcp://router.local:1").toString());
  }

  @Test
  void shouldTellTheWildcardFromAnAddress() {
    assertTrue(ZmqEndpoint.parse("tcp://*:1").wildcard());
    assertTrue(ZmqEndpoint.parse("tcp://0.0.0.0:1").wildcard());
    assertTrue(ZmqEndpoint.parse("tcp://[::]:1").wildcard());
    assertFalse(ZmqEndpoint.parse("tcp://127.0.0.1:1").wildcard());
    assertFalse(ZmqEndpoint.parse("tcp://localhost:1").wildcard());
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "127.0.0.1:5557",
        "ipc:///tmp/x",
        "tcp://127.0.0.1",
        "tcp://:5557",
        "tcp://127.0.0.1:",
        "tcp://127.0.0.1:x",
        "tcp://127.0.0.1:65536",
        "tcp://127.0.0.1:-1",
        "tcp://::1:5557",
        "tcp://[::1:5557"
      })
  void shouldRefuseWhatIsNotATcpEndpoint(String text) {
    assertThrows(IllegalArgumentException.class, () -> ZmqEndpoint.parse(text));
  }
}
