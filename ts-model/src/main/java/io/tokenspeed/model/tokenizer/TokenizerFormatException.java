package io.tokenspeed.model.tokenizer;

/**
 * A tokenizer file that cannot be used: malformed JSON, a missing or mistyped field, or a component
 * type this package does not implement. The message names the field or component and the offending
 * value.
 */
public final class TokenizerFormatException extends IllegalArgumentException {

  private static final long serialVersionUID = 1L;

  public TokenizerFormatException(String message) {
    super(message);
  }
}
