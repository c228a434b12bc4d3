package io.tokenspeed.core;

/**
 * The identity of one cached block, independent of tier, rank and deployment: the group, the
 * content hash of the page (or tail) the block belongs to, and the block's ordinal inside that
 * page. {@link ObjectKey} turns it into the store's key.
 */
public record CacheKey(int groupId, ContentHash pageHash, int pageOffset) {
  public CacheKey {
    if (groupId < 0) {
      throw new IllegalArgumentException("group_id=" + groupId + " must be non-negative");
    }
    if (pageHash == null) {
      throw new IllegalArgumentException("page hash is missing");
    }
    if (pageOffset < 0) {
      throw new IllegalArgumentException("page_offset=" + pageOffset + " must be non-negative");
    }
  }
}
