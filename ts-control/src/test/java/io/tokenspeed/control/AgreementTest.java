package io.tokenspeed.control;

import static io.tokenspeed.control.Records.get;
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

  /** Regression: every owner re-reporting an agreed operation used to agree it a second time. */
  @Test
  void shouldNeverAgreeAnOperationTwiceWhenEveryOwnerReportsItAgain() throws Exception {
    Agreement a = new Agreement(2, 10, 100);
    assertEquals(1, a.apply(1, round(List.of(get(1, OK)), List.of(get(1, OK)))).size());
    assertTrue(a.agreed(1));
    assertEquals(
        "operation 1 was already agreed; rank 1 reports it again",
        a.checkLocal(1, List.of(get(1, OK))));
    ProtocolException e =
        assertThrows(
            ProtocolException.class,
            () -> a.apply(2, round(List.of(get(1, OK)), List.of(get(1, OK)))));
    assertEquals(
        "protocol error in round 2: operation 1 was already agreed; rank 0 reports it again",
        e.getMessage());
  }

  /** Agreed ids are remembered as a floor plus the ids above it, out of order included. */
  @Test
  void shouldRememberAgreedIdsOutOfOrderAndForgetNothingBelowTheFloor() throws Exception {
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
