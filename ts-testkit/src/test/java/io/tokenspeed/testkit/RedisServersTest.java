package io.tokenspeed.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class RedisServersTest {

  @Test
  void shouldSayHowToInstallTheServerWhenNoneIsOnThePathAndNoneIsEmbedded(@TempDir Path empty) {
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> RedisBinary.resolve(null, empty.toString(), Optional.empty()));
    assertTrue(e.getMessage().contains("apt-get install -y redis-server"), e.getMessage());
    assertTrue(e.getMessage().contains(empty.toString()), e.getMessage());
  }

  @Test
  void shouldSayHowToInstallTheServerWhenThereIsNoPathAtAll() {
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class, () -> RedisBinary.resolve(null, null, Optional.empty()));
    assertTrue(e.getMessage().contains("apt-get install -y redis-server"), e.getMessage());
  }

  @Test
  void shouldPreferTheServerOnThePath(@TempDir Path dir) throws Exception {
    Path fake = dir.resolve("redis-server");
    Files.writeString(fake, "#!/bin/sh\n");
    assertTrue(fake.toFile().setExecutable(true));
    assertEquals(
        fake, RedisBinary.resolve(null, "/nonexistent:" + dir, Optional.of("/not-consulted")));
  }

  @Test
  void shouldRefuseAnExplicitPathThatIsNotAnExecutable(@TempDir Path dir) {
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> RedisBinary.resolve(dir.resolve("nope").toString(), null, Optional.empty()));
    assertTrue(e.getMessage().contains(RedisBinary.ENV), e.getMessage());
  }

  /** The test-scope artifact's server runs on this platform (linux-amd64, where the suite runs). */
  @Test
  void shouldRunTheEmbeddedServerWhenNoneIsOnThePath(@TempDir Path empty) throws Exception {
    Optional<String> embedded = RedisBinary.embeddedResource();
    assertTrue(embedded.isPresent(), "the embedded redis-server is missing from the classpath");
    Path binary = RedisBinary.resolve(null, empty.toString(), embedded);
    assertTrue(Files.isExecutable(binary), binary.toString());
    assertEquals(binary, RedisBinary.resolve(null, empty.toString(), embedded), "copied once");
    Process p =
        new ProcessBuilder(binary.toString(), "--version").redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes());
    assertTrue(p.waitFor(30, TimeUnit.SECONDS));
    assertEquals(0, p.exitValue(), out);
    assertTrue(out.startsWith("Redis server v=6.2"), out);
  }
}
