package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.tokenspeed.core.storage.CostFigures;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.SamplingState;
import java.util.Arrays;
import java.util.HashSet;
import java.util.OptionalInt;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The request codec that carries a new request from the leader to the other ranks: every field a
 * follower samples with, penalties included, comes back as the leader had it, so the follower's
 * penalties and tokens are the leader's.
 */
class ReplicaCodecTest {

  static LongStream seeds() {
    return LongStream.range(0, 16);
  }

  private static SamplingParams randomParams(SplittableRandom rnd) {
    Set<Integer> stops = new HashSet<>();
    for (int i = rnd.nextInt(4); i > 0; i--) {
      stops.add(rnd.nextInt(1000));
    }
    boolean penalized = rnd.nextBoolean();
    return new SamplingParams(
        rnd.nextInt(3) == 0 ? 0 : rnd.nextDouble(0.1, 2),
        rnd.nextInt(-1, 50),
        rnd.nextDouble(0.05, 1),
        rnd.nextDouble(0, 1),
        java.util.OptionalLong.of(rnd.nextLong()),
        1 + rnd.nextInt(100),
        stops,
        rnd.nextBoolean(),
        penalized ? rnd.nextDouble(-2, 2) : 0,
        penalized ? rnd.nextDouble(-2, 2) : 0,
        penalized ? rnd.nextDouble(0.01, 10) : 1);
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldRoundTripEverySamplingParamIncludingThePenalties(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int[] prompt = rnd.ints(1 + rnd.nextInt(40), 0, 500).toArray();
    SamplingParams params = randomParams(rnd);
    int topLogprobs = rnd.nextInt(-1, 21);
    ActiveRequest leader =
        new ActiveRequest(
            7,
            new RequestHandle(7, id -> {}, topLogprobs),
            prompt,
            new SamplingState(params, OptionalInt.of(2), prompt),
            0);
    ActiveRequest follower =
        Replica.decode(7, Replica.encode(leader), id -> {}, OptionalInt.of(2), 0);
    assertEquals(params, follower.sampling.params());
    assertEquals(topLogprobs, follower.handle.topLogprobs());
    assertArrayEquals(prompt, Arrays.copyOf(follower.tokens, follower.promptTokens));
    assertEquals(leader.sampling.penalties(), follower.sampling.penalties());
    for (int i = 0; i < 5 && !leader.sampling.isFinished(); i++) {
      int token = rnd.nextInt(500);
      assertEquals(leader.sampling.onToken(token), follower.sampling.onToken(token));
      if (!leader.sampling.isFinished()) {
        assertEquals(leader.sampling.rowSampling(-1), follower.sampling.rowSampling(-1));
      }
    }
  }

  /** A disaggregated half's ticket reaches every rank as the leader took it (docs/pd.md). */
  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldRoundTripTheTicketOfADisaggregatedHalf(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int[] prompt = rnd.ints(1 + rnd.nextInt(40), 0, 500).toArray();
    ActiveRequest leader =
        new ActiveRequest(
            9,
            new RequestHandle(9, id -> {}, -1),
            prompt,
            new SamplingState(SamplingParams.greedy(3).withSeed(5), OptionalInt.empty(), prompt),
            0);
    long room = rnd.nextLong() | 1;
    leader.ticket =
        switch (rnd.nextInt(3)) {
          case 0 -> null;
          case 1 -> new PdTicket.Decode(room, 1 + rnd.nextInt(8));
          default -> {
            java.util.List<java.net.InetSocketAddress> to = new java.util.ArrayList<>();
            for (int i = 1 + rnd.nextInt(4); i > 0; i--) {
              to.add(
                  new java.net.InetSocketAddress(
                      rnd.nextBoolean() ? "127.0.0.1" : "::1", 1 + rnd.nextInt(65535)));
            }
            yield new PdTicket.Prefill(room, to);
          }
        };
    ActiveRequest follower =
        Replica.decode(9, Replica.encode(leader), id -> {}, OptionalInt.empty(), 0);
    assertEquals(leader.ticket, follower.ticket);
  }

  @Test
  void shouldRefuseARequestEncodedInTheFirstVersion() {
    int[] prompt = {1, 2, 3};
    SamplingParams params = SamplingParams.greedy(4).withSeed(1);
    ActiveRequest a =
        new ActiveRequest(
            3,
            new RequestHandle(3, id -> {}, -1),
            prompt,
            new SamplingState(params, OptionalInt.empty(), prompt),
            0);
    byte[] bytes = Replica.encode(a);
    bytes[0] = 1;
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> Replica.decode(3, bytes, id -> {}, OptionalInt.empty(), 0));
    assertEquals("request 3 is encoded in version 1, not 3", e.getMessage());
  }

  /**
   * The leader's cost figures reach every rank bit for bit: the command that carries them decodes
   * to the same figures, so every rank's scheduler decides with the same doubles.
   */
  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldCarryCostFiguresBitForBit(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    CostFigures f =
        new CostFigures(
            rnd.nextDouble() * 1e8,
            rnd.nextDouble() * 1e11,
            rnd.nextDouble() * 1e8,
            rnd.nextDouble() * 1e5,
            rnd.nextDouble());
    Replica.Command c = Replica.Command.costFigures(f);
    Replica.Command back = Replica.Command.decode(seed, c.encode());
    assertEquals(c, back);
    assertEquals(f, back.figures());
  }

  @Test
  void shouldStopOnCostFiguresThisBuildCannotRead() {
    byte[] payload = Replica.Command.costFigures(CostFigures.UNKNOWN).encode();
    byte[] cut = Arrays.copyOf(payload, payload.length - 1);
    IllegalStateException e =
        assertThrows(IllegalStateException.class, () -> Replica.Command.decode(9, cut));
    assertEquals(
        "administrative command 9 is malformed: cost figures of 39 bytes, expected 40",
        e.getMessage());
    assertThrows(
        IllegalArgumentException.class,
        () -> new Replica.Command(Replica.Kind.COST_FIGURES, null, null),
        "figures are required");
  }
}
