package io.tokenspeed.server.chat;

import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.lib.tag.ForTag;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.TagNode;
import com.hubspot.jinjava.tree.parse.TagToken;
import com.hubspot.jinjava.util.ForLoop;
import com.hubspot.jinjava.util.ObjectIterator;
import com.hubspot.jinjava.util.ObjectTruthValue;
import java.util.AbstractList;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Jinjava's {@code for} with Jinja's loop filter: {@code {% for m in messages if m.role == 'user'
 * %}} iterates over the items for which the condition holds, and {@code loop.index}, {@code
 * loop.length} and {@code loop.last} count those only. Jinjava would read {@code messages if ...}
 * as a conditional expression and silently loop over nothing.
 *
 * <p>It also gives the loop Jinja's {@code {% else %}}: the part after it renders when there is
 * nothing to iterate over (Jinjava would render it after every item).
 *
 * <p>A string is iterated by character, as in Python.
 *
 * <p>Each pass charges a step of the render's budget ({@link ChatTemplateLimits#maxRenderSteps()}),
 * so loops with empty bodies are bounded like any other work.
 *
 * <p>As in Jinja, the first {@code if} at the top level of the iterable (outside brackets and
 * string literals) starts the filter; a conditional expression as the iterable needs parentheses.
 */
final class FilteringForTag extends ForTag {

  private static final long serialVersionUID = 1L;

  /** Charges one render step; called for each pass of each loop. */
  private final transient Runnable step;

  FilteringForTag(Runnable step) {
    this.step = step;
  }

  @Override
  public String interpretUnchecked(TagNode tagNode, JinjavaInterpreter interpreter) {
    int elseAt = elseIndex(tagNode);
    var varsAndExpression = getLoopVarsAndExpression((TagToken) tagNode.getMaster());
    List<String> loopVars = varsAndExpression.getLeft();
    String expression = varsAndExpression.getRight();
    int cut = filterStart(expression);
    String iterable = cut < 0 ? expression : expression.substring(0, cut).trim();
    int line = tagNode.getLineNumber();
    Object collection = interpreter.resolveELExpression(iterable, line);
    if (PyValues.unwrap(collection) instanceof String text) {
      // Python iterates a string by character; Jinjava would take it as a single item.
      collection = text.codePoints().mapToObj(Character::toString).toList();
    }
    List<Object> items = new ArrayList<>();
    ForLoop loop = ObjectIterator.getLoop(collection);
    if (cut < 0) {
      loop.forEachRemaining(items::add);
    } else {
      String condition = expression.substring(cut + 2).trim();
      var scope = interpreter.enterScope(); // the filter's loop variables stay in it
      try {
        while (loop.hasNext()) {
          Object item = loop.next();
          bind(loopVars, interpreter.wrap(item), interpreter);
          if (ObjectTruthValue.evaluate(interpreter.resolveELExpression(condition, line))) {
            items.add(item);
          }
        }
      } finally {
        scope.close();
      }
    }
    if (elseAt < 0) {
      return renderForCollection(tagNode, interpreter, loopVars, charged(items));
    }
    List<Node> children = tagNode.getChildren();
    if (items.isEmpty()) {
      StringBuilder out = new StringBuilder();
      for (Node child : children.subList(elseAt + 1, children.size())) {
        out.append(child.render(interpreter).getValue());
      }
      return out.toString();
    }
    TagNode body = new TagNode(this, (TagToken) tagNode.getMaster(), tagNode.getSymbols());
    body.setParent(tagNode.getParent());
    body.getChildren().addAll(children.subList(0, elseAt));
    return renderForCollection(body, interpreter, loopVars, charged(items));
  }

  /** The items, charging a render step as each is taken (an empty body costs steps too). */
  private List<Object> charged(List<Object> items) {
    return new AbstractList<>() {
      @Override
      public Object get(int index) {
        step.run();
        return items.get(index);
      }

      @Override
      public int size() {
        return items.size();
      }
    };
  }

  /** The position of the loop's own {@code {% else %}} among its children, or -1. */
  private static int elseIndex(TagNode tagNode) {
    List<Node> children = tagNode.getChildren();
    for (int i = 0; i < children.size(); i++) {
      if (children.get(i) instanceof TagNode tag && "else".equals(tag.getName())) {
        return i;
      }
    }
    return -1;
  }

  /** Sets the loop variables for one item, unpacking pairs as the loop itself does. */
  private static void bind(List<String> vars, Object item, JinjavaInterpreter interpreter) {
    if (vars.size() == 1) {
      interpreter.getContext().put(vars.get(0), item);
      return;
    }
    for (int i = 0; i < vars.size(); i++) {
      Object value = null;
      if (item instanceof Map.Entry<?, ?> entry) {
        value = i == 0 ? entry.getKey() : i == 1 ? entry.getValue() : null;
      } else if (item instanceof List<?> list && i < list.size()) {
        value = list.get(i);
      }
      interpreter.getContext().put(vars.get(i), value);
    }
  }

  /** The index of the {@code if} that starts a loop filter, or -1. */
  static int filterStart(String expression) {
    int depth = 0;
    for (int i = 0; i < expression.length(); i++) {
      char c = expression.charAt(i);
      if (c == '\'' || c == '"') {
        i++;
        while (i < expression.length() && expression.charAt(i) != c) {
          i += expression.charAt(i) == '\\' ? 2 : 1;
        }
      } else if (c == '(' || c == '[' || c == '{') {
        depth++;
      } else if (c == ')' || c == ']' || c == '}') {
        depth--;
      } else if (depth == 0
          && expression.startsWith("if", i)
          && i > 0
          && !isNamePart(expression.charAt(i - 1))
          && (i + 2 == expression.length() || !isNamePart(expression.charAt(i + 2)))) {
        return i;
      }
    }
    return -1;
  }

  private static boolean isNamePart(char c) {
    return Character.isLetterOrDigit(c) || c == '_' || c == '.';
  }
}
