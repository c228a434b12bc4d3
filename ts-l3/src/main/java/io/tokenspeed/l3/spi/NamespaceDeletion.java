package io.tokenspeed.l3.spi;

/**
 * What a namespace deletion did ({@link Store#purgeNamespace}): how many objects the store removed,
 * how many it knows stayed, and why objects may have stayed. An administrative result, reported by
 * a weight update; it is not an error when objects stayed: their keys belong to a namespace no
 * later key is built under, so they are never read again and the store reclaims them as it evicts.
 *
 * @param removedObjects objects removed over every pass; -1 when the store cannot count them
 * @param remainingObjects objects known to have stayed; -1 when the store cannot count them (see
 *     {@code remainingReason})
 * @param passes removal passes run (0: there was no store to delete from)
 * @param waitedMs milliseconds spent waiting between or before passes
 * @param remainingReason why objects may have stayed; empty when none can have
 */
public record NamespaceDeletion(
    long removedObjects, long remainingObjects, int passes, long waitedMs, String remainingReason) {

  public NamespaceDeletion {
    if (removedObjects < -1 || remainingObjects < -1) {
      throw new IllegalArgumentException(
          "namespace deletion removed_objects="
              + removedObjects
              + " remaining_objects="
              + remainingObjects
              + " must be >= -1 (-1: not countable)");
    }
    if (passes < 0 || waitedMs < 0) {
      throw new IllegalArgumentException(
          "namespace deletion passes=" + passes + " must be >= 0, waited_ms=" + waitedMs + " >= 0");
    }
    if (remainingReason == null) {
      throw new IllegalArgumentException("namespace deletion remaining_reason=null");
    }
  }

  /** Nothing to delete: no store. */
  public static final NamespaceDeletion NONE = new NamespaceDeletion(0, 0, 0, 0, "");

  /** One pass that removed every matching object ({@code removed}: -1 when not counted). */
  public static NamespaceDeletion complete(long removed) {
    return new NamespaceDeletion(removed, 0, 1, 0, "");
  }
}
