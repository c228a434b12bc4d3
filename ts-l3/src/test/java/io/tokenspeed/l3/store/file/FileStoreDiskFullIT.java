package io.tokenspeed.l3.store.file;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.L3Executor;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.testkit.ChildJvm;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A file store on a "full disk", made real by the kernel: the writer runs in a child JVM started
 * under {@code ulimit -f}, so a write past the limit fails with {@code EFBIG} (HotSpot ignores
 * {@code SIGXFSZ}), which the store must treat like {@code ENOSPC}: a retired per-page refusal
 * ({@code Rejected(NO_SPACE)}), no half-written object and no temporary file left, and no outage —
 * reads go on.
 */
class FileStoreDiskFullIT {

  /**
   * The child's file-size limit: 256 KiB, in the 512-byte blocks of {@code sh}'s {@code ulimit}.
   */
  private static final int LIMIT_BLOCKS = 512;

  @TempDir Path temp;

  @Test
  void shouldRejectAPutTheDiskHasNoRoomForWithoutAnOutageAndLeaveNothingHalfWritten()
      throws Exception {
    Path root = temp.resolve("store");
    List<String> lines = runChild(root);
    String all = String.join("\n", lines);

    assertEquals(
        "direct-small " + new RowResult.Ok(FileStoreDiskFullChild.SMALL, false),
        line(lines, "direct-small"),
        all);
    assertEquals(
        "direct-big " + RowResult.Rejected.noSpace("File too large"),
        line(lines, "direct-big"),
        all);
    assertEquals("put [FAILED, OK] retired=true", line(lines, "put"), all);
    assertEquals(
        "get [OK] retired=true bytes=" + FileStoreDiskFullChild.SMALL, line(lines, "get"), all);
    assertEquals("same-bytes true", line(lines, "same-bytes"), all);
    assertEquals("health HEALTHY epoch=0 outages=0 faults=0", line(lines, "health"), all);
    assertEquals("writes refused=true keys=1 reason=File too large", line(lines, "writes"), all);
    assertEquals("closed true", line(lines, "closed"), all);

    try (FileStore store = new FileStore(FileStoreSettings.of(root))) {
      for (String name : List.of("big", "big2")) {
        assertFalse(
            Files.exists(store.objectPath(FileStoreDiskFullChild.key(name))),
            "no object published for " + name);
      }
      assertTrue(Files.exists(store.objectPath(FileStoreDiskFullChild.key("small2"))));
    }
    assertEquals(List.of(), FileStoreTest.temporaryFiles(root), "temporary files left");
  }

  private List<String> runChild(Path root) throws IOException, InterruptedException {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    List<String> command = new ArrayList<>();
    command.addAll(List.of("sh", "-c", "ulimit -f " + LIMIT_BLOCKS + " && exec \"$@\"", "sh"));
    command.addAll(
        List.of(
            java,
            "-XX:-UsePerfData",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Xmx128m",
            "-cp",
            ChildJvm.classpath(FileStoreDiskFullChild.class, FileStore.class, L3Executor.class),
            FileStoreDiskFullChild.class.getName(),
            root.toString()));
    Path stderr = temp.resolve("child.stderr");
    Process p =
        new ProcessBuilder(command)
            .redirectError(stderr.toFile())
            .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")))
            .start();
    byte[] out = p.getInputStream().readAllBytes();
    assertTrue(p.waitFor(120, TimeUnit.SECONDS), "the child exits");
    List<String> lines = new String(out, StandardCharsets.UTF_8).lines().toList();
    assertEquals(
        0,
        p.exitValue(),
        "child exit; stdout:\n"
            + String.join("\n", lines)
            + "\nstderr:\n"
            + Files.readString(stderr));
    return lines;
  }

  private static String line(List<String> lines, String prefix) {
    for (String l : lines) {
      if (l.startsWith(prefix + " ")) {
        return l;
      }
    }
    return "(no line " + prefix + ")";
  }
}
