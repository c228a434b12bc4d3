package io.tokenspeed.pd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/** Shared helpers of the ts-pd tests: settings, waits, block contents, log capture. */
final class PdTesting {

  private PdTesting() {}

  /** The longest any single wait of a test may take before it fails (a loaded CI machine). */
  static final Duration WAIT = Duration.ofSeconds(30);

  /** Loopback, any port. */
  static InetSocketAddress loopback() {
    return new InetSocketAddress(InetAddress.getLoopbackAddress(), 0);
  }

  /** A server socket on loopback, any port, with a backlog of one (a raw peer's listener). */
  static ServerSocket loopbackServer() throws IOException {
    return new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
  }

  /** The address {@code server} listens on. */
  static InetSocketAddress addressOf(ServerSocket server) {
    return new InetSocketAddress(server.getInetAddress(), server.getLocalPort());
  }

  /** Whole milliseconds since {@code startNs} (a {@link System#nanoTime} reading). */
  static long millisSince(long startNs) {
    return (System.nanoTime() - startNs) / 1_000_000;
  }

  /** Timings that keep tests short but tolerate a loaded machine. */
  static PdSettings settings() {
    return PdSettings.defaults().withTimingsMs(5_000, 10_000, 100, 5_000);
  }

  /** The value of {@code stage}; fails the test when it fails or does not complete in time. */
  static <T> T await(CompletionStage<T> stage, String what) {
    try {
      return stage.toCompletableFuture().get(WAIT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (ExecutionException e) {
      throw new AssertionError(what + " failed: " + e.getCause(), e.getCause());
    } catch (TimeoutException e) {
      throw new AssertionError(what + " did not complete within " + WAIT);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError(what + " was interrupted");
    }
  }

  /** The {@link PdException} {@code stage} failed with; fails the test otherwise. */
  static PdException awaitFailure(CompletionStage<?> stage, String what) {
    return awaitFailure(stage, what, WAIT);
  }

  /** The {@link PdException} {@code stage} failed with within {@code within}. */
  static PdException awaitFailure(CompletionStage<?> stage, String what, Duration within) {
    Object value;
    try {
      value = stage.toCompletableFuture().get(within.toMillis(), TimeUnit.MILLISECONDS);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof PdException p) {
        return p;
      }
      throw new AssertionError(what + " failed with something else: " + e.getCause(), e.getCause());
    } catch (TimeoutException e) {
      throw new AssertionError(what + " did not fail within " + within);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError(what + " was interrupted");
    }
    throw new AssertionError(what + " completed with " + value + " where a failure was due");
  }

  /** Asserts {@code stage} failed with {@code kind} and returns the exception. */
  static PdException awaitFailure(CompletionStage<?> stage, PdException.Kind kind, String what) {
    return awaitFailure(stage, kind, what, WAIT);
  }

  /** Asserts {@code stage} failed with {@code kind} within {@code within}. */
  static PdException awaitFailure(
      CompletionStage<?> stage, PdException.Kind kind, String what, Duration within) {
    PdException e = awaitFailure(stage, what, within);
    assertEquals(kind, e.kind(), () -> what + ": " + e);
    return e;
  }

  /** Waits until {@code condition} holds; fails naming {@code what} after {@link #WAIT}. */
  static void eventually(BooleanSupplier condition, String what) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        fail("never: " + what);
      }
      try {
        Thread.sleep(2);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new AssertionError("interrupted waiting for " + what);
      }
    }
  }

  /** A bootstrap of {@code numTokens} tokens and the given bytes per block, from {@code rnd}. */
  static Bootstrap bootstrap(SplittableRandom rnd, int numTokens, int... blockBytes) {
    int[] tokens = new int[numTokens];
    for (int i = 0; i < numTokens; i++) {
      tokens[i] = rnd.nextInt(1 << 17);
    }
    byte[] identity = new byte[PdFrameDescriptor.DIGEST_BYTES];
    rnd.nextBytes(identity);
    return new Bootstrap(tokens, identity, blockBytes);
  }

  /** Fills {@code seg} with bytes drawn from {@code seed}. */
  static void fill(MemorySegment seg, long seed) {
    SplittableRandom r = new SplittableRandom(seed);
    long n = seg.byteSize();
    long i = 0;
    for (; i + 8 <= n; i += 8) {
      seg.set(ValueLayout.JAVA_LONG_UNALIGNED, i, r.nextLong());
    }
    for (; i < n; i++) {
      seg.set(ValueLayout.JAVA_BYTE, i, (byte) r.nextInt());
    }
  }

  /** The seed of block {@code (group, index)} of {@code room}'s source bytes. */
  static long blockSeed(long room, int group, int index) {
    return room * 0x9E3779B97F4A7C15L + group * 1_000_003L + index;
  }

  /**
   * The source blocks of one room on the prefill side: {@code blocks[g][i]}, each of the group's
   * bytes per block, filled from {@link #blockSeed}.
   */
  static MemorySegment[][] sources(Arena arena, long room, Bootstrap b, Ack ack) {
    MemorySegment[][] out = new MemorySegment[b.numGroups()][];
    for (int g = 0; g < b.numGroups(); g++) {
      out[g] = new MemorySegment[ack.numBlocks(g)];
      for (int i = 0; i < out[g].length; i++) {
        out[g][i] = arena.allocate(b.blockBytes(g));
        fill(out[g][i], blockSeed(room, g, i));
      }
    }
    return out;
  }

  /** Sends every block of {@code sources} in order, then DONE. */
  static void sendAll(Transfer t, MemorySegment[][] sources, DoneInfo info) {
    for (int g = 0; g < sources.length; g++) {
      for (int i = 0; i < sources[g].length; i++) {
        if (!t.send(g, i, sources[g][i])) {
          throw new AssertionError("room " + t.room() + " stopped accepting blocks");
        }
      }
    }
    if (!t.done(info)) {
      throw new AssertionError("room " + t.room() + " stopped accepting DONE");
    }
  }

  /** Asserts every block of {@code d} holds the source bytes of {@code room}. */
  static void assertLandedBytes(long room, Destinations d, Bootstrap b) {
    for (int g = 0; g < d.numGroups(); g++) {
      for (int i = 0; i < d.numBlocks(g); i++) {
        MemorySegment expected = Arena.ofAuto().allocate(b.blockBytes(g));
        fill(expected, blockSeed(room, g, i));
        long at = expected.mismatch(d.block(g, i));
        if (at != -1) {
          fail(
              "room "
                  + room
                  + " block ("
                  + g
                  + ", "
                  + i
                  + ") differs from its source at byte "
                  + at);
        }
      }
    }
  }

  /**
   * Takes {@code room} of {@code b} from {@code sender} to {@code receiver} end to end: registers
   * it, sends every block the ACK asks for and DONE with {@code info}, checks the landed bytes,
   * acknowledges, awaits the fence and releases the destinations.
   *
   * @return the ACK
   */
  static Ack landRoom(
      KvReceiver receiver, KvSender sender, Arena arena, long room, Bootstrap b, DoneInfo info) {
    Registration reg = receiver.expect(room);
    Transfer t = sender.bootstrap(room, receiver.address(), b);
    Ack ack = await(t.acknowledged(), "ACK");
    sendAll(t, sources(arena, room, b, ack), info);
    Landed landed = await(reg.landed(), "landing");
    assertLandedBytes(room, landed.destinations(), b);
    assertTrue(landed.acknowledge());
    await(t.received(), "RECEIVED");
    landed.destinations().release();
    return ack;
  }

  /** Asserts the counters of a quiet endpoint add up: every opened room ended once or is open. */
  static void assertBalanced(PdMetrics m) {
    assertEquals(m.roomsOpened(), m.roomsEnded() + m.roomsOpen(), m::toString);
  }

  /** Captures the records of the ts-pd loggers while open. */
  static final class LogCapture extends Handler implements AutoCloseable {
    private final List<LogRecord> records = new ArrayList<>();
    private final Logger logger = Logger.getLogger("io.tokenspeed.pd");

    LogCapture() {
      logger.addHandler(this);
    }

    @Override
    public synchronized void publish(LogRecord r) {
      records.add(r);
    }

    /** The messages logged so far. */
    synchronized List<String> messages() {
      return records.stream().map(LogRecord::getMessage).toList();
    }

    /** Waits for a message containing every one of {@code parts}, and returns it. */
    String awaitMessage(String... parts) {
      String[] found = new String[1];
      eventually(
          () -> {
            for (String m : messages()) {
              boolean all = true;
              for (String p : parts) {
                all &= m != null && m.contains(p);
              }
              if (all) {
                found[0] = m;
                return true;
              }
            }
            return false;
          },
          "a log message containing " + List.of(parts) + "; logged: " + messages());
      return found[0];
    }

    @Override
    public void flush() {}

    @Override
    public void close() {
      logger.removeHandler(this);
    }
  }
}
