package io.tokenspeed.pd;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.ToIntBiFunction;

/**
 * A scripted {@link Landing}: it reserves, for each room, the blocks its plan says (by default
 * {@code blocksOf(room, group)}), each block in a shared arena of the destinations' own that {@link
 * Destinations#release} closes. A release while a thread still reads into a block makes the close
 * fail, and a write after the release fails the reader: both show up in {@link #closeFailures} or
 * as failed rooms. It may hold a room's reservation until the test lets it go ({@link #hold}),
 * refuse a room ({@link #refuse}), or complete on another thread.
 */
final class TestLanding implements Landing {

  /** The destinations of one room, counting their releases. */
  static final class Blocks extends ArenaDestinations {
    final long room;
    final AtomicInteger releases = new AtomicInteger();
    private final TestLanding owner;

    Blocks(TestLanding owner, long room, Bootstrap b, int[] blocksPerGroup) {
      super(b, blocksPerGroup);
      this.owner = owner;
      this.room = room;
    }

    @Override
    public void release() {
      if (releases.incrementAndGet() == 1) {
        try {
          super.release();
        } catch (IllegalStateException e) {
          owner.closeFailures.incrementAndGet();
          throw e;
        }
      }
    }
  }

  final List<Blocks> issued = new ArrayList<>();
  final AtomicInteger closeFailures = new AtomicInteger();
  final AtomicInteger reservations = new AtomicInteger();
  private final Map<Long, int[]> plans = new ConcurrentHashMap<>();
  private final Map<Long, CompletableFuture<Void>> holds = new ConcurrentHashMap<>();
  private final Map<Long, String> refusals = new ConcurrentHashMap<>();
  private final ToIntBiFunction<Long, Integer> blocksOf;
  private volatile Executor async;

  /** Reserves {@code blocksOf(room, group)} blocks of each group unless a plan says otherwise. */
  TestLanding(ToIntBiFunction<Long, Integer> blocksOf) {
    this.blocksOf = blocksOf;
  }

  /** Reserves {@code blocksPerGroup} for {@code room}. */
  TestLanding plan(long room, int... blocksPerGroup) {
    plans.put(room, blocksPerGroup.clone());
    return this;
  }

  /** Holds {@code room}'s reservation until the returned future completes. */
  CompletableFuture<Void> hold(long room) {
    CompletableFuture<Void> gate = new CompletableFuture<>();
    holds.put(room, gate);
    return gate;
  }

  /** Refuses {@code room} with {@code reason}. */
  TestLanding refuse(long room, String reason) {
    refusals.put(room, reason);
    return this;
  }

  /** Completes reservations on {@code executor} from now (null: on the receiver's thread). */
  TestLanding async(Executor executor) {
    this.async = executor;
    return this;
  }

  @Override
  public CompletionStage<Destinations> reserve(long room, Bootstrap bootstrap) {
    reservations.incrementAndGet();
    String refusal = refusals.get(room);
    if (refusal != null) {
      return CompletableFuture.failedStage(new IllegalStateException(refusal));
    }
    int[] plan = plans.get(room);
    if (plan == null) {
      plan = new int[bootstrap.numGroups()];
      for (int g = 0; g < plan.length; g++) {
        plan[g] = blocksOf.applyAsInt(room, g);
      }
    }
    Blocks d = new Blocks(this, room, bootstrap, plan);
    synchronized (issued) {
      issued.add(d);
    }
    CompletableFuture<Void> gate = holds.get(room);
    if (gate != null) {
      return gate.thenApply(v -> d);
    }
    Executor e = async;
    return e == null
        ? CompletableFuture.completedFuture(d)
        : CompletableFuture.supplyAsync(() -> d, e);
  }

  /** The destinations issued for {@code room} (the last, if several). */
  Blocks of(long room) {
    synchronized (issued) {
      for (int i = issued.size() - 1; i >= 0; i--) {
        if (issued.get(i).room == room) {
          return issued.get(i);
        }
      }
    }
    throw new AssertionError("no destinations were issued for room " + room);
  }

  /** Waits until {@code room}'s destinations (the last issued) were released. */
  void awaitReleased(long room) {
    PdTesting.eventually(() -> of(room).releases.get() == 1, "the destinations released");
  }

  /**
   * Waits until every destinations object issued was released, then asserts it was once, cleanly.
   */
  void awaitAllReleasedOnce() {
    PdTesting.eventually(() -> issued.stream().allMatch(d -> d.releases.get() == 1), "releases");
    assertAllReleasedOnce();
  }

  /** Asserts every destinations object issued was released exactly once, and cleanly. */
  void assertAllReleasedOnce() {
    synchronized (issued) {
      for (Blocks b : issued) {
        assertEquals(1, b.releases.get(), "releases of room " + b.room + "'s destinations");
      }
    }
    assertEquals(0, closeFailures.get(), "releases while bytes could still land");
  }
}
