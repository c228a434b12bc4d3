package io.tokenspeed.server.router;

import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * What one backend's KV events say it holds: the block hashes of its Device and Host tiers, the
 * blocks it wrote to the shared L3 store, and the prefixes the router sent it lately that its
 * events have not confirmed yet. Every backend may restore what any wrote to the store: a lookup
 * reads the store's blocks of all backends together ({@link StoreIndex}).
 *
 * <pre>
 *   request's page hashes   h0  h1  h2  h3  h4  h5  h6
 *   Device (or pending)     ●   ●   ●   .
 *   Host                    .   ●   ●   ●   ●
 *                           └─ device 3 ┘
 *                           └──── local 5 ──────┘      (every page in Device, Host or pending)
 *   store (any backend's)                       ●   .  → store 1 more page past local
 * </pre>
 *
 * <p><b>Pending prefixes.</b> A request's pages are stored (and their events sent) only as it is
 * prefilled: until then, a burst of requests sharing a new prefix would each find it nowhere and
 * spread over the backends. So the router notes each routed request's pages as <i>pending</i> on
 * the backend it chose ({@link #notePending}); they count as Device pages for {@link
 * #DEFAULT_PENDING_MS} or until an event names them (stored on a tier, or removed), whichever comes
 * first. At most {@link #MAX_PENDING} pages are pending per backend, the oldest dropped first. Only
 * a backend whose events are live gets pending pages: without events nothing would ever confirm or
 * correct them.
 *
 * <p>Bounded: the tiers' hashes are one {@link BlockTable} of at most {@code maxBlocks}.
 *
 * <p>Thread-safe: the backend's event subscriber writes, request threads read; one lock.
 */
final class PrefixIndex {
  /** The Device tier's bit. */
  static final int DEVICE = 1;

  /** The Host tier's bit. */
  static final int HOST = 2;

  /** The bit of a block the backend wrote to the shared L3 store. */
  static final int STORE = 4;

  /** How long a routed request's pages count as the chosen backend's without an event. */
  static final long DEFAULT_PENDING_MS = 10_000;

  /** The most pending pages per backend. */
  static final int MAX_PENDING = 65_536;

  /** The longest prefix a backend holds, in pages: in its Device tier, and in Device or Host. */
  record Match(int devicePages, int localPages) {
    static final Match NONE = new Match(0, 0);

    Match {
      if (devicePages < 0 || localPages < devicePages) {
        throw new IllegalArgumentException(
            "devicePages=" + devicePages + ", localPages=" + localPages + ": 0 <= device <= local");
      }
    }
  }

  private final BlockTable tiers;
  private final LongSupplier nanoClock;
  private final long pendingNs;
  private final LinkedHashMap<Long, Long> pending = new LinkedHashMap<>();

  PrefixIndex(int maxBlocks, LongSupplier nanoClock, long pendingMs) {
    this.tiers = new BlockTable(maxBlocks);
    this.nanoClock = nanoClock;
    this.pendingNs = pendingMs * 1_000_000L;
  }

  /**
   * The blocks {@code hashes} were stored on {@code tier} ({@link #DEVICE}, {@link #HOST}, {@link
   * #STORE}).
   */
  synchronized void onStored(long[] hashes, int tier) {
    for (long h : hashes) {
      tiers.add(h, tier);
      pending.remove(h);
    }
  }

  /** The blocks {@code hashes} left {@code tier}. */
  synchronized void onRemoved(long[] hashes, int tier) {
    for (long h : hashes) {
      tiers.remove(h, tier);
      pending.remove(h);
    }
  }

  /**
   * Forgets the backend's Device and Host blocks (what it holds is no longer known: events were
   * lost, or it restarted); what it wrote to the store stays.
   */
  synchronized void clear() {
    tiers.removeAll(DEVICE | HOST);
    pending.clear();
  }

  /**
   * Forgets everything the backend reported ({@code AllBlocksCleared}: its caches were cleared, and
   * what it wrote to the store before is out of its reach).
   */
  synchronized void clearAll() {
    tiers.removeAll(DEVICE | HOST | STORE);
    pending.clear();
  }

  /** Notes {@code hashes} (a request just routed here) as pending. */
  synchronized void notePending(long[] hashes) {
    long deadline = nanoClock.getAsLong() + pendingNs;
    for (long h : hashes) {
      if ((tiers.get(h) & DEVICE) == 0) {
        pending.remove(h); // re-inserted last: the youngest
        pending.put(h, deadline);
      }
    }
    Iterator<Map.Entry<Long, Long>> it = pending.entrySet().iterator();
    while (pending.size() > MAX_PENDING && it.hasNext()) {
      it.next();
      it.remove();
    }
  }

  /** The longest prefixes of {@code hashes} this backend holds. */
  synchronized Match match(long[] hashes, int numPages) {
    long now = nanoClock.getAsLong();
    expire(now);
    int device = -1;
    int i = 0;
    for (; i < numPages; i++) {
      long h = hashes[i];
      int b = tiers.get(h);
      boolean onDevice = (b & DEVICE) != 0 || pending.containsKey(h);
      if (!onDevice && device < 0) {
        device = i;
      }
      if (!onDevice && (b & HOST) == 0) {
        break;
      }
    }
    return new Match(device < 0 ? i : device, i);
  }

  private void expire(long now) {
    Iterator<Map.Entry<Long, Long>> it = pending.entrySet().iterator();
    while (it.hasNext()) {
      Map.Entry<Long, Long> e = it.next();
      if (e.getValue() - now > 0) {
        break; // in insertion order, so in deadline order: the rest are younger
      }
      it.remove();
    }
  }

  /**
   * The tiers ({@link #DEVICE}, {@link #HOST}, {@link #STORE}) that hold {@code hash}, 0 for none.
   */
  synchronized int tiersOf(long hash) {
    return tiers.get(hash);
  }

  /** Blocks held on every tier of {@code mask} now. */
  synchronized int blocks(int mask) {
    return tiers.count(mask);
  }

  /** Blocks held on any tier now. */
  synchronized int size() {
    return tiers.size();
  }

  /** Pending pages now (expired ones included until the next lookup). */
  synchronized int pending() {
    return pending.size();
  }

  /** Blocks evicted to stay within the bound so far. */
  synchronized long evicted() {
    return tiers.evicted();
  }
}
