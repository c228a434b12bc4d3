package io.tokenspeed.server.chat;

import com.hubspot.jinjava.Jinjava;
import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.LegacyOverrides;
import com.hubspot.jinjava.el.JinjavaProcessors;
import com.hubspot.jinjava.el.TruthyTypeConverter;
import com.hubspot.jinjava.el.TypeConvertingMapELResolver;
import com.hubspot.jinjava.el.ext.JinjavaBeanELResolver;
import com.hubspot.jinjava.el.ext.JinjavaListELResolver;
import com.hubspot.jinjava.interpret.Context;
import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.interpret.OutputTooBigException;
import com.hubspot.jinjava.interpret.RenderResult;
import com.hubspot.jinjava.interpret.TemplateError;
import com.hubspot.jinjava.lib.expression.ExpressionStrategy;
import com.hubspot.jinjava.lib.filter.Filter;
import com.hubspot.jinjava.lib.fn.ELFunctionDefinition;
import com.hubspot.jinjava.lib.tag.Tag;
import com.hubspot.jinjava.loader.ResourceNotFoundException;
import com.hubspot.jinjava.mode.ExecutionMode;
import com.hubspot.jinjava.objects.date.DateTimeProvider;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.TagNode;
import com.hubspot.jinjava.tree.output.RenderedOutputNode;
import com.hubspot.jinjava.tree.parse.ExpressionToken;
import io.tokenspeed.server.chat.ChatTemplateException.Reason;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import jinjava.de.odysseus.el.ExpressionFactoryImpl;
import jinjava.de.odysseus.el.tree.TreeStore;
import jinjava.de.odysseus.el.tree.impl.Cache;
import jinjava.javax.el.ArrayELResolver;
import jinjava.javax.el.CompositeELResolver;
import jinjava.javax.el.ExpressionFactory;

/**
 * Jinjava set up to render chat templates the way Hugging Face {@code transformers} renders them
 * with Jinja ({@code apply_chat_template}), and bounded so that no template and no conversation can
 * hang it or fill the heap.
 *
 * <h2>What Hugging Face's environment has, and where it is here</h2>
 *
 * <ul>
 *   <li>{@code trim_blocks} and {@code lstrip_blocks}: Jinjava's options of the same name; a
 *       template's CRLF and CR line ends become LF and one trailing newline is dropped, as Jinja
 *       does by default.
 *   <li>{@code raise_exception(msg)}: a function; the render fails with {@link Reason#RAISED} and
 *       the template's message.
 *   <li>{@code tojson} with {@code ensure_ascii}, {@code indent}, {@code separators} and {@code
 *       sort_keys}: Python's {@code json.dumps} text ({@link PyJson}).
 *   <li>{@code strftime_now(fmt)}: the current local time ({@link Strftime}).
 *   <li>loop controls ({@code break}, {@code continue}), {@code namespace(...)}, {@code is string},
 *       {@code is mapping}: Jinjava has them.
 *   <li>Python slices, binary {@code +} without spaces and Python string escapes: {@link
 *       PyTreeBuilder}. Python's string, dict and list methods: {@link PyMethods}.
 *   <li>the {@code {% generation %}} block of assistant masks: renders its body.
 *   <li>an immutable sandbox: no method can modify a template's inputs, and {@code include}, {@code
 *       import}, {@code from} and {@code extends} are disabled (a template cannot read files).
 * </ul>
 *
 * <h2>Bounds</h2>
 *
 * Values in messages are data, never template text: nested interpretation is off, so content
 * holding {@code {{ ... }}} prints as written. The output and every string a filter or method
 * builds are bounded by {@link ChatTemplateLimits#maxOutputChars()}, macro recursion by {@link
 * ChatTemplateLimits#maxMacroDepth()}, and the work of one render by a count of evaluated nodes
 * ({@link ChatTemplateLimits#maxRenderSteps()}) kept per thread.
 *
 * <p>Thread-safe: renders on different threads share nothing but the immutable setup.
 */
final class JinjaEnvironment {

  /**
   * Jinjava's own bound on macro recursion, this far above {@link
   * ChatTemplateLimits#maxRenderDepth()}: it ends recursion silently, so the depth check here must
   * always be reached first.
   */
  private static final int MACRO_DEPTH_MARGIN = 8;

  /** Jinja's sandbox refuses larger ranges; so does this one (Jinjava would cut them short). */
  static final int MAX_RANGE = 100_000;

  private static final Set<String> DISABLED_TAGS = Set.of("include", "import", "from", "extends");

  /**
   * Functions a template may test for with {@code is defined} ({@code strftime_now is defined}, as
   * Llama 3's template does); Jinjava resolves calls apart from variables, so each also gets a
   * variable of its name.
   */
  private static final List<String> FUNCTIONS =
      List.of("raise_exception", "strftime_now", "range", "namespace");

  /** The value of a function's name used as a variable. */
  record TemplateFunction(String name) {
    @Override
    public String toString() {
      return "<built-in function " + name + ">";
    }
  }

  private final ChatTemplateLimits limits;
  private final Jinjava jinjava;

  /** Nodes the current render may still evaluate; absent outside a render. */
  private final ThreadLocal<Budget> budget = new ThreadLocal<>();

  /**
   * A render's remaining steps and its nesting: {@code exceeded} or {@code tooDeep} stays set once
   * a bound was passed, whatever Jinjava does with the exception that reported it.
   */
  private static final class Budget {
    long remaining;
    boolean exceeded;
    boolean tooDeep;
    int baseDepth = -1;

    Budget(long remaining) {
      this.remaining = remaining;
    }
  }

  /** Thrown by a node when the render has used its steps. */
  private static final class OutOfSteps extends RuntimeException {
    OutOfSteps() {
      super("render steps exhausted", null, false, false);
    }
  }

  /** Thrown by {@code raise_exception}. */
  static final class Raised extends RuntimeException {
    Raised(String message) {
      super(message, null, false, false);
    }
  }

  /**
   * @param clock the time {@code strftime_now} reads
   * @param zone the zone {@code strftime_now} writes local time in
   */
  JinjaEnvironment(ChatTemplateLimits limits, DateTimeProvider clock, ZoneId zone) {
    this.limits = limits;
    CompositeELResolver resolver = new CompositeELResolver();
    resolver.add(new PyMethods(limits.maxOutputChars()));
    resolver.add(new ArrayELResolver(true));
    resolver.add(new JinjavaListELResolver(true));
    resolver.add(new TypeConvertingMapELResolver(true));
    resolver.add(new JinjavaBeanELResolver(true));
    JinjavaConfig config =
        JinjavaConfig.newBuilder()
            .withTrimBlocks(true)
            .withLstripBlocks(false) // TemplateText applies Jinja's lstrip_blocks
            .withNestedInterpretationEnabled(false)
            .withLegacyOverrides(
                LegacyOverrides.newBuilder()
                    .withEvaluateMapKeys(true)
                    .withIterateOverMapKeys(true)
                    .withUsePyishObjectMapper(true)
                    .withUseNaturalOperatorPrecedence(true)
                    .withParseWhitespaceControlStrictly(true)
                    .withAllowAdjacentTextNodes(true)
                    .withUseTrimmingForNotesAndExpressions(true)
                    .withKeepNullableLoopValues(true)
                    .build())
            .withExecutionMode(new ChatExecutionMode())
            .withMaxOutputSize(limits.maxOutputChars())
            .withMaxStringLength(limits.maxOutputChars())
            .withMaxListSize(limits.maxOutputChars())
            .withMaxMapSize(limits.maxOutputChars())
            .withRangeLimit(MAX_RANGE)
            .withEnableRecursiveMacroCalls(true)
            .withMaxMacroRecursionDepth(limits.maxRenderDepth() + MACRO_DEPTH_MARGIN)
            .withElResolver(resolver)
            .withDisabled(Map.of(Context.Library.TAG, DISABLED_TAGS))
            .withLocale(Locale.ROOT)
            .withTimeZone(zone)
            .withDateTimeProvider(clock)
            .withProcessors(
                JinjavaProcessors.newBuilder().withNodePreProcessor(this::onNode).build())
            .build();
    this.jinjava = new ChatJinjava(config);
    jinjava.setResourceLocator(
        (name, encoding, interpreter) -> {
          throw new ResourceNotFoundException("chat templates cannot read files: " + name);
        });
    Context global = jinjava.getGlobalContext();
    global.registerFunction(
        new ELFunctionDefinition(
            "", "raise_exception", JinjaEnvironment.class, "raiseException", Object.class));
    global.registerFunction(
        new ELFunctionDefinition(
            "", "strftime_now", JinjaEnvironment.class, "strftimeNow", String.class));
    global.registerFunction(
        new ELFunctionDefinition(
            "", "range", JinjaEnvironment.class, "range", Object.class, Object[].class));
    global.registerFilter(new ToJsonFilter(limits.maxOutputChars()));
    global.registerFilter(new LengthFilter("length"));
    global.registerFilter(new LengthFilter("count"));
    global.registerTag(new GenerationTag());
    global.registerTag(new FilteringForTag(this::chargeStep));
    global.registerFilter(new ExtremeFilter("max", 1));
    global.registerFilter(new ExtremeFilter("min", -1));
    global.registerFilter(new ItemsFilter());
    global.registerFilter(new StringFilter("upper", (v, args) -> v.toUpperCase(Locale.ROOT)));
    global.registerFilter(new StringFilter("lower", (v, args) -> v.toLowerCase(Locale.ROOT)));
    global.registerFilter(new StringFilter("capitalize", (v, args) -> PyMethods.capitalize(v)));
    global.registerFilter(new StringFilter("title", (v, args) -> titleFilter(v)));
    global.registerFilter(
        new StringFilter(
            "trim",
            (v, args) ->
                PyMethods.strip(
                    v,
                    args.length > 0 && args[0] != null ? String.valueOf(args[0]) : null,
                    true,
                    true)));
    global.registerFilter(new RoundFilter());
  }

  ChatTemplateLimits limits() {
    return limits;
  }

  /**
   * Renders template text prepared by {@link TemplateText#prepare}.
   *
   * @param origin where the template comes from, for messages
   * @throws ChatTemplateException if the template raises, fails or passes a limit
   */
  String render(String source, Map<String, Object> bindings, String origin) {
    for (String name : FUNCTIONS) {
      bindings.putIfAbsent(name, new TemplateFunction(name));
    }
    Budget steps = new Budget(limits.maxRenderSteps());
    budget.set(steps);
    RenderResult result;
    try {
      result = jinjava.renderForResult(source, bindings);
    } catch (RuntimeException e) {
      ChatTemplateException known = known(e, steps);
      throw known != null
          ? known
          : new ChatTemplateException(
              Reason.TEMPLATE, origin + ": rendering failed: " + e.getMessage(), e);
    } finally {
      budget.remove();
    }
    List<TemplateError> fatal =
        result.getErrors().stream()
            .filter(error -> error.getSeverity() == TemplateError.ErrorType.FATAL)
            .toList();
    // A raise or a limit explains any errors that follow it, so it is reported first.
    for (TemplateError error : fatal) {
      ChatTemplateException known = known(error.getException(), steps);
      if (known != null) {
        throw known;
      }
      if (error.getReason() == TemplateError.ErrorReason.OUTPUT_TOO_BIG) {
        throw outputTooLong();
      }
    }
    ChatTemplateException known = known(null, steps);
    if (known != null) {
      throw known;
    }
    if (!fatal.isEmpty()) {
      throw new ChatTemplateException(Reason.TEMPLATE, origin + ": " + describe(fatal.get(0)));
    }
    String output = result.getOutput();
    if (output.length() > limits.maxOutputChars()) {
      throw outputTooLong();
    }
    return output;
  }

  /**
   * The failure {@code t} stands for when it is a raise or a passed bound, or when the budget
   * records one; null otherwise.
   */
  private ChatTemplateException known(Throwable t, Budget steps) {
    Raised raised = find(t, Raised.class);
    if (raised != null) {
      return new ChatTemplateException(Reason.RAISED, raised.getMessage());
    }
    if (steps.exceeded || steps.tooDeep || find(t, OutOfSteps.class) != null) {
      return outOfSteps(steps);
    }
    StringLimitException tooLong = find(t, StringLimitException.class);
    if (tooLong != null) {
      return new ChatTemplateException(Reason.LIMIT, tooLong.getMessage());
    }
    if (find(t, OutputTooBigException.class) != null) {
      return outputTooLong();
    }
    return null;
  }

  private ChatTemplateException outputTooLong() {
    return new ChatTemplateException(
        Reason.LIMIT,
        "rendered prompt is longer than maxOutputChars=" + limits.maxOutputChars() + " characters");
  }

  private ChatTemplateException outOfSteps(Budget steps) {
    if (steps.tooDeep) {
      return new ChatTemplateException(
          Reason.LIMIT,
          "rendering nested loops and macro calls deeper than maxRenderDepth="
              + limits.maxRenderDepth()
              + " (a macro that recurses without end?)");
    }
    return new ChatTemplateException(
        Reason.LIMIT,
        "rendering took more than maxRenderSteps="
            + limits.maxRenderSteps()
            + " template steps (too many messages, or a template that loops without end)");
  }

  /** One line: the line number, Jinjava's message and the innermost cause that says more. */
  static String describe(TemplateError error) {
    StringBuilder out = new StringBuilder();
    if (error.getLineno() > 0) {
      out.append("line ").append(error.getLineno()).append(": ");
    }
    out.append(error.getMessage());
    Throwable root = error.getException();
    while (root != null && root.getCause() != null && root.getCause() != root) {
      root = root.getCause();
    }
    if (root != null && root.getMessage() != null && !out.toString().contains(root.getMessage())) {
      out.append(" (").append(root.getMessage()).append(')');
    }
    return out.toString().replace('\n', ' ');
  }

  private static <T extends Throwable> T find(Throwable t, Class<T> type) {
    for (int depth = 0; t != null && depth < 32; depth++, t = t.getCause()) {
      if (type.isInstance(t)) {
        return type.cast(t);
      }
    }
    return null;
  }

  /** One step of the current render's budget, outside a node (a loop pass). */
  private void chargeStep() {
    Budget steps = budget.get();
    if (steps != null && (steps.exceeded || --steps.remaining < 0)) {
      steps.exceeded = true;
      throw new OutOfSteps();
    }
  }

  private void onNode(Node node, JinjavaInterpreter interpreter) {
    Budget steps = budget.get();
    if (steps == null) {
      return;
    }
    if (steps.exceeded || steps.tooDeep) {
      throw new OutOfSteps(); // Jinjava may have caught the first one and carried on
    }
    int depth = 0;
    for (Context c = interpreter.getContext(); c != null; c = c.getParent()) {
      depth++;
    }
    if (steps.baseDepth < 0) {
      steps.baseDepth = depth;
    }
    if (depth - steps.baseDepth > limits.maxRenderDepth()) {
      steps.tooDeep = true;
      throw new OutOfSteps();
    }
    if (--steps.remaining < 0) {
      steps.exceeded = true;
      throw new OutOfSteps();
    }
  }

  // ---------------------------------------------------------------- functions

  /** {@code raise_exception(message)}: fails the render with the template's message. */
  public static Object raiseException(Object message) {
    throw new Raised(String.valueOf(PyValues.unwrap(message)));
  }

  /**
   * {@code range(stop)}, {@code range(start, stop[, step])}: Python's, refusing more than {@value
   * #MAX_RANGE} numbers as Jinja's sandbox does (Jinjava would quietly return fewer).
   */
  public static List<Long> range(Object first, Object... rest) {
    if (rest.length > 2) {
      throw new IllegalArgumentException(
          "range expected at most 3 arguments, got " + (1 + rest.length));
    }
    long start = 0;
    long stop;
    long step = 1;
    if (rest.length == 0) {
      stop = rangeArgument(first);
    } else {
      start = rangeArgument(first);
      stop = rangeArgument(rest[0]);
      if (rest.length == 2) {
        step = rangeArgument(rest[1]);
      }
    }
    if (step == 0) {
      throw new IllegalArgumentException("range() arg 3 must not be zero");
    }
    long count = step > 0 ? (stop - start + step - 1) / step : (start - stop - step - 1) / -step;
    count = Math.max(0, count);
    if (count > MAX_RANGE) {
      throw new IllegalArgumentException(
          "range too big: " + count + " numbers, at most " + MAX_RANGE + " are allowed");
    }
    List<Long> out = new ArrayList<>((int) count);
    for (long i = 0; i < count; i++) {
      out.add(start + i * step);
    }
    return out;
  }

  private static long rangeArgument(Object value) {
    value = PyValues.unwrap(value);
    if (!PyValues.isInteger(value)) {
      throw new IllegalArgumentException(
          "range() arguments must be integers, not " + PyValues.typeName(value));
    }
    return ((Number) value).longValue();
  }

  /** {@code strftime_now(format)}: the configured clock's local time, formatted by strftime. */
  public static String strftimeNow(String format) {
    JinjavaConfig config = JinjavaInterpreter.getCurrent().getConfig();
    long nowMs = config.getDateTimeProvider().getCurrentTimeMillis();
    LocalDateTime now = LocalDateTime.ofInstant(Instant.ofEpochMilli(nowMs), config.getTimeZone());
    return Strftime.format(now, format);
  }

  // ---------------------------------------------------------------- filters and tags

  /** {@code tojson}: Python's {@code json.dumps}, with Hugging Face's defaults and arguments. */
  private static final class ToJsonFilter implements Filter {

    private final long maxChars;

    ToJsonFilter(long maxChars) {
      this.maxChars = maxChars;
    }

    @Override
    public String getName() {
      return "tojson";
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return filter(var, interpreter, args, Map.of());
    }

    @Override
    public Object filter(
        Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
      // Hugging Face's signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
      // sort_keys=False).
      String[] names = {"ensure_ascii", "indent", "separators", "sort_keys"};
      Object[] values = new Object[names.length];
      if (args.length > names.length) {
        throw new IllegalArgumentException(
            "tojson takes at most 4 arguments (ensure_ascii, indent, separators, sort_keys), got "
                + args.length);
      }
      System.arraycopy(args, 0, values, 0, args.length);
      for (Map.Entry<String, Object> e : kwargs.entrySet()) {
        int i = java.util.Arrays.asList(names).indexOf(e.getKey());
        if (i < 0) {
          throw new IllegalArgumentException(
              "tojson has no argument "
                  + e.getKey()
                  + " (allowed: "
                  + String.join(", ", names)
                  + ")");
        }
        values[i] = e.getValue();
      }
      boolean ensureAscii = truthy(values[0]);
      String indent = indent(PyValues.unwrap(values[1]));
      String itemSeparator = indent == null ? ", " : ",";
      String keySeparator = ": ";
      Object separators = PyValues.unwrap(values[2]);
      if (separators != null) {
        if (!(separators instanceof Collection<?> pair) || pair.size() != 2) {
          throw new IllegalArgumentException(
              "tojson separators must be a pair of strings (item, key), got " + separators);
        }
        Object[] both = pair.toArray();
        itemSeparator = String.valueOf(PyValues.unwrap(both[0]));
        keySeparator = String.valueOf(PyValues.unwrap(both[1]));
      }
      boolean sortKeys = truthy(values[3]);
      return PyJson.dumps(
          var,
          new PyJson.Options(ensureAscii, indent, itemSeparator, keySeparator, sortKeys),
          maxChars);
    }

    private static String indent(Object value) {
      if (value == null) {
        return null;
      }
      if (value instanceof String s) {
        return s;
      }
      if (PyValues.isInteger(value)) {
        long n = ((Number) value).longValue();
        if (n < 0 || n > 64) {
          throw new IllegalArgumentException("tojson indent=" + n + " must be in [0, 64]");
        }
        return " ".repeat((int) n);
      }
      throw new IllegalArgumentException(
          "tojson indent must be an integer or a string, got " + PyValues.typeName(value));
    }

    private static boolean truthy(Object value) {
      value = PyValues.unwrap(value);
      if (value == null) {
        return false;
      }
      if (value instanceof Boolean b) {
        return b;
      }
      if (value instanceof Number n) {
        return n.doubleValue() != 0;
      }
      if (value instanceof CharSequence s) {
        return !s.isEmpty();
      }
      if (value instanceof Collection<?> c) {
        return !c.isEmpty();
      }
      if (value instanceof Map<?, ?> m) {
        return !m.isEmpty();
      }
      return true;
    }
  }

  /** {@code length} and {@code count}: Python's {@code len}, strings measured in code points. */
  private static final class LengthFilter implements Filter {

    private final String name;

    LengthFilter(String name) {
      this.name = name;
    }

    @Override
    public String getName() {
      return name;
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      Object value = PyValues.unwrap(var);
      if (value == null) {
        return 0L;
      }
      if (value instanceof CharSequence s) {
        return (long) s.toString().codePointCount(0, s.length());
      }
      if (value instanceof Collection<?> c) {
        return (long) c.size();
      }
      if (value instanceof Map<?, ?> m) {
        return (long) m.size();
      }
      if (value instanceof Object[] a) {
        return (long) a.length;
      }
      if (value instanceof Iterable<?> it) {
        long n = 0;
        for (Object ignored : it) {
          n++;
        }
        return n;
      }
      throw new IllegalArgumentException(
          "object of type '" + PyValues.typeName(value) + "' has no len()");
    }
  }

  /**
   * {@code {% generation %}...{% endgeneration %}}: marks what the assistant wrote, for training
   * masks; for a prompt it is its body.
   */
  private static final class GenerationTag implements Tag {

    private static final long serialVersionUID = 1L;

    @Override
    public String getName() {
      return "generation";
    }

    @Override
    public String interpret(TagNode tagNode, JinjavaInterpreter interpreter) {
      StringBuilder out = new StringBuilder();
      for (Node child : tagNode.getChildren()) {
        out.append(child.render(interpreter).getValue());
      }
      return out.toString();
    }
  }

  /** {@code max} and {@code min} of a sequence, optionally by {@code attribute=}. */
  private static final class ExtremeFilter implements Filter {

    private final String name;
    private final int sign;

    ExtremeFilter(String name, int sign) {
      this.name = name;
      this.sign = sign;
    }

    @Override
    public String getName() {
      return name;
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return filter(var, interpreter, new Object[0], Map.of());
    }

    @Override
    public Object filter(
        Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
      Object attribute = kwargs.get("attribute");
      Object best = null;
      Object bestKey = null;
      for (Object item : iterable(var, name)) {
        Object key = attribute == null ? item : ((Map<?, ?>) item).get(String.valueOf(attribute));
        if (best == null || sign * compare(key, bestKey) > 0) {
          best = item;
          bestKey = key;
        }
      }
      return best;
    }

    private static int compare(Object a, Object b) {
      a = PyValues.unwrap(a);
      b = PyValues.unwrap(b);
      if (a instanceof Number x && b instanceof Number y) {
        return Double.compare(x.doubleValue(), y.doubleValue());
      }
      if (a instanceof String x && b instanceof String y) {
        // Jinja compares case-insensitively unless case_sensitive=true.
        return PyValues.compareStrings(x.toLowerCase(Locale.ROOT), y.toLowerCase(Locale.ROOT));
      }
      throw new IllegalArgumentException(
          "cannot compare " + PyValues.typeName(a) + " with " + PyValues.typeName(b));
    }
  }

  /**
   * A filter on the text of a value, with Python's meaning: case mapping independent of the JVM's
   * locale (Jinjava's would make {@code 'i'|upper} a dotted capital I in a Turkish locale), and
   * {@code trim} removing Unicode white space only (Java's {@code trim} also removes control
   * characters and keeps a no-break space).
   */
  private static final class StringFilter implements Filter {

    private final String name;
    private final java.util.function.BiFunction<String, Object[], String> function;

    StringFilter(String name, java.util.function.BiFunction<String, Object[], String> function) {
      this.name = name;
      this.function = function;
    }

    @Override
    public String getName() {
      return name;
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return filter(var, interpreter, (Object[]) args, Map.of());
    }

    @Override
    public Object filter(
        Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
      Object value = PyValues.unwrap(var);
      String text =
          value == null ? "" : value instanceof String s ? s : interpreter.getAsString(value);
      return function.apply(text, args);
    }
  }

  /** Jinja's {@code title}: words split at runs of {@code -}, spaces and opening brackets. */
  private static final java.util.regex.Pattern WORD_BEGINNING =
      java.util.regex.Pattern.compile(
          "[-\\s({\\[<]+", java.util.regex.Pattern.UNICODE_CHARACTER_CLASS);

  static String titleFilter(String s) {
    StringBuilder out = new StringBuilder(s.length());
    java.util.regex.Matcher m = WORD_BEGINNING.matcher(s);
    int at = 0;
    while (at < s.length()) {
      int end = m.find(at) ? m.start() : s.length();
      if (end > at) {
        int first = s.codePointAt(at);
        out.append(Character.toString(first).toUpperCase(Locale.ROOT))
            .append(s.substring(at + Character.charCount(first), end).toLowerCase(Locale.ROOT));
      }
      if (end < s.length()) {
        out.append(s, end, m.end());
        at = m.end();
      } else {
        at = end;
      }
    }
    return out.toString();
  }

  /**
   * {@code round(precision=0, method='common')}: Python's {@code round} (half to even, on the
   * double's exact value), or {@code ceil} or {@code floor}; a float stays a float ({@code 2.0}).
   */
  private static final class RoundFilter implements Filter {

    @Override
    public String getName() {
      return "round";
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      return filter(var, interpreter, (Object[]) args, Map.of());
    }

    @Override
    public Object filter(
        Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
      Object value = PyValues.unwrap(var);
      Object precisionArg = args.length > 0 ? args[0] : kwargs.get("precision");
      Object methodArg = args.length > 1 ? args[1] : kwargs.get("method");
      int precision =
          precisionArg == null ? 0 : (int) Double.parseDouble(String.valueOf(precisionArg));
      String method = methodArg == null ? "common" : String.valueOf(methodArg);
      java.math.RoundingMode mode =
          switch (method) {
            case "common" -> java.math.RoundingMode.HALF_EVEN;
            case "ceil" -> java.math.RoundingMode.CEILING;
            case "floor" -> java.math.RoundingMode.FLOOR;
            default ->
                throw new IllegalArgumentException(
                    "round: method=" + method + " must be common, ceil or floor");
          };
      if (PyValues.isInteger(value) && method.equals("common")) {
        return value;
      }
      if (!(value instanceof Number n)) {
        throw new IllegalArgumentException(
            "round: expected a number, not " + PyValues.typeName(value));
      }
      double d = n.doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        return d;
      }
      return new java.math.BigDecimal(d).setScale(precision, mode).doubleValue();
    }
  }

  /** {@code items}: a dict's (key, value) pairs, in order. */
  private static final class ItemsFilter implements Filter {

    @Override
    public String getName() {
      return "items";
    }

    @Override
    public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
      Object value = PyValues.unwrap(var);
      if (value == null) {
        return List.of();
      }
      if (!(value instanceof Map<?, ?> map)) {
        throw new IllegalArgumentException(
            "items: can only get items from a mapping, not " + PyValues.typeName(value));
      }
      List<List<Object>> items = new ArrayList<>(map.size());
      for (Map.Entry<?, ?> e : map.entrySet()) {
        List<Object> pair = new ArrayList<>(2);
        pair.add(e.getKey());
        pair.add(e.getValue());
        items.add(pair);
      }
      return items;
    }
  }

  private static Iterable<?> iterable(Object var, String filter) {
    Object value = PyValues.unwrap(var);
    if (value instanceof Iterable<?> it) {
      return it;
    }
    if (value instanceof Object[] array) {
      return List.of(array);
    }
    throw new IllegalArgumentException(
        filter + ": expected a sequence, not " + PyValues.typeName(value));
  }

  /** Prints values as Python's {@code str} does where Jinjava differs: booleans and floats. */
  private static final class ChatExecutionMode implements ExecutionMode {

    @Override
    public void prepareContext(Context context) {
      context.setExpressionStrategy(new PyExpressionStrategy());
    }
  }

  private static final class PyExpressionStrategy implements ExpressionStrategy {

    private static final long serialVersionUID = 1L;

    @Override
    public RenderedOutputNode interpretOutput(
        ExpressionToken master, JinjavaInterpreter interpreter) {
      Object value =
          PyValues.unwrap(
              interpreter.resolveELExpression(master.getExpr(), master.getLineNumber()));
      String text;
      if (value instanceof String string) {
        text = string; // Jinjava's printer would escape control characters
      } else if (value instanceof Boolean b) {
        text = b ? "True" : "False";
      } else if (value instanceof Double || value instanceof Float) {
        text = PyValues.floatRepr(((Number) value).doubleValue());
      } else {
        text = interpreter.getAsString(value);
      }
      return new RenderedOutputNode(text);
    }
  }

  /** Jinjava with {@link PyTreeBuilder}'s expression syntax. */
  private static final class ChatJinjava extends Jinjava {

    private final ExpressionFactory expressions;

    ChatJinjava(JinjavaConfig config) {
      super(config);
      Context global = getGlobalContext();
      PyTreeBuilder builder =
          new PyTreeBuilder(
              name -> global.getFilter(name) != null,
              name -> global.getExpTest(name) != null,
              config.getMaxStringLength());
      this.expressions =
          new ExpressionFactoryImpl(
              new TreeStore(builder, new Cache(1000)), new TruthyTypeConverter());
    }

    @Override
    public ExpressionFactory getExpressionFactory() {
      return expressions;
    }
  }
}
