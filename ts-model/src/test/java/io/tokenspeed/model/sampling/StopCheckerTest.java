package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;
import org.junit.jupiter.api.Test;

class StopCheckerTest {

  private static final OptionalInt EOS = OptionalInt.of(2);

  @Test
  void shouldStopOnStopTokenIdWhenSampled() {
    StopChecker c = new StopChecker(SamplingParams.greedy(10).withStopTokenIds(Set.of(7, 9)), EOS);
    assertEquals(Optional.empty(), c.check(5, 1));
    assertEquals(Optional.of(new FinishReason.Stop(9)), c.check(9, 2));
    assertEquals(Optional.of(new FinishReason.Stop(7)), c.check(7, 3));
  }

  @Test
  void shouldStopOnEosUnlessIgnoreEos() {
    SamplingParams p = SamplingParams.greedy(10);
    assertEquals(Optional.of(new FinishReason.Stop(2)), new StopChecker(p, EOS).check(2, 1));
    assertEquals(Optional.empty(), new StopChecker(p.withIgnoreEos(true), EOS).check(2, 1));
    assertEquals(Optional.empty(), new StopChecker(p, OptionalInt.empty()).check(2, 1));
    // An explicit stop id still stops with ignore_eos, even when it is the eos id.
    StopChecker explicit = new StopChecker(p.withIgnoreEos(true).withStopTokenIds(Set.of(2)), EOS);
    assertEquals(Optional.of(new FinishReason.Stop(2)), explicit.check(2, 1));
  }

  @Test
  void shouldFinishWithLengthWhenMaxTokensReached() {
    StopChecker c = new StopChecker(SamplingParams.greedy(3), EOS);
    assertEquals(Optional.empty(), c.check(5, 1));
    assertEquals(Optional.empty(), c.check(5, 2));
    assertEquals(Optional.of(new FinishReason.Length(3)), c.check(5, 3));
  }

  @Test
  void shouldPreferStopWhenLastAllowedTokenIsStopToken() {
    StopChecker c = new StopChecker(SamplingParams.greedy(3), EOS);
    assertEquals(Optional.of(new FinishReason.Stop(2)), c.check(2, 3));
  }

  @Test
  void shouldFailWhenCheckedPastMaxTokens() {
    StopChecker c = new StopChecker(SamplingParams.greedy(3), EOS);
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> c.check(5, 4));
    assertTrue(e.getMessage().contains("numGeneratedTokens=4"), e.getMessage());
    assertThrows(IllegalStateException.class, () -> c.check(5, 0));
  }

  @Test
  void shouldNameReasonsAsTheWireDoes() {
    assertEquals("stop", new FinishReason.Stop(1).wireName());
    assertEquals("length", new FinishReason.Length(1).wireName());
    assertThrows(IllegalArgumentException.class, () -> new FinishReason.Stop(-1));
    assertThrows(IllegalArgumentException.class, () -> new FinishReason.Length(0));
  }

  @Test
  void shouldIncludeStopTokenAndCountItWhenSequenceRuns() {
    // Greedy over a row whose argmax is the eos id (2) from step 3 on.
    SamplingState state =
        new SamplingState(SamplingParams.greedy(10).withSeedIfAbsent(() -> 1), EOS);
    Sampler sampler = new Sampler(4);
    List<Integer> ids = new ArrayList<>();
    while (!state.isFinished()) {
      float[] row =
          state.numGeneratedTokens() < 3 ? new float[] {0, 5, 1, 0} : new float[] {0, 1, 5, 0};
      int id = state.sample(sampler, row, 0);
      ids.add(id);
      state.onToken(id);
    }
    assertEquals(List.of(1, 1, 1, 2), ids);
    assertEquals(4, state.numGeneratedTokens());
    assertEquals(Optional.of(new FinishReason.Stop(2)), state.finishReason());
    assertThrows(IllegalStateException.class, () -> state.onToken(1));
    assertThrows(IllegalStateException.class, () -> state.sample(sampler, new float[4], 0));
  }

  @Test
  void shouldRequireResolvedSeedWhenStateStarts() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> new SamplingState(SamplingParams.defaults(), EOS));
    assertTrue(e.getMessage().startsWith("seed="), e.getMessage());
    SamplingState s = new SamplingState(SamplingParams.defaults().withSeed(11), EOS);
    assertEquals(11, s.seed());
    assertFalse(s.isFinished());
  }
}
