package io.tokenspeed.engine.kvevents;

import io.tokenspeed.core.ContentHash;
import io.tokenspeed.core.PromptKeys;

/**
 * One full page of a prompt's prefix, as a KV event names it: its P tokens, its page hash and its
 * parent's. The event hash of a page is the first 8 bytes of its SHA-256 page hash read big-endian
 * as an unsigned 64-bit integer ({@link #hash}): every replica gives the same prefix the same
 * hashes. Immutable; it reads the tokens of the prompt it was taken from.
 */
public final class KvPage {
  private final PromptKeys keys;
  private final int page;

  /** Page {@code page} of {@code keys}, which must be a full page. */
  public KvPage(PromptKeys keys, int page) {
    if (page < 0 || page >= keys.numFullPages()) {
      throw new IllegalArgumentException(
          "page=" + page + " is not one of the " + keys.numFullPages() + " full pages");
    }
    this.keys = keys;
    this.page = page;
  }

  /** The page's place in its prefix: 0 for the first. */
  public int index() {
    return page;
  }

  /** The page's SHA-256 page hash. */
  public ContentHash pageHash() {
    return keys.pageHash(page);
  }

  /** The parent page's SHA-256 page hash, or null for the first page of a prefix. */
  public ContentHash parentPageHash() {
    return page == 0 ? null : keys.pageHash(page - 1);
  }

  /** The event hash: the page hash's first 8 bytes, big-endian (unsigned). */
  public long hash() {
    return keys.pageHash(page).w0();
  }

  /** Whether the page has a parent (every page but a prefix's first). */
  public boolean hasParent() {
    return page > 0;
  }

  /** The parent's event hash; only when {@link #hasParent}. */
  public long parentHash() {
    if (page == 0) {
      throw new IllegalStateException("the first page of a prefix has no parent");
    }
    return keys.pageHash(page - 1).w0();
  }

  /** Tokens in the page: P. */
  public int numTokens() {
    return keys.layout().prefixGranularity();
  }

  /** Token {@code i} of the page, {@code 0 <= i < P}. */
  public int token(int i) {
    int p = keys.layout().prefixGranularity();
    if (i < 0 || i >= p) {
      throw new IndexOutOfBoundsException("token " + i + " of a page of " + p);
    }
    return keys.token(page * p + i);
  }

  @Override
  public String toString() {
    return "KvPage{" + page + ", " + Long.toUnsignedString(hash()) + "}";
  }
}
