package io.tokenspeed.model;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.model.config.ModelConfig;
import java.util.HashSet;
import java.util.Set;

/**
 * The checks every forward pass makes of its batch before it touches memory, whatever the device: a
 * request that does not fit the model or the cache is refused with a message naming it, never
 * computed over the wrong blocks.
 */
public final class ForwardChecks {
  private ForwardChecks() {}

  /**
   * Checks request {@code r} of a batch against the model's {@code config} and a cache of {@code
   * layout} whose group {@code g} has {@code numBlocks[g]} blocks, on a replica of {@code ranks}
   * ranks: positions within {@code max_position_embeddings}, token ids within the vocabulary, one
   * block table per group covering every row up to the chunk's end with real, distinct blocks
   * (holes only where nothing is read: rows left of a sliding window, another rank's pages of a
   * page-cyclic group), and State tables as {@link #checkStateTable} says.
   *
   * @throws IllegalArgumentException naming the request, the group, the row and the value
   */
  public static void check(
      int r,
      ForwardRequest req,
      ModelConfig config,
      CacheLayout layout,
      int[] numBlocks,
      int ranks) {
    int end = req.startPosition() + req.numTokens();
    if (end > config.maxPositionEmbeddings()) {
      throw new IllegalArgumentException(
          "request "
              + r
              + " ends at position="
              + end
              + " beyond max_position_embeddings="
              + config.maxPositionEmbeddings());
    }
    for (int id : req.tokenIds()) {
      if (id < 0 || id >= config.vocabSize()) {
        throw new IllegalArgumentException(
            "request " + r + " token id=" + id + " outside [0, " + config.vocabSize() + ")");
      }
    }
    if (req.blockTables().length != layout.numGroups()) {
      throw new IllegalArgumentException(
          "request "
              + r
              + " has block tables="
              + req.blockTables().length
              + " but the layout has groups="
              + layout.numGroups());
    }
    for (int g = 0; g < layout.numGroups(); g++) {
      int[] table = req.blockTables()[g];
      if (layout.group(g).kind() instanceof GroupKind.StateCheckpoints) {
        checkStateTable(r, g, req, table, layout, numBlocks[g]);
        continue;
      }
      int rows = layout.group(g).rowsFor(end);
      if (table.length < rows) {
        throw new IllegalArgumentException(
            "request "
                + r
                + " group "
                + g
                + " block table has rows="
                + table.length
                + " but tokens up to position "
                + end
                + " need "
                + rows);
      }
      int groupBlocks = numBlocks[g];
      int firstRead = firstRowRead(layout.group(g), req.startPosition());
      // a page-cyclic group's table names only this rank's pages: 0 is another rank's
      boolean othersPages = ranks > 1 && layout.group(g).sharding() instanceof Sharding.PageCyclic;
      Set<Integer> seen = new HashSet<>();
      for (int i = 0; i < rows; i++) {
        int id = table[i];
        if (id == 0 && (i < firstRead || othersPages)) {
          continue;
        }
        if (id < 1 || id >= groupBlocks) {
          throw new IllegalArgumentException(
              "request "
                  + r
                  + " group "
                  + g
                  + " row "
                  + i
                  + " block id="
                  + id
                  + " outside [1, "
                  + groupBlocks
                  + ")");
        }
        if (!seen.add(id)) {
          throw new IllegalArgumentException(
              "request " + r + " group " + g + " row " + i + " repeats block id=" + id);
        }
      }
    }
  }

  /**
   * The first block-table row a chunk starting at {@code start} reads: 0, except in a sliding
   * window group, whose rows entirely left of position {@code start - W + 1} may be holes.
   */
  private static int firstRowRead(CacheGroupSpec group, int start) {
    if (group.kind() instanceof GroupKind.SlidingWindow w) {
      return Math.max(0, start - w.windowTokens() + 1) / group.blockGranularity();
    }
    return 0;
  }

  /**
   * A state table (one slot per page, row i = the checkpoint at boundary (i+1)·P): the input row
   * {@code ceil(start/P) - 1} (when start &gt; 0) and the working row {@code ceil(end/P) - 1} must
   * hold real slots; the rows of boundaries the chunk crosses may be 0 (no checkpoint wanted). No
   * slot appears twice, except that the working row may name the input row's slot: the chunk then
   * resumes and goes on in place (each channel's state is read whole before it is written).
   */
  private static void checkStateTable(
      int r, int g, ForwardRequest req, int[] table, CacheLayout layout, int numSlots) {
    int page = layout.group(g).blockGranularity();
    int start = req.startPosition();
    int end = start + req.numTokens();
    int inputRow = start == 0 ? -1 : Math.ceilDiv(start, page) - 1;
    int workingRow = Math.ceilDiv(end, page) - 1;
    if (table.length <= workingRow) {
      throw new IllegalArgumentException(
          "request "
              + r
              + " group "
              + g
              + " state table has rows="
              + table.length
              + " but tokens up to position "
              + end
              + " need "
              + (workingRow + 1));
    }
    Set<Integer> seen = new HashSet<>();
    for (int i = Math.max(0, inputRow); i <= workingRow; i++) {
      int id = table[i];
      boolean required = i == inputRow || i == workingRow;
      if (id == 0 && !required) {
        continue;
      }
      if (id < 1 || id >= numSlots) {
        throw new IllegalArgumentException(
            "request "
                + r
                + " group "
                + g
                + " state row "
                + i
                + " slot id="
                + id
                + " outside [1, "
                + numSlots
                + ")"
                + (required ? " (input or working checkpoint)" : ""));
      }
      boolean resumesInPlace = i == workingRow && inputRow >= 0 && id == table[inputRow];
      if (!seen.add(id) && !resumesInPlace) {
        throw new IllegalArgumentException(
            "request " + r + " group " + g + " state row " + i + " repeats slot id=" + id);
      }
    }
  }
}
