package io.tokenspeed.testkit;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

/**
 * Two child processes racing to create the same keys in one store: the create-only check every
 * store shares. Each child prints {@code ready}, waits for the barrier file, PUTs keys {@code
 * 0..count-1} and prints {@code created N} or {@code existed N} per key; {@link #run} releases both
 * together and {@link Outcome#verify} checks that every key was created exactly once and answered
 * as a success by both.
 */
public final class CreateRace {

  private CreateRace() {}

  /** What both children reported. */
  public record Outcome(ChildJvm.Finished a, ChildJvm.Finished b) {

    /** Both transcripts, for assertion messages. */
    public String describe() {
      return a.describe() + "\n" + b.describe();
    }

    /** Keys child {@code a} created. */
    public Set<Integer> createdByA() {
      return a.numbers("created");
    }

    /** Keys child {@code b} created. */
    public Set<Integer> createdByB() {
      return b.numbers("created");
    }

    /**
     * Both exited 0; each answered every key with created or existed; no key was created twice and
     * none was left uncreated. Throws {@link AssertionError} naming what broke.
     */
    public void verify(int count) {
      Set<Integer> all = IntStream.range(0, count).boxed().collect(Collectors.toSet());
      require(a.exitStatus() == 0 && b.exitStatus() == 0, "a child failed");
      for (ChildJvm.Finished child : List.of(a, b)) {
        Set<Integer> answered = new HashSet<>(child.numbers("created"));
        answered.addAll(child.numbers("existed"));
        require(answered.equals(all), "not every key answered Ok by " + child.name());
      }
      Set<Integer> twice = new HashSet<>(createdByA());
      twice.retainAll(createdByB());
      require(twice.isEmpty(), "keys both processes created: " + twice);
      Set<Integer> created = new HashSet<>(createdByA());
      created.addAll(createdByB());
      require(created.equals(all), "keys neither process created");
    }

    private void require(boolean ok, String what) {
      if (!ok) {
        throw new AssertionError(what + "\n" + describe());
      }
    }
  }

  /** Waits until both children are ready, releases them together and collects their output. */
  public static Outcome run(ChildJvm a, ChildJvm b, Path barrier, Duration timeout)
      throws IOException, InterruptedException {
    a.awaitLine("ready", timeout);
    b.awaitLine("ready", timeout);
    Files.createFile(barrier);
    return new Outcome(a.finish(timeout), b.finish(timeout));
  }
}
