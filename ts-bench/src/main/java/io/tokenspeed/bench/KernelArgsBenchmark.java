package io.tokenspeed.bench;

import io.tokenspeed.cuda.KernelArgs;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.Blackhole;

/**
 * The host's work to pack one kernel launch's arguments, without the launch itself (no GPU): the 22
 * arguments of {@code qkv_rope_store}, the widest launch of a decode step. The baseline is the way
 * launches packed them before {@link KernelArgs}: a fresh confined arena per launch, one native
 * value per argument and the pointer array, all freed after the call.
 *
 * <pre>
 *   ./mvnw -q -pl ts-bench -am package -DskipTests
 *   java --enable-native-access=ALL-UNNAMED -jar ts-bench/target/benchmarks.jar KernelArgsBenchmark
 * </pre>
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class KernelArgsBenchmark {

  private KernelArgs args;
  private long pointer;
  private int layer;

  @Setup
  public void setUp() {
    args = new KernelArgs(Arena.ofAuto());
    pointer = 0x7f00_0000_0000L;
  }

  /** The arguments of one launch of {@code qkv_rope_store} (22), fresh boxes as a launch makes. */
  private Object[] launch() {
    layer = (layer + 1) & 31;
    long p = pointer + layer;
    return new Object[] {
      p,
      0L,
      0L,
      0L,
      1e-5f,
      p + 64,
      p + 128,
      p + 192,
      p + 256,
      5,
      32,
      8,
      128,
      p + 320,
      p + 384,
      1_048_576L,
      4096L * layer,
      4096L * layer + 2048,
      16,
      1,
      33,
      64
    };
  }

  @Benchmark
  public MemorySegment reusedSlots() {
    return args.pack("qkv_rope_store", launch());
  }

  @Benchmark
  public void freshArena(Blackhole bh) {
    Object[] values = launch();
    try (Arena a = Arena.ofConfined()) {
      MemorySegment params = a.allocate(ValueLayout.ADDRESS, values.length);
      for (int i = 0; i < values.length; i++) {
        MemorySegment value =
            switch (values[i]) {
              case Long l -> a.allocateFrom(ValueLayout.JAVA_LONG, l);
              case Integer n -> a.allocateFrom(ValueLayout.JAVA_INT, n);
              case Float x -> a.allocateFrom(ValueLayout.JAVA_FLOAT, x);
              case Double x -> a.allocateFrom(ValueLayout.JAVA_DOUBLE, x);
              default -> throw new IllegalArgumentException("argument " + i);
            };
        params.setAtIndex(ValueLayout.ADDRESS, i, value);
      }
      bh.consume(params.address());
    }
  }
}
