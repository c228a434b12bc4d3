package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.storage.StorageOp;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.stream.LongStream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The manager over a store that refuses PUTs for a long time (issue 43: a full Redis refused every
 * backup, and each was sent again about five times with its whole payload while new prompts kept
 * publishing pages), with prompts arriving throughout, rounds at random intervals and the store's
 * answers one round or more late.
 */
class StmRefusingStoreTest {

  private static final long MS = 1_000_000L;

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 6).map(i -> 0x43L * 1_000 + i);
  }

  /** A run's rounds: a tick, the store's answers to PUTs sent earlier, new pages, dispatch. */
  private static final class Run {
    final Random rnd;
    final StmFixture f;
    final List<StorageOp> inFlight = new ArrayList<>();
    long tick;
    int prompt;
    long pagesOffered;
    long pagesSent;
    long puts;
    final Set<CacheKey> written = new HashSet<>();
    final Set<CacheKey> offered = new LinkedHashSet<>();

    Run(long seed, StorageConfig config) {
      rnd = new Random(seed);
      f = new StmFixture(config, 64, 512);
    }

    /** Rounds for {@code durationMs} of agreed time against a store that refuses or takes all. */
    void rounds(long durationMs, boolean refuse, int promptEveryRounds) {
      long end = tick + durationMs * MS;
      int round = 0;
      while (tick - end < 0) {
        tick += (1 + rnd.nextInt(20)) * MS;
        f.stm.onTick(tick);
        List<StorageOp> answered = new ArrayList<>();
        for (StorageOp op : inFlight) {
          if (rnd.nextInt(3) != 0) {
            answered.add(op); // the others answer in a later round
          }
        }
        for (StorageOp op : answered) {
          inFlight.remove(op);
          BitSet ok = new BitSet();
          if (!refuse) {
            ok.set(0, Facts.keysOf(op));
            written.addAll(((StorageOp.Put) op).keys());
          }
          f.stm.onCompletion(Facts.of(op, ok, new BitSet(), true, false));
        }
        if (promptEveryRounds > 0 && round++ % promptEveryRounds == 0) {
          List<CacheKey> keys = f.cache.neededKeys(f.prompt(128, 10_000 + prompt++), 64);
          f.put(Tier.HOST, keys);
          keys.forEach(f.stm::offerBackup);
          offered.addAll(keys);
          pagesOffered += keys.size();
        }
        for (StorageOp op : f.drain()) {
          puts++;
          pagesSent += Facts.keysOf(op);
          inFlight.add(op);
        }
        if (round % 64 == 0) {
          f.checkInvariants(List.of());
        }
      }
      f.checkInvariants(List.of());
    }
  }

  /**
   * Ten minutes of prompts against a store that refuses every PUT: after the first refusal the
   * store sees one page per hold, the holds doubling to their cap, whatever the traffic; nothing is
   * dropped as refused (probes do not use up a page's attempts), and the pages it holds are no
   * pending work once it refuses persistently.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldSendARefusingStoreOnePagePerHoldWhateverTheTraffic(long seed) {
    long capMs = List.of(1_000L, 10_000L).get((int) (seed % 2));
    Run run = new Run(seed, StmFixture.config().withMaxBackupBackoffMs(capMs));
    run.rounds(600_000, true, 1 + run.rnd.nextInt(40));
    int burst = run.f.stm.config().backupHostCredits(); // sent before the first refusal came
    // holds of 100, 200, ... ms up to the cap, then the cap: one probe after each
    long holds = 0;
    long spentMs = 0;
    for (int level = 1; spentMs < 600_000; level++) {
      spentMs += BackupPacer.backoffNs(level, capMs) / MS;
      holds++;
    }
    assertTrue(
        run.pagesSent <= burst + holds,
        "pages sent "
            + run.pagesSent
            + " of "
            + run.pagesOffered
            + " offered: more than the first burst ("
            + burst
            + ") and one page per hold ("
            + holds
            + ")");
    assertTrue(run.pagesOffered > 10 * run.pagesSent, run.pagesOffered + " vs " + run.pagesSent);
    assertEquals(
        0,
        run.f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.REFUSED),
        "seed " + seed);
    assertEquals(0, run.f.stm.deferredCandidates(), "no pending work: it refuses persistently");
    assertTrue(run.f.stm.heldCandidates() > 0, "the pages are held, still on the Host");
    assertEquals(capMs * MS, run.f.stm.backupBackoffNs(), "the hold at its cap");
  }

  /**
   * Five seconds of refusals (a cooldown rejects every PUT; a full store refuses them), with
   * prompts publishing pages meanwhile, then a store that takes everything: every page offered that
   * is still on the Host is written, none is dropped as refused, and the pages sent during the
   * refusals are the first burst and one probe per hold.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldReofferBackupsRefusedDuringACooldownOnceTheStoreTakesThem(long seed) {
    Run run = new Run(seed, StmFixture.config());
    run.rounds(5_000, true, 20 + run.rnd.nextInt(20));
    long sentWhileRefusing = run.pagesSent;
    assertTrue(
        sentWhileRefusing <= run.f.stm.config().backupHostCredits() + 8,
        "pages sent while refused: " + sentWhileRefusing);
    assertTrue(run.f.stm.deferredCandidates() + run.f.stm.heldCandidates() > 0);
    run.rounds(30_000, false, 0); // the store answers again; no new prompt
    for (CacheKey k : run.offered) {
      if (run.f.cache.host().contains(k)) {
        assertTrue(run.written.contains(k), "a page still on the Host was never written: " + k);
      }
    }
    assertEquals(
        0,
        run.f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.REFUSED),
        "seed " + seed);
    assertEquals(0, run.f.stm.trackedRefusals());
    assertEquals(0, run.f.stm.queuedCandidates() + run.f.stm.deferredCandidates());
    assertEquals(0, run.f.stm.backupBackoffNs(), "writes open again");
    long unavailable =
        run.f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.UNAVAILABLE);
    long overflow = run.f.stm.counters().droppedBackupKeys(StorageCounters.DropReason.OVERFLOW);
    assertEquals(
        run.offered.size(),
        run.written.size() + unavailable + overflow,
        "every page offered was written or dropped with its reason");
  }
}
