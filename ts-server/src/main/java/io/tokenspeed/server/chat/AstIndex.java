package io.tokenspeed.server.chat;

import jinjava.de.odysseus.el.tree.Bindings;
import jinjava.de.odysseus.el.tree.impl.ast.AstNode;
import jinjava.de.odysseus.el.tree.impl.ast.AstRightValue;
import jinjava.javax.el.ELContext;

/**
 * {@code value[index]}: on a string, the code point at {@code index} (negative from the end, and
 * undefined out of range, as Jinja makes it); on anything else, what the resolvers give (lists with
 * negative indices, dict keys, attributes), and undefined where they have nothing.
 */
final class AstIndex extends AstRightValue {

  private final AstNode base;
  private final AstNode index;

  AstIndex(AstNode base, AstNode index) {
    this.base = base;
    this.index = index;
  }

  @Override
  public Object eval(Bindings bindings, ELContext context) {
    Object container = base.eval(bindings, context);
    Object i = PyValues.unwrap(index.eval(bindings, context));
    if (container == null || i == null) {
      return null;
    }
    if (!(PyValues.unwrap(container) instanceof String s)) {
      context.setPropertyResolved(false);
      Object value = context.getELResolver().getValue(context, container, i);
      return context.isPropertyResolved() ? value : null;
    }
    if (!PyValues.isInteger(i)) {
      return null;
    }
    long n = s.codePointCount(0, s.length());
    long at = ((Number) i).longValue();
    if (at < 0) {
      at += n;
    }
    if (at < 0 || at >= n) {
      return null;
    }
    int offset = s.offsetByCodePoints(0, (int) at);
    return Character.toString(s.codePointAt(offset));
  }

  @Override
  public void appendStructure(StringBuilder b, Bindings bindings) {
    base.appendStructure(b, bindings);
    b.append('[');
    index.appendStructure(b, bindings);
    b.append(']');
  }

  @Override
  public String toString() {
    return "[]";
  }

  @Override
  public int getCardinality() {
    return 2;
  }

  @Override
  public AstNode getChild(int i) {
    return i == 0 ? base : i == 1 ? index : null;
  }
}
