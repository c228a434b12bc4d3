package io.tokenspeed.model.checkpoint;

import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Hands a model builder the tensors it asks for, checking each against the shape the configuration
 * implies, and afterwards reports any tensor nobody asked for. A builder therefore states its
 * expected tensor set once, by the calls it makes, and the three checkpoint errors — missing, wrong
 * shape, unexpected — fall out of it with the file and tensor named.
 */
public final class WeightSource {
  private final Checkpoint checkpoint;
  private final String architecture;
  private final Set<String> taken = new LinkedHashSet<>();

  public WeightSource(Checkpoint checkpoint, String architecture) {
    this.checkpoint = checkpoint;
    this.architecture = architecture;
  }

  /**
   * The floating-point tensor {@code name} of shape {@code shape}.
   *
   * @throws CheckpointException when it is missing, not a float type or differently shaped
   */
  public Tensor take(String name, int... shape) {
    Tensor t = checkpoint.tensors().get(name);
    if (t == null) {
      throw new CheckpointException(
          checkpoint.folder()
              + ": tensor "
              + name
              + " is missing; "
              + architecture
              + " with this config.json needs it with shape "
              + Arrays.toString(shape));
    }
    if (!Arrays.equals(t.shape(), shape)) {
      throw new CheckpointException(
          t.file()
              + ": tensor "
              + name
              + " has shape "
              + Arrays.toString(t.shape())
              + " but config.json implies "
              + Arrays.toString(shape));
    }
    if (!t.dtype().isFloat()) {
      throw new CheckpointException(
          t.file()
              + ": tensor "
              + name
              + " dtype="
              + t.dtype()
              + "; weights must be F32, BF16 or F16");
    }
    taken.add(name);
    return t;
  }

  /** True when the checkpoint holds {@code name}. */
  public boolean has(String name) {
    return checkpoint.tensors().containsKey(name);
  }

  /**
   * Fails on the first tensor (in name order) that no {@link #take} asked for. Buffers that some
   * exporters save and that carry no weights ({@code *.rotary_emb.inv_freq}) are ignored.
   */
  public void requireAllTaken() {
    Set<String> extra = new TreeSet<>();
    for (Map.Entry<String, Tensor> e : checkpoint.tensors().entrySet()) {
      String name = e.getKey();
      if (!taken.contains(name) && !name.endsWith(".rotary_emb.inv_freq")) {
        extra.add(name);
      }
    }
    if (!extra.isEmpty()) {
      String first = extra.iterator().next();
      throw new CheckpointException(
          checkpoint.tensors().get(first).file()
              + ": tensor "
              + first
              + " is unexpected for "
              + architecture
              + " with this config.json"
              + (extra.size() > 1 ? " (and " + (extra.size() - 1) + " more: " + extra + ")" : ""));
    }
  }
}
