package io.tokenspeed.engine;

import io.tokenspeed.core.control.RankEvents;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * The agreement of a tensor-parallel replica's ranks on what their KV transfers did (docs/pd.md,
 * "Tensor parallelism"). Each rank's transport sees its own pairs only; whatever changes the
 * scheduler or a tier (an ACK, a landing, a copy's end, a fence, a failure) is first reported as an
 * {@link Event}, rides the round's exchange ({@link RankEvents}), and is applied on every rank in
 * the agreed round that makes it complete, in the same order on every rank:
 *
 * <pre>
 *   FAILED               complete when any rank reported it (the lowest rank's reason)
 *   ENDPOINT             a rank's own fact, applied as it arrives
 *   the others           complete when every rank reported it (a FENCED carries the lowest rank's
 *                        error, if any)
 * </pre>
 *
 * A single rank agrees with itself at once: {@link #report} applies the event right away, so an
 * engine of one rank runs exactly as it would without the agreement.
 *
 * <p>Loop thread only.
 */
final class PdEvents {
  /** What a rank reports. */
  enum Kind {
    /** Prefill: every pair of the request was acknowledged with the blocks it needs. */
    ACKED,
    /**
     * Either side: a pair failed, or the request cannot be served here; carries the reason. Flagged
     * {@link Event#cancelled} when the pair ended because the peer's half was cancelled by its
     * client: the request then ends cancelled, not with an error.
     */
    FAILED,
    /** Prefill: the Device → Host copy the transfer sends from completed. */
    COPIED,
    /**
     * Prefill: every pair's fence stands; carries the first pair's error, if any, flagged {@link
     * Event#cancelled} when that error is the decode half's client cancelling.
     */
    FENCED,
    /** Decode: every pair landed and the Host → Device copy completed. */
    LANDED,
    /** Decode: after the request ended, nothing writes its staging blocks any more. */
    RELEASED,
    /** Decode: this rank's KV endpoint ({@code id} is the rank, the text host:port). */
    ENDPOINT
  }

  /**
   * One report: its kind, the request (or rank) it is about, a text (or null), and whether the text
   * says that the peer's half of the request was cancelled by its client (FAILED, FENCED).
   */
  record Event(Kind kind, long id, String text, boolean cancelled) {
    Event(Kind kind, long id, String text) {
      this(kind, id, text, false);
    }
  }

  /** The bit of an encoded event's kind byte that says {@link Event#cancelled}. */
  private static final int CANCELLED_BIT = 0x80;

  /** The longest text an event carries, in UTF-8 bytes (a longer one is cut). */
  static final int MAX_TEXT_BYTES = 512;

  private final int size;
  private final Consumer<Event> apply;
  private final ArrayDeque<Event> outgoing = new ArrayDeque<>();

  /** Reports of the events not yet complete: by kind and id, which ranks reported, and texts. */
  private final Map<Key, Reports> pending = new HashMap<>();

  /** Ids whose FAILED was applied, with the round it was: later reports of them are dropped. */
  private final Map<Long, Long> failed = new HashMap<>();

  private long rounds;

  private record Key(Kind kind, long id) {}

  private static final class Reports {
    final String[] texts;
    final boolean[] cancelled;
    int count;

    Reports(int size) {
      texts = new String[size];
      cancelled = new boolean[size];
    }
  }

  PdEvents(int size, Consumer<Event> apply) {
    this.size = size;
    this.apply = apply;
  }

  /** Reports an event of this rank: applied now on a single rank, else sent with the next round. */
  void report(Kind kind, long id, String text) {
    report(kind, id, text, false);
  }

  /**
   * Reports an event of this rank whose text, when {@code cancelled}, says that the peer's half was
   * cancelled by its client (see {@link Event#cancelled}).
   */
  void report(Kind kind, long id, String text, boolean cancelled) {
    Event e = new Event(kind, id, cut(text), cancelled);
    if (size == 1) {
      apply.accept(e);
    } else {
      outgoing.add(e);
    }
  }

  /** Whether events wait to be sent. */
  boolean outgoing() {
    return !outgoing.isEmpty();
  }

  /** The events for this round's report, as many as fit; the rest wait for the next round. */
  RankEvents take() {
    if (outgoing.isEmpty()) {
      return RankEvents.EMPTY;
    }
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    List<byte[]> encoded = new ArrayList<>();
    int total = 2;
    for (Iterator<Event> it = outgoing.iterator(); it.hasNext(); ) {
      byte[] one = encode(it.next());
      if (total + one.length > RankEvents.MAX_BYTES || encoded.size() == 0xFFFF) {
        break;
      }
      total += one.length;
      encoded.add(one);
      it.remove();
    }
    bytes.write(encoded.size() >>> 8);
    bytes.write(encoded.size() & 0xFF);
    for (byte[] one : encoded) {
      bytes.writeBytes(one);
    }
    return new RankEvents(bytes.toByteArray());
  }

  /**
   * Applies what the agreed round completes: {@code events} are every rank's reports of the round,
   * by rank (an empty list for none). Every rank calls this with the same lists, in the same round.
   */
  void agreed(List<RankEvents> events) {
    rounds++;
    failed.values().removeIf(r -> rounds - r > 8); // no rank reports a failed id this late
    if (events.isEmpty()) {
      return;
    }
    List<List<Event>> byRank = new ArrayList<>();
    for (RankEvents re : events) {
      byRank.add(decode(re));
    }
    // failures first: a request that failed this round applies nothing else of it
    for (int r = 0; r < byRank.size(); r++) {
      for (Event e : byRank.get(r)) {
        if (e.kind() == Kind.ENDPOINT) {
          apply.accept(e); // a rank's own fact: nobody else reports it
        } else if (e.kind() == Kind.FAILED && !failed.containsKey(e.id())) {
          failed.put(e.id(), rounds);
          pending.keySet().removeIf(k -> k.id() == e.id() && k.kind() != Kind.RELEASED);
          apply.accept(e);
        }
      }
    }
    for (int r = 0; r < byRank.size(); r++) {
      for (Event e : byRank.get(r)) {
        if (e.kind() == Kind.FAILED
            || e.kind() == Kind.ENDPOINT
            || (failed.containsKey(e.id()) && e.kind() != Kind.RELEASED)) {
          continue;
        }
        Key key = new Key(e.kind(), e.id());
        Reports reports = pending.computeIfAbsent(key, k -> new Reports(size));
        if (reports.texts[r] == null) {
          reports.count++;
          reports.texts[r] = e.text() == null ? "" : e.text();
          reports.cancelled[r] = e.cancelled();
        }
        if (reports.count == size) {
          pending.remove(key);
          String text = null;
          boolean cancelled = false;
          for (int k = 0; k < size; k++) {
            if (!reports.texts[k].isEmpty()) {
              text = reports.texts[k];
              cancelled = reports.cancelled[k];
              break;
            }
          }
          apply.accept(new Event(e.kind(), e.id(), text, cancelled));
        }
      }
    }
  }

  /** Forgets every report of {@code id} (its request ended on every rank in this round). */
  void forget(long id) {
    pending.keySet().removeIf(k -> k.id() == id && k.kind() != Kind.RELEASED);
  }

  private static String cut(String text) {
    if (text == null) {
      return null;
    }
    byte[] b = text.getBytes(StandardCharsets.UTF_8);
    if (b.length <= MAX_TEXT_BYTES) {
      return text;
    }
    return new String(b, 0, MAX_TEXT_BYTES, StandardCharsets.UTF_8);
  }

  private static byte[] encode(Event e) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(e.kind().ordinal() | (e.cancelled() ? CANCELLED_BIT : 0));
      out.writeLong(e.id());
      byte[] text = e.text() == null ? null : e.text().getBytes(StandardCharsets.UTF_8);
      out.writeShort(text == null ? 0xFFFF : text.length);
      if (text != null) {
        out.write(text);
      }
    } catch (IOException ex) {
      throw new UncheckedIOException(ex);
    }
    return bytes.toByteArray();
  }

  /** A rank's events; one this build cannot read stops the replica. */
  static List<Event> decode(RankEvents re) {
    if (re.isEmpty()) {
      return List.of();
    }
    List<Event> out = new ArrayList<>();
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(re.bytes()))) {
      int n = in.readUnsignedShort();
      for (int i = 0; i < n; i++) {
        int kindByte = in.readUnsignedByte();
        int kind = kindByte & ~CANCELLED_BIT;
        if (kind >= Kind.values().length) {
          throw new IllegalStateException(
              "a rank reported PD event kind " + kind + ", unknown here");
        }
        long id = in.readLong();
        int len = in.readUnsignedShort();
        String text = null;
        if (len != 0xFFFF) {
          byte[] b = in.readNBytes(len);
          if (b.length != len) {
            throw new IllegalStateException("a rank's PD event is cut short");
          }
          text = new String(b, StandardCharsets.UTF_8);
        }
        out.add(new Event(Kind.values()[kind], id, text, (kindByte & CANCELLED_BIT) != 0));
      }
      if (in.available() != 0) {
        throw new IllegalStateException("a rank's PD events carry trailing bytes");
      }
    } catch (IOException ex) {
      throw new IllegalStateException("a rank's PD events are cut short", ex);
    }
    return out;
  }
}
