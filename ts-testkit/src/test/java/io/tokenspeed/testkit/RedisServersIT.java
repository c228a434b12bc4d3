package io.tokenspeed.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.SocketTimeoutException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The harness against real redis-server processes: lifecycle by pid, pause, ACL, a cluster. */
@Tag("live")
class RedisServersIT {

  @TempDir Path dir;

  @Test
  void shouldStopByPidAndComeBackEmptyOnTheSamePortWhenKilledAndRestarted() {
    try (RedisServer server = RedisServers.startStandalone(dir)) {
      long pid = server.pid();
      int port = server.port();
      assertEquals("OK", server.command("SET", "k", "v"));
      assertEquals("v", server.command("GET", "k"));

      server.kill();
      assertFalse(server.isAlive());
      assertFalse(ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false), "pid " + pid);

      server.restart();
      assertEquals(port, server.port());
      assertTrue(server.pid() != pid);
      assertEquals("PONG", server.command("PING"));
      assertNull(server.command("GET", "k"), "nothing is persisted across a restart");
    }
  }

  @Test
  void shouldAnswerNothingWhilePausedAndEverythingAfterResume() throws IOException {
    try (RedisServer server = RedisServers.startStandalone(dir)) {
      server.pause();
      try (RespConnection c = new RespConnection(server.port(), Duration.ofMillis(200))) {
        assertThrows(SocketTimeoutException.class, () -> c.call("PING"));
      } finally {
        server.resume();
      }
      assertEquals("PONG", server.command("PING"));
    }
  }

  @Test
  void shouldRefuseKeysOutsideTheUsersPatternWhenAnAclUserIsCreated() {
    try (RedisServer server = RedisServers.startStandalone(dir)) {
      server.createAclUser("tenant", "secret", "mine_*");
      assertEquals("OK", server.commandAs("tenant", "secret", "SET", "mine_1", "x"));
      RedisErrorReply e =
          assertThrows(
              RedisErrorReply.class, () -> server.commandAs("tenant", "secret", "GET", "theirs_1"));
      assertTrue(e.getMessage().startsWith("NOPERM"), e.getMessage());
      assertThrows(
          RedisErrorReply.class, () -> server.commandAs("tenant", "wrong", "GET", "mine_1"));
    }
  }

  @Test
  void shouldServeEverySlotWhenThreeMastersFormACluster() {
    RedisCluster cluster = RedisServers.startCluster(dir, 3);
    try (cluster) {
      assertEquals(3, cluster.uris().size());
      for (RedisServer node : cluster.nodes()) {
        String info = (String) node.command("CLUSTER", "INFO");
        assertTrue(info.contains("cluster_state:ok"), info);
        assertTrue(info.contains("cluster_known_nodes:3"), info);
        @SuppressWarnings("unchecked")
        List<Object> slots = (List<Object>) node.command("CLUSTER", "SLOTS");
        assertEquals(3, slots.size(), "slot ranges seen by " + node);
      }
    }
    for (RedisServer node : cluster.nodes()) {
      assertFalse(node.isAlive(), node.toString());
    }
  }
}
