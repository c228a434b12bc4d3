package io.tokenspeed.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LiveTreeTest {

  @Test
  void shouldListTheFilesOfATreeAndNothingWhenItIsMissing(@TempDir Path dir) throws IOException {
    Files.createDirectories(dir.resolve("a/b"));
    Files.writeString(dir.resolve("a/one"), "1");
    Files.writeString(dir.resolve("a/b/two"), "2");
    Files.writeString(dir.resolve("a/b/.tmp-x"), "3");
    assertEquals(
        Set.of(dir.resolve("a/one"), dir.resolve("a/b/two"), dir.resolve("a/b/.tmp-x")),
        new HashSet<>(LiveTree.regularFiles(dir)));
    assertEquals(
        Set.of(dir.resolve("a/one"), dir.resolve("a/b/two")),
        new HashSet<>(LiveTree.publishedFiles(dir)));
    assertTrue(LiveTree.regularFiles(dir.resolve("missing")).isEmpty());
  }

  /**
   * A writer renames temporaries into place and deletes objects and whole directories while the
   * tree is listed again and again: no listing fails, and each lists only names the writer made.
   */
  @Test
  void shouldListATreeWhileAWriterRenamesAndDeletesInIt(@TempDir Path dir) throws Exception {
    AtomicBoolean stop = new AtomicBoolean();
    AtomicReference<Throwable> writerFailed = new AtomicReference<>();
    Thread writer =
        Thread.ofPlatform()
            .start(
                () -> {
                  SplittableRandom random = new SplittableRandom(7);
                  try {
                    for (int i = 0; !stop.get(); i++) {
                      Path shard = dir.resolve("s" + random.nextInt(4));
                      Files.createDirectories(shard);
                      Path tmp = shard.resolve(".tmp-" + i);
                      Files.writeString(tmp, "x");
                      Files.move(tmp, shard.resolve("o" + i), StandardCopyOption.ATOMIC_MOVE);
                      if (random.nextInt(3) == 0) {
                        try (var left = Files.list(shard)) {
                          for (Path p : left.toList()) {
                            Files.deleteIfExists(p);
                          }
                        }
                        Files.deleteIfExists(shard);
                      }
                    }
                  } catch (IOException e) {
                    // a directory emptied and removed under the writer's own list: start again
                    if (!stop.get()
                        && !(e instanceof java.nio.file.NoSuchFileException)
                        && !(e instanceof java.nio.file.DirectoryNotEmptyException)) {
                      writerFailed.set(e);
                    }
                  }
                });
    try {
      long listed = 0;
      for (int round = 0; round < 2_000; round++) {
        List<Path> files = LiveTree.regularFiles(dir);
        for (Path f : files) {
          String name = f.getFileName().toString();
          assertTrue(name.startsWith("o") || name.startsWith(".tmp-"), name);
        }
        listed += files.size();
      }
      assertTrue(listed > 0, "the listings saw the writer's files");
    } finally {
      stop.set(true);
      writer.join();
    }
    assertEquals(null, writerFailed.get());
  }
}
