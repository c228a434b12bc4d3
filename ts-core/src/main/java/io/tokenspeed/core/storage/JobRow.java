package io.tokenspeed.core.storage;

/**
 * One object of a storage job on one rank: its store key and, for GET and PUT rows this rank owns,
 * the Host range it moves. A row this rank does not own (page-cyclic ownership) carries no range:
 * it is reported as a retired success with no bytes and no object evidence.
 *
 * @param key the store's object key (see {@link io.tokenspeed.core.ObjectKey})
 * @param range the Host bytes, or null for QUERY rows and rows owned by another rank
 * @param owned whether this rank moves this row's bytes
 */
public record JobRow(String key, HostRange range, boolean owned) {
  public JobRow {
    if (key == null || key.isEmpty()) {
      throw new IllegalArgumentException("job row key=" + key + " must be non-empty");
    }
    if (!owned && range != null) {
      throw new IllegalArgumentException("job row " + key + " is not owned but has a range");
    }
  }

  /** An owned row moving {@code range}. */
  public static JobRow owned(String key, HostRange range) {
    return new JobRow(key, range, true);
  }

  /** A row another rank owns. */
  public static JobRow notOwned(String key) {
    return new JobRow(key, null, false);
  }

  /** A QUERY row. */
  public static JobRow query(String key) {
    return new JobRow(key, null, true);
  }
}
