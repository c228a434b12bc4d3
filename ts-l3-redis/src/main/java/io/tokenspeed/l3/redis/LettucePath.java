package io.tokenspeed.l3.redis;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.SetArgs;
import io.lettuce.core.cluster.api.async.RedisClusterAsyncCommands;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.CommandType;
import io.tokenspeed.l3.spi.RowResult;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The data path over TLS ({@code tls=true}): GET, SET NX and STRLEN through Lettuce's asynchronous
 * API, pipelined on one of a few multiplexed connections. The direct path ({@link DirectPath})
 * speaks plain TCP only; this one keeps TLS available, at Lettuce's cost per call.
 *
 * <p>Why it still retires its failures:
 *
 * <ul>
 *   <li><b>PUT</b> copies every source segment into a private array on the calling thread before it
 *       issues any command. Lettuce encodes values later, on its event loop, and may still do so
 *       after the call timed out; it then reads the private copy, never Host memory.
 *   <li><b>GET</b> decodes each reply with a {@link SegmentReplyDecoder} that copies straight from
 *       the socket buffer into the destination. Lettuce decodes a reply even when its command
 *       already timed out, so before a failed call throws it abandons every decoder; abandoning
 *       takes the decoder's lock, so when the call throws no copy is in progress and none can start
 *       ({@code lateReplies} counts the replies dropped that way). A destination of a confined
 *       arena, which the event loop may not touch, is staged in a private array instead and copied
 *       in by the calling thread after the call succeeded.
 *   <li><b>QUERY</b> hands the client no segment at all.
 * </ul>
 */
final class LettucePath {

  private final RedisLinks links;
  private final AtomicLong commands;
  private final AtomicLong abandonedReads;
  private final AtomicLong lateReplies;

  LettucePath(
      RedisLinks links, AtomicLong commands, AtomicLong abandonedReads, AtomicLong lateReplies) {
    this.links = links;
    this.commands = commands;
    this.abandonedReads = abandonedReads;
    this.lateReplies = lateReplies;
  }

  RedisStore.Answers exists(List<String> keys, long deadlineNs) throws IOException {
    int n = keys.size();
    List<Future<Long>> futures = new ArrayList<>(n);
    try {
      RedisClusterAsyncCommands<String, byte[]> c = links.next();
      for (String key : keys) {
        futures.add(c.strlen(key));
        commands.incrementAndGet();
      }
    } catch (RuntimeException e) {
      throw failure(futures, e);
    }
    Replies replies = await(futures, deadlineNs);
    RedisStore.Answers answers = new RedisStore.Answers(n);
    for (int i = 0; i < n; i++) {
      Throwable error = replies.errors[i];
      if (error == null) {
        long length = (Long) replies.values[i];
        answers.rows()[i] = length > 0 ? new RowResult.Ok(length, false) : RowResult.MISSING;
      } else if (!serverAnswer(answers, i, error, false)) {
        throw failure(futures, error);
      }
    }
    return answers;
  }

  RedisStore.Answers get(List<String> keys, List<MemorySegment> destinations, long deadlineNs)
      throws IOException {
    int n = keys.size();
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
      throw failure(futures, e);
    }
    Replies replies;
    try {
      replies = await(futures, deadlineNs);
    } catch (IOException e) {
      abandon(decoders);
      throw e;
    }
    RedisStore.Answers answers = new RedisStore.Answers(n);
    for (int i = 0; i < n; i++) {
      Throwable error = replies.errors[i];
      RowResult row = error == null ? decoders.get(i).row() : null;
      if (row != null) {
        answers.rows()[i] = row;
      } else if (error == null || !serverAnswer(answers, i, error, false)) {
        abandon(decoders);
        throw failure(
            futures,
            error != null
                ? error
                : new IOException("the reply to GET key #" + i + " carried no value"));
      }
    }
    for (SegmentReplyDecoder d : decoders) {
      d.finish(); // confined destinations: the staged bytes land now, on this thread
    }
    return answers;
  }

  RedisStore.Answers put(List<String> keys, List<MemorySegment> sources, long deadlineNs)
      throws IOException {
    int n = keys.size();
    // Private copies first: Lettuce encodes on its event loop, possibly after this call failed.
    byte[][] values = new byte[n][];
    for (int i = 0; i < n; i++) {
      values[i] = sources.get(i).toArray(ValueLayout.JAVA_BYTE);
    }
    List<Future<String>> futures = new ArrayList<>(n);
    SetArgs createOnly = SetArgs.Builder.nx();
    try {
      RedisClusterAsyncCommands<String, byte[]> c = links.next();
      for (int i = 0; i < n; i++) {
        futures.add(c.set(keys.get(i), values[i], createOnly));
        commands.incrementAndGet();
      }
    } catch (RuntimeException e) {
      throw failure(futures, e);
    }
    Replies replies = await(futures, deadlineNs);
    RedisStore.Answers answers = new RedisStore.Answers(n);
    for (int i = 0; i < n; i++) {
      Throwable error = replies.errors[i];
      if (error == null) {
        boolean created = "OK".equals(replies.values[i]);
        answers.rows()[i] = new RowResult.Ok(values[i].length, !created);
      } else if (!serverAnswer(answers, i, error, true)) {
        throw failure(futures, error);
      }
    }
    return answers;
  }

  /**
   * Records a server's error reply as row {@code i}'s answer (WRONGTYPE, OOM) or as its error;
   * false when {@code error} is no server reply (a timeout, a lost connection).
   */
  private static boolean serverAnswer(
      RedisStore.Answers answers, int i, Throwable error, boolean put) {
    if (!(error instanceof RedisCommandExecutionException) || error.getMessage() == null) {
      return false;
    }
    String text = error.getMessage();
    if (!put && DirectCall.isCode(text, "WRONGTYPE")) {
      answers.rows()[i] = new RowResult.Invalid(0);
    } else if (put && DirectCall.isCode(text, "OOM")) {
      answers.rows()[i] = RowResult.Rejected.noSpace(text);
    } else {
      answers.errors()[i] = text;
    }
    return true;
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

  // ------------------------------------------------------------------ waiting and failures

  /** Every future's value or failure; all waits share one deadline. */
  private static final class Replies {
    final Object[] values;
    final Throwable[] errors;

    Replies(int n) {
      values = new Object[n];
      errors = new Throwable[n];
    }
  }

  /**
   * Waits for every future; a timeout of any fails the whole call as {@link RedisStore.TimedOut}.
   */
  private static Replies await(List<? extends Future<?>> futures, long deadlineNs)
      throws IOException {
    Replies replies = new Replies(futures.size());
    int timedOut = 0;
    Throwable timeout = null;
    for (int i = 0; i < futures.size(); i++) {
      Future<?> f = futures.get(i);
      try {
        replies.values[i] =
            f.get(Math.max(0, deadlineNs - System.nanoTime()), TimeUnit.NANOSECONDS);
      } catch (ExecutionException e) {
        Throwable cause = e.getCause() == null ? e : e.getCause();
        replies.errors[i] = cause;
        if (cause instanceof RedisCommandTimeoutException) {
          timedOut++;
          timeout = cause;
        }
      } catch (TimeoutException e) {
        replies.errors[i] = e;
        timedOut++;
        timeout = e;
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
    if (timedOut > 0) {
      int pending = 0;
      for (Future<?> f : futures) {
        if (!f.isDone()) {
          pending++;
          f.cancel(false);
        }
      }
      throw new RedisStore.TimedOut(Math.max(pending, timedOut), timeout);
    }
    return replies;
  }

  /** Cancels whatever is still pending and wraps {@code cause} (no server reply) for the store. */
  private static IOException failure(List<? extends Future<?>> futures, Throwable cause) {
    for (Future<?> f : futures) {
      if (!f.isDone()) {
        f.cancel(false);
      }
    }
    if (cause instanceof IOException io) {
      return io;
    }
    return new IOException(RedisLinks.messages(cause), cause);
  }
}
