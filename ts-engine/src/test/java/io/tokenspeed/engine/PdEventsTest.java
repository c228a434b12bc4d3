package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.control.RankEvents;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The ranks' agreement on their transfers' events ({@link PdEvents}): every rank of a replica,
 * given the same agreed rounds, applies the same events in the same order, each once — a failure as
 * soon as any rank reports it (the lowest rank's reason), the others once every rank has (RELEASED
 * even after a failure, nothing else of a failed request) — checked against an oracle on seeded
 * random reports of 2 to 4 ranks; every report crosses the exchange in {@link PdEvents#take}'s
 * encoding, split over rounds when it does not fit one.
 */
class PdEventsTest {
  static LongStream seeds() {
    return LongStream.range(0, 300);
  }

  private static final PdEvents.Kind[] ALL_OF_EVERY_RANK = {
    PdEvents.Kind.ACKED,
    PdEvents.Kind.COPIED,
    PdEvents.Kind.FENCED,
    PdEvents.Kind.LANDED,
    PdEvents.Kind.RELEASED
  };

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldApplyTheSameEventsOnEveryRankAsTheOracleSays(long seed) {
    SplittableRandom rnd = new SplittableRandom(seed);
    int size = 2 + rnd.nextInt(3);
    int requests = 1 + rnd.nextInt(12);
    int rounds = 40;
    // what each rank reports in each round (before the exchange: encoded, maybe split)
    List<List<List<PdEvents.Event>>> plan = new ArrayList<>();
    for (int r = 0; r < rounds; r++) {
      List<List<PdEvents.Event>> byRank = new ArrayList<>();
      for (int k = 0; k < size; k++) {
        byRank.add(new ArrayList<>());
      }
      plan.add(byRank);
    }
    for (long id = 1; id <= requests; id++) {
      for (int rank = 0; rank < size; rank++) {
        int at = rnd.nextInt(20);
        boolean fails = rnd.nextInt(6) == 0;
        for (PdEvents.Kind kind : ALL_OF_EVERY_RANK) {
          if (rnd.nextInt(4) == 0) {
            continue; // this rank never reports it
          }
          if (fails && kind != PdEvents.Kind.RELEASED) {
            continue;
          }
          at = Math.min(rounds - 10, at + rnd.nextInt(3));
          String text = rnd.nextInt(3) == 0 ? "rank " + rank + " says " + kind : null;
          plan.get(at).get(rank).add(new PdEvents.Event(kind, id, text));
        }
        if (fails) {
          plan.get(Math.min(rounds - 10, at))
              .get(rank)
              .add(new PdEvents.Event(PdEvents.Kind.FAILED, id, "rank " + rank + " failed " + id));
        }
      }
    }
    List<List<PdEvents.Event>> applied = new ArrayList<>();
    List<PdEvents> ranks = new ArrayList<>();
    for (int k = 0; k < size; k++) {
      List<PdEvents.Event> mine = new ArrayList<>();
      applied.add(mine);
      ranks.add(new PdEvents(size, mine::add));
    }
    // what the ranks did report: a rank that applied a request's failure reports nothing more
    // of it but its release, as the engine's rooms do once ended
    List<List<List<PdEvents.Event>>> reported = new ArrayList<>();
    for (int r = 0; r < rounds; r++) {
      List<RankEvents> agreed = new ArrayList<>();
      boolean any = false;
      List<List<PdEvents.Event>> byRank = new ArrayList<>();
      reported.add(byRank);
      for (int k = 0; k < size; k++) {
        List<PdEvents.Event> sent = new ArrayList<>();
        byRank.add(sent);
        for (PdEvents.Event e : plan.get(r).get(k)) {
          boolean ended =
              applied.get(k).stream()
                  .anyMatch(a -> a.kind() == PdEvents.Kind.FAILED && a.id() == e.id());
          if (ended && e.kind() != PdEvents.Kind.RELEASED) {
            continue;
          }
          sent.add(e);
          ranks.get(k).report(e.kind(), e.id(), e.text());
        }
        RankEvents out = ranks.get(k).take();
        any |= !out.isEmpty();
        agreed.add(out);
      }
      for (PdEvents p : ranks) {
        p.agreed(any ? agreed : List.of());
      }
    }
    for (int k = 0; k < size; k++) {
      assertFalse(ranks.get(k).outgoing(), "rank " + k + " left events unsent");
      assertEquals(applied.get(0), applied.get(k), "rank " + k + " applied otherwise than rank 0");
    }
    assertEquals(oracle(reported, size), applied.get(0), "seed " + seed);
  }

  /** What the agreement must apply, computed directly from the plan. */
  private static List<PdEvents.Event> oracle(List<List<List<PdEvents.Event>>> plan, int size) {
    List<PdEvents.Event> out = new ArrayList<>();
    Set<Long> failed = new HashSet<>();
    Map<String, String[]> reports = new HashMap<>();
    for (List<List<PdEvents.Event>> round : plan) {
      for (List<PdEvents.Event> rank : round) {
        for (PdEvents.Event e : rank) {
          if (e.kind() == PdEvents.Kind.FAILED && failed.add(e.id())) {
            out.add(e);
            reports
                .keySet()
                .removeIf(key -> key.endsWith("/" + e.id()) && !key.startsWith("RELEASED"));
          }
        }
      }
      for (int k = 0; k < round.size(); k++) {
        for (PdEvents.Event e : round.get(k)) {
          if (e.kind() == PdEvents.Kind.FAILED
              || (failed.contains(e.id()) && e.kind() != PdEvents.Kind.RELEASED)) {
            continue;
          }
          String key = e.kind() + "/" + e.id();
          String[] texts = reports.computeIfAbsent(key, x -> new String[size]);
          texts[k] = e.text() == null ? "" : e.text();
          int count = 0;
          String text = null;
          for (String t : texts) {
            if (t != null) {
              count++;
              if (text == null && !t.isEmpty()) {
                text = t;
              }
            }
          }
          if (count == size) {
            reports.remove(key);
            out.add(new PdEvents.Event(e.kind(), e.id(), text));
          }
        }
      }
    }
    return out;
  }

  @Test
  void shouldSplitReportsThatDoNotFitOneRoundAndCutLongTexts() {
    List<PdEvents.Event> applied = new ArrayList<>();
    PdEvents solo = new PdEvents(1, applied::add);
    solo.report(PdEvents.Kind.FAILED, 5, "x".repeat(2000));
    assertEquals(1, applied.size(), "a single rank applies at once");
    assertEquals(
        PdEvents.MAX_TEXT_BYTES,
        applied.get(0).text().getBytes(StandardCharsets.UTF_8).length,
        "the reason is cut");

    PdEvents rank = new PdEvents(2, e -> {});
    for (int i = 0; i < 200; i++) {
      rank.report(PdEvents.Kind.FAILED, i, "y".repeat(400));
    }
    int events = 0;
    int reports = 0;
    while (rank.outgoing()) {
      RankEvents r = rank.take();
      assertTrue(r.length() <= RankEvents.MAX_BYTES);
      events += PdEvents.decode(r).size();
      reports++;
    }
    assertEquals(200, events, "every event leaves, none twice");
    assertTrue(reports > 1, "200 events of 400 bytes take several reports");
  }

  /**
   * The flag that a FAILED or FENCED is the peer's client cancelling rides the exchange with its
   * text, and an agreed FENCED carries the flag of the rank whose text it carries (the lowest rank
   * that reported one).
   */
  @Test
  void shouldCarryTheCancelledFlagWithTheTextItQualifies() {
    List<List<PdEvents.Event>> applied = List.of(new ArrayList<>(), new ArrayList<>());
    List<PdEvents> ranks =
        List.of(new PdEvents(2, applied.get(0)::add), new PdEvents(2, applied.get(1)::add));
    ranks.get(0).report(PdEvents.Kind.FENCED, 7, null);
    ranks.get(1).report(PdEvents.Kind.FENCED, 7, "the decode half was cancelled", true);
    ranks.get(1).report(PdEvents.Kind.FAILED, 8, "the prefill half was cancelled", true);
    ranks.get(0).report(PdEvents.Kind.FAILED, 9, "the connection failed", false);
    List<RankEvents> round = List.of(ranks.get(0).take(), ranks.get(1).take());
    for (int r = 0; r < 2; r++) {
      ranks.get(r).agreed(round);
      assertEquals(
          List.of(
              new PdEvents.Event(PdEvents.Kind.FAILED, 9, "the connection failed", false),
              new PdEvents.Event(PdEvents.Kind.FAILED, 8, "the prefill half was cancelled", true),
              new PdEvents.Event(PdEvents.Kind.FENCED, 7, "the decode half was cancelled", true)),
          applied.get(r),
          "rank " + r);
    }
    assertTrue(PdEvents.decode(round.get(1)).stream().allMatch(PdEvents.Event::cancelled));
    PdEvents solo = new PdEvents(1, applied.get(0)::add);
    solo.report(PdEvents.Kind.FAILED, 10, "x", true);
    assertTrue(applied.get(0).getLast().cancelled(), "a single rank applies the flag at once");
  }
}
