package io.tokenspeed.core;

import java.util.List;

/**
 * The cache geometry of a deployment: the page size {@code P} (tokens per content page, the unit of
 * reuse), the element type and the ordered cache groups.
 *
 * <pre>
 *   tokens   0        bg       2bg               P                2P
 *            |--row0--|--row1--|  ...  |--rowk--|--row k+1--| ... |
 *            |<------------- page 0 ----------->|<--- page 1 ---->|
 *   page offset of row i = (i*bg mod P) / bg,  in 0 .. P/bg - 1
 * </pre>
 */
public record CacheLayout(int prefixGranularity, String dtype, List<CacheGroupSpec> groups) {

  /** Largest page size accepted, in tokens. */
  public static final int MAX_PREFIX_GRANULARITY = 1 << 20;

  public CacheLayout {
    if (prefixGranularity < 1 || prefixGranularity > MAX_PREFIX_GRANULARITY) {
      throw new IllegalArgumentException(
          "prefix_granularity="
              + prefixGranularity
              + " must be in [1, "
              + MAX_PREFIX_GRANULARITY
              + "]");
    }
    if (dtype == null || dtype.isBlank()) {
      throw new IllegalArgumentException("dtype=" + dtype + " must be non-empty");
    }
    if (groups == null || groups.isEmpty()) {
      throw new IllegalArgumentException(
          "groups=" + groups + ": a cache layout needs at least one group");
    }
    groups = List.copyOf(groups);
    for (int i = 0; i < groups.size(); i++) {
      CacheGroupSpec g = groups.get(i);
      if (g.groupId() != i) {
        throw new IllegalArgumentException(
            "group at position " + i + " has group_id=" + g.groupId() + ", expected " + i);
      }
      if (prefixGranularity % g.blockGranularity() != 0) {
        throw new IllegalArgumentException(
            "group "
                + i
                + " block_granularity="
                + g.blockGranularity()
                + " does not divide prefix_granularity="
                + prefixGranularity);
      }
    }
  }

  /** Number of groups. */
  public int numGroups() {
    return groups.size();
  }

  /** The group with id {@code groupId}. */
  public CacheGroupSpec group(int groupId) {
    return groups.get(groupId);
  }

  /** Rows of group {@code groupId} in one page: {@code P / bg}. */
  public int rowsPerPage(int groupId) {
    return prefixGranularity / groups.get(groupId).blockGranularity();
  }

  /** True when some group deals its pages cyclically over several owners. */
  public boolean pageSharded() {
    for (CacheGroupSpec g : groups) {
      if (g.sharding() instanceof Sharding.PageCyclic) {
        return true;
      }
    }
    return false;
  }
}
