package io.tokenspeed.model.parallel;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

/**
 * One rank of a multi-process collective test, in its own JVM: opens the collective file as its
 * rank, meets the other ranks at a first barrier, then plays the seeded {@link CollectiveScript}.
 *
 * <p>Arguments: {@code file rank size maxFloats seed steps timeoutMillis mode}. Mode {@code digest}
 * plays the steps once and prints {@code digest <hex>} of every result; mode {@code loop} prints
 * {@code running} after the first step and plays the steps over and over (for at most two minutes).
 * A {@link CollectiveException} prints {@code collective-failed <message>} and exits with status 3.
 */
public final class CollectiveChild {

  private CollectiveChild() {}

  public static void main(String[] args) throws Exception {
    Path file = Path.of(args[0]);
    int rank = Integer.parseInt(args[1]);
    int size = Integer.parseInt(args[2]);
    int maxFloats = Integer.parseInt(args[3]);
    long seed = Long.parseLong(args[4]);
    int count = Integer.parseInt(args[5]);
    Duration timeout = Duration.ofMillis(Long.parseLong(args[6]));
    boolean loop = args[7].equals("loop");
    List<CollectiveScript.Step> steps = CollectiveScript.steps(seed, size, maxFloats, count);
    try (SharedMemoryCollective collective =
        SharedMemoryCollective.open(file, rank, size, maxFloats, timeout)) {
      collective.barrier(Duration.ofSeconds(60));
      long h = 0xCBF2_9CE4_8422_2325L;
      long end = System.nanoTime() + Duration.ofMinutes(2).toNanos();
      int round = 0;
      do {
        for (int i = 0; i < steps.size(); i++) {
          h = CollectiveScript.digest(h, CollectiveScript.play(collective, seed, steps.get(i), i));
          if (loop && round == 0 && i == 0) {
            System.out.println("running");
          }
        }
        round++;
      } while (loop && System.nanoTime() < end);
      System.out.println("digest " + Long.toHexString(h));
    } catch (CollectiveException e) {
      System.out.println("collective-failed " + e.getMessage().replace('\n', ' '));
      System.out.flush();
      System.exit(3);
    }
  }
}
