package io.tokenspeed.cache;

import java.util.Arrays;

/**
 * The exact image of a retracted request: the bytes of every Device block it needs to go on from
 * {@code tokens} computed tokens, saved by D2H into private Host blocks that the request holds (one
 * reference each; never published, never matched, never evicted).
 *
 * <pre>
 *   Full / SWA group g:  hostBlocks[g][row] for row in [firstNeededRow(tokens), rowsFor(tokens)),
 *                        0 below the window; the row holding token `tokens` may be partial
 *   State group g:       hostBlocks[g] = [running state after `tokens` tokens], or [0] when
 *                        tokens = 0
 * </pre>
 *
 * {@link CacheCoordinator#admitImage} loads it back into fresh Device blocks, byte for byte, and
 * hands its references to the admission's copies, which drop them once the loads completed.
 *
 * @param tokens the tokens whose KV and State the image holds
 * @param hostBlocks per group, the Host block of each row as above
 */
public record RetractionImage(int tokens, int[][] hostBlocks) {
  public RetractionImage {
    if (tokens < 1) {
      throw new IllegalArgumentException("tokens=" + tokens + " must be >= 1");
    }
    hostBlocks = hostBlocks.clone();
    for (int g = 0; g < hostBlocks.length; g++) {
      hostBlocks[g] = hostBlocks[g].clone();
    }
  }

  /** Every non-zero Host block of the image, in group and row order. */
  public int[] blocks() {
    return Arrays.stream(hostBlocks).flatMapToInt(Arrays::stream).filter(b -> b != 0).toArray();
  }
}
