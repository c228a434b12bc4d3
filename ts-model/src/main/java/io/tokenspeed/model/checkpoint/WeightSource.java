package io.tokenspeed.model.checkpoint;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Hands a model builder the tensors it asks for, checking each against the shape the configuration
 * implies, and afterwards reports any tensor nobody asked for. A builder therefore states its
 * expected tensor set once, by the calls it makes, and the three checkpoint errors — missing, wrong
 * shape, unexpected — fall out of it with the file and tensor named.
 *
 * <p>A {@link #planning planning} source has no checkpoint: it records every request and answers it
 * with a zero tensor of the asked shape, so running a builder against it yields the exact tensor
 * set that builder checks a real checkpoint against ({@link #taken()}). The zeros are pages of a
 * sparse scratch file mapped read-only: a builder reads only its small tensors (norms, biases), so
 * planning a model of any size touches little memory.
 */
public final class WeightSource implements AutoCloseable {
  private final Checkpoint checkpoint;
  private final String architecture;
  private final Map<String, TensorShape> taken = new LinkedHashMap<>();
  private final Arena planArena;
  private final FileChannel planFile;

  public WeightSource(Checkpoint checkpoint, String architecture) {
    this(checkpoint, architecture, null, null);
  }

  private WeightSource(
      Checkpoint checkpoint, String architecture, Arena planArena, FileChannel planFile) {
    this.checkpoint = checkpoint;
    this.architecture = architecture;
    this.planArena = planArena;
    this.planFile = planFile;
  }

  /**
   * A source without a checkpoint that records what a builder takes and hands it zero tensors
   * (F32). Close it after the builder ran; the tensors it handed out are then invalid.
   */
  public static WeightSource planning(String architecture) {
    try {
      Path scratch = Files.createTempFile("tokenspeed-plan-", ".bin");
      FileChannel ch =
          FileChannel.open(
              scratch,
              StandardOpenOption.READ,
              StandardOpenOption.WRITE,
              StandardOpenOption.DELETE_ON_CLOSE);
      return new WeightSource(null, architecture, Arena.ofShared(), ch);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot create a planning scratch file", e);
    }
  }

  /** The tensors taken so far, in the order they were asked for. */
  public List<TensorShape> taken() {
    return List.copyOf(new ArrayList<>(taken.values()));
  }

  private Tensor placeholder(String name, int[] shape) {
    long bytes = new TensorShape(name, shape).numElements() * DType.F32.byteSize();
    taken.put(name, new TensorShape(name, shape));
    try {
      if (planFile.size() < bytes) {
        planFile.write(ByteBuffer.allocate(1), bytes - 1); // grows the file sparsely
      }
      MemorySegment zeros =
          bytes == 0
              ? MemorySegment.ofArray(new byte[0])
              : planFile.map(FileChannel.MapMode.READ_ONLY, 0, bytes, planArena);
      return new Tensor(name, "(planning)", DType.F32, shape, zeros);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot map a planning tensor " + name, e);
    }
  }

  /** Releases a planning source's scratch file and mappings; a no-op for a checkpoint source. */
  @Override
  public void close() {
    if (planArena != null) {
      planArena.close();
      try {
        planFile.close();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  /**
   * The floating-point tensor {@code name} of shape {@code shape}.
   *
   * @throws CheckpointException when it is missing, not a float type or differently shaped
   */
  public Tensor take(String name, int... shape) {
    if (checkpoint == null) {
      return placeholder(name, shape);
    }
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
    taken.put(name, new TensorShape(name, shape));
    return t;
  }

  /** True when the checkpoint holds {@code name}. */
  public boolean has(String name) {
    return checkpoint != null && checkpoint.tensors().containsKey(name);
  }

  /**
   * Fails on the first tensor (in name order) that no {@link #take} asked for. Buffers that some
   * exporters save and that carry no weights ({@code *.rotary_emb.inv_freq}) are ignored.
   */
  public void requireAllTaken() {
    if (checkpoint == null) {
      return;
    }
    Set<String> extra = new TreeSet<>();
    for (Map.Entry<String, Tensor> e : checkpoint.tensors().entrySet()) {
      String name = e.getKey();
      if (!taken.containsKey(name) && !name.endsWith(".rotary_emb.inv_freq")) {
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
