package io.tokenspeed.server.router;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.server.router.PrefixChooser.Candidate;
import io.tokenspeed.server.router.PrefixChooser.Choice;
import io.tokenspeed.server.router.PrefixChooser.Reason;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The routing rule: what each backend's prefix and load cost, and which one wins, and why. */
class PrefixChooserTest {
  private static final LoadReport NONE = LoadReport.UNKNOWN;

  private static Candidate c(int device, int local, int store, double load) {
    return new Candidate(16, device, local, store, load, NONE);
  }

  @Test
  void shouldChooseTheBackendHoldingTheLongestDevicePrefix() {
    Choice ch =
        PrefixChooser.choose(
            1000, List.of(c(10, 10, 0, 0), c(40, 40, 0, 0), c(0, 0, 0, 0)), 256, 0);
    assertEquals(1, ch.index());
    assertEquals(Reason.DEVICE_PREFIX, ch.reason());
    assertEquals(640, ch.deviceTokens());
    assertEquals(0, ch.hostTokens());
  }

  @Test
  void shouldPriceAHostPrefixBelowRecomputationAndADevicePrefixBelowBoth() {
    // the same 40 pages, on Device at one, on Host at the other
    Choice ch = PrefixChooser.choose(1000, List.of(c(0, 40, 0, 0), c(40, 40, 0, 0)), 256, 0);
    assertEquals(1, ch.index());
    Choice host = PrefixChooser.choose(1000, List.of(c(0, 40, 0, 0), c(0, 0, 0, 0)), 256, 1);
    assertEquals(0, host.index());
    assertEquals(Reason.HOST_PREFIX, host.reason());
    assertEquals(640, host.hostTokens());
  }

  @Test
  void shouldCountAPrefixOnlyTheStoreHoldsForEveryBackendAndLetTheLoadDecide() {
    // the store holds 40 pages: at either backend they are restored; the idler one wins
    Choice ch = PrefixChooser.choose(1000, List.of(c(0, 0, 40, 3), c(0, 0, 40, 1)), 256, 0);
    assertEquals(1, ch.index());
    assertEquals(Reason.L3_PREFIX, ch.reason());
    assertEquals(640, ch.storeTokens());
    // 20 pages local and 20 more only in the store, against 40 on another's Device
    Choice mixed = PrefixChooser.choose(1000, List.of(c(20, 20, 20, 0), c(40, 40, 0, 0)), 256, 0);
    assertEquals(1, mixed.index());
  }

  @Test
  void shouldLetEnoughLoadOutweighAPrefix() {
    // a 640-token Device prefix saves 640 prefill tokens; three queued requests cost 768
    Choice stay = PrefixChooser.choose(1000, List.of(c(40, 40, 0, 2), c(0, 0, 0, 0)), 256, 0);
    assertEquals(0, stay.index());
    Choice leave = PrefixChooser.choose(1000, List.of(c(40, 40, 0, 3), c(0, 0, 0, 0)), 256, 0);
    assertEquals(1, leave.index());
    assertEquals(Reason.LOAD, leave.reason());
    // with load priced at 0 the prefix always wins
    Choice free = PrefixChooser.choose(1000, List.of(c(40, 40, 0, 50), c(0, 0, 0, 0)), 0, 0);
    assertEquals(0, free.index());
  }

  @Test
  void shouldBreakTiesRoundRobinByTheTurn() {
    List<Candidate> same = List.of(c(0, 0, 0, 1), c(0, 0, 0, 1), c(0, 0, 0, 1));
    for (int turn = 0; turn < 9; turn++) {
      Choice ch = PrefixChooser.choose(500, same, 256, turn);
      assertEquals(turn % 3, ch.index());
      assertEquals(Reason.ROUND_ROBIN, ch.reason());
    }
    // a tie between two of three: in turn between those two
    List<Candidate> two = List.of(c(0, 0, 0, 2), c(0, 0, 0, 1), c(0, 0, 0, 1));
    assertEquals(1, PrefixChooser.choose(500, two, 256, 0).index());
    assertEquals(2, PrefixChooser.choose(500, two, 256, 1).index());
    // without token ids every candidate is load only
    List<Candidate> blind = List.of(Candidate.loadOnly(0, NONE), Candidate.loadOnly(0, NONE));
    assertEquals(1, PrefixChooser.choose(0, blind, 256, 1).index());
  }

  @Test
  void shouldNeverCountTheLastTokenOfThePrompt() {
    // 4 pages of 16 = 64 tokens held, prompt of 64: at most 63 reused
    assertArrayEquals(new int[] {63, 0, 0}, PrefixChooser.split(64, c(4, 4, 0, 0)));
    assertArrayEquals(new int[] {32, 16, 15}, PrefixChooser.split(64, c(2, 3, 1, 0)));
    assertArrayEquals(new int[] {0, 0, 0}, PrefixChooser.split(0, c(0, 0, 0, 0)));
  }

  @Test
  void shouldTakeTheBackendsPricesAndFillAMissingOneFromTheOthers() {
    // measured: 1 ms a token; restoring at a tenth of that, 50 ms a call
    LoadReport measured = new LoadReport(0, 0, 1e-3, 0.1, 0.05);
    // 100 tokens to restore: 100 * 1e-3 * 0.1 + 0.1 = 0.11 s against 0.1 s to recompute: recompute
    Candidate stored = new Candidate(10, 0, 0, 10, 0, measured);
    Candidate nothing = new Candidate(10, 0, 0, 0, 0, measured);
    Choice ch = PrefixChooser.choose(101, List.of(stored, nothing), 0, 0);
    assertEquals(
        ch.scores()[0], ch.scores()[1], 1e-12, "a restore that does not pay is a recompute");
    // 1000 tokens: 0.1 + 0.1 = 0.2 s against 1 s, and the last token, 1 ms, at both
    Choice big =
        PrefixChooser.choose(
            1001,
            List.of(
                new Candidate(10, 0, 0, 100, 0, measured), new Candidate(10, 0, 0, 0, 0, measured)),
            0,
            0);
    assertEquals(0.201, big.scores()[0], 1e-9);
    assertEquals(1.001, big.scores()[1], 1e-9);
    // a backend without figures is priced as the measured one
    Choice mixed =
        PrefixChooser.choose(
            1001,
            List.of(new Candidate(10, 0, 0, 100, 0, NONE), new Candidate(10, 0, 0, 0, 0, measured)),
            0,
            0);
    assertEquals(0.101, mixed.scores()[0], 1e-9, "the other's prices, no latency of its own");
  }

  @Test
  void shouldReadTheBackendsFiguresFromItsMetrics() {
    String text =
        """
        # HELP tokenspeed:num_requests_running Requests admitted.
        # TYPE tokenspeed:num_requests_running gauge
        tokenspeed:num_requests_running{model_name="m",engine_role="fused",dp_rank="0"} 3.0
        tokenspeed:num_requests_waiting{model_name="m",engine_role="fused",dp_rank="0"} 2.0
        tokenspeed:num_requests_running_other 7
        tokenspeed:l3_reference_prefill_seconds{model_name="m"} 8.192
        tokenspeed:l3_break_even_bandwidth_bytes_per_second{model_name="m"} 1.0E8
        tokenspeed:l3_restore_bandwidth_bytes_per_second{model_name="m"} 4.0E8
        tokenspeed:l3_restore_latency_seconds{model_name="m"} 0.001
        """;
    LoadReport r = LoadReport.parse(text);
    assertEquals(5, r.queued());
    assertEquals(8.192 / LoadReport.REFERENCE_TOKENS, r.prefillSecondsPerToken(), 1e-15);
    // bytes(R) = 1e8 * (8.192 - 0.002); at 4e8 B/s that is (8.19 / 4) s against 8.192 s
    assertEquals(1e8 * 8.19 / 4e8 / 8.192, r.restoreRatio(), 1e-12);
    assertEquals(0.001, r.restoreLatencySeconds(), 1e-15);
    LoadReport off =
        LoadReport.parse(
            "tokenspeed:l3_reference_prefill_seconds 0\n"
                + "tokenspeed:l3_break_even_bandwidth_bytes_per_second NaN\n");
    assertTrue(Double.isNaN(off.prefillSecondsPerToken()), "L3 off: 0 is unknown");
    assertTrue(Double.isNaN(off.restoreRatio()));
    LoadReport never =
        LoadReport.parse(
            "tokenspeed:l3_reference_prefill_seconds 1\n"
                + "tokenspeed:l3_break_even_bandwidth_bytes_per_second +Inf\n");
    assertEquals(1, never.restoreRatio(), "a restore never pays: priced as a recompute");
  }

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {1, 2, 3})
  void shouldHashPagesAsTheEnginesContractSays(long seed) throws Exception {
    SplittableRandom r = new SplittableRandom(seed);
    int p = 1 + r.nextInt(32);
    int[] tokens = new int[r.nextInt(300)];
    for (int i = 0; i < tokens.length; i++) {
      tokens[i] = r.nextInt(1 << 17);
    }
    long[] got = PageHashes.of(tokens, p);
    // h_i = SHA-256(u32le(len(h_{i-1})) | h_{i-1} | u32le(P) | u32le(token)...), the first 8 bytes
    List<Long> want = new ArrayList<>();
    byte[] prev = null;
    for (int page = 0; (page + 1) * p <= Math.max(0, tokens.length - 1); page++) {
      MessageDigest sha = MessageDigest.getInstance("SHA-256");
      ByteBuffer b =
          ByteBuffer.allocate(4 + (prev == null ? 0 : 32) + 4 + 4 * p)
              .order(ByteOrder.LITTLE_ENDIAN);
      b.putInt(prev == null ? 0 : 32);
      if (prev != null) {
        b.put(prev);
      }
      b.putInt(p);
      for (int i = 0; i < p; i++) {
        b.putInt(tokens[page * p + i]);
      }
      prev = sha.digest(b.array());
      want.add(ByteBuffer.wrap(prev, 0, 8).order(ByteOrder.BIG_ENDIAN).getLong());
    }
    assertEquals(want, java.util.Arrays.stream(got).boxed().toList(), "P " + p);
  }
}
