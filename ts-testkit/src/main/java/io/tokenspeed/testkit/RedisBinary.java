package io.tokenspeed.testkit;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Locale;
import java.util.Optional;

/**
 * Finds the {@code redis-server} executable that live tests start, so that the README's test
 * command runs them on a machine where nobody installed Redis.
 *
 * <pre>
 *   1. $TOKENSPEED_REDIS_SERVER        an explicit executable (must exist)
 *   2. redis-server on PATH            the installed server (Redis 7, Valkey, ...)
 *   3. the embedded server             the linux-amd64 redis-server 6.2 that the test-scope
 *                                      artifact com.github.codemonstur:embedded-redis ships,
 *                                      copied once to ${java.io.tmpdir}/tokenspeed-redis-HASH/
 * </pre>
 *
 * <p>The embedded copy is keyed by the SHA-256 of the binary and written through a temporary file
 * and an atomic rename, so concurrent test JVMs either find a complete copy or make their own. The
 * harness uses only commands that Redis 6.2 has (cluster slots are added with {@code CLUSTER
 * ADDSLOTS}, not 7.0's {@code ADDSLOTSRANGE}). Only when none of the three exists (another
 * platform, no server installed) does a start fail, naming {@link RedisServers#INSTALL_HINT}.
 */
public final class RedisBinary {

  /** Environment variable naming an explicit {@code redis-server} executable. */
  public static final String ENV = "TOKENSPEED_REDIS_SERVER";

  /** The classpath resource of the embedded linux-amd64 server. */
  static final String EMBEDDED_RESOURCE = "/redis-server-6.2.6-v5-linux-amd64";

  private static volatile Path resolved;

  private RedisBinary() {}

  /** The executable live tests start, resolved once per JVM; fails with the install hint. */
  public static Path require() {
    Path p = resolved;
    if (p == null) {
      synchronized (RedisBinary.class) {
        p = resolved;
        if (p == null) {
          p = resolve(System.getenv(ENV), System.getenv("PATH"), embeddedResource());
          resolved = p;
        }
      }
    }
    return p;
  }

  /**
   * The resolution rule, with its inputs passed in: an explicit path, the search path, and the
   * embedded binary's resource name when this platform has one.
   */
  static Path resolve(String explicit, String searchPath, Optional<String> embedded) {
    if (explicit != null && !explicit.isBlank()) {
      Path p = Path.of(explicit);
      if (Files.isRegularFile(p) && Files.isExecutable(p)) {
        return p;
      }
      throw new IllegalStateException(
          ENV
              + "="
              + explicit
              + " is not an executable file; unset it or point it at redis-server");
    }
    Optional<Path> onPath = onPath("redis-server", searchPath);
    if (onPath.isPresent()) {
      return onPath.get();
    }
    if (embedded.isPresent()) {
      return extract(embedded.get());
    }
    throw new IllegalStateException(
        "redis-server is not installed (not found on PATH="
            + searchPath
            + ") and no embedded server exists for "
            + System.getProperty("os.name")
            + "/"
            + System.getProperty("os.arch")
            + "; the live Redis tests need it: "
            + RedisServers.INSTALL_HINT);
  }

  /** The first executable {@code name} in {@code searchPath}, if any. */
  static Optional<Path> onPath(String name, String searchPath) {
    if (searchPath != null) {
      for (String entry : searchPath.split(File.pathSeparator)) {
        if (entry.isEmpty()) {
          continue;
        }
        Path candidate = Path.of(entry, name);
        if (Files.isRegularFile(candidate) && Files.isExecutable(candidate)) {
          return Optional.of(candidate);
        }
      }
    }
    return Optional.empty();
  }

  /** The embedded binary's resource on linux-amd64 when the artifact is on the classpath. */
  static Optional<String> embeddedResource() {
    String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
    boolean amd64 = arch.equals("amd64") || arch.equals("x86_64");
    if (!os.contains("linux") || !amd64) {
      return Optional.empty();
    }
    return RedisBinary.class.getResource(EMBEDDED_RESOURCE) == null
        ? Optional.empty()
        : Optional.of(EMBEDDED_RESOURCE);
  }

  /** Copies the resource to a content-addressed executable under the temporary directory. */
  static Path extract(String resource) {
    byte[] bytes;
    try (InputStream in = RedisBinary.class.getResourceAsStream(resource)) {
      if (in == null) {
        throw new IllegalStateException("the embedded redis-server " + resource + " is missing");
      }
      bytes = in.readAllBytes();
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read the embedded redis-server " + resource, e);
    }
    String hash;
    try {
      hash = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
    Path dir =
        Path.of(System.getProperty("java.io.tmpdir"), "tokenspeed-redis-" + hash.substring(0, 16));
    Path target = dir.resolve("redis-server");
    try {
      if (Files.isRegularFile(target)
          && Files.isExecutable(target)
          && Files.size(target) == bytes.length) {
        return target;
      }
      Files.createDirectories(dir);
      Path tmp = Files.createTempFile(dir, "redis-server-", ".part");
      try {
        Files.write(tmp, bytes);
        if (!tmp.toFile().setExecutable(true, false)) {
          throw new IOException("cannot make " + tmp + " executable");
        }
        try {
          Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE);
        } catch (AtomicMoveNotSupportedException e) {
          Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
        }
      } finally {
        Files.deleteIfExists(tmp);
      }
      System.err.println(
          "ts-testkit: no redis-server on PATH; using the embedded Redis 6.2 server at " + target);
      return target;
    } catch (IOException e) {
      throw new UncheckedIOException("cannot copy the embedded redis-server to " + target, e);
    }
  }
}
