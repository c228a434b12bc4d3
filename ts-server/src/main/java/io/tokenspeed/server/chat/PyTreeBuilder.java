package io.tokenspeed.server.chat;

import static jinjava.de.odysseus.el.tree.impl.Scanner.Symbol.COLON;
import static jinjava.de.odysseus.el.tree.impl.Scanner.Symbol.DOT;
import static jinjava.de.odysseus.el.tree.impl.Scanner.Symbol.IDENTIFIER;
import static jinjava.de.odysseus.el.tree.impl.Scanner.Symbol.LBRACK;
import static jinjava.de.odysseus.el.tree.impl.Scanner.Symbol.LPAREN;
import static jinjava.de.odysseus.el.tree.impl.Scanner.Symbol.RBRACK;

import com.hubspot.jinjava.el.ExtendedSyntaxBuilder;
import com.hubspot.jinjava.el.ext.AstNamedParameter;
import com.hubspot.jinjava.el.ext.ExtendedParser;
import com.hubspot.jinjava.el.ext.ExtendedScanner;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.function.Predicate;
import jinjava.de.odysseus.el.tree.Bindings;
import jinjava.de.odysseus.el.tree.impl.Parser;
import jinjava.de.odysseus.el.tree.impl.Parser.ExtensionPoint;
import jinjava.de.odysseus.el.tree.impl.Scanner;
import jinjava.de.odysseus.el.tree.impl.ast.AstBinary;
import jinjava.de.odysseus.el.tree.impl.ast.AstDot;
import jinjava.de.odysseus.el.tree.impl.ast.AstIdentifier;
import jinjava.de.odysseus.el.tree.impl.ast.AstNode;
import jinjava.de.odysseus.el.tree.impl.ast.AstParameters;
import jinjava.de.odysseus.el.tree.impl.ast.AstRightValue;
import jinjava.de.odysseus.el.tree.impl.ast.AstUnary;
import jinjava.javax.el.ELContext;
import jinjava.javax.el.ELException;

/**
 * Jinjava's expression syntax, brought closer to Jinja's where chat templates need it, each change
 * in one override:
 *
 * <ul>
 *   <li>Subscripts take Python slices with a step ({@code messages[::-1]}); every slice becomes an
 *       {@link AstSlice} (Python's bounds and clipping, strings by code point). An index into a
 *       string picks a code point ({@code s[-1]}), see {@link AstIndex}.
 *   <li>Filters and tests chain in any order ({@code xs|length is even}).
 *   <li>A keyword argument's value is a whole expression ({@code f(n=x - 1)}).
 *   <li>{@code not} binds as in Jinja, looser than comparisons and tests ({@code not x is
 *       defined}).
 *   <li>{@code %} is Python's modulo ({@code -7 % 3 == 2}); {@code '-' * 20} repeats a string.
 *   <li>{@code empty}, {@code div}, {@code mod}, {@code eq}, {@code ne}, {@code lt}, {@code gt},
 *       {@code le}, {@code ge} and {@code instanceof} are names, as in Jinja, not operators.
 *   <li>{@code n+1} is an addition: Jinjava scans {@code +} before a digit as a unary plus and then
 *       fails; here it is binary whenever an operand precedes it.
 *   <li>String literals unescape as Python's do: {@code \xhh}, {@code \\uhhhh}, {@code \Uhhhhhhhh},
 *       octal, {@code \a \v}, and an unknown escape keeps its backslash ({@code '\d'} is two
 *       characters), where Jinjava rejects all but a few.
 * </ul>
 *
 * <p>A filter or test the environment does not have fails with its name when it is used (Jinjava
 * would render nothing and report nothing; Jinja refuses the template).
 *
 * <p>It relies on the natural operator precedence of Jinjava's legacy overrides: filters and tests
 * are parsed above {@link Parser#value()}, which this class replaces.
 */
final class PyTreeBuilder extends ExtendedSyntaxBuilder {

  private static final long serialVersionUID = 1L;

  private final transient Predicate<String> knownFilter;
  private final transient Predicate<String> knownTest;
  private final transient AstBinary.Operator multiply;

  /**
   * @param maxStringChars the longest string {@code str * n} may build
   */
  PyTreeBuilder(Predicate<String> knownFilter, Predicate<String> knownTest, long maxStringChars) {
    super(Feature.METHOD_INVOCATIONS, Feature.VARARGS);
    this.knownFilter = knownFilter;
    this.knownTest = knownTest;
    this.multiply = multiply(maxStringChars);
  }

  /**
   * Python's {@code *}: a string times an integer repeats it ({@code '-' * 20}); numbers multiply
   * as Jinjava multiplies them.
   */
  private static AstBinary.Operator multiply(long maxStringChars) {
    return (bindings, context, left, right) -> {
      Object a = left.eval(bindings, context);
      Object b = right.eval(bindings, context);
      Object x = PyValues.unwrap(a);
      Object y = PyValues.unwrap(b);
      if (x instanceof String s && PyValues.isInteger(y)) {
        return repeat(s, ((Number) y).longValue(), maxStringChars);
      }
      if (y instanceof String s && PyValues.isInteger(x)) {
        return repeat(s, ((Number) x).longValue(), maxStringChars);
      }
      return AstBinary.MUL.eval(bindings, context, new Evaluated(a), new Evaluated(b));
    };
  }

  private static String repeat(String s, long times, long maxChars) {
    if (times <= 0 || s.isEmpty()) {
      return "";
    }
    if (times > maxChars / s.length()) {
      throw new StringLimitException("string repetition", maxChars);
    }
    return s.repeat((int) times);
  }

  /** An operand already evaluated, so that an operator can hand it on without evaluating twice. */
  private static final class Evaluated extends AstRightValue {

    private final Object value;

    Evaluated(Object value) {
      this.value = value;
    }

    @Override
    public Object eval(Bindings bindings, ELContext context) {
      return value;
    }

    @Override
    public void appendStructure(StringBuilder b, Bindings bindings) {
      b.append(value);
    }

    @Override
    public int getCardinality() {
      return 0;
    }

    @Override
    public AstNode getChild(int i) {
      return null;
    }
  }

  @Override
  protected Parser createParser(String expression) {
    return new PyParser(this, expression);
  }

  private static final class PyParser extends ExtendedParser {

    private final PyTreeBuilder builder;

    PyParser(PyTreeBuilder builder, String input) {
      super(builder, input);
      this.builder = builder;
    }

    @Override
    protected Scanner createScanner(String expression) {
      return new PyScanner(expression);
    }

    @Override
    protected AstIdentifier createAstIdentifier(String name, int index) {
      if (name.startsWith(FILTER_PREFIX)) {
        String filter = name.substring(FILTER_PREFIX.length());
        if (!builder.knownFilter.test(filter)) {
          return new UnknownName(name, index, "no filter named '" + filter + "'");
        }
      } else if (name.startsWith(EXPTEST_PREFIX)) {
        String test = name.substring(EXPTEST_PREFIX.length());
        if (!builder.knownTest.test(test)) {
          return new UnknownName(name, index, "no test named '" + test + "'");
        }
      }
      return super.createAstIdentifier(name, index);
    }

    /**
     * A unary expression followed by any chain of filters and tests, as Jinja allows ({@code
     * xs|length is even}); Jinjava takes either filters or one test.
     */
    @Override
    protected AstNode filter(boolean required) throws Scanner.ScanException, ParseException {
      AstNode v = unary(required);
      if (v == null) {
        return null;
      }
      while (true) {
        Scanner.Token token = getToken();
        if ("|".equals(token.getImage()) && lookahead(0).getSymbol() == IDENTIFIER) {
          consumeToken();
          String name = consumeToken().getImage();
          List<AstNode> arguments = new ArrayList<>(List.of(v, interpreter()));
          if (getToken().getSymbol() == LPAREN) {
            AstParameters given = params();
            for (int i = 0; i < given.getCardinality(); i++) {
              arguments.add(given.getChild(i));
            }
          }
          v =
              createAstMethod(
                  createAstDot(identifier(FILTER_PREFIX + name), "filter", true),
                  createAstParameters(arguments));
        } else if ("is".equals(token.getImage())
            && "not".equals(lookahead(0).getImage())
            && isTestName(lookahead(1))) {
          consumeToken();
          consumeToken();
          v = test(v, "evaluateNegated");
        } else if ("is".equals(token.getImage()) && isTestName(lookahead(0))) {
          consumeToken();
          v = test(v, "evaluate");
        } else {
          return v;
        }
      }
    }

    private static boolean isTestName(Scanner.Token token) {
      return switch (token.getSymbol()) {
        case IDENTIFIER, TRUE, FALSE, NULL, EQ, NE, LT, LE, GT, GE -> true;
        case EXTENSION -> "in".equals(token.getImage());
        default -> false;
      };
    }

    /** {@code value is name} or {@code value is name arg}: the test {@code name} on the value. */
    private AstNode test(AstNode value, String method)
        throws Scanner.ScanException, ParseException {
      String name = consumeToken().getImage();
      List<AstNode> arguments = new ArrayList<>(List.of(value, interpreter()));
      AstNode argument = value();
      if (argument != null) {
        arguments.add(argument);
      }
      return createAstMethod(
          createAstDot(identifier(EXPTEST_PREFIX + name), method, true),
          createAstParameters(arguments));
    }

    /**
     * Call arguments, where {@code name=value} takes a whole expression as its value ({@code
     * namespace(last=messages|length - 1)}); Jinjava parses {@code =} as an operator that binds
     * tighter than {@code -}. A trailing comma is allowed, as in Jinja.
     */
    @Override
    protected AstParameters params(Scanner.Symbol left, Scanner.Symbol right)
        throws Scanner.ScanException, ParseException {
      consumeToken(left);
      List<AstNode> arguments = new ArrayList<>();
      while (getToken().getSymbol() != right) {
        arguments.add(argument());
        if (getToken().getSymbol() != Scanner.Symbol.COMMA) {
          break;
        }
        consumeToken();
      }
      consumeToken(right);
      return createAstParameters(arguments);
    }

    private AstNode argument() throws Scanner.ScanException, ParseException {
      if (getToken().getSymbol() == IDENTIFIER
          && lookahead(0).getSymbol() == Scanner.Symbol.EXTENSION
          && "=".equals(lookahead(0).getImage())) {
        String name = consumeToken().getImage();
        consumeToken();
        return new AstNamedParameter(identifier(name), expr(true));
      }
      return expr(true);
    }

    /** {@code a and b}, over operands that may each start with {@code not}. */
    @Override
    protected AstNode and(boolean required) throws Scanner.ScanException, ParseException {
      AstNode v = not(required);
      if (v == null) {
        return null;
      }
      while (true) {
        if (getToken().getSymbol() == Scanner.Symbol.AND) {
          consumeToken();
          v = createAstBinary(v, not(true), AstBinary.AND);
        } else if (getToken().getSymbol() == Scanner.Symbol.EXTENSION
            && getExtensionHandler(getToken()).getExtensionPoint() == ExtensionPoint.AND) {
          v = getExtensionHandler(consumeToken()).createAstNode(v, not(true));
        } else {
          return v;
        }
      }
    }

    /**
     * Jinja's {@code not}: looser than comparisons and tests, so {@code not x is defined} is {@code
     * not (x is defined)} and {@code not a == b} is {@code not (a == b)}. Java's expression
     * language binds it to the next operand only.
     */
    private AstNode not(boolean required) throws Scanner.ScanException, ParseException {
      if (getToken().getSymbol() == Scanner.Symbol.NOT) {
        consumeToken();
        return createAstUnary(not(true), AstUnary.NOT);
      }
      return eq(required);
    }

    @Override
    protected AstBinary createAstBinary(AstNode left, AstNode right, AstBinary.Operator operator) {
      if (operator == AstBinary.MOD) {
        return super.createAstBinary(left, right, PY_MOD);
      }
      if (operator == AstBinary.MUL) {
        return super.createAstBinary(left, right, builder.multiply);
      }
      return super.createAstBinary(left, right, operator);
    }

    /** A value followed by any number of {@code .name}, {@code .name(args)} and subscripts. */
    @Override
    protected AstNode value() throws Scanner.ScanException, ParseException {
      boolean lvalue = true;
      AstNode v = nonliteral();
      if (v == null) {
        v = literal();
        if (v == null) {
          return null;
        }
        lvalue = false;
      }
      while (true) {
        Scanner.Symbol symbol = getToken().getSymbol();
        if (symbol == DOT) {
          consumeToken();
          String name = consumeToken(IDENTIFIER).getImage();
          AstDot dot = createAstDot(v, name, lvalue);
          v = getToken().getSymbol() == LPAREN ? createAstMethod(dot, params()) : dot;
        } else if (symbol == LBRACK) {
          consumeToken();
          v = subscript(v, lvalue);
        } else {
          return v;
        }
      }
    }

    /** After {@code [}: an index {@code [i]} or a slice {@code [start:stop:step]}. */
    private AstNode subscript(AstNode base, boolean lvalue)
        throws Scanner.ScanException, ParseException {
      AstNode start = getToken().getSymbol() == COLON ? null : expr(true);
      if (getToken().getSymbol() == RBRACK) {
        consumeToken();
        if (getToken().getSymbol() == LPAREN) {
          return createAstMethod(createAstBracket(base, start, lvalue, true), params());
        }
        return new AstIndex(base, start);
      }
      consumeToken(COLON);
      Scanner.Symbol next = getToken().getSymbol();
      AstNode stop = next == COLON || next == RBRACK ? null : expr(true);
      AstNode step = null;
      if (getToken().getSymbol() == COLON) {
        consumeToken();
        step = getToken().getSymbol() == RBRACK ? null : expr(true);
      }
      consumeToken(RBRACK);
      return new AstSlice(base, start, stop, step);
    }
  }

  /**
   * Python's {@code %} on numbers: the remainder takes the divisor's sign ({@code -7 % 3 == 2}).
   * String formatting with {@code %} is not supported.
   */
  static final AstBinary.Operator PY_MOD =
      (bindings, context, left, right) -> {
        Object a = PyValues.unwrap(left.eval(bindings, context));
        Object b = PyValues.unwrap(right.eval(bindings, context));
        if (!(a instanceof Number x) || !(b instanceof Number y)) {
          throw new ELException(
              "unsupported operand types for %: '"
                  + PyValues.typeName(a)
                  + "' and '"
                  + PyValues.typeName(b)
                  + "' (string formatting with % is not supported)");
        }
        if (PyValues.isInteger(x) && PyValues.isInteger(y)) {
          if (y.longValue() == 0) {
            throw new ELException("integer modulo by zero");
          }
          return Math.floorMod(x.longValue(), y.longValue());
        }
        double d = y.doubleValue();
        if (d == 0) {
          throw new ELException("float modulo by zero");
        }
        double r = x.doubleValue() % d;
        return r != 0 && (r < 0) != (d < 0) ? r + d : r;
      };

  /** A filter or test name with nothing behind it: using it is an error naming it. */
  private static final class UnknownName extends AstIdentifier {

    private final String message;

    UnknownName(String name, int index, String message) {
      super(name, index);
      this.message = message;
    }

    @Override
    public Object eval(Bindings bindings, ELContext context) {
      throw new ELException(message);
    }
  }

  private static final class PyScanner extends ExtendedScanner {

    /** Tokens after which {@code +} can only be binary. */
    private static final Set<Scanner.Symbol> OPERAND_ENDS =
        Set.of(
            Scanner.Symbol.IDENTIFIER,
            Scanner.Symbol.INTEGER,
            Scanner.Symbol.FLOAT,
            Scanner.Symbol.STRING,
            Scanner.Symbol.TRUE,
            Scanner.Symbol.FALSE,
            Scanner.Symbol.NULL,
            Scanner.Symbol.RPAREN,
            Scanner.Symbol.RBRACK);

    /** Words that are operators in Java's expression language but plain names in Jinja. */
    private static final Set<String> NOT_KEYWORDS =
        Set.of("empty", "instanceof", "div", "mod", "eq", "ne", "lt", "gt", "le", "ge");

    PyScanner(String input) {
      super(input);
    }

    @Override
    protected Token keyword(String s) {
      return NOT_KEYWORDS.contains(s) ? null : super.keyword(s);
    }

    @Override
    protected Token nextEval() throws ScanException {
      if (getInput().charAt(getPosition()) == '+' && afterOperand()) {
        return fixed(Scanner.Symbol.PLUS);
      }
      return super.nextEval();
    }

    private boolean afterOperand() {
      Token previous = getToken();
      if (previous == null) {
        return false;
      }
      return OPERAND_ENDS.contains(previous.getSymbol()) || "}".equals(previous.getImage());
    }

    @Override
    protected Token nextString() throws ScanException {
      String input = getInput();
      int begin = getPosition();
      char quote = input.charAt(begin);
      StringBuilder value = new StringBuilder();
      int i = begin + 1;
      while (i < input.length()) {
        char c = input.charAt(i++);
        if (c == quote) {
          return token(Scanner.Symbol.STRING, value.toString(), i - begin);
        }
        if (c != '\\') {
          value.append(c);
          continue;
        }
        if (i == input.length()) {
          break;
        }
        i = unescape(input, i, value);
      }
      throw new ScanException(begin, "unterminated string", String.valueOf(quote));
    }

    /** Appends the escape starting after the backslash at {@code i - 1}; returns the next index. */
    private static int unescape(String input, int i, StringBuilder value) throws ScanException {
      char e = input.charAt(i++);
      switch (e) {
        case '\n' -> {} // a line continuation
        case '\\', '\'', '"' -> value.append(e);
        case 'a' -> value.append('\u0007');
        case 'b' -> value.append('\b');
        case 'f' -> value.append('\f');
        case 'n' -> value.append('\n');
        case 'r' -> value.append('\r');
        case 't' -> value.append('\t');
        case 'v' -> value.append('\u000b');
        case 'x' -> {
          return hex(input, i, 2, value);
        }
        case 'u' -> {
          return hex(input, i, 4, value);
        }
        case 'U' -> {
          return hex(input, i, 8, value);
        }
        default -> {
          if (e >= '0' && e <= '7') {
            int code = e - '0';
            int end = Math.min(input.length(), i + 2);
            while (i < end && input.charAt(i) >= '0' && input.charAt(i) <= '7') {
              code = code * 8 + (input.charAt(i++) - '0');
            }
            value.append((char) code);
          } else {
            value.append('\\').append(e);
          }
        }
      }
      return i;
    }

    private static int hex(String input, int i, int digits, StringBuilder value)
        throws ScanException {
      if (i + digits > input.length()) {
        throw new ScanException(i, "truncated \\x, \\u or \\U escape", digits + " hex digits");
      }
      int code;
      try {
        code = Integer.parseUnsignedInt(input.substring(i, i + digits), 16);
      } catch (NumberFormatException ex) {
        throw new ScanException(i, "invalid \\x, \\u or \\U escape", digits + " hex digits");
      }
      if (!Character.isValidCodePoint(code)) {
        throw new ScanException(i, "escape beyond U+10FFFF", "a valid code point");
      }
      value.appendCodePoint(code);
      return i + digits;
    }
  }
}
