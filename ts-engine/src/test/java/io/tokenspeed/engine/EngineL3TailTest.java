package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.EngineL3Test.SharedStore;
import io.tokenspeed.engine.EngineTest.Run;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.sampling.SamplingParams;
import io.tokenspeed.model.sampling.TokenLogprobs;
import io.tokenspeed.scheduler.StorageConfig;
import java.nio.file.Path;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Tails end to end (issue 38, item 6): a writer engine serves a prompt whose reusable bound is not
 * a multiple of P and closes; its write-through leaves the exact tail object in the shared store
 * beside the full pages. A fresh engine serving the same prompt then restores every reusable token
 * from the store — the full pages and the tail, everything but the last prompt token, which the
 * forward computes for its logits — records the tail as a local hint, and gives exactly the tokens,
 * logits and logprobs of an engine without storage. Before tails were written the reader restored
 * only the full pages below the tail.
 */
class EngineL3TailTest {
  private static final int P = 16;
  private static final int TOP_LOGPROBS = 5;

  /** P = 16 with blocks of 4 tokens: a tail has whole rows under its hash and a partial one. */
  private static final EngineConfig CONFIG = new EngineConfig(P, 4, 256, 4.0, 64, 8, 2, 2, 64);

  @TempDir Path dir;

  /**
   * Each context model with a prompt of 3 pages and 6 tokens (a tail of 5 tokens: one whole row and
   * one partial row), of 4 whole pages (the reusable bound is a tail inside the last full page),
   * and of 10 tokens (a tail inside page 0).
   */
  static Stream<Arguments> prompts() {
    return Stream.of("llama", "gemma3")
        .flatMap(
            m ->
                Stream.of(Arguments.of(m, 3 * P + 6), Arguments.of(m, 4 * P), Arguments.of(m, 10)));
  }

  @ParameterizedTest(name = "{0}, {1} prompt tokens")
  @MethodSource("prompts")
  void shouldRestoreANonAlignedPromptsTailFromTheStoreAndMatchAnEngineWithoutStorage(
      String name, int length) throws Exception {
    try (CausalLm model =
        name.equals("llama") ? ContextModels.llama(dir) : ContextModels.gemma3(dir)) {
      check(model, name, length);
    }
  }

  private static void check(CausalLm model, String name, int length) throws Exception {
    int[] prompt =
        new SplittableRandom(length * 31L + name.hashCode())
            .ints(length, 0, model.vocabSize())
            .toArray();
    int bound = length - 1;
    SharedStore store = new SharedStore();

    serveFresh(model, l3(store), prompt, new AtomicInteger()); // its close drains the PUTs
    assertTrue(store.puts.get() > 0, "the writer put its prompt");

    Served want = serveFresh(model, null, prompt, new AtomicInteger());
    AtomicInteger hints = new AtomicInteger();
    Served got = serveFresh(model, l3(store), prompt, hints);
    String what = name + ", " + length + " tokens";
    EngineTest.assertSame(want.run(), got.run(), what + ": restored from L3 vs no storage");
    assertEquals(want.logprobs(), got.logprobs(), what + ": logprobs");
    var m = got.run().result().metrics();
    assertEquals(0, m.reusedDeviceTokens(), what + ": a fresh Device");
    assertEquals(bound, m.reusedHostTokens(), what + ": every reusable token, through the Host");
    assertEquals(
        bound, m.reusedStorageTokens(), what + ": the full pages and the tail came from L3");
    assertEquals(1 + 7, m.computedTokens(), what + ": the last prompt token and 7 decode steps");
    assertEquals(1, hints.get(), what + ": the retired, attached GET recorded the tail's hint");
  }

  /** A run and the logprobs of each of its steps. */
  private record Served(Run run, List<TokenLogprobs> logprobs) {}

  /**
   * Serves {@code prompt} (greedy, 8 tokens, with logprobs) on a fresh engine, with L3 when {@code
   * l3} is not null; {@code hints} ends as the number of tail hints the engine's cache held after
   * its last round. Invariants are checked after every round; the close drains L3 writes.
   */
  private static Served serveFresh(CausalLm model, L3Settings l3, int[] prompt, AtomicInteger hints)
      throws Exception {
    Checked rec =
        new Checked() {
          @Override
          public void afterRound(EngineView e) {
            super.afterRound(e);
            hints.set(e.cache().tails().size());
          }
        };
    Served out;
    try (Engine e =
        Engine.start(EngineSettings.of(model, CONFIG).observer(rec).l3(l3).conclude())) {
      RequestHandle h = e.submit(prompt, SamplingParams.greedy(8), TOP_LOGPROBS);
      Run run = rec.await(h);
      out = new Served(run, h.logprobs());
    }
    assertTrue(rec.broken.isEmpty(), () -> rec.broken.toString());
    return out;
  }

  /** One-token extensions (a tail inside page 0 is one) and a soft deadline nothing reaches. */
  private static L3Settings l3(SharedStore store) {
    return EngineL3Test.l3(
        store, StorageConfig.defaults().withMinExtensionTokens(1).withSoftDeadlineMs(60_000));
  }
}
