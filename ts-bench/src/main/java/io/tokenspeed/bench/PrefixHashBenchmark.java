package io.tokenspeed.bench;

import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.PrefixHasher;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Chained page hashing of a whole prompt (P = 64): the cost every request pays once before any
 * probe. Divide the score by {@code numTokens / 64} for ns per page; token bytes per second are
 * {@code 4 * numTokens / score}. The baseline is a bare SHA-256 over the same token bytes, in one
 * update, measured in the same run.
 *
 * <pre>
 *   ./mvnw -q -pl ts-core,ts-cache,ts-bench -am package -DskipTests
 *   java -jar ts-bench/target/benchmarks.jar PrefixHashBenchmark -f 1 -wi 3 -i 5
 * </pre>
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class PrefixHashBenchmark {

  @Param({"8192", "32768"})
  int numTokens;

  private int[] tokens;
  private byte[] tokenBytes;
  private PrefixHasher hasher;
  private java.security.MessageDigest sha;

  @Setup(Level.Trial)
  public void setUp() throws Exception {
    tokens = BenchLayouts.prompt(numTokens, 42);
    tokenBytes = new byte[4 * numTokens];
    for (int i = 0; i < numTokens; i++) {
      int t = tokens[i];
      tokenBytes[4 * i] = (byte) t;
      tokenBytes[4 * i + 1] = (byte) (t >>> 8);
      tokenBytes[4 * i + 2] = (byte) (t >>> 16);
      tokenBytes[4 * i + 3] = (byte) (t >>> 24);
    }
    hasher = new PrefixHasher(64, List.of());
    sha = java.security.MessageDigest.getInstance("SHA-256");
  }

  @Benchmark
  public ContentHash[] pageHashes() {
    return hasher.pageHashes(tokens);
  }

  /** Baseline: one SHA-256 over the raw token bytes, no chaining. */
  @Benchmark
  public byte[] rawSha256Baseline() {
    return sha.digest(tokenBytes);
  }
}
