package io.tokenspeed.control;

import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.testkit.ChildJvm;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;

/**
 * Starts one {@link ControlChild} rank in its own JVM: standard input open (the child reads its
 * peers' ports there and holds after a failure until it ends), standard error in {@code
 * rankN.stderr}, and its {@code error } and {@code protocol } lines failing any other wait at once.
 */
final class ChildRank {

  private ChildRank() {}

  /** Starts rank {@code rank}, handing it {@code secret} through its environment. */
  static ChildJvm start(Path workDir, int rank, List<String> args, ReplicaSecret secret)
      throws IOException {
    return start(workDir, "rank" + rank, args, secret);
  }

  static ChildJvm start(Path workDir, String name, List<String> args, ReplicaSecret secret)
      throws IOException {
    return ChildJvm.launch(ControlChild.class)
        .args(args)
        .env(ReplicaSecret.ENV, secret.toHex())
        .maxHeap("128m")
        .classpathFirst(RelayExchange.class, StorageDone.class)
        .openInput()
        .failOn("error ", "protocol ")
        .start(workDir, name);
  }
}
