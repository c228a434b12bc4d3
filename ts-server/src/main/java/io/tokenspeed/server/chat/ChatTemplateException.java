package io.tokenspeed.server.chat;

/**
 * A chat template that cannot be loaded, or a conversation it cannot render. The message is one
 * line, fit to return to a client (a render failure) or to print at startup (a load failure): it
 * names the file or the field, the value, and what is allowed.
 *
 * <p>{@link #reason()} says whose the fault is: a server answers {@link Reason#RAISED}, {@link
 * Reason#LIMIT} and {@link Reason#MESSAGES} with 400, as the request cannot be served with this
 * template; {@link Reason#TEMPLATE} at render time is a template error on a path the load-time
 * check did not reach, also caused by what the request contains.
 */
public final class ChatTemplateException extends RuntimeException {

  /** Why rendering or loading failed. */
  public enum Reason {
    /** The template called {@code raise_exception(message)}; the message is the template's. */
    RAISED,
    /** The render would pass a bound of {@link ChatTemplateLimits}. */
    LIMIT,
    /** The messages or variables handed to the renderer are not acceptable. */
    MESSAGES,
    /** The template failed while rendering (a type error, an unknown filter or method). */
    TEMPLATE,
    /** The template or the file holding it is invalid; raised by loading only. */
    INVALID
  }

  private final Reason reason;

  public ChatTemplateException(Reason reason, String message) {
    super(message);
    this.reason = reason;
  }

  public ChatTemplateException(Reason reason, String message, Throwable cause) {
    super(message, cause);
    this.reason = reason;
  }

  /** Why rendering or loading failed. */
  public Reason reason() {
    return reason;
  }
}
