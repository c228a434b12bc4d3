package io.tokenspeed.server.chat;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import jinjava.de.odysseus.el.tree.Bindings;
import jinjava.de.odysseus.el.tree.impl.ast.AstNode;
import jinjava.de.odysseus.el.tree.impl.ast.AstRightValue;
import jinjava.javax.el.ELContext;
import jinjava.javax.el.ELException;

/**
 * A Python slice, {@code value[start:stop:step]}, of a string or a sequence. Each bound may be left
 * out; negative bounds count from the end; out-of-range bounds are clipped; a negative step walks
 * backwards, so {@code messages[::-1]} is the list reversed. Strings are sliced by code point, as
 * Python slices them, so an emoji is never split into half a surrogate pair.
 *
 * <pre>
 *   "Hello"[1:]   = "ello"      [1, 2, 3][::-1] = [3, 2, 1]
 *   "Hello"[::-2] = "olH"       [1, 2, 3][-2:]  = [2, 3]
 * </pre>
 */
final class AstSlice extends AstRightValue {

  private final AstNode base;
  private final AstNode start;
  private final AstNode stop;
  private final AstNode step;

  AstSlice(AstNode base, AstNode start, AstNode stop, AstNode step) {
    this.base = base;
    this.start = start;
    this.stop = stop;
    this.step = step;
  }

  @Override
  public Object eval(Bindings bindings, ELContext context) {
    Object value = PyValues.unwrap(base.eval(bindings, context));
    Integer from = bound(start, "start", bindings, context);
    Integer to = bound(stop, "stop", bindings, context);
    Integer by = bound(step, "step", bindings, context);
    int stride = by == null ? 1 : by;
    if (stride == 0) {
      throw new ELException("slice step cannot be zero");
    }
    if (value instanceof CharSequence text) {
      int[] codePoints = text.toString().codePoints().toArray();
      int[] picked = pick(codePoints.length, from, to, stride);
      StringBuilder out = new StringBuilder(picked.length);
      for (int i : picked) {
        out.appendCodePoint(codePoints[i]);
      }
      return out.toString();
    }
    List<?> items;
    if (value instanceof List<?> list) {
      items = list;
    } else if (value instanceof Collection<?> collection) {
      items = new ArrayList<>(collection);
    } else if (value instanceof Object[] array) {
      items = List.of(array);
    } else {
      throw new ELException("'" + PyValues.typeName(value) + "' object is not subscriptable");
    }
    int[] picked = pick(items.size(), from, to, stride);
    List<Object> out = new ArrayList<>(picked.length);
    for (int i : picked) {
      out.add(items.get(i));
    }
    return out;
  }

  /** The indices {@code range(len)[from:to:stride]}, with Python's clipping of bounds. */
  static int[] pick(int length, Integer from, Integer to, int stride) {
    int first;
    int end;
    if (stride > 0) {
      first = from == null ? 0 : clip(from, length, 0, length);
      end = to == null ? length : clip(to, length, 0, length);
    } else {
      first = from == null ? length - 1 : clip(from, length, -1, length - 1);
      end = to == null ? -1 : clip(to, length, -1, length - 1);
    }
    int count;
    if (stride > 0) {
      count = first < end ? (end - first - 1) / stride + 1 : 0;
    } else {
      count = first > end ? (first - end - 1) / -stride + 1 : 0;
    }
    int[] out = new int[count];
    for (int k = 0; k < count; k++) {
      out[k] = first + k * stride;
    }
    return out;
  }

  private static int clip(int index, int length, int low, int high) {
    long i = index < 0 ? (long) index + length : index;
    return (int) Math.max(low, Math.min(high, i));
  }

  private static Integer bound(AstNode node, String name, Bindings bindings, ELContext context) {
    if (node == null) {
      return null;
    }
    Object value = PyValues.unwrap(node.eval(bindings, context));
    if (value == null) {
      return null;
    }
    if (!PyValues.isInteger(value)) {
      throw new ELException(
          "slice "
              + name
              + " must be an integer or none, not "
              + PyValues.typeName(value)
              + " ("
              + value
              + ")");
    }
    long v = ((Number) value).longValue();
    return (int) Math.max(Integer.MIN_VALUE + 1L, Math.min(Integer.MAX_VALUE, v));
  }

  @Override
  public void appendStructure(StringBuilder b, Bindings bindings) {
    base.appendStructure(b, bindings);
    b.append('[');
    if (start != null) {
      start.appendStructure(b, bindings);
    }
    b.append(':');
    if (stop != null) {
      stop.appendStructure(b, bindings);
    }
    if (step != null) {
      b.append(':');
      step.appendStructure(b, bindings);
    }
    b.append(']');
  }

  @Override
  public String toString() {
    return "[::]";
  }

  @Override
  public int getCardinality() {
    return children().size();
  }

  @Override
  public AstNode getChild(int i) {
    return children().get(i);
  }

  private List<AstNode> children() {
    List<AstNode> children = new ArrayList<>(4);
    children.add(base);
    for (AstNode n : new AstNode[] {start, stop, step}) {
      if (n != null) {
        children.add(n);
      }
    }
    return children;
  }
}
