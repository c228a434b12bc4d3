package io.tokenspeed.engine;

import io.tokenspeed.cache.Tier;
import io.tokenspeed.cache.TierListener;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.engine.kvevents.KvEvent;
import io.tokenspeed.engine.kvevents.KvEventSink;
import io.tokenspeed.engine.kvevents.KvMedium;
import io.tokenspeed.engine.kvevents.KvPage;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Turns what the tiers publish and drop into KV events (docs/kv-events.md) and hands each round's
 * to the {@link KvEventSink}. The loop thread's only: the tiers call it from inside their
 * operations ({@link TierListener}), the storage transfer manager when a backup stored a key,
 * intake with every request's keys, the administration around a full clear, and the round's end
 * flushes.
 *
 * <p><b>Which publication is a page.</b> A page of P tokens is held by a tier when the tier
 * publishes its <em>sentinel</em>: the last row of the page ({@code page_offset = P/bg - 1}) in the
 * first full-history group, or in group 0 when the model has none. A page is stored in a tier when
 * the tier publishes its sentinel, removed when the sentinel leaves the tier's index (evicted or
 * unpublished), and stored in L3 when a backup PUT of its sentinel retired accepted. A full-history
 * group publishes a page's rows in order, so when its sentinel is published the page is whole; an
 * eviction that takes a page's earlier rows first leaves the page announced until its sentinel goes
 * too.
 *
 * <p><b>Page to tokens.</b> A tier publishes a key, not tokens; {@code BlockStored} carries the
 * page's tokens and its parent. Intake notes every request's {@link PromptKeys}: each full page not
 * held by a tier goes into a bounded map of pages not yet announced ({@value #PENDING_PAGES}
 * entries, least recently noted dropped first). A page a tier announces moves to the map of held
 * pages (as large as the tiers: a page is there while some tier holds it) and back when the last
 * tier drops it. A sentinel published under a hash that neither map knows — a tail (the partial
 * page at an exact boundary, which is no page) or a page dropped from the bounded map before a tier
 * published it — is not announced, and so never removed either; {@link #unresolved} counts them.
 *
 * <p><b>Clears.</b> A full clear (a cache clear, a namespace rotation, a weight update) suppresses
 * the removals the clear itself makes and appends one {@code AllBlocksCleared}; a Device-only clear
 * is ordinary evictions (one {@code BlockRemoved} of the Device for the pages it dropped). L3 has
 * no removals: only a full clear forgets what it holds.
 *
 * <p><b>Batches.</b> Events of one round are handed over once, in order, at the round's end.
 * Consecutive stores in one tier of a chain (each page the child of the one before) merge into one
 * {@code BlockStored}, consecutive removals from one tier into one {@code BlockRemoved}.
 */
final class KvEventRecorder implements TierListener {
  private static final System.Logger LOG = System.getLogger(KvEventRecorder.class.getName());

  /** The most pages noted at intake and not yet announced that the recorder remembers. */
  static final int PENDING_PAGES = 1 << 16;

  private final KvEventSink sink;
  private final int sentinelGroup;
  private final int sentinelOffset;

  /** Pages noted at intake that no tier holds, least recently noted first. */
  private final LinkedHashMap<ContentHash, KvPage> pending;

  /** Pages some tier holds, with the tiers that hold them. */
  private final Map<ContentHash, Held> held = new HashMap<>();

  /** The round's events so far, as builders (the last one may still grow). */
  private final List<Object> round = new ArrayList<>();

  /** A full clear runs: its removals are not events. */
  private boolean clearing;

  private long unresolved;
  private long batches;
  private boolean sinkFailureLogged;

  private static final class Held {
    final KvPage page;
    int tiers; // bit per Tier ordinal

    Held(KvPage page) {
      this.page = page;
    }
  }

  private static final class Stored {
    final KvMedium medium;
    final List<KvPage> pages = new ArrayList<>(4);

    Stored(KvMedium medium) {
      this.medium = medium;
    }
  }

  private static final class Removed {
    final KvMedium medium;
    long[] hashes = new long[4];
    int n;

    Removed(KvMedium medium) {
      this.medium = medium;
    }

    void add(long h) {
      if (n == hashes.length) {
        hashes = Arrays.copyOf(hashes, 2 * n);
      }
      hashes[n++] = h;
    }
  }

  KvEventRecorder(CacheLayout layout, KvEventSink sink) {
    this(layout, sink, PENDING_PAGES);
  }

  KvEventRecorder(CacheLayout layout, KvEventSink sink, int pendingPages) {
    this.sink = sink;
    this.sentinelGroup = sentinelGroup(layout);
    CacheGroupSpec g = layout.group(sentinelGroup);
    this.sentinelOffset = layout.prefixGranularity() / g.blockGranularity() - 1;
    this.pending =
        new LinkedHashMap<>(16, 0.75f, true) {
          @Override
          protected boolean removeEldestEntry(Map.Entry<ContentHash, KvPage> eldest) {
            return size() > pendingPages;
          }
        };
  }

  /** The group whose rows stand for pages: the first full-history group, else group 0. */
  static int sentinelGroup(CacheLayout layout) {
    for (CacheGroupSpec g : layout.groups()) {
      if (g.kind() instanceof GroupKind.FullHistory) {
        return g.groupId();
      }
    }
    return 0;
  }

  /** Whether {@code key} is a page's sentinel row. */
  boolean isSentinel(CacheKey key) {
    return key.groupId() == sentinelGroup && key.pageOffset() == sentinelOffset;
  }

  /** Intake: the pages of a request's known tokens, for the stores to come. */
  void noteKeys(PromptKeys keys) {
    for (int i = 0; i < keys.numFullPages(); i++) {
      ContentHash h = keys.pageHash(i);
      if (!held.containsKey(h) && pending.get(h) == null) {
        pending.put(h, new KvPage(keys, i));
      }
    }
  }

  @Override
  public void published(Tier tier, CacheKey key) {
    if (!isSentinel(key)) {
      return;
    }
    ContentHash h = key.pageHash();
    Held x = held.get(h);
    if (x == null) {
      KvPage page = pending.remove(h);
      if (page == null) {
        unresolved++;
        return;
      }
      x = new Held(page);
      held.put(h, x);
    }
    int bit = 1 << tier.ordinal();
    if ((x.tiers & bit) != 0) {
      return;
    }
    x.tiers |= bit;
    stored(medium(tier), x.page);
  }

  @Override
  public void removed(Tier tier, CacheKey key) {
    if (clearing || !isSentinel(key)) {
      return;
    }
    ContentHash h = key.pageHash();
    Held x = held.get(h);
    int bit = 1 << tier.ordinal();
    if (x == null || (x.tiers & bit) == 0) {
      return; // never announced
    }
    x.tiers &= ~bit;
    if (x.tiers == 0) {
      held.remove(h);
      pending.put(h, x.page);
    }
    Object last = round.isEmpty() ? null : round.getLast();
    Removed r;
    if (last instanceof Removed prev && prev.medium == medium(tier)) {
      r = prev;
    } else {
      r = new Removed(medium(tier));
      round.add(r);
    }
    r.add(x.page.hash());
  }

  /** A backup PUT of {@code key} retired accepted (current generation). */
  void storedInStorage(CacheKey key) {
    if (!isSentinel(key)) {
      return;
    }
    ContentHash h = key.pageHash();
    Held x = held.get(h);
    KvPage page = x != null ? x.page : pending.get(h);
    if (page == null) {
      unresolved++;
      return;
    }
    stored(KvMedium.STORAGE, page);
  }

  /** A full clear starts: the removals it makes are not events. */
  void beginClear() {
    clearing = true;
  }

  /** A full clear ended: every tier is empty; one {@code AllBlocksCleared}. */
  void endClear() {
    clearing = false;
    for (Map.Entry<ContentHash, Held> e : held.entrySet()) {
      pending.put(e.getKey(), e.getValue().page);
    }
    held.clear();
    round.add(KvEvent.AllBlocksCleared.INSTANCE);
  }

  /** The round's end: its events, if any, go to the sink as one batch. */
  void flush() {
    if (round.isEmpty()) {
      return;
    }
    List<KvEvent> batch = new ArrayList<>(round.size());
    for (Object o : round) {
      batch.add(
          switch (o) {
            case Stored s -> new KvEvent.BlockStored(s.medium, s.pages);
            case Removed r -> new KvEvent.BlockRemoved(r.medium, Arrays.copyOf(r.hashes, r.n));
            case KvEvent e -> e;
            default -> throw new IllegalStateException("not an event: " + o);
          });
    }
    round.clear();
    batches++;
    try {
      sink.publish(List.copyOf(batch));
    } catch (RuntimeException e) {
      if (!sinkFailureLogged) {
        sinkFailureLogged = true;
        LOG.log(
            System.Logger.Level.WARNING, "the KV event sink failed; its batch is lost: " + e, e);
      }
    }
  }

  /** Sentinel publications and stores whose page the recorder did not know (not announced). */
  long unresolved() {
    return unresolved;
  }

  /** Batches handed to the sink. */
  long batches() {
    return batches;
  }

  /** Pages some tier holds (as announced). */
  int heldPages() {
    return held.size();
  }

  private void stored(KvMedium medium, KvPage page) {
    Object last = round.isEmpty() ? null : round.getLast();
    if (last instanceof Stored s
        && s.medium == medium
        && s.pages.getLast().pageHash().equals(page.parentPageHash())) {
      s.pages.add(page);
      return;
    }
    Stored s = new Stored(medium);
    s.pages.add(page);
    round.add(s);
  }

  private static KvMedium medium(Tier tier) {
    return tier == Tier.DEVICE ? KvMedium.DEVICE : KvMedium.HOST;
  }
}
