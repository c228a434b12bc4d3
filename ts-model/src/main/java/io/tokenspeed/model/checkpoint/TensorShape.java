package io.tokenspeed.model.checkpoint;

import java.util.Arrays;

/**
 * A tensor a model builder asks for: its name and the shape the configuration implies.
 *
 * @param name the tensor's name in the checkpoint
 * @param shape row-major dimensions (a copy is kept and handed out)
 */
public record TensorShape(String name, int[] shape) {

  public TensorShape {
    if (name == null || name.isEmpty()) {
      throw new IllegalArgumentException("name=" + name + " must be non-empty");
    }
    shape = shape.clone();
    for (int d : shape) {
      if (d < 0) {
        throw new IllegalArgumentException(
            "tensor " + name + " shape=" + Arrays.toString(shape) + " must be non-negative");
      }
    }
  }

  @Override
  public int[] shape() {
    return shape.clone();
  }

  /** Elements of the tensor. */
  public long numElements() {
    long n = 1;
    for (int d : shape) {
      n = Math.multiplyExact(n, d);
    }
    return n;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof TensorShape t && name.equals(t.name) && Arrays.equals(shape, t.shape);
  }

  @Override
  public int hashCode() {
    return name.hashCode() * 31 + Arrays.hashCode(shape);
  }

  @Override
  public String toString() {
    return name + Arrays.toString(shape);
  }
}
