package io.tokenspeed.server.trace;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * Small seeded traces shaped like the conversation trace: every request starts with the shared
 * system block (id 0); a conversation's next turn repeats its previous turn's blocks (the last one
 * whole now) and adds new ones; some requests are fresh conversations, some repeat a turn exactly.
 */
public final class TraceTestData {
  private TraceTestData() {}

  public static List<TraceRequest> conversations(long seed, int requests) {
    SplittableRandom rnd = new SplittableRandom(seed);
    List<int[]> open = new ArrayList<>();
    List<TraceRequest> out = new ArrayList<>();
    int nextId = 1;
    long t = 0;
    for (int i = 0; i < requests; i++) {
      int[] ids;
      int choice = rnd.nextInt(10);
      if (open.isEmpty() || choice < 3) {
        ids = new int[1 + 1 + rnd.nextInt(4)];
        ids[0] = 0;
        for (int j = 1; j < ids.length; j++) {
          ids[j] = nextId++;
        }
        open.add(ids);
      } else if (choice < 9) {
        int c = rnd.nextInt(open.size());
        int[] prev = open.get(c);
        ids = java.util.Arrays.copyOf(prev, prev.length + 1 + rnd.nextInt(3));
        for (int j = prev.length; j < ids.length; j++) {
          ids[j] = nextId++;
        }
        open.set(c, ids);
      } else {
        ids = open.get(rnd.nextInt(open.size())).clone(); // a turn sent again
      }
      int n = ids.length;
      int input = (n - 1) * Trace.BLOCK_TOKENS + 1 + rnd.nextInt(Trace.BLOCK_TOKENS);
      t += rnd.nextInt(3) * 1000L;
      out.add(new TraceRequest(t, input, 1 + rnd.nextInt(64), ids));
    }
    return out;
  }
}
