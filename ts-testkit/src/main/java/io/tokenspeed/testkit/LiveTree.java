package io.tokenspeed.testkit;

import java.io.IOException;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.List;

/**
 * Lists the regular files under a directory that a running process is changing: a file store's
 * writer renames temporaries into place and its evictions delete objects while the listing runs,
 * and {@code Files.walk} fails on an entry that disappears between the directory's read and the
 * entry's attributes. Here such an entry is simply not listed (it was not there when asked).
 */
public final class LiveTree {

  private LiveTree() {}

  /** The regular files under {@code root}; none when it does not exist. */
  public static List<Path> regularFiles(Path root) throws IOException {
    List<Path> files = new ArrayList<>();
    if (!Files.isDirectory(root)) {
      return files;
    }
    Files.walkFileTree(
        root,
        new SimpleFileVisitor<>() {
          @Override
          public FileVisitResult visitFile(Path file, BasicFileAttributes attrs) {
            if (attrs.isRegularFile()) {
              files.add(file);
            }
            return FileVisitResult.CONTINUE;
          }

          @Override
          public FileVisitResult visitFileFailed(Path file, IOException e) throws IOException {
            if (e instanceof NoSuchFileException) {
              return FileVisitResult.CONTINUE;
            }
            throw e;
          }

          @Override
          public FileVisitResult postVisitDirectory(Path dir, IOException e) throws IOException {
            if (e != null && !(e instanceof NoSuchFileException)) {
              throw e;
            }
            return FileVisitResult.CONTINUE;
          }
        });
    return files;
  }

  /** The published objects under {@code root}: its regular files less the writers' temporaries. */
  public static List<Path> publishedFiles(Path root) throws IOException {
    return regularFiles(root).stream()
        .filter(p -> !p.getFileName().toString().startsWith(".tmp-"))
        .toList();
  }
}
