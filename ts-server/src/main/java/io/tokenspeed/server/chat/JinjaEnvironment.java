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
import com.hubspot.jinjava.loader.ResourceNotFoundException;
import com.hubspot.jinjava.mode.ExecutionMode;
import com.hubspot.jinjava.objects.date.DateTimeProvider;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.output.RenderedOutputNode;
import com.hubspot.jinjava.tree.parse.ExpressionToken;
import io.tokenspeed.server.chat.ChatTemplateException.Reason;
import java.time.ZoneId;
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
 * <h2>Hugging Face's environment, and where each part of it is here</h2>
 *
 * <ul>
 *   <li>{@code trim_blocks}: Jinjava's option. {@code lstrip_blocks}, CRLF line ends and the
 *       dropped trailing newline: {@link TemplateText}, before Jinjava parses (Jinjava's own {@code
 *       lstrip_blocks} strips too much).
 *   <li>{@code raise_exception(msg)}, {@code strftime_now(fmt)}: {@link PyFunctions}; a raise fails
 *       the render with {@link Reason#RAISED} and the template's message.
 *   <li>{@code tojson} as Python's {@code json.dumps}, and filters whose Jinjava versions differ:
 *       {@link PyFilters}.
 *   <li>loop controls, {@code namespace(...)}, {@code is string}, {@code is mapping}: Jinjava's.
 *       Loop filters ({@code for x in xs if c}) and {@code for ... else}: {@link FilteringForTag}.
 *   <li>Python's expression syntax where Jinjava's differs (slices, {@code not}, keyword arguments,
 *       string escapes, {@code %}, {@code *}): {@link PyTreeBuilder}. Python's string, dict and
 *       list methods: {@link PyMethods}.
 *   <li>printing: strings as they are, booleans as {@code True}/{@code False}, floats as Python
 *       writes them.
 *   <li>the immutable sandbox: no method can modify a template's inputs, and {@code include},
 *       {@code import}, {@code from} and {@code extends} are disabled (a template cannot read
 *       files).
 * </ul>
 *
 * <h2>Bounds</h2>
 *
 * Values in messages are data, never template text: nested interpretation is off, so content
 * holding {@code {{ ... }}} prints as written. The output and every string a filter or method
 * builds are bounded by {@link ChatTemplateLimits#maxOutputChars()}; the work of one render by
 * {@link ChatTemplateLimits#maxRenderSteps()}, counting every node evaluated and every loop pass;
 * the nesting of loops and macro calls by {@link ChatTemplateLimits#maxRenderDepth()}. Steps and
 * depth are counted per render in a thread-local {@link Budget}: Jinjava catches and records some
 * exceptions and carries on, so once a bound is passed every further node fails at once, and the
 * budget, not the exception, decides the outcome.
 *
 * <p>Thread-safe: renders on different threads share nothing but the immutable setup. Each render
 * parses the template again (a millisecond or so for Qwen3's), which keeps Jinjava's node trees
 * private to one render.
 */
final class JinjaEnvironment {

  /**
   * Jinjava's own bound on macro recursion, this far above {@link
   * ChatTemplateLimits#maxRenderDepth()}: it ends recursion silently, so the depth check here must
   * always be reached first.
   */
  private static final int MACRO_DEPTH_MARGIN = 8;

  private static final Set<String> DISABLED_TAGS = Set.of("include", "import", "from", "extends");

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
            .withRangeLimit(PyFunctions.MAX_RANGE)
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
    PyFunctions.register(global);
    PyFilters.register(global, limits.maxOutputChars());
    global.registerTag(new FilteringForTag(this::chargeStep));
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
    PyFunctions.bindNames(bindings);
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
    PyFunctions.Raised raised = find(t, PyFunctions.Raised.class);
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
