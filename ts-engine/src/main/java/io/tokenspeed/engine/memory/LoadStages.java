package io.tokenspeed.engine.memory;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import java.util.Optional;

/**
 * How a round's copies into the Device are split into stages of consecutive model layers, so that
 * the forward pass starts on layer 0 while later layers are still being copied ({@link
 * io.tokenspeed.model.LayerGate}).
 *
 * <p>A block holds its layers' fields in layer order ({@code layers.<l>.k | layers.<l>.v | ...}),
 * so the part of a block that stage {@code s} covers is one byte range per group: from the first
 * field of the stage's first layer to the last field of its last layer (empty when the group has no
 * layer in the stage, as a Jamba attention group at its Mamba layers).
 *
 * <pre>
 *   layers 0..L-1 split into S stages:  stage(l) = floor(l · S / L)
 *   block of group g:  | l0.k | l0.v | l1.k | l1.v | l2.k | l2.v | l3.k | l3.v |
 *   S = 2:             |<------ stage 0 ------>|<------ stage 1 ------>|
 * </pre>
 *
 * <p>Each stage is one copy per block per group, so more stages mean more, smaller copies: a GPU's
 * copy calls cost a few microseconds each. On an H100, 8 stages of a Llama 1B shape's 16-position
 * blocks (64 KiB copies) moved a 32k-token restore at 12-14 GB/s where whole blocks went at 37, and
 * the restore's TTFT was a third longer: the engine loads whole by default ({@link
 * io.tokenspeed.engine.EngineSettings#DEFAULT_LOAD_STAGES}). Immutable.
 */
public final class LoadStages {

  private final int numLayers;
  private final int numStages;

  /** {@code [group][stage]}: the stage's byte range inside a block of the group. */
  private final long[][] offsets;

  private final long[][] lengths;

  private LoadStages(int numLayers, int numStages, long[][] offsets, long[][] lengths) {
    this.numLayers = numLayers;
    this.numStages = numStages;
    this.offsets = offsets;
    this.lengths = lengths;
  }

  /**
   * The stages of {@code layout} split into at most {@code maxStages} stages, or empty when the
   * copies cannot be split (at most one stage asked for or possible, or a field whose name does not
   * say its layer, or a group whose fields are not in layer order).
   *
   * @throws IllegalArgumentException when {@code maxStages < 1}
   */
  public static Optional<LoadStages> of(CacheLayout layout, int maxStages) {
    if (maxStages < 1) {
      throw new IllegalArgumentException("load stages=" + maxStages + " must be at least 1");
    }
    int groups = layout.numGroups();
    int[][] fieldLayers = new int[groups][];
    int numLayers = 0;
    for (int g = 0; g < groups; g++) {
      CacheGroupSpec spec = layout.group(g);
      fieldLayers[g] = new int[spec.fields().size()];
      int previous = -1;
      for (int f = 0; f < spec.fields().size(); f++) {
        int l = layerOf(spec.fields().get(f));
        if (l < previous) {
          return Optional.empty();
        }
        fieldLayers[g][f] = l;
        previous = l;
        numLayers = Math.max(numLayers, l + 1);
      }
    }
    int numStages = Math.min(maxStages, numLayers);
    if (numStages < 2) {
      return Optional.empty();
    }
    long[][] offsets = new long[groups][numStages];
    long[][] lengths = new long[groups][numStages];
    for (int g = 0; g < groups; g++) {
      long at = 0;
      var fields = layout.group(g).fields();
      for (int f = 0; f < fields.size(); f++) {
        int s = stageOf(fieldLayers[g][f], numLayers, numStages);
        if (lengths[g][s] == 0) {
          offsets[g][s] = at;
        }
        lengths[g][s] += fields.get(f).bytesPerBlock();
        at += fields.get(f).bytesPerBlock();
      }
    }
    return Optional.of(new LoadStages(numLayers, numStages, offsets, lengths));
  }

  /** The layer a field belongs to, from its name {@code layers.<l>.<part>}; -1 if it has none. */
  private static int layerOf(CacheField field) {
    String name = field.name();
    if (!name.startsWith("layers.")) {
      return Integer.MIN_VALUE;
    }
    int dot = name.indexOf('.', "layers.".length());
    if (dot < 0) {
      return Integer.MIN_VALUE;
    }
    try {
      return Integer.parseInt(name.substring("layers.".length(), dot));
    } catch (NumberFormatException e) {
      return Integer.MIN_VALUE;
    }
  }

  private static int stageOf(int layer, int numLayers, int numStages) {
    return (int) ((long) layer * numStages / numLayers);
  }

  /** Layers of the model (one more than the largest layer a field names). */
  public int numLayers() {
    return numLayers;
  }

  /** Stages, at least 2. */
  public int numStages() {
    return numStages;
  }

  /** The stage that copies layer {@code layer}; the last stage for a layer past the last. */
  public int stageOfLayer(int layer) {
    if (layer < 0) {
      throw new IllegalArgumentException("layer=" + layer + " must be non-negative");
    }
    return layer >= numLayers ? numStages - 1 : stageOf(layer, numLayers, numStages);
  }

  /** Where stage {@code stage}'s bytes start inside a block of group {@code group}. */
  public long offset(int group, int stage) {
    return offsets[group][stage];
  }

  /** Bytes of a block of group {@code group} that stage {@code stage} copies (0: none). */
  public long length(int group, int stage) {
    return lengths[group][stage];
  }

  /**
   * These stages with stage {@code stage} copying nothing: the whole-loop simulation's planted bug
   * of loads that leave some layers' bytes behind while their gate still opens (never used
   * otherwise).
   */
  public LoadStages withoutStage(int stage) {
    long[][] lengths = new long[this.lengths.length][];
    for (int g = 0; g < lengths.length; g++) {
      lengths[g] = this.lengths[g].clone();
      lengths[g][stage] = 0;
    }
    return new LoadStages(numLayers, numStages, offsets, lengths);
  }

  @Override
  public String toString() {
    return "LoadStages[layers=" + numLayers + ", stages=" + numStages + "]";
  }
}
