package io.tokenspeed.control;

import static io.tokenspeed.control.Records.get;
import static io.tokenspeed.control.Records.ok;
import static io.tokenspeed.control.Records.put;
import static io.tokenspeed.control.Records.query;
import static io.tokenspeed.core.storage.KeyOutcome.FAILED;
import static io.tokenspeed.core.storage.KeyOutcome.INVALID;
import static io.tokenspeed.core.storage.KeyOutcome.MISSING;
import static io.tokenspeed.core.storage.KeyOutcome.OK;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class AgreementTest {

  private static List<List<StorageDone>> round(List<StorageDone> rank0, List<StorageDone> rank1) {
    return List.of(rank0, rank1);
  }

  private static List<List<StorageDone>> round(
      List<StorageDone> rank0, List<StorageDone> rank1, List<StorageDone> rank2) {
    return List.of(rank0, rank1, rank2);
  }

  @Test
  void shouldReduceKeyByKeyWhenOwnersDisagree() throws Exception {
    Agreement a = new Agreement(3, 10, 100);
    List<AgreedCompletion> out =
        a.apply(
            1,
            round(
                List.of(get(1, OK, OK, OK, MISSING, FAILED)),
                List.of(Records.detached(get(1, OK, MISSING, FAILED, INVALID, FAILED))),
                List.of(Records.unretired(get(1, OK, OK, OK, OK, FAILED)))));
    AgreedCompletion c = out.getFirst();
    assertEquals(List.of(OK, MISSING, FAILED, INVALID, FAILED), c.outcomes());
    assertFalse(c.retired());
    assertTrue(c.detached());
  }

  @Test
  void shouldTakeNoObjectEvidenceFromOwnersThatDidNotReadWhenTheyReportOk() throws Exception {
    // Rank 1 does not own row 0 (reports OK); rank 0 read it and found it missing.
    Agreement a = new Agreement(2, 10, 100);
    AgreedCompletion c =
        a.apply(1, round(List.of(get(4, MISSING, OK)), List.of(get(4, OK, OK)))).getFirst();
    assertTrue(c.objectFailure(0));
    assertTrue(c.ok(1));
  }

  @Test
  void shouldCompleteALaterOperationWhenAnEarlierOneIsStillPending() throws Exception {
    Agreement a = new Agreement(2, 10, 100);
    assertEquals(List.of(), a.apply(1, round(List.of(get(1, OK), get(2, OK)), List.of())));
    List<AgreedCompletion> out = a.apply(2, round(List.of(), List.of(get(2, OK))));
    assertEquals(1, out.size());
    assertEquals(2, out.getFirst().operationId());
    assertEquals(1, a.pendingOperations());
    assertEquals(1, a.pendingKeys());
  }

  @Test
  void shouldRefuseWhenAnOwnerReportsAnOperationTwiceAcrossRounds() throws Exception {
    Agreement a = new Agreement(2, 10, 100);
    a.apply(1, round(List.of(get(1, OK)), List.of()));
    assertEquals("operation 1 reported twice by rank 0", a.checkLocal(0, List.of(get(1, OK))));
    ProtocolException e =
        assertThrows(
            ProtocolException.class, () -> a.apply(2, round(List.of(get(1, OK)), List.of())));
    assertEquals("protocol error in round 2: operation 1 reported twice by rank 0", e.getMessage());
  }

  /**
   * Regression: every owner re-reporting an agreed operation used to agree it a second time, and
   * then stopped the replica with a protocol error. A report after agreement is a late second one:
   * dropped and counted, never agreed again.
   */
  @Test
  void shouldDropEveryOwnersLateReportWhenTheOperationWasAgreed() throws Exception {
    Agreement a = new Agreement(2, 10, 100);
    assertEquals(1, a.apply(1, round(List.of(get(1, OK)), List.of(get(1, OK)))).size());
    assertTrue(a.agreed(1));
    assertNull(a.checkLocal(1, List.of(get(1, OK), get(2, OK))));
    List<AgreedCompletion> out =
        a.apply(2, round(List.of(get(1, FAILED), get(2, OK)), List.of(get(1, OK), get(2, OK))));
    assertEquals(List.of(2L), out.stream().map(AgreedCompletion::operationId).toList());
    assertEquals(2, a.lateReports());
    assertEquals("operation 1 from rank 0 in round 2", a.firstLateReport());
    assertEquals(0, a.pendingOperations());
  }

  /**
   * Regression: agreed ids were a floor plus the ids above it, bounded at agreedMemory; an
   * operation in flight while more than agreedMemory later ones were agreed fell below the moved
   * floor, and its first reports were then refused as a duplicate, stopping the replica.
   */
  @Test
  void shouldAgreeAnOperationInFlightWhileMoreThanAgreedMemoryLaterOnesAreAgreed()
      throws Exception {
    Agreement a = new Agreement(2, 64, 64L * 4096 + 8192);
    int later = a.agreedMemory() + 5_000;
    a.apply(1, round(List.of(get(0, OK)), List.of())); // operation 0: rank 1 is slow
    long n = 2;
    for (long id = 1; id <= later; id += 1_000) {
      List<StorageDone> batch = new ArrayList<>();
      for (long k = id; k < Math.min(later + 1, id + 1_000); k++) {
        batch.add(get(k, OK));
      }
      assertEquals(batch.size(), a.apply(n++, round(batch, batch)).size());
    }
    assertFalse(a.agreed(0), "operation 0 is still in flight");
    List<AgreedCompletion> out = a.apply(n++, round(List.of(), List.of(get(0, OK))));
    assertEquals(List.of(0L), out.stream().map(AgreedCompletion::operationId).toList());
    assertEquals(0, a.lateReports());
    assertEquals(0, a.forgottenIds());
    // Far below every agreed id now, a second report of operation 0 is late: dropped.
    assertEquals(List.of(), a.apply(n, round(List.of(), List.of(get(0, FAILED)))));
    assertEquals(1, a.lateReports());
    assertEquals(0, a.pendingOperations());
  }

  /** Agreed ids are remembered as runs of consecutive ids, out of order included. */
  @Test
  void shouldRememberAgreedIdsOutOfOrderAndForgetNone() throws Exception {
    Agreement a = new Agreement(1, 10, 100);
    SplittableRandom rnd = new SplittableRandom(7);
    List<Long> ids = new ArrayList<>(LongStream.range(0, 5_000).boxed().toList());
    Collections.shuffle(ids, new java.util.Random(rnd.nextLong()));
    int round = 1;
    for (int i = 0; i < ids.size(); i += 50) {
      List<StorageDone> batch = new ArrayList<>();
      for (long id : ids.subList(i, Math.min(ids.size(), i + 50))) {
        assertFalse(a.agreed(id));
        batch.add(get(id, OK));
      }
      a.apply(round++, List.of(batch));
    }
    for (long id = 0; id < 5_000; id++) {
      assertTrue(a.agreed(id), "id " + id);
    }
    assertFalse(a.agreed(5_000));
    assertEquals(0, a.forgottenIds());
    for (long id : new long[] {Long.MAX_VALUE, Long.MAX_VALUE - 2, Long.MAX_VALUE - 1}) {
      assertFalse(a.agreed(id));
      assertEquals(1, a.apply(round++, List.of(List.of(get(id, OK)))).size());
    }
    assertTrue(a.agreed(Long.MAX_VALUE - 2) && a.agreed(Long.MAX_VALUE));
    assertEquals(List.of(), a.apply(round, List.of(List.of(get(Long.MAX_VALUE, OK)))));
    assertEquals(1, a.lateReports());
  }

  /**
   * Ids skipped for good (never issued by the scheduler) are the one way runs outgrow their bound:
   * then the two oldest merge, and a first report in the gap between them counts as late.
   */
  @Test
  void shouldMergeTheOldestRunsWhenIdsAreSkippedForGood() throws Exception {
    Agreement a = new Agreement(1, 1, 1);
    int memory = a.agreedMemory();
    for (long i = 0; i <= memory; i++) {
      a.apply(i + 1, List.of(List.of(get(2 * i, OK)))); // every odd id skipped
    }
    assertEquals(1, a.forgottenIds());
    assertTrue(a.agreed(1), "the gap between the two oldest runs merged");
    assertFalse(a.agreed(3));
    assertEquals(List.of(), a.apply(memory + 2, List.of(List.of(get(1, OK)))));
    assertEquals(1, a.lateReports());
    assertEquals(1, a.apply(memory + 3, List.of(List.of(get(3, OK)))).size());
  }

  @Test
  void shouldRefuseWhenOwnersDisagreeOnKindOrKeyCount() throws Exception {
    Agreement a = new Agreement(2, 10, 100);
    ProtocolException kind =
        assertThrows(
            ProtocolException.class,
            () -> a.apply(1, round(List.of(query(1, OK)), List.of(put(1, OK)))));
    assertTrue(kind.getMessage().endsWith("operation 1 is PUT on rank 1 but QUERY on rank 0"));
    Agreement b = new Agreement(2, 10, 100);
    b.apply(1, round(List.of(get(1, OK, OK)), List.of()));
    assertEquals(
        "operation 1 has 1 keys on rank 1 but 2 on rank 0: per-key masks must have equal lengths",
        b.checkLocal(1, List.of(get(1, OK))));
    assertNull(b.checkLocal(1, List.of(get(1, FAILED, OK))));
  }

  @Test
  void shouldRefuseWhenTheWindowOverflowsButNotWhenOperationsCompleteInTheSameRound()
      throws Exception {
    Agreement a = new Agreement(2, 2, 5);
    // Three operations reported by both owners at once never enter the window.
    assertEquals(
        3,
        a.apply(
                1,
                round(
                    List.of(get(1, OK), get(2, OK), get(3, OK)),
                    List.of(get(3, OK), get(2, OK), get(1, OK))))
            .size());
    a.apply(2, round(List.of(get(4, OK, OK), get(5, OK)), List.of()));
    ProtocolException ops =
        assertThrows(
            ProtocolException.class, () -> a.apply(3, round(List.of(get(6, OK)), List.of())));
    assertTrue(ops.getMessage().contains("max_pending_operations=2"), ops.getMessage());
    Agreement b = new Agreement(2, 10, 5);
    ProtocolException keys =
        assertThrows(
            ProtocolException.class,
            () -> b.apply(1, round(List.of(get(4, OK, OK, OK), get(5, OK, OK, OK)), List.of())));
    assertTrue(keys.getMessage().contains("6 keys"), keys.getMessage());
    assertEquals(
        "operation 9 has 6 keys, more than max_pending_keys=5",
        b.checkLocal(0, List.of(get(9, OK, OK, OK, OK, OK, OK))));
  }

  @Test
  void shouldFindDuplicatesInOneLocalReportBeforeTheExchange() {
    Agreement a = new Agreement(2, 10, 100);
    assertEquals(
        "operation 3 appears twice in one report",
        a.checkLocal(0, List.of(get(3, OK), put(4, OK), get(3, OK))));
    assertNull(a.checkLocal(0, List.of(get(3, OK), put(4, OK))));
  }

  static LongStream seeds() {
    return LongStream.range(0, 400);
  }

  static LongStream creditSeeds() {
    return LongStream.range(0, 60);
  }

  /**
   * A scheduler's credits drive the window: dense ids, each issued only while fewer than {@code
   * maxOperations} operations are in flight, its credit returned when its agreed fact is delivered
   * (one round after agreement, as the exchange does); every owner reports each operation once, in
   * a random later round, and now and then reports an agreed one again, late (also long after, far
   * below every id still in flight). A window of exactly the credits never overflows, every
   * operation is agreed once in the round its last owner first reported it, and every late record
   * is dropped and counted.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("creditSeeds")
  void shouldHoldEveryOperationTheCreditsAllowAndDropLateReportsWhenSizedFromTheCredits(long seed)
      throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    int worldSize = 2 + rnd.nextInt(3);
    int maxOperations = 1 + rnd.nextInt(rnd.nextBoolean() ? 4 : 200);
    int maxKeys = 1 + rnd.nextInt(8);
    int rounds = 300 + rnd.nextInt(300);
    Agreement a = new Agreement(worldSize, maxOperations, (long) maxOperations * maxKeys);
    // reports[round][rank]; the round in which each operation's last owner first reports it
    List<List<List<StorageDone>>> reports = new ArrayList<>();
    for (int n = 0; n <= rounds + 40; n++) {
      List<List<StorageDone>> ranks = new ArrayList<>();
      for (int r = 0; r < worldSize; r++) {
        ranks.add(new ArrayList<>());
      }
      reports.add(ranks);
    }
    java.util.Map<Long, Integer> lastOwnerRound = new java.util.HashMap<>();
    java.util.Map<Long, StorageDone> recordOf = new java.util.HashMap<>();
    List<Long> agreedSoFar = new ArrayList<>();
    List<AgreedCompletion> delivered = List.of(); // agreed in the previous round
    long nextId = 0;
    int inFlight = 0;
    long lateSent = 0;
    java.util.Set<Long> agreedIds = new java.util.HashSet<>();
    for (int n = 1; n <= rounds + 40; n++) {
      inFlight -= delivered.size(); // credits come back with the delivered facts
      while (n <= rounds && inFlight < maxOperations && rnd.nextInt(3) != 0) {
        long id = nextId++;
        inFlight++;
        StorageDone d =
            new StorageDone(
                id, StorageKind.GET, List.of(ok(1 + rnd.nextInt(maxKeys))), true, 0, false);
        recordOf.put(id, d);
        int last = 0;
        for (int r = 0; r < worldSize; r++) {
          int at = n + rnd.nextInt(rnd.nextInt(8) == 0 ? 30 : 3); // sometimes many rounds late
          reports.get(at).get(r).add(d);
          last = Math.max(last, at);
        }
        lastOwnerRound.put(id, last);
      }
      List<List<StorageDone>> gathered = reports.get(n);
      if (!agreedSoFar.isEmpty() && rnd.nextInt(4) == 0) {
        long late = agreedSoFar.get(rnd.nextInt(agreedSoFar.size()));
        int r = rnd.nextInt(worldSize);
        if (!gathered.get(r).contains(recordOf.get(late))) {
          gathered.get(r).add(recordOf.get(late));
          lateSent++;
        }
      }
      for (int r = 0; r < worldSize; r++) {
        assertNull(a.checkLocal(r, gathered.get(r)), "seed " + seed + " round " + n);
      }
      List<AgreedCompletion> out = a.apply(n, gathered);
      for (AgreedCompletion c : out) {
        assertTrue(agreedIds.add(c.operationId()), "agreed twice: " + c.operationId());
        assertEquals(n, lastOwnerRound.get(c.operationId()), "operation " + c.operationId());
        agreedSoFar.add(c.operationId());
      }
      assertTrue(a.pendingOperations() <= maxOperations, "seed " + seed + " round " + n);
      delivered = out;
    }
    assertTrue(lateSent > 0, "the run carries late reports");
    assertEquals(nextId, agreedIds.size(), "every operation agreed");
    assertEquals(lateSent, a.lateReports());
    assertEquals(0, a.pendingOperations());
    assertEquals(0, a.forgottenIds());
  }

  /**
   * Random per-rank fact sets delivered over random rounds in random order, compared with the
   * brute-force reduction: each operation must be agreed exactly in the round its last owner
   * reports it, with the reference's fact. Ten cases per seed, 4,000 in all.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldEqualTheBruteForceReductionWhenFactsAreRandom(long seed) throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    for (int c = 0; c < 10; c++) {
      int worldSize = 1 + rnd.nextInt(8);
      int numRounds = 1 + rnd.nextInt(12);
      int numOps = rnd.nextInt(30);
      // deliveries[round][rank]
      List<List<List<StorageDone>>> deliveries = new ArrayList<>();
      for (int n = 0; n < numRounds; n++) {
        List<List<StorageDone>> ranks = new ArrayList<>();
        for (int r = 0; r < worldSize; r++) {
          ranks.add(new ArrayList<>());
        }
        deliveries.add(ranks);
      }
      List<List<AgreedCompletion>> expected = new ArrayList<>();
      for (int n = 0; n < numRounds; n++) {
        expected.add(new ArrayList<>());
      }
      long maxPendingOps = 0;
      for (int op = 0; op < numOps; op++) {
        long id = op * 1_000_000L + rnd.nextInt(1_000_000); // distinct, random gaps
        StorageKind kind = StorageKind.values()[rnd.nextInt(3)];
        int numKeys = 1 + rnd.nextInt(rnd.nextBoolean() ? 3 : 70);
        List<StorageDone> owners = new ArrayList<>();
        int last = 0;
        for (int r = 0; r < worldSize; r++) {
          List<KeyOutcome> outcomes = new ArrayList<>();
          for (int k = 0; k < numKeys; k++) {
            KeyOutcome o = KeyOutcome.values()[rnd.nextInt(4)];
            if (kind != StorageKind.GET && o.objectEvidence()) {
              o = rnd.nextBoolean() ? OK : FAILED;
            }
            outcomes.add(rnd.nextInt(3) == 0 ? OK : o);
          }
          StorageDone d =
              new StorageDone(
                  id, kind, outcomes, rnd.nextInt(5) != 0, rnd.nextLong(1000), rnd.nextInt(6) == 0);
          owners.add(d);
          int at = rnd.nextInt(numRounds);
          deliveries.get(at).get(r).add(d);
          last = Math.max(last, at);
        }
        expected.get(last).add(Reference.reduce(owners));
        maxPendingOps++;
      }
      for (List<List<StorageDone>> ranks : deliveries) {
        for (List<StorageDone> list : ranks) {
          Collections.shuffle(list, new java.util.Random(rnd.nextLong()));
        }
      }
      Agreement a = new Agreement(worldSize, (int) Math.max(1, maxPendingOps), 1L << 20);
      for (int n = 0; n < numRounds; n++) {
        List<AgreedCompletion> want = new ArrayList<>(expected.get(n));
        want.sort(Comparator.comparingLong(AgreedCompletion::operationId));
        for (int r = 0; r < worldSize; r++) {
          assertNull(a.checkLocal(r, deliveries.get(n).get(r)), "seed " + seed + " case " + c);
        }
        assertEquals(
            want,
            a.apply(n + 1, deliveries.get(n)),
            "seed " + seed + " case " + c + " round " + (n + 1));
      }
      assertEquals(0, a.pendingOperations());
      assertEquals(0, a.pendingKeys());
    }
  }
}
