package io.tokenspeed.control;

import io.tokenspeed.core.control.AgreedRound;
import io.tokenspeed.core.control.FrontendMessage;
import io.tokenspeed.core.storage.AgreedCompletion;
import io.tokenspeed.core.storage.KeyOutcome;
import io.tokenspeed.core.storage.PressureSnapshot;
import io.tokenspeed.core.storage.StorageDone;
import io.tokenspeed.core.storage.StorageKind;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.List;
import java.util.SplittableRandom;
import java.util.TreeMap;

/**
 * A seeded run of random rounds: what every rank reports in each round, and what the replica must
 * agree on, derived by brute force from all ranks' reports at once. Every rank (a thread or a
 * separate JVM) builds the same scenario from the seed and takes its own reports from it.
 *
 * <p>Operations start in random rounds; each owner completes each one after its own random delay
 * (usually a few rounds, sometimes many), so owners finish out of order and some operations wait on
 * one late owner while later ones complete. Records inside one report are shuffled.
 */
final class Scenario {

  final long seed;
  final int worldSize;
  final int rounds;
  private final List<List<List<StorageDone>>> records; // [rank][round-1]
  private final long[][] clockNs; // [rank][round-1]
  private final PressureSnapshot[][] pressure; // [rank][round-1]
  private final List<List<FrontendMessage>> frontend; // [round-1]
  private final List<AgreedRound> expected;
  private int maxPendingOperations;
  private long maxPendingKeys;
  private int maxOwnerSpread;

  Scenario(long seed, int worldSize, int rounds) {
    this.seed = seed;
    this.worldSize = worldSize;
    this.rounds = rounds;
    SplittableRandom rnd = new SplittableRandom(seed);
    records = new ArrayList<>();
    clockNs = new long[worldSize][rounds];
    pressure = new PressureSnapshot[worldSize][rounds];
    for (int r = 0; r < worldSize; r++) {
      List<List<StorageDone>> perRound = new ArrayList<>();
      for (int n = 0; n < rounds; n++) {
        perRound.add(new ArrayList<>());
      }
      records.add(perRound);
    }
    frontend = new ArrayList<>();
    // Operations: id -> owner records; completion round of each owner.
    TreeMap<Long, StorageDone[]> ops = new TreeMap<>();
    TreeMap<Long, Integer> lastRound = new TreeMap<>();
    TreeMap<Long, Integer> firstRound = new TreeMap<>();
    long nextOp = 1;
    int quiet = Math.min(rounds, 40);
    for (int n = 1; n <= rounds; n++) {
      int newOps = n <= rounds - quiet ? rnd.nextInt(4) : 0;
      for (int i = 0; i < newOps; i++) {
        long op = nextOp;
        nextOp += 1 + rnd.nextInt(3);
        StorageKind kind = StorageKind.values()[rnd.nextInt(3)];
        int numKeys = rnd.nextInt(10) == 0 ? 1 + rnd.nextInt(40) : 1 + rnd.nextInt(6);
        StorageDone[] owners = new StorageDone[worldSize];
        int last = 0;
        int first = Integer.MAX_VALUE;
        for (int r = 0; r < worldSize; r++) {
          int delay = rnd.nextInt(20) == 0 ? 5 + rnd.nextInt(30) : rnd.nextInt(4);
          int at = n + delay;
          owners[r] = record(rnd, op, kind, numKeys);
          records.get(r).get(at - 1).add(owners[r]);
          last = Math.max(last, at);
          first = Math.min(first, at);
        }
        ops.put(op, owners);
        lastRound.put(op, last);
        firstRound.put(op, first);
        maxOwnerSpread = Math.max(maxOwnerSpread, last - first);
      }
      long leaderClock = n == 1 ? rnd.nextLong() : clockNs[0][n - 2] + rnd.nextLong(1_000_000);
      for (int r = 0; r < worldSize; r++) {
        clockNs[r][n - 1] = r == 0 ? leaderClock : rnd.nextLong();
        pressure[r][n - 1] =
            new PressureSnapshot(
                rnd.nextInt(100), rnd.nextLong(1L << 40), rnd.nextLong(10_000_000_000L));
      }
      List<FrontendMessage> messages = new ArrayList<>();
      int numMessages = rnd.nextInt(4) == 0 ? 1 + rnd.nextInt(3) : 0;
      for (int i = 0; i < numMessages; i++) {
        long requestId = rnd.nextLong(1_000_000);
        if (rnd.nextBoolean()) {
          byte[] payload = new byte[rnd.nextInt(40)];
          rnd.nextBytes(payload);
          messages.add(FrontendMessage.newRequest(requestId, payload));
        } else {
          messages.add(FrontendMessage.cancel(requestId));
        }
      }
      frontend.add(messages);
    }
    for (List<List<StorageDone>> perRound : records) {
      for (List<StorageDone> list : perRound) {
        shuffle(list, rnd);
      }
    }
    expected = reference(ops, firstRound, lastRound);
  }

  private static StorageDone record(SplittableRandom rnd, long op, StorageKind kind, int numKeys) {
    List<KeyOutcome> outcomes = new ArrayList<>();
    for (int k = 0; k < numKeys; k++) {
      int x = rnd.nextInt(10);
      KeyOutcome o;
      if (x < 6) {
        o = KeyOutcome.OK;
      } else if (kind != StorageKind.GET || x == 6) {
        o = KeyOutcome.FAILED;
      } else {
        o = x < 9 ? KeyOutcome.MISSING : KeyOutcome.INVALID;
      }
      outcomes.add(o);
    }
    return new StorageDone(
        op,
        kind,
        outcomes,
        rnd.nextInt(10) != 0,
        kind.movesPayload() ? rnd.nextLong(1L << 30) : 0,
        rnd.nextInt(10) == 0);
  }

  private static <T> void shuffle(List<T> list, SplittableRandom rnd) {
    for (int i = list.size() - 1; i > 0; i--) {
      Collections.swap(list, i, rnd.nextInt(i + 1));
    }
  }

  private List<AgreedRound> reference(
      TreeMap<Long, StorageDone[]> ops,
      TreeMap<Long, Integer> firstRound,
      TreeMap<Long, Integer> lastRound) {
    List<List<AgreedCompletion>> byRound = new ArrayList<>();
    for (int n = 0; n < rounds; n++) {
      byRound.add(new ArrayList<>());
    }
    // Window high-water marks: an operation is pending after round n when some owner reported it
    // at or before n and its last owner reports it after n.
    for (int n = 1; n <= rounds; n++) {
      int pendingOps = 0;
      long pendingKeys = 0;
      for (var e : ops.entrySet()) {
        if (firstRound.get(e.getKey()) <= n && lastRound.get(e.getKey()) > n) {
          pendingOps++;
          pendingKeys += e.getValue()[0].outcomes().size();
        }
      }
      maxPendingOperations = Math.max(maxPendingOperations, pendingOps);
      maxPendingKeys = Math.max(maxPendingKeys, pendingKeys);
    }
    for (var e : ops.entrySet()) {
      byRound.get(lastRound.get(e.getKey()) - 1).add(Reference.reduce(List.of(e.getValue())));
    }
    List<AgreedRound> out = new ArrayList<>();
    for (int n = 1; n <= rounds; n++) {
      PressureSnapshot p = PressureSnapshot.IDLE;
      for (int r = 0; r < worldSize; r++) {
        PressureSnapshot q = pressure[r][n - 1];
        p =
            new PressureSnapshot(
                Math.max(p.queuedJobs(), q.queuedJobs()),
                Math.max(p.queuedPayloadBytes(), q.queuedPayloadBytes()),
                Math.max(p.oldestAgeNs(), q.oldestAgeNs()));
      }
      out.add(new AgreedRound(n, clockNs[0][n - 1], p, frontend.get(n - 1), byRound.get(n - 1)));
    }
    return out;
  }

  /**
   * What {@code rank} reports in round {@code n} (from 1), with the plan digest every rank reports
   * in that round.
   */
  LocalReport report(int rank, int n) {
    LocalReport local =
        LocalReport.of(clockNs[rank][n - 1], pressure[rank][n - 1], records.get(rank).get(n - 1))
            .withPlanDigest(planDigest(n));
    return rank == 0 ? local.withFrontend(frontend.get(n - 1)) : local;
  }

  /**
   * The plan digest of round {@code n}: 0 in round 1 (no plan yet), then any long, from the seed.
   */
  long planDigest(int n) {
    return n == 1 ? 0 : new SplittableRandom(seed * 1_000_003L + n).nextLong();
  }

  /** The agreed rounds, by brute force. */
  List<AgreedRound> expected() {
    return expected;
  }

  /** The most operations pending after any round (the window the agreement must allow). */
  int maxPendingOperations() {
    return maxPendingOperations;
  }

  /** The most keys pending after any round. */
  long maxPendingKeys() {
    return maxPendingKeys;
  }

  /** The most rounds between an operation's first and last owner report. */
  int maxOwnerSpread() {
    return maxOwnerSpread;
  }

  /** Total agreed completions over the run. */
  int totalCompletions() {
    return expected.stream().mapToInt(r -> r.completions().size()).sum();
  }

  /** A digest of agreed rounds: every field, payload bytes included. */
  static final class Digest {
    private final MessageDigest sha;

    Digest() {
      try {
        sha = MessageDigest.getInstance("SHA-256");
      } catch (NoSuchAlgorithmException e) {
        throw new IllegalStateException(e);
      }
    }

    void add(AgreedRound round) {
      ByteBuffer b = ByteBuffer.allocate(64);
      b.putLong(round.round()).putLong(round.tickNs());
      b.putInt(round.pressure().queuedJobs());
      b.putLong(round.pressure().queuedPayloadBytes()).putLong(round.pressure().oldestAgeNs());
      b.putInt(round.frontend().size()).putInt(round.completions().size());
      sha.update(b.array(), 0, b.position());
      for (FrontendMessage m : round.frontend()) {
        sha.update((m.kind() + ":" + m.requestId() + ":").getBytes(StandardCharsets.UTF_8));
        sha.update(m.payload());
      }
      for (AgreedCompletion c : round.completions()) {
        sha.update(c.toString().getBytes(StandardCharsets.UTF_8));
      }
    }

    String hex() {
      return HexFormat.of().formatHex(sha.digest());
    }
  }

  /** The digest of the expected rounds. */
  String expectedDigest() {
    Digest d = new Digest();
    expected.forEach(d::add);
    return d.hex();
  }
}
