package io.tokenspeed.server;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Pattern;

/** Finds the Maven reactor root: the nearest directory upwards whose pom.xml lists modules. */
public final class ReactorRoot {

  private static final Pattern MODULES = Pattern.compile("<modules>");

  private ReactorRoot() {}

  /** Walks up from the working directory (a module directory under Surefire and Failsafe). */
  public static Path find() {
    return findFrom(Path.of("").toAbsolutePath());
  }

  public static Path findFrom(Path start) {
    for (Path dir = start; dir != null; dir = dir.getParent()) {
      Path pom = dir.resolve("pom.xml");
      try {
        if (Files.isRegularFile(pom) && MODULES.matcher(Files.readString(pom)).find()) {
          return dir;
        }
      } catch (IOException e) {
        throw new IllegalStateException("cannot read " + pom, e);
      }
    }
    throw new IllegalStateException("no pom.xml with <modules> above " + start);
  }
}
