package io.tokenspeed.l3.redis;

import io.lettuce.core.KeyScanCursor;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.ScanArgs;
import io.lettuce.core.ScanCursor;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.api.async.RedisClusterAsyncCommands;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import io.lettuce.core.resource.Delay;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.spi.StoreArguments;
import io.tokenspeed.l3.spi.StoreConfigurationException;
import io.tokenspeed.l3.spi.StoreResult;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The {@code redis} store: the distributed L3 on Redis or Valkey, standalone or Redis Cluster. GET,
 * SET NX and STRLEN go over plain TCP connections of the store's own ({@link DirectPath}), read and
 * written by the thread of the store call; Lettuce serves what is not on the data path (the startup
 * checks, the cluster topology, namespace deletion) and, with {@code tls=true}, the data path too
 * ({@link LettucePath}).
 *
 * <h2>Commands and answers</h2>
 *
 * <pre>
 *   call    command per key        reply                        row
 *   QUERY   STRLEN key             n &gt; 0                        Ok(n, false)
 *                                  0 (no such key)              Missing
 *                                  WRONGTYPE                    Invalid(0)
 *   GET     GET key                $n, n == destination length  Ok(n, false), bytes read from the
 *                                                               socket into the destination
 *                                  $n, n != destination length  Invalid(n), destination untouched
 *                                  nil                          Missing, destination untouched
 *                                  WRONGTYPE                    Invalid(0)
 *   PUT     SET key value NX       OK                           Ok(length, false)  newly written
 *                                  nil (key exists)             Ok(length, true)   already existed
 *                                  OOM (server full)            Rejected(NO_SPACE, reply):
 *                                                               re-offer later
 *   any     MOVED, ASK (cluster)   followed: the key is sent to the named master (after ASKING
 *                                  for ASK), at most 8 rounds per call; MOVED also refreshes the
 *                                  slot table
 *   any     NOPERM, WRONGPASS, NOAUTH (refused by ACL or         the call throws
 *           credentials, before the command ran)                StoreConfigurationException:
 *                                                               not an outage; the message names
 *                                                               the user and the refused command
 *   any     timeout, lost connection, other error               the call throws IOException
 * </pre>
 *
 * <p>Keys are the tsl3 object keys themselves ({@code tsl3-<ns>_<hash>|g0|o0|r0}); they carry no
 * hash tag, so a cluster spreads one namespace over every slot, and {@code ~tsl3-<ns>_*} in an ACL
 * confines a user to one deployment (a client configured with another namespace gets NOPERM, never
 * another tenant's bytes). Values are the raw payload, nothing else: an object's length is its only
 * metadata, and GET accepts it only when it equals the destination's length exactly.
 *
 * <h2>One call, many keys</h2>
 *
 * A call's keys are routed to their servers (one, or the master of each key's slot), and each
 * server's share is spread over up to {@code connections} connections, with up to {@code
 * pipeline_depth} GETs or SETs in flight on each (STRLEN: 128). The calling thread reads the
 * replies of all of them in turn, each GET value straight from the socket into its destination, and
 * writes each SET value straight from its source segment (a gathering write of the command's
 * header, the segment and the trailer): no value is copied in user space. See {@link DirectCall}.
 *
 * <pre>
 *   prefix of 12 pages, one server, connections=4, pipeline_depth=4:
 *   conn 0: GET p0 p4 p8     conn 1: GET p1 p5 p9     conn 2: GET p2 p6 p10    conn 3: GET p3 p7 p11
 * </pre>
 *
 * <h2>Create-only</h2>
 *
 * {@code SET key value NX} is atomic on the server that owns the key's slot: of several writers
 * racing one key, in one process or many, exactly one is answered {@code OK} and the others nil,
 * and the first bytes stay. Both answers are success; they are counted apart ({@link
 * RedisCounters}). A PUT that times out may or may not have been executed: its connection is
 * closed, so a server that had not received the whole value drops the command, and one that had
 * creates exactly the object the PUT meant to create, which is harmless for content-named keys.
 *
 * <h2>Why {@link #failuresRetire()} is true</h2>
 *
 * A call that throws or returns has stopped touching the caller's Host segments. On the direct path
 * every read into a destination and every write from a source happens on the calling thread, inside
 * the call: when the call ends, nothing else holds the segments, whatever happened on the network.
 * A call that fails mid-value may leave a destination partly written (and throws: the executor
 * publishes no row of a failed call); its connections are closed, so no later reply is ever read
 * into anything. Over TLS the Lettuce path keeps private copies of PUT values and abandons GET
 * decoders before it throws (see {@link LettucePath}).
 *
 * <p>Argument errors (a key or value over its limit, mismatched lists) throw before any command is
 * sent. A failed call's references are therefore released by the executor, never quarantined, and
 * its keys carry no object evidence: the health monitor sees an outage and the next probe decides.
 * A refusal by ACL or credentials is the exception: it throws {@link StoreConfigurationException},
 * which the executor counts and logs as a configuration failure without any cooldown, because no
 * probe can repair an ACL (a cooldown would only repeat: probe, refusal, cooldown).
 *
 * <h2>Outages</h2>
 *
 * Nothing waits for a server that is down. A failed connection attempt makes the store refuse new
 * connections to that server for a delay doubling from 1 ms to one second: calls in that window
 * fail at once, and the first call after it tries again. A connection that fails mid-call is closed
 * with the idle ones of its server; a call whose pooled connection had died while idle (a server
 * restarted, or one that closed an idle client) and failed before any reply arrived sends its
 * commands again on a fresh connection, once. A server restarted on the same address is picked up
 * without any action here. Every call is bounded by {@code command_timeout_ms}: past it, the
 * store's reaper thread closes the call's connections, which ends any blocked read or write.
 *
 * <h2>Namespace deletion</h2>
 *
 * {@link #deleteNamespace} walks every master ({@code SCAN 0 MATCH <namespace>_* COUNT 1000}, the
 * namespace's glob characters escaped) and removes each page of keys with {@code UNLINK} in batches
 * of at most {@value #UNLINK_BATCH} keys of one hash slot (Cluster refuses multi-key commands
 * across slots). UNLINK frees the memory in the background, so a large namespace does not stall the
 * server. Each SCAN page and UNLINK batch is bounded by {@code command_timeout_ms}; the whole
 * deletion takes as long as the namespace is large (an administrative call, never on the loop). A
 * key written while the scan runs may survive it.
 *
 * <h2>What it must never do</h2>
 *
 * <ul>
 *   <li>Overwrite an existing key (every write is {@code SET NX}).
 *   <li>Answer {@code Ok} for a GET whose reply length differs from the destination's.
 *   <li>Touch a segment after the call returned or threw.
 *   <li>Hand Lettuce a Host segment for a PUT.
 * </ul>
 *
 * <p>Thread-safe: the executor's workers call one instance concurrently; each call uses connections
 * no other call uses at the same time.
 */
public final class RedisStore implements Store {

  /** Keys per SCAN page asked of the server (a hint; Redis may return more or fewer). */
  static final int SCAN_COUNT = 1000;

  /** Most keys in one UNLINK. */
  static final int UNLINK_BATCH = 256;

  private static final String GLOB_SPECIALS = "*?[]\\";

  /** A call's answers: per key a row, or the server's error reply the call must throw for. */
  record Answers(RowResult[] rows, String[] errors) {
    Answers(int n) {
      this(new RowResult[n], new String[n]);
    }
  }

  /** The call's deadline passed before every key was answered. */
  static final class TimedOut extends IOException {
    final int pending;

    TimedOut(int pending, Throwable cause) {
      super("the call's deadline passed with " + pending + " key(s) unanswered", cause);
      this.pending = pending;
    }
  }

  private final RedisStoreSettings settings;
  private final ClientResources resources;
  private final RedisLinks links;
  private final DirectPath direct;
  private final LettucePath lettuce;
  private final long commandTimeoutNs;
  private final AtomicBoolean closed = new AtomicBoolean();

  private final AtomicLong putsNewlyWritten = new AtomicLong();
  private final AtomicLong putsAlreadyExisted = new AtomicLong();
  private final AtomicLong putsRejected = new AtomicLong();
  private final AtomicLong getsOk = new AtomicLong();
  private final AtomicLong getsMissing = new AtomicLong();
  private final AtomicLong getsInvalid = new AtomicLong();
  private final AtomicLong existsOk = new AtomicLong();
  private final AtomicLong existsMissing = new AtomicLong();
  private final AtomicLong failedCalls = new AtomicLong();
  private final AtomicLong lettuceCommands = new AtomicLong();
  private final AtomicLong lettuceAbandonedReads = new AtomicLong();
  private final AtomicLong lateReplies = new AtomicLong();
  private final DirectPath.Counters directCounters;

  private RedisStore(
      RedisStoreSettings settings,
      ClientResources resources,
      RedisLinks links,
      DirectPath direct,
      DirectPath.Counters directCounters) {
    this.settings = settings;
    this.resources = resources;
    this.links = links;
    this.direct = direct;
    this.directCounters = directCounters;
    this.lettuce =
        direct == null
            ? new LettucePath(links, lettuceCommands, lettuceAbandonedReads, lateReplies)
            : null;
    this.commandTimeoutNs = TimeUnit.MILLISECONDS.toNanos(settings.commandTimeoutMs());
  }

  /**
   * Connects as {@code settings} say and checks the server: the credentials, the cluster flag and
   * reachability, all within {@code connect_timeout_ms}.
   *
   * @throws IllegalArgumentException when a setting is wrong for the server (password, user,
   *     cluster flag); the message names the setting
   * @throws IOException when no server answers at the configured address in time
   */
  public static RedisStore open(RedisStoreSettings settings) throws IOException {
    return open(settings, !settings.tls());
  }

  /**
   * {@link #open(RedisStoreSettings)}, choosing the data path: {@code directPath} false keeps every
   * command on Lettuce (what {@code tls=true} does), so that tests can run that path on plain TCP.
   */
  static RedisStore open(RedisStoreSettings settings, boolean directPath) throws IOException {
    if (settings == null) {
      throw new IllegalArgumentException("redis store settings are required");
    }
    if (directPath && settings.tls()) {
      throw new IllegalArgumentException("the direct path speaks plain TCP only, not tls=true");
    }
    ClientResources resources =
        DefaultClientResources.builder()
            .reconnectDelay(
                Delay.exponential(
                    Duration.ZERO, RedisLinks.RECONNECT_DELAY_MAX, 2, TimeUnit.MILLISECONDS))
            .build();
    RedisLinks links = null;
    try {
      long deadlineNs =
          System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.connectTimeoutMs());
      links = RedisLinks.open(settings, resources, directPath ? 1 : settings.connections());
      DirectPath.Counters counters = new DirectPath.Counters();
      DirectPath direct = directPath ? openDirect(settings, links, counters, deadlineNs) : null;
      return new RedisStore(settings, resources, links, direct, counters);
    } catch (IOException | RuntimeException | Error e) {
      if (links != null) {
        links.close();
      }
      shutdown(resources);
      throw e;
    }
  }

  /** Opens the direct path's first connections; a failure reads as a startup error. */
  private static DirectPath openDirect(
      RedisStoreSettings settings, RedisLinks links, DirectPath.Counters counters, long deadlineNs)
      throws IOException {
    String where = String.join(",", settings.uris());
    try {
      if (links instanceof RedisLinks.Cluster cluster) {
        DirectPath[] opened = new DirectPath[1];
        DirectPath path =
            DirectPath.cluster(
                settings,
                counters,
                cluster.slotTable(),
                () -> cluster.refreshSlotTable(table -> opened[0].updateTopology(table)),
                deadlineNs);
        opened[0] = path;
        return path;
      }
      RedisStoreSettings.Endpoint endpoint = settings.endpoints().getFirst();
      return DirectPath.standalone(
          settings, counters, endpoint.host(), endpoint.port(), deadlineNs);
    } catch (IOException e) {
      Exception translated =
          RedisLinks.explainStartup(settings, where, e, RedisLinks.Step.HANDSHAKE);
      if (translated instanceof RuntimeException r) {
        throw r;
      }
      throw (IOException) translated;
    }
  }

  @Override
  public String name() {
    return "redis";
  }

  /** True: see the class comment (all I/O inside the call; over TLS, copies and abandonment). */
  @Override
  public boolean failuresRetire() {
    return true;
  }

  @Override
  public int maxKeyBytes() {
    return settings.maxKeyBytes();
  }

  @Override
  public long maxValueBytes() {
    return settings.maxValueBytes();
  }

  /** The settings this store was opened with. */
  public RedisStoreSettings settings() {
    return settings;
  }

  /** The cumulative counters. */
  public RedisCounters counters() {
    return new RedisCounters(
        putsNewlyWritten.get(),
        putsAlreadyExisted.get(),
        putsRejected.get(),
        getsOk.get(),
        getsMissing.get(),
        getsInvalid.get(),
        existsOk.get(),
        existsMissing.get(),
        failedCalls.get(),
        lettuceAbandonedReads.get() + directCounters.abandonedReads.sum(),
        lateReplies.get(),
        lettuceCommands.get() + directCounters.commands.sum(),
        directCounters.redirects.sum(),
        directCounters.connectionsOpened.sum());
  }

  /** Direct-path connections open now (idle or in use); 0 over TLS. */
  int openConnections() {
    return direct == null ? 0 : direct.openLinks();
  }

  // ------------------------------------------------------------------ QUERY

  @Override
  public StoreResult exists(List<String> keys) throws IOException {
    checkKeys(keys);
    long deadlineNs = System.nanoTime() + commandTimeoutNs;
    Answers answers;
    try {
      answers =
          direct != null
              ? answersOf(direct.exists(keys, deadlineNs))
              : lettuce.exists(keys, deadlineNs);
    } catch (IOException e) {
      throw failed("QUERY", keys, e);
    }
    List<RowResult> rows = rows("QUERY", keys, answers);
    for (RowResult row : rows) {
      switch (row) {
        case RowResult.Ok ok -> existsOk.incrementAndGet();
        case RowResult.Missing m -> existsMissing.incrementAndGet();
        case RowResult.Invalid inv -> {}
        case RowResult.Rejected r -> throw new IllegalStateException("QUERY row " + r);
        case RowResult.Unknown u -> throw new IllegalStateException("QUERY row " + u);
      }
    }
    return StoreResult.of(rows);
  }

  // ------------------------------------------------------------------ GET

  @Override
  public StoreResult get(List<String> keys, List<MemorySegment> destinations) throws IOException {
    checkKeys(keys);
    StoreArguments.checkSegments(keys, destinations, "destinations");
    StoreArguments.checkValueSizes(destinations, "destination", settings.maxValueBytes());
    long deadlineNs = System.nanoTime() + commandTimeoutNs;
    Answers answers;
    try {
      answers =
          direct != null
              ? answersOf(direct.get(keys, destinations, deadlineNs))
              : lettuce.get(keys, destinations, deadlineNs);
    } catch (IOException e) {
      throw failed("GET", keys, e);
    }
    List<RowResult> rows = rows("GET", keys, answers);
    for (RowResult row : rows) {
      switch (row) {
        case RowResult.Ok ok -> getsOk.incrementAndGet();
        case RowResult.Missing m -> getsMissing.incrementAndGet();
        case RowResult.Invalid inv -> getsInvalid.incrementAndGet();
        case RowResult.Rejected r -> throw new IllegalStateException("GET row " + r);
        case RowResult.Unknown u -> throw new IllegalStateException("GET row " + u);
      }
    }
    return StoreResult.of(rows);
  }

  // ------------------------------------------------------------------ PUT

  @Override
  public StoreResult put(List<String> keys, List<MemorySegment> sources) throws IOException {
    checkKeys(keys);
    StoreArguments.checkSegments(keys, sources, "sources");
    for (int i = 0; i < sources.size(); i++) {
      long size = sources.get(i).byteSize();
      if (size < 1) {
        throw new IllegalArgumentException(
            "value size=0 bytes of key #" + i + " must be at least 1 byte");
      }
      StoreArguments.checkValueSize(size, i, "value", settings.maxValueBytes());
    }
    long deadlineNs = System.nanoTime() + commandTimeoutNs;
    Answers answers;
    try {
      answers =
          direct != null
              ? answersOf(direct.put(keys, sources, deadlineNs))
              : lettuce.put(keys, sources, deadlineNs);
    } catch (IOException e) {
      throw failed("PUT", keys, e);
    }
    int newly = 0;
    int existed = 0;
    int rejected = 0;
    int firstError = firstError(answers);
    for (int i = 0; i < firstError; i++) {
      switch (answers.rows()[i]) {
        case RowResult.Ok ok when ok.alreadyExisted() -> existed++;
        case RowResult.Ok ok -> newly++;
        case RowResult.Rejected r -> rejected++;
        case RowResult row -> throw new IllegalStateException("PUT row " + row);
      }
    }
    putsNewlyWritten.addAndGet(newly);
    putsAlreadyExisted.addAndGet(existed);
    if (firstError < keys.size()) {
      throw serverRefused("PUT", keys, answers.errors()[firstError]);
    }
    putsRejected.addAndGet(rejected);
    return StoreResult.of(Arrays.asList(answers.rows()));
  }

  // ------------------------------------------------------------------ answers

  private static Answers answersOf(DirectCall call) {
    return new Answers(call.rows, call.errors);
  }

  /** The rows of a call every key of which was answered; throws for the first error reply. */
  private List<RowResult> rows(String op, List<String> keys, Answers answers) throws IOException {
    int firstError = firstError(answers);
    if (firstError < keys.size()) {
      throw serverRefused(op, keys, answers.errors()[firstError]);
    }
    for (int i = 0; i < keys.size(); i++) {
      if (answers.rows()[i] == null) {
        failedCalls.incrementAndGet();
        throw new IOException(
            "redis " + op + " key #" + i + " of " + keys.size() + " has no answer");
      }
    }
    return Arrays.asList(answers.rows());
  }

  /** The first key answered with an error reply, or the key count when none was. */
  private static int firstError(Answers answers) {
    String[] errors = answers.errors();
    for (int i = 0; i < errors.length; i++) {
      if (errors[i] != null) {
        return i;
      }
    }
    return errors.length;
  }

  // ------------------------------------------------------------------ namespace deletion

  @Override
  public long deleteNamespace(String namespace) throws IOException {
    checkOpen();
    if (namespace == null || namespace.isEmpty()) {
      throw new IllegalArgumentException("namespace=" + namespace + " must be a namespace name");
    }
    String pattern = escapeGlob(namespace) + "_*";
    ScanArgs scanArgs = ScanArgs.Builder.matches(pattern).limit(SCAN_COUNT);
    long removed = 0;
    List<String> what = List.of(namespace + "_");
    for (RedisClusterAsyncCommands<String, byte[]> master :
        links.masters(System.nanoTime() + commandTimeoutNs)) {
      ScanCursor cursor = ScanCursor.INITIAL;
      while (true) {
        lettuceCommands.incrementAndGet();
        KeyScanCursor<String> page =
            awaitAll("SCAN", what, List.of(master.scan(cursor, scanArgs))).getFirst();
        removed += unlink(master, page.getKeys(), what);
        if (page.isFinished()) {
          break;
        }
        cursor = page;
      }
    }
    return removed;
  }

  private long unlink(
      RedisClusterAsyncCommands<String, byte[]> master, List<String> keys, List<String> what)
      throws IOException {
    if (keys.isEmpty()) {
      return 0;
    }
    Map<Integer, List<String>> bySlot = new LinkedHashMap<>();
    for (String key : keys) {
      int slot = links.slotted() ? SlotHash.getSlot(key) : 0;
      bySlot.computeIfAbsent(slot, s -> new ArrayList<>()).add(key);
    }
    List<Future<Long>> futures = new ArrayList<>();
    for (List<String> slotKeys : bySlot.values()) {
      for (int from = 0; from < slotKeys.size(); from += UNLINK_BATCH) {
        List<String> batch = slotKeys.subList(from, Math.min(slotKeys.size(), from + UNLINK_BATCH));
        futures.add(master.unlink(batch.toArray(String[]::new)));
        lettuceCommands.incrementAndGet();
      }
    }
    long removed = 0;
    for (long n : awaitAll("UNLINK", what, futures)) {
      removed += n;
    }
    return removed;
  }

  /** Every future's value, all within one command timeout; the first failure fails the step. */
  private <T> List<T> awaitAll(String op, List<String> what, List<? extends Future<T>> futures)
      throws IOException {
    long deadlineNs = System.nanoTime() + commandTimeoutNs;
    List<T> values = new ArrayList<>(futures.size());
    try {
      for (Future<T> f : futures) {
        values.add(f.get(Math.max(0, deadlineNs - System.nanoTime()), TimeUnit.NANOSECONDS));
      }
      return values;
    } catch (ExecutionException e) {
      Throwable cause = e.getCause() == null ? e : e.getCause();
      int pending = cancelPending(futures);
      if (cause instanceof RedisCommandTimeoutException) {
        throw failed(op, what, new TimedOut(pending, cause));
      }
      if (cause instanceof RedisCommandExecutionException && cause.getMessage() != null) {
        throw serverRefused(op, what, cause.getMessage());
      }
      throw failed(op, what, new IOException(RedisLinks.messages(cause), cause));
    } catch (TimeoutException e) {
      throw failed(op, what, new TimedOut(cancelPending(futures), e));
    } catch (InterruptedException e) {
      cancelPending(futures);
      Thread.currentThread().interrupt();
      InterruptedIOException io = new InterruptedIOException("interrupted waiting for redis");
      io.initCause(e);
      throw io;
    }
  }

  private static int cancelPending(List<? extends Future<?>> futures) {
    int pending = 0;
    for (Future<?> f : futures) {
      if (!f.isDone()) {
        pending++;
        f.cancel(false);
      }
    }
    return pending;
  }

  static String escapeGlob(String text) {
    StringBuilder out = new StringBuilder(text.length() + 8);
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (GLOB_SPECIALS.indexOf(c) >= 0) {
        out.append('\\');
      }
      out.append(c);
    }
    return out.toString();
  }

  // ------------------------------------------------------------------ failures

  /**
   * Counts a call that failed without a server's error reply (a timeout, a lost connection, a
   * malformed reply, a refused handshake) and builds the exception it throws: one line naming the
   * operation, the keys' namespace, and what to check.
   */
  private IOException failed(String op, List<String> keys, IOException cause) {
    if (cause instanceof InterruptedIOException interrupted) {
      failedCalls.incrementAndGet();
      return interrupted;
    }
    if (cause instanceof DirectLink.HandshakeRefused refused) {
      return serverRefused(op, keys, refused.getMessage());
    }
    failedCalls.incrementAndGet();
    String what = "redis " + op + " of " + keys.size() + " key(s)";
    String where = String.join(",", settings.uris());
    if (cause instanceof TimedOut timedOut) {
      return new IOException(
          what
              + " at "
              + where
              + " did not complete within command_timeout_ms="
              + settings.commandTimeoutMs()
              + " ("
              + timedOut.pending
              + " still pending)",
          cause);
    }
    return new IOException(what + " at " + where + " failed: " + RedisLinks.messages(cause), cause);
  }

  /**
   * Counts a call a server answered with an error reply and builds the exception it throws: ACL and
   * credential refusals are {@link StoreConfigurationException}s naming the user and the command.
   */
  private IOException serverRefused(String op, List<String> keys, String serverMessage) {
    failedCalls.incrementAndGet();
    String what = "redis " + op + " of " + keys.size() + " key(s)";
    String where = String.join(",", settings.uris());
    String user = settings.username().isEmpty() ? "default" : settings.username();
    if (serverMessage.startsWith("NOPERM")) {
      String namespace = namespaceOf(keys.isEmpty() ? "" : keys.getFirst());
      String command = commandOf(op);
      return new StoreConfigurationException(
          what
              + " at "
              + where
              + " refused: redis user="
              + user
              + " may not run command="
              + command
              + " on keys of namespace "
              + namespace
              + " ("
              + serverMessage
              + "); its ACL must allow +"
              + command.toLowerCase(java.util.Locale.ROOT)
              + " and its key pattern must cover ~"
              + namespace
              + "_*; check the deployment namespace and the user's ACL",
          new RedisCommandExecutionException(serverMessage));
    }
    if (serverMessage.startsWith("WRONGPASS") || serverMessage.startsWith("NOAUTH")) {
      return new StoreConfigurationException(
          what
              + " at "
              + where
              + " refused: the server does not accept redis user="
              + user
              + " for command="
              + commandOf(op)
              + " ("
              + serverMessage
              + "); check the store's username and password",
          new RedisCommandExecutionException(serverMessage));
    }
    return new IOException(
        what + " at " + where + " failed: " + serverMessage,
        new RedisCommandExecutionException(serverMessage));
  }

  /** The Redis command a store operation sends per key. */
  private static String commandOf(String op) {
    return switch (op) {
      case "QUERY" -> "STRLEN";
      case "PUT" -> "SET";
      default -> op; // GET, SCAN, UNLINK
    };
  }

  private static String namespaceOf(String key) {
    int separator = key.indexOf('_');
    return separator < 0 ? key : key.substring(0, separator);
  }

  // ------------------------------------------------------------------ argument checks

  private void checkKeys(List<String> keys) {
    checkOpen();
    StoreArguments.checkKeys(keys, settings.maxKeyBytes());
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("redis store " + settings.uris() + " is closed");
    }
  }

  // ------------------------------------------------------------------ close

  /** Closes the connections and the client's threads. Idempotent. */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    try {
      if (direct != null) {
        direct.close();
      }
    } finally {
      try {
        links.close();
      } finally {
        shutdown(resources);
      }
    }
  }

  private static void shutdown(ClientResources resources) {
    try {
      resources
          .shutdown(0, RedisLinks.SHUTDOWN_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)
          .get(RedisLinks.SHUTDOWN_TIMEOUT.toMillis() * 2, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (ExecutionException | TimeoutException e) {
      // the client's threads are daemons; a slow shutdown only delays their exit
    }
  }
}
