package io.tokenspeed.server.chat;

/**
 * What one render of a chat template may use. A template is checkpoint data and the messages are
 * client data; together they must not be able to hang the renderer or fill the heap, so every
 * render runs under these bounds and fails with a {@link ChatTemplateException} ({@link
 * ChatTemplateException.Reason#LIMIT}) when it would pass one.
 *
 * @param maxOutputChars the longest rendered prompt, in UTF-16 chars; also the longest string a
 *     method or filter may build on the way
 * @param maxRenderSteps the most template nodes (text, expressions, tags, each loop pass counted
 *     again) one render may evaluate, which bounds its work
 * @param maxRenderDepth the deepest nesting of loops and macro calls (each level of a recursive
 *     macro counts)
 */
public record ChatTemplateLimits(int maxOutputChars, int maxRenderSteps, int maxRenderDepth) {

  /** Default {@link #maxOutputChars}: 8 Mi chars, far beyond any context window's worth of text. */
  public static final int DEFAULT_MAX_OUTPUT_CHARS = 8 << 20;

  /**
   * Default {@link #maxRenderSteps}: 4 Mi steps. Qwen3's template takes about 20 per message, so
   * this allows some 200,000 messages, while a runaway loop stops within a few seconds.
   */
  public static final int DEFAULT_MAX_RENDER_STEPS = 4 << 20;

  /**
   * Default {@link #maxRenderDepth}: 64 levels, well past the few that real templates nest (a loop
   * in a loop, a macro printing a nested JSON schema).
   */
  public static final int DEFAULT_MAX_RENDER_DEPTH = 64;

  /**
   * The largest {@link #maxRenderDepth} accepted: deeper recursion would exhaust a thread's stack.
   */
  public static final int MAX_RENDER_DEPTH = 256;

  /** The defaults above. */
  public static final ChatTemplateLimits DEFAULTS =
      new ChatTemplateLimits(
          DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_MAX_RENDER_STEPS, DEFAULT_MAX_RENDER_DEPTH);

  public ChatTemplateLimits {
    if (maxOutputChars < 1) {
      throw new IllegalArgumentException("maxOutputChars=" + maxOutputChars + " must be >= 1");
    }
    if (maxRenderSteps < 1) {
      throw new IllegalArgumentException("maxRenderSteps=" + maxRenderSteps + " must be >= 1");
    }
    if (maxRenderDepth < 1 || maxRenderDepth > MAX_RENDER_DEPTH) {
      throw new IllegalArgumentException(
          "maxRenderDepth=" + maxRenderDepth + " must be in [1, " + MAX_RENDER_DEPTH + "]");
    }
  }
}
