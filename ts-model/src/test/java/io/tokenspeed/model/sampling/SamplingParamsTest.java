package io.tokenspeed.model.sampling;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.OptionalLong;
import java.util.Set;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class SamplingParamsTest {

  static Stream<Arguments> invalid() {
    SamplingParams d = SamplingParams.defaults();
    return Stream.of(
        Arguments.of("temperature=-0.1", (Supplier<?>) () -> d.withTemperature(-0.1)),
        Arguments.of("temperature=NaN", (Supplier<?>) () -> d.withTemperature(Double.NaN)),
        Arguments.of(
            "temperature=Infinity",
            (Supplier<?>) () -> d.withTemperature(Double.POSITIVE_INFINITY)),
        Arguments.of("topK=-2", (Supplier<?>) () -> d.withTopK(-2)),
        Arguments.of("topP=0.0", (Supplier<?>) () -> d.withTopP(0)),
        Arguments.of("topP=1.5", (Supplier<?>) () -> d.withTopP(1.5)),
        Arguments.of("topP=NaN", (Supplier<?>) () -> d.withTopP(Double.NaN)),
        Arguments.of("minP=-0.5", (Supplier<?>) () -> d.withMinP(-0.5)),
        Arguments.of("minP=1.01", (Supplier<?>) () -> d.withMinP(1.01)),
        Arguments.of("maxTokens=0", (Supplier<?>) () -> d.withMaxTokens(0)),
        Arguments.of(
            "stopTokenIds contains -3", (Supplier<?>) () -> d.withStopTokenIds(Set.of(-3))),
        Arguments.of(
            "stopTokenIds contains null",
            (Supplier<?>)
                () -> {
                  Set<Integer> ids = new HashSet<>();
                  ids.add(null);
                  return d.withStopTokenIds(ids);
                }));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("invalid")
  void shouldNameFieldValueAndRangeWhenOutOfRange(String expected, Supplier<?> build) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build::get);
    assertTrue(e.getMessage().startsWith(expected), e.getMessage());
    assertTrue(e.getMessage().contains("must"), e.getMessage());
  }

  @Test
  void shouldAcceptBoundsWhenInRange() {
    SamplingParams p =
        SamplingParams.defaults().withTemperature(0).withTopK(-1).withTopP(1).withMinP(1);
    assertTrue(p.isGreedy());
    assertFalse(p.isTopKOn());
    assertFalse(p.isTopPOn());
    assertTrue(p.isMinPOn());
    assertFalse(p.withTopK(0).isTopKOn());
    assertTrue(p.withTopK(1).isTopKOn());
    assertTrue(p.withTopP(Double.MIN_VALUE).isTopPOn());
  }

  @Test
  void shouldUseDocumentedDefaultsWhenDefaults() {
    SamplingParams d = SamplingParams.defaults();
    assertEquals(SamplingParams.DEFAULT_TEMPERATURE, d.temperature());
    assertEquals(SamplingParams.DEFAULT_TOP_K, d.topK());
    assertEquals(SamplingParams.DEFAULT_TOP_P, d.topP());
    assertEquals(SamplingParams.DEFAULT_MIN_P, d.minP());
    assertEquals(SamplingParams.DEFAULT_MAX_TOKENS, d.maxTokens());
    assertEquals(SamplingParams.DEFAULT_IGNORE_EOS, d.ignoreEos());
    assertEquals(OptionalLong.empty(), d.seed());
    assertEquals(Set.of(), d.stopTokenIds());
    assertFalse(d.isGreedy() || d.isTopKOn() || d.isTopPOn() || d.isMinPOn());
  }

  @Test
  void shouldKeepRequestSeedWhenPresentAndAssignOneWhenAbsent() {
    SamplingParams seeded = SamplingParams.defaults().withSeed(7);
    assertSame(seeded, seeded.withSeedIfAbsent(() -> 99));
    assertEquals(OptionalLong.of(99), SamplingParams.defaults().withSeedIfAbsent(() -> 99).seed());
  }

  @Test
  void shouldCopyStopTokenIdsWhenBuilt() {
    Set<Integer> ids = new HashSet<>(Set.of(1, 2));
    SamplingParams p = SamplingParams.defaults().withStopTokenIds(ids);
    ids.add(3);
    assertEquals(Set.of(1, 2), p.stopTokenIds());
    assertThrows(UnsupportedOperationException.class, () -> p.stopTokenIds().add(4));
  }
}
