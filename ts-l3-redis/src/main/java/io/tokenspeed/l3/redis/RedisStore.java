package io.tokenspeed.l3.redis;

import io.lettuce.core.KeyScanCursor;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.ScanArgs;
import io.lettuce.core.ScanCursor;
import io.lettuce.core.SetArgs;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.api.async.RedisClusterAsyncCommands;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.CommandType;
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
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The {@code redis} store: the distributed L3 on Redis or Valkey, standalone or Redis Cluster,
 * through Lettuce's asynchronous API. Each store call pipelines one command per key on one of a few
 * multiplexed connections and waits for all replies, bounded by {@code command_timeout_ms}.
 *
 * <h2>Commands and answers</h2>
 *
 * <pre>
 *   call    command per key        reply                        row
 *   QUERY   STRLEN key             n &gt; 0                        Ok(n, false)
 *                                  0 (no such key)              Missing
 *                                  WRONGTYPE                    Invalid(0)
 *   GET     GET key                $n, n == destination length  Ok(n, false), bytes copied once
 *                                  $n, n != destination length  Invalid(n), destination untouched
 *                                  nil                          Missing, destination untouched
 *                                  WRONGTYPE                    Invalid(0)
 *   PUT     SET key value NX       OK                           Ok(length, false)  newly written
 *                                  nil (key exists)             Ok(length, true)   already existed
 *                                  OOM (server full)            Rejected(NO_SPACE, reply):
 *                                                               re-offer later
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
 * <h2>Create-only</h2>
 *
 * {@code SET key value NX} is atomic on the server that owns the key's slot: of several writers
 * racing one key, in one process or many, exactly one is answered {@code OK} and the others nil,
 * and the first bytes stay. Both answers are success; they are counted apart ({@link
 * RedisCounters}). A PUT that times out may still be executed by the server later; that only
 * creates the object the PUT meant to create, which is harmless for content-named keys.
 *
 * <h2>Why {@link #failuresRetire()} is true</h2>
 *
 * A call that throws has stopped touching the caller's Host segments, for each kind:
 *
 * <ul>
 *   <li><b>PUT</b> copies every source segment into a private array on the calling thread before it
 *       issues any command. Lettuce encodes values later, on its event loop, and may still do so
 *       after the call timed out; it then reads the private copy, never Host memory. The copy costs
 *       one memcpy per value, which is small next to the network transfer.
 *   <li><b>GET</b> decodes each reply with a {@link SegmentReplyDecoder} that copies straight from
 *       the socket buffer into the destination. Lettuce decodes a reply even when its command
 *       already timed out, so before a failed call throws it abandons every decoder; abandoning
 *       takes the decoder's lock, so when the call throws no copy is in progress and none can start
 *       ({@code lateReplies} counts the replies dropped that way). A destination of a confined
 *       arena, which the event loop may not touch, is staged in a private array instead and copied
 *       in by the calling thread after the call succeeded.
 *   <li><b>QUERY</b> hands the client no segment at all.
 * </ul>
 *
 * Argument errors (a key or value over its limit, mismatched lists) throw before any command is
 * sent. A failed call's references are therefore released by the executor, never quarantined, and
 * its keys carry no object evidence: the health monitor sees an outage and the next probe decides.
 * A refusal by ACL or credentials is the exception: it throws {@link StoreConfigurationException},
 * which the executor counts and logs as a configuration failure without any cooldown, because no
 * probe can repair an ACL (a cooldown would only repeat: probe, refusal, cooldown).
 *
 * <h2>Outages</h2>
 *
 * While a connection is down, commands are rejected at once (Lettuce's {@code REJECT_COMMANDS})
 * instead of waiting for the command timeout, and the client reconnects in the background with a
 * delay doubling from 1 ms to one second. Commands in flight when a connection drops fail; they are
 * never replayed onto the new connection. A server restarted on the same address is picked up
 * without any action here. In a cluster, the link to every master is opened at startup (Lettuce
 * would open it on the first command for one of its slots, and that command would be rejected).
 * Lettuce's own logs (reconnections, topology refreshes) go through SLF4J.
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
 *   <li>Throw from a GET while a decoder could still write into a destination.
 *   <li>Hand Lettuce a Host segment for a PUT.
 * </ul>
 *
 * <p>Thread-safe: the executor's workers call one instance concurrently.
 */
public final class RedisStore implements Store {

  /** Keys per SCAN page asked of the server (a hint; Redis may return more or fewer). */
  static final int SCAN_COUNT = 1000;

  /** Most keys in one UNLINK. */
  static final int UNLINK_BATCH = 256;

  private static final String GLOB_SPECIALS = "*?[]\\";

  private final RedisStoreSettings settings;
  private final ClientResources resources;
  private final RedisLinks links;
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
  private final AtomicLong abandonedReads = new AtomicLong();
  private final AtomicLong lateReplies = new AtomicLong();
  private final AtomicLong commands = new AtomicLong();

  private RedisStore(RedisStoreSettings settings, ClientResources resources, RedisLinks links) {
    this.settings = settings;
    this.resources = resources;
    this.links = links;
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
    if (settings == null) {
      throw new IllegalArgumentException("redis store settings are required");
    }
    ClientResources resources =
        DefaultClientResources.builder()
            .reconnectDelay(
                Delay.exponential(
                    Duration.ZERO, RedisLinks.RECONNECT_DELAY_MAX, 2, TimeUnit.MILLISECONDS))
            .build();
    try {
      return new RedisStore(settings, resources, RedisLinks.open(settings, resources));
    } catch (IOException | RuntimeException | Error e) {
      shutdown(resources);
      throw e;
    }
  }

  @Override
  public String name() {
    return "redis";
  }

  /** True: see the class comment (private PUT copies, abandonable GET decoders). */
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
        abandonedReads.get(),
        lateReplies.get(),
        commands.get());
  }

  // ------------------------------------------------------------------ QUERY

  @Override
  public StoreResult exists(List<String> keys) throws IOException {
    checkKeys(keys);
    int n = keys.size();
    long deadlineNs = System.nanoTime() + commandTimeoutNs;
    List<Future<Long>> futures = new ArrayList<>(n);
    try {
      RedisClusterAsyncCommands<String, byte[]> c = links.next();
      for (String key : keys) {
        futures.add(c.strlen(key));
        commands.incrementAndGet();
      }
    } catch (RuntimeException e) {
      throw failed("QUERY", keys, futures, e);
    }
    Replies replies = await(futures, deadlineNs);
    List<RowResult> rows = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      Throwable error = replies.errors[i];
      if (error == null && replies.values[i] instanceof Long length) {
        if (length > 0) {
          existsOk.incrementAndGet();
          rows.add(new RowResult.Ok(length, false));
        } else {
          existsMissing.incrementAndGet();
          rows.add(RowResult.MISSING);
        }
      } else if (isServerError(error, "WRONGTYPE")) {
        rows.add(new RowResult.Invalid(0));
      } else {
        throw failed("QUERY", keys, futures, replies.firstFailure(i));
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
    int n = keys.size();
    long deadlineNs = System.nanoTime() + commandTimeoutNs;
    List<SegmentReplyDecoder> decoders = new ArrayList<>(n);
    List<Future<RowResult>> futures = new ArrayList<>(n);
    try {
      RedisClusterAsyncCommands<String, byte[]> c = links.next();
      for (int i = 0; i < n; i++) {
        SegmentReplyDecoder decoder =
            new SegmentReplyDecoder(RedisLinks.CODEC, destinations.get(i), lateReplies);
        decoders.add(decoder);
        RedisFuture<RowResult> f =
            c.dispatch(
                CommandType.GET, decoder, new CommandArgs<>(RedisLinks.CODEC).addKey(keys.get(i)));
        futures.add(f);
        commands.incrementAndGet();
      }
    } catch (RuntimeException e) {
      abandon(decoders);
      throw failed("GET", keys, futures, e);
    }
    Replies replies;
    try {
      replies = await(futures, deadlineNs);
    } catch (InterruptedIOException e) {
      abandon(decoders);
      throw e;
    }
    List<RowResult> rows = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      Throwable error = replies.errors[i];
      RowResult row = error == null ? decoders.get(i).row() : null;
      if (row == null && isServerError(error, "WRONGTYPE")) {
        row = new RowResult.Invalid(0);
      }
      if (row == null) {
        abandon(decoders);
        Throwable cause =
            error != null
                ? replies.firstFailure(i)
                : new IOException("the reply to GET key #" + i + " carried no value");
        throw failed("GET", keys, futures, cause);
      }
      rows.add(row);
    }
    for (SegmentReplyDecoder d : decoders) {
      d.finish(); // confined destinations: the staged bytes land now, on this thread
    }
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

  /** Abandons every decoder; counts those that never decoded a reply. */
  private void abandon(List<SegmentReplyDecoder> decoders) {
    for (SegmentReplyDecoder d : decoders) {
      d.abandon();
      if (d.row() == null) {
        abandonedReads.incrementAndGet();
      }
    }
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
    int n = keys.size();
    // Private copies first: Lettuce encodes on its event loop, possibly after this call failed.
    byte[][] values = new byte[n][];
    for (int i = 0; i < n; i++) {
      values[i] = sources.get(i).toArray(ValueLayout.JAVA_BYTE);
    }
    long deadlineNs = System.nanoTime() + commandTimeoutNs;
    List<Future<String>> futures = new ArrayList<>(n);
    SetArgs createOnly = SetArgs.Builder.nx();
    try {
      RedisClusterAsyncCommands<String, byte[]> c = links.next();
      for (int i = 0; i < n; i++) {
        futures.add(c.set(keys.get(i), values[i], createOnly));
        commands.incrementAndGet();
      }
    } catch (RuntimeException e) {
      throw failed("PUT", keys, futures, e);
    }
    Replies replies = await(futures, deadlineNs);
    List<RowResult> rows = new ArrayList<>(n);
    int newly = 0;
    int existed = 0;
    int rejected = 0;
    for (int i = 0; i < n; i++) {
      Throwable error = replies.errors[i];
      if (error == null) {
        boolean created = "OK".equals(replies.values[i]);
        if (created) {
          newly++;
        } else {
          existed++;
        }
        rows.add(new RowResult.Ok(values[i].length, !created));
      } else if (isServerError(error, "OOM")) {
        rejected++;
        rows.add(RowResult.Rejected.noSpace(error.getMessage())); // the server's OOM reply
      } else {
        putsNewlyWritten.addAndGet(newly);
        putsAlreadyExisted.addAndGet(existed);
        throw failed("PUT", keys, futures, replies.firstFailure(i));
      }
    }
    putsNewlyWritten.addAndGet(newly);
    putsAlreadyExisted.addAndGet(existed);
    putsRejected.addAndGet(rejected);
    return StoreResult.of(rows);
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
    for (RedisClusterAsyncCommands<String, byte[]> master :
        links.masters(System.nanoTime() + commandTimeoutNs)) {
      ScanCursor cursor = ScanCursor.INITIAL;
      while (true) {
        commands.incrementAndGet();
        KeyScanCursor<String> page = awaitOne(master.scan(cursor, scanArgs), "SCAN", namespace);
        removed += unlink(master, page.getKeys(), namespace);
        if (page.isFinished()) {
          break;
        }
        cursor = page;
      }
    }
    return removed;
  }

  private long unlink(
      RedisClusterAsyncCommands<String, byte[]> master, List<String> keys, String namespace)
      throws IOException {
    if (keys.isEmpty()) {
      return 0;
    }
    Map<Integer, List<String>> bySlot = new LinkedHashMap<>();
    for (String key : keys) {
      int slot = links.slotted() ? SlotHash.getSlot(key) : 0;
      bySlot.computeIfAbsent(slot, s -> new ArrayList<>()).add(key);
    }
    long deadlineNs = System.nanoTime() + commandTimeoutNs;
    List<Future<Long>> futures = new ArrayList<>();
    for (List<String> slotKeys : bySlot.values()) {
      for (int from = 0; from < slotKeys.size(); from += UNLINK_BATCH) {
        List<String> batch = slotKeys.subList(from, Math.min(slotKeys.size(), from + UNLINK_BATCH));
        futures.add(master.unlink(batch.toArray(String[]::new)));
        commands.incrementAndGet();
      }
    }
    Replies replies = await(futures, deadlineNs);
    long removed = 0;
    for (int i = 0; i < futures.size(); i++) {
      if (replies.errors[i] != null) {
        throw failed("UNLINK", List.of(namespace + "_"), futures, replies.firstFailure(i));
      }
      removed += (Long) replies.values[i];
    }
    return removed;
  }

  private <T> T awaitOne(Future<T> future, String op, String namespace) throws IOException {
    Replies replies = await(List.of(future), System.nanoTime() + commandTimeoutNs);
    if (replies.errors[0] != null) {
      throw failed(op, List.of(namespace + "_"), List.of(future), replies.firstFailure(0));
    }
    @SuppressWarnings("unchecked")
    T value = (T) replies.values[0];
    return value;
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

  // ------------------------------------------------------------------ waiting and failures

  /** Every future's value or failure; all waits share one deadline. */
  private static final class Replies {
    final Object[] values;
    final Throwable[] errors;
    int timedOut;

    Replies(int n) {
      values = new Object[n];
      errors = new Throwable[n];
    }

    /** The failure to report for row {@code i}: a timeout if any row timed out. */
    Throwable firstFailure(int i) {
      if (timedOut > 0) {
        for (Throwable t : errors) {
          if (t instanceof TimeoutException || t instanceof RedisCommandTimeoutException) {
            return t;
          }
        }
      }
      return errors[i];
    }
  }

  private static Replies await(List<? extends Future<?>> futures, long deadlineNs)
      throws InterruptedIOException {
    Replies replies = new Replies(futures.size());
    for (int i = 0; i < futures.size(); i++) {
      Future<?> f = futures.get(i);
      try {
        replies.values[i] =
            f.get(Math.max(0, deadlineNs - System.nanoTime()), TimeUnit.NANOSECONDS);
      } catch (ExecutionException e) {
        Throwable cause = e.getCause() == null ? e : e.getCause();
        replies.errors[i] = cause;
        if (cause instanceof RedisCommandTimeoutException) {
          replies.timedOut++;
        }
      } catch (TimeoutException e) {
        replies.errors[i] = e;
        replies.timedOut++;
      } catch (CancellationException e) {
        replies.errors[i] = e;
      } catch (InterruptedException e) {
        for (Future<?> other : futures) {
          other.cancel(false);
        }
        Thread.currentThread().interrupt();
        InterruptedIOException io = new InterruptedIOException("interrupted waiting for redis");
        io.initCause(e);
        throw io;
      }
    }
    return replies;
  }

  /**
   * Cancels whatever is still pending of a failed call, counts it, and builds the exception the
   * call throws: one line naming the operation, the keys' namespace, and what to check.
   */
  private IOException failed(
      String op, List<String> keys, List<? extends Future<?>> futures, Throwable cause) {
    int pending = 0;
    for (Future<?> f : futures) {
      if (!f.isDone()) {
        pending++;
        f.cancel(false);
      }
    }
    failedCalls.incrementAndGet();
    String what = "redis " + op + " of " + keys.size() + " key(s)";
    String where = String.join(",", settings.uris());
    String serverMessage = cause == null ? "" : String.valueOf(cause.getMessage());
    if (cause instanceof TimeoutException || cause instanceof RedisCommandTimeoutException) {
      return new IOException(
          what
              + " at "
              + where
              + " did not complete within command_timeout_ms="
              + settings.commandTimeoutMs()
              + " ("
              + pending
              + " still pending)",
          cause);
    }
    String user = settings.username().isEmpty() ? "default" : settings.username();
    if (cause instanceof RedisCommandExecutionException && serverMessage.startsWith("NOPERM")) {
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
          cause);
    }
    if (cause instanceof RedisCommandExecutionException
        && (serverMessage.startsWith("WRONGPASS") || serverMessage.startsWith("NOAUTH"))) {
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
          cause);
    }
    if (cause instanceof RedisCommandExecutionException) {
      return new IOException(what + " at " + where + " failed: " + serverMessage, cause);
    }
    return new IOException(what + " at " + where + " failed: " + RedisLinks.messages(cause), cause);
  }

  /** The Redis command a store operation sends per key. */
  private static String commandOf(String op) {
    return switch (op) {
      case "QUERY" -> "STRLEN";
      case "PUT" -> "SET";
      default -> op; // GET, SCAN, UNLINK
    };
  }

  private static boolean isServerError(Throwable error, String code) {
    return error instanceof RedisCommandExecutionException
        && error.getMessage() != null
        && (error.getMessage().equals(code) || error.getMessage().startsWith(code + " "));
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
      links.close();
    } finally {
      shutdown(resources);
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
