package io.tokenspeed.server.trace;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * What an infinite prefix cache could serve of a trace: for each request in order, the longest
 * prefix of its prompt ({@link TracePrompts}) that an earlier request's prompt also began with, in
 * tokens. The trace's own limit on any cache, shared or not: a replay's achieved reuse is compared
 * with it. (An engine reuses whole pages and computes at least a prompt's last token, so it reaches
 * this bound only to within a page and a token per request.)
 *
 * <p>Prompts sharing their first k ids share their blocks' tokens, so the common prefix with
 * earlier prompts is found on the ids: a tree of id prefixes remembers, for each, the most tokens
 * any earlier request had of its last block (all of it, or the part its cut last block holds).
 */
public final class CacheBound {

  /** A prefix of ids: the node of its parent and its last id. */
  private record Key(int parent, int id) {}

  private CacheBound() {}

  /** Per request, in order, the tokens of its prompt an earlier request's prompt began with. */
  public static long[] hitTokens(List<TraceRequest> requests) {
    Map<Key, Integer> nodes = new HashMap<>();
    // per node: the most tokens of its block an earlier request had
    int[] most = new int[1024];
    long[] out = new long[requests.size()];
    for (int i = 0; i < requests.size(); i++) {
      TraceRequest r = requests.get(i);
      int node = 0; // the root: the empty prefix
      long hit = 0;
      boolean open = true;
      for (int j = 0; j < r.numBlocks(); j++) {
        Key key = new Key(node, r.hashId(j));
        Integer child = nodes.get(key);
        int tokens = r.blockTokens(j);
        if (child == null) {
          child = nodes.size() + 1;
          nodes.put(key, child);
          if (child >= most.length) {
            most = java.util.Arrays.copyOf(most, most.length * 2);
          }
          open = false;
        } else if (open) {
          int seen = Math.min(tokens, most[child]);
          hit += seen;
          open = seen == tokens;
        }
        most[child] = Math.max(most[child], tokens);
        node = child;
      }
      out[i] = hit;
    }
    return out;
  }

  /**
   * The share of all input tokens {@link #hitTokens} counts: the trace's infinite-cache hit rate.
   */
  public static double hitRate(List<TraceRequest> requests) {
    long hit = 0;
    long input = 0;
    long[] perRequest = hitTokens(requests);
    for (int i = 0; i < perRequest.length; i++) {
      hit += perRequest[i];
      input += requests.get(i).inputLength();
    }
    return input == 0 ? 0 : (double) hit / input;
  }
}
