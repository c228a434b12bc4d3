package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.tokenspeed.core.metrics.PrometheusText;
import io.tokenspeed.server.cli.StallingRelay.Hold;
import io.tokenspeed.testkit.LiveTree;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The L3 fault matrix on real {@code tokenspeed serve} processes and real stores: Redis killed
 * (SIGKILL) mid-GET and mid-PUT and restarted on its port, Redis frozen (SIGSTOP) past the soft
 * deadline, the file store's directory made read-only, its file system full, objects truncated and
 * overwritten with garbage, and a rank of a {@code --tp 2} replica killed.
 *
 * <p>Every fault checks the same four things:
 *
 * <ol>
 *   <li><b>No output differs from recomputation.</b> Each completion (greedy, the untied tiny model
 *       whose output depends on its context) equals, text and per-token logprobs, the one a server
 *       without L3 computes for the same token ids from empty caches.
 *   <li><b>The fault hit what it names.</b> The storage metrics count it: failed GET or PUT keys
 *       (keys minus OK keys), an outage (the health epoch), soft timeouts, refused backups, or
 *       invalid objects, as the fault says.
 *   <li><b>The engine keeps serving,</b> during the fault and after it, and L3 works again once the
 *       fault is repaired (a page written after the repair is restored from the store).
 *   <li><b>Nothing leaks.</b> Once idle, the server's operation and Host credits, Ready holds,
 *       quarantined references, outstanding executor jobs, pending storage work, used Host and
 *       Device parents and requests are back to zero, as on a fresh server.
 * </ol>
 *
 * <p>Prompts are token ids: a 576-token prefix (nine 64-token pages) and a 40-token suffix, so a
 * prompt that shares another's prefix can restore nine pages from the store. "Mid-GET" and
 * "mid-PUT" are made exact by a relay in front of Redis that holds the transfer after its first
 * bytes (see {@link StallingRelay}); the kill lands while the store call is inside the server.
 *
 * <p>The file system faults need the server's view of the store to change under it: as root, a mode
 * change stops no write, so the server runs in a private mount namespace ({@code unshare -m}) where
 * the store is a bind mount remounted read-only, or a small tmpfs filled up; without root, a mode
 * change stops the writes, and a file-size limit ({@code prlimit --fsize} on the server's pid,
 * which the JVM answers with EFBIG, not SIGXFSZ) stands for the full device.
 */
class FaultMatrixIT {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static final int PREFIX_TOKENS = 576;
  private static final int SUFFIX_TOKENS = 40;
  private static final int MAX_TOKENS = 8;
  private static final String ADMIN = "fault-admin";

  /**
   * Objects one prefix writes on one rank: nine 64-token pages of four 16-token blocks, one object
   * per block.
   */
  private static final int PREFIX_KEYS = PREFIX_TOKENS / 16;

  /**
   * Objects of a prompt's tail on one rank: its reusable bound (every token but the last) ends 39
   * tokens into its last page, whose rows below the bound fill three 16-token blocks.
   */
  private static final int TAIL_KEYS = ((PREFIX_TOKENS + SUFFIX_TOKENS - 1) % 64 + 15) / 16;

  @TempDir static Path shared;

  @TempDir Path workDir;

  /** The server without L3 that recomputes every expected completion from empty caches. */
  private static ServeProcess recompute;

  private static final Map<String, Completion> EXPECTED = new ConcurrentHashMap<>();

  /** One completion: its text, its per-token logprobs, the prompt tokens restored from L3. */
  record Completion(String text, String logprobs, int storageTokens, long millis) {
    String output() {
      return text + " " + logprobs;
    }
  }

  @BeforeAll
  static void startRecomputation() throws Exception {
    recompute = ServeProcess.start(shared, model(), 120);
  }

  @AfterAll
  static void stopRecomputation() throws Exception {
    if (recompute != null) {
      recompute.close();
    }
  }

  // ---------------------------------------------------------------------------------- Redis

  /**
   * Redis SIGKILLed while a reader's GET of nine pages is half delivered, then restarted empty on
   * the same port: the completion waiting for that GET equals recomputation and used nothing of it
   * (the wait ended by the failure, not by its 5 s soft deadline); the failed GET keys and the
   * outage are counted; the reader serves while Redis is down and, after the restart, writes and
   * restores pages through it again.
   */
  @Test
  void redisKilledMidGetThenRestarted() throws Exception {
    try (RedisServer redis = RedisServers.startStandalone(workDir.resolve("redis"));
        StallingRelay relay = new StallingRelay(redis.port())) {
      List<String> l3 = redis(relay.uri(), 5000);
      try (ServeProcess writer = serve(l3)) {
        writeThrough(writer, 0);
        writeThrough(writer, 1);
      }
      try (ServeProcess reader = serve(l3)) {
        awaitIdle(reader);
        warm(reader);
        CompletableFuture<Void> holding = relay.trap("GET", Hold.REPLY, 40_000);
        CompletableFuture<Completion> waiting = completeAsync(reader, prompt(0, 1));
        holding.get(60, TimeUnit.SECONDS);
        redis.kill(); // SIGKILL while the GET's reply is half way
        long killedNs = System.nanoTime();
        Completion c = waiting.get(60, TimeUnit.SECONDS);
        long afterKillMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killedNs);
        assertExpected(c, prompt(0, 1), "the completion whose GET was killed");
        assertEquals(0, c.storageTokens(), "nothing of the killed GET was used");

        Map<String, PrometheusText.Family> m = awaitMetrics(reader, f -> failed(f, "get") > 0);
        double failedGets = failed(m, "get");
        assertEquals(PREFIX_KEYS, failedGets, "every key of the killed GET failed, no other");
        assertTrue(epoch(m) >= 1, "the killed connection is an outage signal");
        assertEquals(0, sum(m, "tokenspeed:l3_soft_timeouts_total"), "the failure ended the wait");

        Completion down = complete(reader, prompt(1, 1));
        assertExpected(down, prompt(1, 1), "while Redis is down");
        assertEquals(0, down.storageTokens(), "nothing restored from a dead server");

        redis.restart();
        double recoverMs = recoverThroughStore(reader, reader, 2);
        Map<String, PrometheusText.Family> end = awaitIdle(reader);
        report(
            "redisKilledMidGetThenRestarted",
            "GET keys failed %.0f, health epoch %.0f, completion %d ms after the kill"
                + " (%d ms total), L3 restored again %.0f ms after the restart, health %s",
            failedGets,
            epoch(end),
            afterKillMs,
            c.millis(),
            recoverMs,
            health(end));
      }
    }
  }

  /**
   * Redis SIGKILLed while a writer's PUT is half sent (the server has received part of its values),
   * then restarted empty: the writer's completions equal recomputation before and after; the failed
   * PUT keys and the outage are counted; once Redis is back the writer's new pages reach it and a
   * fresh reader restores them.
   */
  @Test
  void redisKilledMidPutThenRestarted() throws Exception {
    try (RedisServer redis = RedisServers.startStandalone(workDir.resolve("redis"));
        StallingRelay relay = new StallingRelay(redis.port())) {
      List<String> l3 = redis(relay.uri(), 5000);
      try (ServeProcess writer = serve(l3)) {
        awaitIdle(writer);
        CompletableFuture<Void> holding = relay.trap("SET", Hold.REQUEST, 20_000);
        assertExpected(complete(writer, prompt(10, 0)), prompt(10, 0), "the writer");
        holding.get(60, TimeUnit.SECONDS);
        redis.kill(); // SIGKILL while the PUT's values are half sent
        Map<String, PrometheusText.Family> m = awaitMetrics(writer, f -> failed(f, "put") > 0);
        double failedPuts = failed(m, "put");
        assertTrue(epoch(m) >= 1, "the killed connection is an outage signal");

        assertExpected(complete(writer, prompt(11, 0)), prompt(11, 0), "while Redis is down");
        redis.restart();
        double recoverMs;
        try (ServeProcess reader = serve(l3)) {
          awaitIdle(reader);
          recoverMs = recoverThroughStore(writer, reader, 12);
          awaitIdle(reader);
        }
        Map<String, PrometheusText.Family> end = awaitIdle(writer);
        report(
            "redisKilledMidPutThenRestarted",
            "PUT keys failed %.0f, health epoch %.0f, keys written (all after the restart) %.0f,"
                + " restored by a fresh reader %.0f ms after the restart",
            failedPuts,
            epoch(end),
            sum(end, "tokenspeed:l3_put_written_keys_total"),
            recoverMs);
      }
    }
  }

  /**
   * Redis frozen with SIGSTOP for longer than the command timeout (10 s here), far past the 300 ms
   * soft deadline: each request falls back to recomputation within about the soft deadline (well
   * under the command timeout) and equals it; the soft timeouts and, once the store calls time out,
   * the outage are counted. After SIGCONT the reader restores the writer's pages again.
   */
  @Test
  void redisFrozenPastTheSoftDeadline() throws Exception {
    // far above a fallback's soft deadline and recomputation (about a second on two busy cores),
    // so that a request that waited for the frozen store's calls instead is told apart for sure
    int commandTimeoutMs = 10_000;
    try (RedisServer redis = RedisServers.startStandalone(workDir.resolve("redis"))) {
      List<String> l3 = redis(redis.uri(), 300, commandTimeoutMs);
      try (ServeProcess writer = serve(l3)) {
        for (int p = 20; p < 23; p++) {
          writeThrough(writer, p);
        }
      }
      try (ServeProcess reader = serve(l3)) {
        awaitIdle(reader);
        warm(reader);
        // the reader's first restore (its first GET: connection, class loading, compilation on two
        // busy cores) may miss the 300 ms soft deadline; L3 works once a restore is complete
        Completion before = awaitRestored(reader, 20, 1);
        assertEquals(PREFIX_TOKENS, before.storageTokens(), "restored before the freeze");

        redis.pause(); // SIGSTOP
        long frozenNs = System.nanoTime();
        List<Long> fallbackMs = new ArrayList<>();
        double softTimeouts;
        try {
          Completion a = complete(reader, prompt(21, 1));
          assertExpected(a, prompt(21, 1), "while Redis is frozen");
          assertEquals(0, a.storageTokens(), "nothing restored from a frozen server");
          fallbackMs.add(a.millis());
          Map<String, PrometheusText.Family> m =
              awaitMetrics(reader, f -> sum(f, "tokenspeed:l3_soft_timeouts_total") >= 1);
          assertTrue(sum(m, "tokenspeed:l3_soft_timeouts_total") >= 1, "a soft timeout");
          // past the command timeout: the calls stuck in the frozen server fail, an outage
          long stuckMs =
              commandTimeoutMs + 500 - TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - frozenNs);
          if (stuckMs > 0) {
            Thread.sleep(stuckMs);
          }
          m = awaitMetrics(reader, f -> epoch(f) >= 1);
          softTimeouts = sum(m, "tokenspeed:l3_soft_timeouts_total");
          Completion b = complete(reader, prompt(22, 1));
          assertExpected(b, prompt(22, 1), "while Redis is frozen, after the command timeout");
          assertEquals(0, b.storageTokens());
          fallbackMs.add(b.millis());
        } finally {
          redis.resume(); // SIGCONT
        }
        for (long ms : fallbackMs) {
          assertTrue(
              ms < commandTimeoutMs,
              "a frozen store costs a request its 300 ms soft deadline and the recomputation, less"
                  + " than the "
                  + commandTimeoutMs
                  + " ms command timeout: "
                  + ms
                  + " ms");
        }

        long resumedNs = System.nanoTime();
        Completion again = awaitRestored(reader, 21, 2);
        double recoverMs = (System.nanoTime() - resumedNs) / 1e6;
        Map<String, PrometheusText.Family> end = awaitIdle(reader);
        report(
            "redisFrozenPastTheSoftDeadline",
            "fallback latencies %s ms (soft deadline 300 ms, command timeout %d ms), soft"
                + " timeouts %.0f, health epoch %.0f, restored %d tokens again %.0f ms after"
                + " SIGCONT",
            fallbackMs,
            commandTimeoutMs,
            softTimeouts,
            epoch(end),
            again.storageTokens(),
            recoverMs);
      }
    }
  }

  // ------------------------------------------------------------------------------ file store

  /**
   * The file store's directory made read-only under a running reader: its PUTs fail (counted), its
   * reads go on (pages the writer stored are restored, no outage stops them), every completion
   * equals recomputation; the backups are held back, probed one page at a time; writable again, the
   * held pages and new ones are stored.
   */
  @Test
  void fileStoreDirectoryMadeReadOnly() throws Exception {
    Path store = Files.createDirectories(workDir.resolve("store"));
    List<String> l3 = file(store);
    try (ServeProcess writer = serve(l3)) {
      for (int p = 30; p < 33; p++) {
        writeThrough(writer, p);
      }
    }
    ReadOnly readOnly = ReadOnly.choose(workDir);
    try (ServeProcess reader = readOnly.serve(this, store, l3)) {
      awaitIdle(reader);
      Completion before = complete(reader, prompt(30, 1));
      assertExpected(before, prompt(30, 1), "before");
      assertEquals(PREFIX_TOKENS, before.storageTokens());

      long objects = objects(store);
      readOnly.apply(reader, store);
      try {
        assertExpected(complete(reader, prompt(33, 0)), prompt(33, 0), "read-only, new pages");
        Map<String, PrometheusText.Family> m = awaitMetrics(reader, f -> failed(f, "put") > 0);
        Completion read = complete(reader, prompt(31, 1));
        assertExpected(read, prompt(31, 1), "read-only, stored pages");
        assertEquals(
            PREFIX_TOKENS,
            read.storageTokens(),
            () -> "reads go on in a read-only store:\n" + l3Lines(reader) + tail(reader));
        assertExpected(complete(reader, prompt(34, 0)), prompt(34, 0), "read-only, new pages");
        Completion read2 = complete(reader, prompt(32, 1));
        assertExpected(read2, prompt(32, 1), "read-only, stored pages");
        assertEquals(
            PREFIX_TOKENS,
            read2.storageTokens(),
            () -> "reads go on after failed PUTs:\n" + l3Lines(reader) + tail(reader));
        assertEquals(objects, objects(store), "nothing was written into the read-only store");
        // the new prefixes' pages and tails stay held for the store (no pending work: it
        // refuses persistently), and so do the tails of the two prompts read (their suffixes are
        // new); the server is otherwise idle
        m =
            awaitMetrics(
                reader,
                f ->
                    sum(f, "tokenspeed:l3_storage_pending") == 0
                        && sum(f, "tokenspeed:num_requests_running") == 0
                        && sum(f, "tokenspeed:l3_operation_credits_in_use") == 0
                        && sum(f, "tokenspeed:l3_backup_candidates", "state", "held")
                            == 2 * (PREFIX_KEYS + TAIL_KEYS) + 2 * TAIL_KEYS);
        assertEquals(0, epoch(m), "a read-only store is not an outage");
        assertTrue(
            sum(m, "tokenspeed:l3_configuration_failures_total") > 0,
            "the refusals are counted as configuration failures");
        assertEquals(1, health(m, "healthy"), "still healthy");
        assertEquals(
            0,
            sum(m, "tokenspeed:l3_dropped_backup_keys_total", "reason", "refused"),
            "the two new prefixes' backups are held for the store, not dropped");
        assertTrue(
            sum(m, "tokenspeed:l3_backup_candidates", "state", "held") > 0,
            "held while the store refuses them");
        report(
            "fileStoreDirectoryMadeReadOnly",
            "%s: PUT keys failed %.0f in %.0f configuration failures, GET keys ok %.0f, health"
                + " epoch %.0f, dropped refused %.0f, held %.0f",
            readOnly,
            failed(m, "put"),
            sum(m, "tokenspeed:l3_configuration_failures_total"),
            sum(m, "tokenspeed:l3_ok_keys_total", "kind", "get"),
            epoch(m),
            sum(m, "tokenspeed:l3_dropped_backup_keys_total", "reason", "refused"),
            sum(m, "tokenspeed:l3_backup_candidates", "state", "held"));
      } finally {
        readOnly.lift(reader, store);
      }
      assertExpected(complete(reader, prompt(35, 0)), prompt(35, 0), "writable again");
      // the next probe finds the store writable: the held prefixes go with the new one
      awaitMetrics(reader, f -> objects(store) >= objects + 3 * PREFIX_KEYS);
      awaitIdle(reader);
    }
  }

  /**
   * The file store's file system full under a running server: PUTs are refused (a retired refusal,
   * not an outage: the health epoch stays 0, the store is shown refusing writes); backups are held
   * back and the store is probed with one page per hold, so the second prefix's pages are not sent
   * while it is full, and nothing is dropped as refused; reads of stored pages go on (a full clear
   * drops the held pages); every completion equals recomputation; with room again, new pages are
   * stored and the store is no longer shown refusing.
   */
  @Test
  void fileStoreDiskFull() throws Exception {
    Path store = Files.createDirectories(workDir.resolve("store"));
    List<String> l3 = file(store);
    DiskFull disk = DiskFull.choose(workDir);
    try (ServeProcess server = disk.serve(this, store, l3)) {
      awaitIdle(server);
      writeThrough(server, 40);

      disk.fill(server, store);
      Map<String, PrometheusText.Family> m;
      try {
        assertExpected(complete(server, prompt(41, 0)), prompt(41, 0), "disk full");
        assertExpected(complete(server, prompt(42, 0)), prompt(42, 0), "disk full");
        m =
            awaitMetrics(
                server,
                f ->
                    sum(f, "tokenspeed:l3_writes_refused") == 1
                        && sum(f, "tokenspeed:l3_backup_candidates", "state", "held") > 0
                        && sum(f, "tokenspeed:l3_storage_pending") == 0);
        assertEquals(1, sum(m, "tokenspeed:l3_writes_refused"), "the store refuses writes");
        assertTrue(failed(m, "put") > 0, "PUTs failed");
        assertTrue(
            failed(m, "put") < 2 * PREFIX_KEYS,
            "the second prefix's pages were held back, not sent to a full disk: "
                + failed(m, "put"));
        assertEquals(
            0,
            sum(m, "tokenspeed:l3_dropped_backup_keys_total", "reason", "refused"),
            "held for the store to take, not dropped");
        assertEquals(0, epoch(m), "a full disk is not an outage");
        assertEquals(1, health(m, "healthy"), "still healthy");
        clearCache(server);
        Completion read = complete(server, prompt(40, 1));
        assertExpected(read, prompt(40, 1), "disk full, stored pages");
        assertEquals(PREFIX_TOKENS, read.storageTokens(), "reads go on on a full disk");
      } finally {
        disk.free(server, store);
      }
      double written = sum(m, "tokenspeed:l3_put_written_keys_total");
      assertExpected(complete(server, prompt(43, 0)), prompt(43, 0), "room again");
      // the clear above dropped the held pages (cleanup); the new prefix is written once a probe
      // (at most max_backup_backoff_ms away) finds room, and the store is no longer refusing
      Map<String, PrometheusText.Family> after =
          awaitMetrics(
              server,
              f ->
                  sum(f, "tokenspeed:l3_put_written_keys_total") >= written + PREFIX_KEYS
                      && sum(f, "tokenspeed:l3_writes_refused") == 0);
      awaitIdle(server);
      report(
          "fileStoreDiskFull",
          "%s: PUT keys failed %.0f (refused %.0f), dropped as refused %.0f, held %.0f, health"
              + " epoch %.0f, keys written before/after %.0f/%.0f",
          disk,
          failed(m, "put"),
          sum(m, "tokenspeed:l3_refused_put_keys_total"),
          sum(m, "tokenspeed:l3_dropped_backup_keys_total", "reason", "refused"),
          sum(m, "tokenspeed:l3_backup_candidates", "state", "held"),
          epoch(m),
          written,
          sum(after, "tokenspeed:l3_put_written_keys_total"));
    }
  }

  /**
   * One stored object truncated to half its length and another's payload overwritten with random
   * bytes of the same length (header intact, so only the checksum can tell): a fresh reader's
   * completions equal recomputation, it restores only the pages before each damaged one, counts
   * each damaged object as a GET key not OK every time it reads it (the truncated one twice, after
   * a cache clear), sees no outage, and an undamaged prefix is restored whole.
   */
  @Test
  void fileStoreObjectTruncatedAndOverwritten() throws Exception {
    Path store = Files.createDirectories(workDir.resolve("store"));
    List<String> l3 = file(store);
    Set<Path> first;
    Set<Path> second;
    try (ServeProcess writer = serve(l3)) {
      // prompts without a tail, so that every object damaged below is one of a prefix's pages
      writeThrough(writer, aligned(50));
      first = objectFiles(store);
      writeThrough(writer, aligned(51));
      second = objectFiles(store);
      second.removeAll(first);
      writeThrough(writer, aligned(52));
    }
    assertEquals(PREFIX_KEYS, first.size(), "one object per block of the first prefix");
    assertEquals(PREFIX_KEYS, second.size(), "one object per block of the second prefix");
    Path truncated = first.stream().sorted().toList().get(first.size() / 2);
    Path garbage = second.stream().sorted().toList().get(second.size() / 2);
    long length = Files.size(truncated);
    try (FileChannel ch = FileChannel.open(truncated, StandardOpenOption.WRITE)) {
      ch.truncate(length / 2);
    }
    overwritePayload(garbage, new SplittableRandom(99));

    try (ServeProcess reader = serve(l3)) {
      awaitIdle(reader);
      Completion a = complete(reader, prompt(50, 1));
      Completion b = complete(reader, prompt(51, 1));
      Completion whole = complete(reader, prompt(52, 1));
      assertExpected(a, prompt(50, 1), "prefix with a truncated object");
      assertExpected(b, prompt(51, 1), "prefix with an overwritten object");
      assertExpected(whole, prompt(52, 1), "undamaged prefix");
      assertTrue(a.storageTokens() < PREFIX_TOKENS, "stops before the truncated page: " + a);
      assertTrue(b.storageTokens() < PREFIX_TOKENS, "stops before the garbage page: " + b);
      assertEquals(0, a.storageTokens() % 64);
      assertEquals(0, b.storageTokens() % 64);
      assertEquals(PREFIX_TOKENS, whole.storageTokens(), "the undamaged prefix is restored");

      // again, from empty caches: the damaged objects stay damaged and are detected again
      clearCache(reader);
      Completion a2 = complete(reader, prompt(50, 2));
      assertExpected(a2, prompt(50, 2), "the truncated prefix again");
      assertEquals(a.storageTokens(), a2.storageTokens());

      Map<String, PrometheusText.Family> m = awaitIdle(reader);
      double invalid = failed(m, "get");
      assertEquals(3, invalid, "the truncated object twice and the overwritten one once");
      assertEquals(0, epoch(m), "damaged objects are not an outage");
      report(
          "fileStoreObjectTruncatedAndOverwritten",
          "restored %d and %d of %d tokens before the damaged pages (truncated to %d of %d"
              + " bytes, payload overwritten), GET keys not OK %.0f of %.0f, health epoch %.0f",
          a.storageTokens(),
          b.storageTokens(),
          PREFIX_TOKENS,
          length / 2,
          length,
          invalid,
          sum(m, "tokenspeed:l3_keys_total", "kind", "get"),
          epoch(m));
    }
  }

  // --------------------------------------------------------------------------------- ranks

  /**
   * Rank 1 of a {@code --tp 2} replica SIGKILLed while a long completion runs: the launcher exits
   * non-zero naming the rank and no process of the replica survives; a fresh {@code --tp 2} replica
   * on the same file store restores the prefix the first one wrote, with outputs equal to
   * recomputation, and ends idle.
   */
  @Test
  void rankKilled() throws Exception {
    Path store = Files.createDirectories(workDir.resolve("store"));
    List<String> l3 = new ArrayList<>(file(store));
    l3.addAll(List.of("--tp", "2", "--tp-timeout", "5"));
    ServeProcess first = serve(l3, 180);
    List<ProcessHandle> replica = first.process.descendants().toList();
    double seconds;
    try {
      assertEquals(2, replica.size(), "two ranks under the launcher");
      assertExpectedAcrossRanks(complete(first, prompt(60, 0)), prompt(60, 0), "first replica");
      awaitMetrics(
          first,
          f ->
              byRank(f, "tokenspeed:l3_put_written_keys_total").values().stream()
                          .filter(v -> v >= PREFIX_KEYS)
                          .count()
                      == 2
                  && sum(f, "tokenspeed:l3_storage_pending") == 0);
      CompletableFuture<HttpResponse<String>> running =
          first.client.sendAsync(
              HttpRequest.newBuilder(first.uri("/v1/completions"))
                  .POST(
                      HttpRequest.BodyPublishers.ofString(
                          body(prompt(61, 0), 3000, false).replace("}", ",\"stream\":true}")))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      awaitMetrics(first, f -> sum(f, "tokenspeed:num_requests_running") >= 1);
      ProcessHandle rank1 =
          replica.stream()
              .filter(
                  p ->
                      p.info()
                          .arguments()
                          .map(a -> List.of(a).contains("--tp-rank=1"))
                          .orElse(false))
              .findFirst()
              .orElseThrow(() -> new AssertionError("rank 1 among " + replica));
      assertTrue(rank1.destroyForcibly(), "SIGKILL to rank 1");
      long killedNs = System.nanoTime();
      assertTrue(first.process.waitFor(60, TimeUnit.SECONDS), "the launcher ends");
      seconds = (System.nanoTime() - killedNs) / 1e9;
      assertNotEquals(0, first.process.exitValue(), first.stderr());
      assertTrue(first.stderr().contains("rank 1 was killed by signal 9"), first.stderr());
      for (ProcessHandle p : replica) {
        p.onExit().get(30, TimeUnit.SECONDS);
      }
      try {
        // the connection is cut, or rank 0, stopped by the launcher, ends the stream with the
        // run's error: either way the 3000 tokens were not all produced
        HttpResponse<String> cut = running.get(30, TimeUnit.SECONDS);
        assertTrue(
            !cut.body().contains("\"finish_reason\":\"length\""),
            "the running stream cannot have finished: " + lastChars(cut.body()));
      } catch (java.util.concurrent.ExecutionException e) {
        // the connection was cut: the server is gone
      }
    } finally {
      first.close();
      replica.forEach(ProcessHandle::destroyForcibly);
    }

    ServeProcess second = serve(l3, 180);
    List<ProcessHandle> next = second.process.descendants().toList();
    try {
      awaitIdle(second);
      Completion restored = complete(second, prompt(60, 1));
      assertExpectedAcrossRanks(restored, prompt(60, 1), "the fresh replica, from the store");
      assertEquals(PREFIX_TOKENS, restored.storageTokens(), "restored from the first's objects");
      assertExpectedAcrossRanks(complete(second, prompt(61, 0)), prompt(61, 0), "killed one");
      awaitIdle(second);
      // each rank read its own objects (rank 1's figures reach /metrics within a couple of seconds)
      Map<String, PrometheusText.Family> m =
          awaitMetrics(
              second,
              f ->
                  byRank(f, "tokenspeed:l3_ok_keys_total", "kind", "get").values().stream()
                          .filter(v -> v >= PREFIX_KEYS)
                          .count()
                      == 2);
      report(
          "rankKilled",
          "launcher exit %d %.2f s after SIGKILL to rank 1; the fresh replica restored %d tokens;"
              + " GET ok keys by rank %s",
          first.process.exitValue(),
          seconds,
          restored.storageTokens(),
          byRank(m, "tokenspeed:l3_ok_keys_total", "kind", "get"));
      assertEquals(143, second.terminate(90), second.stderr());
    } finally {
      second.close();
      next.forEach(ProcessHandle::destroyForcibly);
    }
  }

  // ------------------------------------------------------------------- file system faults

  /** How the store is made read-only under a running server. */
  private sealed interface ReadOnly {
    ServeProcess serve(FaultMatrixIT test, Path store, List<String> l3) throws Exception;

    void apply(ServeProcess server, Path store) throws Exception;

    void lift(ServeProcess server, Path store) throws Exception;

    /**
     * Modes when they stop this user's writes; otherwise (root) a read-only bind mount in the
     * server's own mount namespace.
     */
    static ReadOnly choose(Path workDir) throws Exception {
      Path probe = Files.createDirectories(workDir.resolve("mode-probe"));
      Files.setPosixFilePermissions(probe, PosixFilePermissions.fromString("r-xr-xr-x"));
      boolean modesStopWrites;
      try {
        Files.createFile(probe.resolve("x"));
        modesStopWrites = false;
      } catch (IOException e) {
        modesStopWrites = true;
      } finally {
        Files.setPosixFilePermissions(probe, PosixFilePermissions.fromString("rwxr-xr-x"));
      }
      if (modesStopWrites) {
        return new Modes();
      }
      Namespace.require("a read-only bind mount of the store (mode bits do not stop root)");
      return new BindMount();
    }
  }

  /** {@code chmod a-w} on every directory of the store. */
  private record Modes() implements ReadOnly {
    @Override
    public ServeProcess serve(FaultMatrixIT test, Path store, List<String> l3) throws Exception {
      return test.serve(l3);
    }

    @Override
    public void apply(ServeProcess server, Path store) throws Exception {
      directories(store, "r-xr-xr-x");
    }

    @Override
    public void lift(ServeProcess server, Path store) throws Exception {
      directories(store, "rwxr-xr-x");
    }

    private static void directories(Path store, String mode) throws IOException {
      try (Stream<Path> walk = Files.walk(store)) {
        for (Path d : walk.filter(Files::isDirectory).toList()) {
          Files.setPosixFilePermissions(d, PosixFilePermissions.fromString(mode));
        }
      }
    }

    @Override
    public String toString() {
      return "mode bits (chmod a-w)";
    }
  }

  /** The server in its own mount namespace, the store a bind mount it remounts read-only. */
  private record BindMount() implements ReadOnly {
    @Override
    public ServeProcess serve(FaultMatrixIT test, Path store, List<String> l3) throws Exception {
      return test.serve(Namespace.wrapper("mount --bind " + q(store) + " " + q(store)), l3);
    }

    @Override
    public void apply(ServeProcess server, Path store) throws Exception {
      Namespace.run(server, "mount -o remount,bind,ro " + q(store));
    }

    @Override
    public void lift(ServeProcess server, Path store) throws Exception {
      Namespace.run(server, "mount -o remount,bind,rw " + q(store));
    }

    @Override
    public String toString() {
      return "read-only bind mount (EROFS)";
    }
  }

  /** How the store's file system is made full under a running server. */
  private sealed interface DiskFull {
    ServeProcess serve(FaultMatrixIT test, Path store, List<String> l3) throws Exception;

    void fill(ServeProcess server, Path store) throws Exception;

    void free(ServeProcess server, Path store) throws Exception;

    /** A small tmpfs filled up where mount namespaces exist; else a file-size limit. */
    static DiskFull choose(Path workDir) {
      return Namespace.available() ? new Tmpfs() : new FileSizeLimit();
    }
  }

  /** A 4 MiB tmpfs on the store in the server's mount namespace, filled by a file of zeros. */
  private record Tmpfs() implements DiskFull {
    @Override
    public ServeProcess serve(FaultMatrixIT test, Path store, List<String> l3) throws Exception {
      return test.serve(Namespace.wrapper("mount -t tmpfs -o size=4m tmpfs " + q(store)), l3);
    }

    @Override
    public void fill(ServeProcess server, Path store) throws Exception {
      // cat fails with ENOSPC once the device is full, which is the point
      String out =
          Namespace.run(
              server,
              "{ cat /dev/zero > "
                  + q(store.resolve("filler"))
                  + "; } 2>&1; df -k "
                  + q(store)
                  + " | tail -1");
      assertTrue(out.contains("No space left on device"), "the tmpfs is full: " + out);
    }

    @Override
    public void free(ServeProcess server, Path store) throws Exception {
      Namespace.run(server, "rm -f " + q(store.resolve("filler")));
    }

    @Override
    public String toString() {
      return "tmpfs of 4 MiB filled up (ENOSPC)";
    }
  }

  /**
   * The server's file-size limit lowered below an object's size (an object is one 16-token block, 8
   * KiB of the tiny model's KV plus its header): EFBIG on every new object.
   */
  private record FileSizeLimit() implements DiskFull {
    @Override
    public ServeProcess serve(FaultMatrixIT test, Path store, List<String> l3) throws Exception {
      return test.serve(l3);
    }

    @Override
    public void fill(ServeProcess server, Path store) throws Exception {
      command(List.of("prlimit", "--pid", Long.toString(server.process.pid()), "--fsize=4096:"));
    }

    @Override
    public void free(ServeProcess server, Path store) throws Exception {
      command(
          List.of("prlimit", "--pid", Long.toString(server.process.pid()), "--fsize=unlimited:"));
    }

    @Override
    public String toString() {
      return "file-size limit of 4 KiB (EFBIG)";
    }
  }

  /** A private mount namespace for one server process ({@code unshare -m}, as root). */
  private static final class Namespace {
    private static Boolean available;

    static synchronized boolean available() {
      if (available == null) {
        try {
          command(List.of("unshare", "-m", "--propagation", "private", "true"));
          available = true;
        } catch (AssertionError | IOException | InterruptedException e) {
          available = false;
        }
      }
      return available;
    }

    static void require(String what) {
      assertTrue(
          available(),
          what
              + " needs a private mount namespace (unshare -m), which this machine refuses; run"
              + " the test as a user whose mode bits stop writes instead");
    }

    /** {@code unshare -m sh -c 'SETUP && exec "$@"' sh}: the server's pid is unshare's own. */
    static List<String> wrapper(String setup) {
      return List.of(
          "unshare", "-m", "--propagation", "private", "sh", "-c", setup + " && exec \"$@\"", "sh");
    }

    /** Runs {@code script} in the mount namespace of {@code server}; returns its output. */
    static String run(ServeProcess server, String script) throws Exception {
      return command(
          List.of("nsenter", "-t", Long.toString(server.process.pid()), "-m", "sh", "-c", script));
    }
  }

  /** Runs a command; fails unless it exits 0 within 30 s; returns stdout and stderr. */
  private static String command(List<String> command) throws IOException, InterruptedException {
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    if (!p.waitFor(30, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new AssertionError("timed out: " + command);
    }
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (p.exitValue() != 0) {
      throw new AssertionError(command + " exited with " + p.exitValue() + ": " + out);
    }
    return out;
  }

  private static String q(Path p) {
    return "'" + p.toAbsolutePath().toString().replace("'", "'\\''") + "'";
  }

  // ------------------------------------------------------------------------------ servers

  private static List<String> model() throws IOException {
    Path config = shared.resolve("tiny-untied.json");
    if (!Files.exists(config)) {
      try (InputStream in = FaultMatrixIT.class.getResourceAsStream("/models/tiny-untied.json")) {
        Files.write(config, in.readAllBytes());
      }
    }
    return List.of(
        "--model",
        "synthetic:" + config,
        "--seed",
        "7",
        "--threads",
        "1",
        "--warmup-rounds",
        "0",
        "--served-model-name",
        "m",
        "--admin-token",
        ADMIN);
  }

  private ServeProcess serve(List<String> l3) throws Exception {
    return serve(List.of(), l3);
  }

  private ServeProcess serve(List<String> l3, long timeoutSeconds) throws Exception {
    List<String> args = new ArrayList<>(model());
    args.addAll(l3);
    return ServeProcess.start(workDir, List.of(), args, timeoutSeconds);
  }

  private ServeProcess serve(List<String> wrapper, List<String> l3) throws Exception {
    List<String> args = new ArrayList<>(model());
    args.addAll(l3);
    return ServeProcess.start(workDir, wrapper, args, 120);
  }

  /**
   * Redis L3 with a 64-token minimum extension (one page), the given soft deadline, a 3 s command
   * timeout and a 500 ms cooldown after an outage.
   */
  private static List<String> redis(String uri, int softDeadlineMs) {
    return redis(uri, softDeadlineMs, 3000);
  }

  /** Redis L3 as {@link #redis(String, int)}, with the given command timeout. */
  private static List<String> redis(String uri, int softDeadlineMs, int commandTimeoutMs) {
    return List.of(
        "--kvstore-storage-backend",
        "redis",
        "--kvstore-storage-backend-extra-config",
        "{\"uri\": \""
            + uri
            + "\", \"command_timeout_ms\": "
            + commandTimeoutMs
            + ", \"async\": {\"min_extension_tokens\": 64,"
            + " \"soft_deadline_ms\": "
            + softDeadlineMs
            + ", \"health_cooldown_ms\": 500}}");
  }

  /**
   * File-store L3 at {@code store} (fsync off), one-page minimum extension, a 5 s soft deadline (a
   * cold reader, or one at --tp 2, on two busy cores can take longer than the default 200 ms to
   * restore, and these tests count on its restores), 500 ms cooldown.
   */
  private static List<String> file(Path store) {
    return List.of(
        "--kvstore-storage-backend",
        "file",
        "--kvstore-storage-backend-extra-config",
        "{\"path\": \""
            + store.toAbsolutePath()
            + "\", \"fsync\": false, \"async\": {\"min_extension_tokens\": 64,"
            + " \"soft_deadline_ms\": 5000, \"health_cooldown_ms\": 500}}");
  }

  // ------------------------------------------------------------------------------ prompts

  /** Prefix {@code p} (576 token ids) followed by suffix {@code s} (40 token ids). */
  static int[] prompt(int p, int s) {
    int[] ids = new int[PREFIX_TOKENS + SUFFIX_TOKENS];
    SplittableRandom prefix = new SplittableRandom(1000 + p);
    for (int i = 0; i < PREFIX_TOKENS; i++) {
      ids[i] = prefix.nextInt(256);
    }
    SplittableRandom suffix = new SplittableRandom(1_000_000 + 1000L * p + s);
    for (int i = PREFIX_TOKENS; i < ids.length; i++) {
      ids[i] = suffix.nextInt(256);
    }
    return ids;
  }

  private static String body(int[] prompt, int maxTokens, boolean logprobs) {
    return "{\"model\":\"m\",\"prompt\":["
        + IntStream.of(prompt).mapToObj(Integer::toString).collect(Collectors.joining(","))
        + "],\"max_tokens\":"
        + maxTokens
        + ",\"temperature\":0,\"ignore_eos\":true"
        + (logprobs ? ",\"logprobs\":1}" : "}");
  }

  static Completion complete(ServeProcess s, int[] prompt) {
    long start = System.nanoTime();
    HttpResponse<String> r = s.post("/v1/completions", body(prompt, MAX_TOKENS, true));
    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
    assertEquals(200, r.statusCode(), r.body());
    try {
      JsonNode json = JSON.readTree(r.body());
      JsonNode choice = json.get("choices").get(0);
      return new Completion(
          choice.get("text").asText(),
          choice.get("logprobs").get("token_logprobs").toString(),
          json.get("usage")
              .get("prompt_tokens_details")
              .get("cached_tokens_by_source")
              .get("storage")
              .asInt(),
          ms);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static CompletableFuture<Completion> completeAsync(ServeProcess s, int[] prompt) {
    return CompletableFuture.supplyAsync(() -> complete(s, prompt));
  }

  /** What a server without L3 answers from empty caches. */
  private static Completion expected(int[] prompt) {
    String key = IntStream.of(prompt).mapToObj(Integer::toString).collect(Collectors.joining(","));
    return EXPECTED.computeIfAbsent(
        key,
        k -> {
          synchronized (FaultMatrixIT.class) {
            clearCache(recompute);
            return complete(recompute, prompt);
          }
        });
  }

  private static void assertExpected(Completion got, int[] prompt, String when) {
    Completion want = expected(prompt);
    assertEquals(want.output(), got.output(), when + ": the completion differs from recomputation");
  }

  /**
   * At --tp 2 the logits are summed across ranks in another order than one rank's, so logprobs
   * agree to rounding (1e-5), not bit for bit; the text must be equal, and greedy decoding picks
   * another token only at a tie within that rounding.
   */
  private static void assertExpectedAcrossRanks(Completion got, int[] prompt, String when)
      throws IOException {
    Completion want = expected(prompt);
    assertEquals(want.text(), got.text(), when + ": the text differs from recomputation");
    JsonNode a = JSON.readTree(want.logprobs());
    JsonNode b = JSON.readTree(got.logprobs());
    assertEquals(a.size(), b.size(), when);
    for (int i = 0; i < a.size(); i++) {
      assertEquals(
          a.get(i).asDouble(),
          b.get(i).asDouble(),
          1e-5,
          when + ": logprob " + i + " of " + want.logprobs() + " vs " + got.logprobs());
    }
  }

  /** A first prefill from an unrelated prompt: later timings are not the JIT's. */
  private static void warm(ServeProcess s) {
    assertExpected(complete(s, prompt(999, 0)), prompt(999, 0), "warm-up");
  }

  private static String tail(ServeProcess s) {
    String err = s.stderr();
    return "\nstderr:\n" + err.substring(Math.max(0, err.length() - 4000));
  }

  private static void clearCache(ServeProcess s) {
    HttpResponse<String> r =
        s.send(
            HttpRequest.newBuilder(s.uri("/admin/clear_cache"))
                .header("Authorization", "Bearer " + ADMIN)
                .POST(HttpRequest.BodyPublishers.noBody())
                .build());
    assertEquals(200, r.statusCode(), r.body());
  }

  // ------------------------------------------------------------------------------ metrics

  /** The sum of every sample named {@code name} with {@code labels} (all ranks, all labels). */
  private static double sum(Map<String, PrometheusText.Family> m, String name, String... labels) {
    return PrometheusText.samples(m, name, labels).stream()
        .mapToDouble(PrometheusText.Sample::value)
        .sum();
  }

  /** Keys of {@code kind} whose outcome was not OK. */
  private static double failed(Map<String, PrometheusText.Family> m, String kind) {
    return sum(m, "tokenspeed:l3_keys_total", "kind", kind)
        - sum(m, "tokenspeed:l3_ok_keys_total", "kind", kind);
  }

  private static double epoch(Map<String, PrometheusText.Family> m) {
    return sum(m, "tokenspeed:l3_health_epoch");
  }

  private static double health(Map<String, PrometheusText.Family> m, String state) {
    return sum(m, "tokenspeed:l3_health_state", "state", state);
  }

  private static String health(Map<String, PrometheusText.Family> m) {
    for (PrometheusText.Sample s : PrometheusText.samples(m, "tokenspeed:l3_health_state")) {
      if (s.value() == 1) {
        return s.labels().get("state");
      }
    }
    return "none";
  }

  private static Map<String, Double> byRank(
      Map<String, PrometheusText.Family> m, String name, String... labels) {
    Map<String, Double> out = new LinkedHashMap<>();
    for (PrometheusText.Sample s : PrometheusText.samples(m, name, labels)) {
      out.merge(s.labels().get("tp_rank"), s.value(), Double::sum);
    }
    return out;
  }

  private interface Condition {
    boolean test(Map<String, PrometheusText.Family> m) throws Exception;
  }

  /** Polls /metrics until {@code condition} holds (30 s at most); returns that scrape. */
  private static Map<String, PrometheusText.Family> awaitMetrics(
      ServeProcess s, Condition condition) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    Map<String, PrometheusText.Family> m = s.metrics();
    while (!condition.test(m)) {
      assertTrue(System.nanoTime() < deadline, () -> "metrics never matched:\n" + l3Lines(s));
      Thread.sleep(100);
      m = s.metrics();
    }
    return m;
  }

  /**
   * Completes prefix {@code p} with suffix 0 on {@code s} and waits until its prefix's objects are
   * written and no storage work is left.
   */
  private static void writeThrough(ServeProcess s, int p) throws Exception {
    writeThrough(s, prompt(p, 0));
  }

  /**
   * Prefix {@code p} and one token: the reusable bound is the prefix's end, a page boundary, so the
   * prompt writes exactly the prefix's objects and no tail.
   */
  private static int[] aligned(int p) {
    return Arrays.copyOf(prompt(p, 0), PREFIX_TOKENS + 1);
  }

  /** Completes {@code prompt} on {@code s} and waits until its prefix's objects are written. */
  private static void writeThrough(ServeProcess s, int[] prompt) throws Exception {
    double before = sum(s.metrics(), "tokenspeed:l3_put_written_keys_total");
    assertExpected(complete(s, prompt), prompt, "writing a prefix");
    awaitMetrics(
        s,
        m ->
            sum(m, "tokenspeed:l3_put_written_keys_total") >= before + PREFIX_KEYS
                && sum(m, "tokenspeed:l3_storage_pending") == 0);
  }

  /** The series that must be back at their idle values once the server is idle. */
  private static final List<String[]> IDLE =
      List.of(
          new String[] {"tokenspeed:num_requests_running"},
          new String[] {"tokenspeed:num_requests_waiting"},
          new String[] {"tokenspeed:l3_operation_credits_in_use"},
          new String[] {"tokenspeed:l3_host_credits_in_use"},
          new String[] {"tokenspeed:l3_ready_holds"},
          new String[] {"tokenspeed:l3_quarantined_refs"},
          new String[] {"tokenspeed:l3_quarantined"},
          new String[] {"tokenspeed:l3_unproven_retirements"},
          new String[] {"tokenspeed:l3_storage_pending"},
          new String[] {"tokenspeed:l3_backup_candidates"},
          new String[] {"tokenspeed:l3_outstanding_jobs"},
          new String[] {"tokenspeed:l3_outstanding_payload_bytes"},
          new String[] {"tokenspeed:kv_parents", "tier", "host", "state", "used"},
          new String[] {"tokenspeed:kv_parents", "tier", "device", "state", "used"});

  private static Map<String, Double> idleValues(Map<String, PrometheusText.Family> m) {
    Map<String, Double> out = new LinkedHashMap<>();
    for (String[] series : IDLE) {
      String[] labels = java.util.Arrays.copyOfRange(series, 1, series.length);
      out.put(String.join(" ", series), sum(m, series[0], labels));
    }
    return out;
  }

  /**
   * Waits (30 s at most) until the server is idle: every {@link #IDLE} series at zero, as on a
   * fresh server, so nothing leaked; returns that scrape.
   */
  private static Map<String, PrometheusText.Family> awaitIdle(ServeProcess s) throws Exception {
    Map<String, Double> zero = new LinkedHashMap<>();
    for (String[] series : IDLE) {
      zero.put(String.join(" ", series), 0.0);
    }
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (true) {
      Map<String, PrometheusText.Family> m = s.metrics();
      Map<String, Double> got = idleValues(m);
      if (got.equals(zero)) {
        return m;
      }
      if (System.nanoTime() > deadline) {
        assertEquals(zero, got, "credits, references and work back to idle");
      }
      Thread.sleep(100);
    }
  }

  private static String l3Lines(ServeProcess s) {
    return s.get("/metrics")
        .body()
        .lines()
        .filter(l -> l.startsWith("tokenspeed:l3_") || l.startsWith("tokenspeed:kv_parents"))
        .collect(Collectors.joining("\n"));
  }

  // ------------------------------------------------------------------------------ recovery

  /**
   * After a repair: the writer computes a new prefix until its pages are written, then the reader
   * (cleared first when it is the writer) restores them; tried with a new prefix each time until it
   * works (30 s at most). Returns the milliseconds it took.
   */
  private static double recoverThroughStore(ServeProcess writer, ServeProcess reader, int from)
      throws Exception {
    long start = System.nanoTime();
    long deadline = start + TimeUnit.SECONDS.toNanos(30);
    for (int p = 100 + 10 * from; ; p++) {
      double written = sum(writer.metrics(), "tokenspeed:l3_put_written_keys_total");
      assertExpected(complete(writer, prompt(p, 0)), prompt(p, 0), "after the repair");
      Map<String, PrometheusText.Family> m =
          awaitMetrics(writer, f -> sum(f, "tokenspeed:l3_storage_pending") == 0);
      if (sum(m, "tokenspeed:l3_put_written_keys_total") >= written + PREFIX_KEYS) {
        if (reader == writer) {
          clearCache(reader);
        }
        Completion c = complete(reader, prompt(p, 1));
        assertExpected(c, prompt(p, 1), "restored after the repair");
        if (c.storageTokens() == PREFIX_TOKENS) {
          return (System.nanoTime() - start) / 1e6;
        }
      }
      assertTrue(System.nanoTime() < deadline, () -> "L3 never recovered:\n" + l3Lines(writer));
      Thread.sleep(200);
    }
  }

  /** Clears the reader and asks prefix {@code p} again until it is restored from the store. */
  private static Completion awaitRestored(ServeProcess reader, int p, int firstSuffix)
      throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    for (int s = firstSuffix; ; s++) {
      clearCache(reader);
      Completion c = complete(reader, prompt(p, s));
      assertExpected(c, prompt(p, s), "restoring prefix " + p);
      if (c.storageTokens() == PREFIX_TOKENS) {
        return c;
      }
      assertTrue(
          System.nanoTime() < deadline,
          () -> "prefix " + p + " was never restored:\n" + l3Lines(reader));
      Thread.sleep(200);
    }
  }

  // ------------------------------------------------------------------------------ objects

  private static long objects(Path store) throws IOException {
    return objectFiles(store).size();
  }

  /** The published object files of a file store (no temporaries, no filler). */
  private static Set<Path> objectFiles(Path store) throws IOException {
    return LiveTree.regularFiles(store).stream()
        .filter(f -> f.getFileName().toString().length() == 64)
        .collect(Collectors.toCollection(HashSet::new));
  }

  /**
   * Overwrites the payload of an object file (format version 2: it starts at the offset the header
   * names at byte 20, after the header, the key and the zeros that align it) with random bytes: the
   * length and header stay, only the payload checksum can tell.
   */
  private static void overwritePayload(Path object, SplittableRandom random) throws IOException {
    try (FileChannel ch =
        FileChannel.open(object, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
      ByteBuffer header = ByteBuffer.allocate(28).order(ByteOrder.BIG_ENDIAN);
      ch.read(header, 0);
      assertEquals(2, Short.toUnsignedInt(header.getShort(4)), "format version of " + object);
      long payload = header.getLong(8);
      long at = Integer.toUnsignedLong(header.getInt(20));
      assertEquals(0, at % 4096, "the payload's offset is aligned in " + object);
      assertEquals(ch.size(), at + payload, "object layout of " + object);
      byte[] garbage = new byte[(int) payload];
      for (int i = 0; i < garbage.length; i++) {
        garbage[i] = (byte) random.nextInt(256);
      }
      ch.write(ByteBuffer.wrap(garbage), at);
    }
  }

  private static void report(String fault, String format, Object... args) {
    System.out.println("fault matrix: " + fault + ": " + String.format(Locale.ROOT, format, args));
  }

  /** The last 400 characters of {@code text}, for a failure message. */
  private static String lastChars(String text) {
    return text.length() <= 400 ? text : "..." + text.substring(text.length() - 400);
  }
}
