package io.tokenspeed.testkit;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class RedisServersTest {

  @Test
  void shouldSayHowToInstallTheServerWhenItIsNotOnThePath(@TempDir Path empty) {
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> RedisServers.requireBinary("redis-server", empty.toString()));
    assertTrue(e.getMessage().contains("apt-get install -y redis-server"), e.getMessage());
    assertTrue(e.getMessage().contains(empty.toString()), e.getMessage());
  }

  @Test
  void shouldSayHowToInstallTheServerWhenThereIsNoPathAtAll() {
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class, () -> RedisServers.requireBinary("redis-server", null));
    assertTrue(e.getMessage().contains("apt-get install -y redis-server"), e.getMessage());
  }
}
