package io.tokenspeed.model.tokenizer;

import io.tokenspeed.core.OneLine;

/**
 * A tokenizer file that cannot be used: malformed JSON, a missing or mistyped field, or a component
 * type this package does not implement. The message names the field or component and the offending
 * value, on one line (a line break the file carried into it is written as an escape).
 */
public final class TokenizerFormatException extends IllegalArgumentException {

  private static final long serialVersionUID = 1L;

  public TokenizerFormatException(String message) {
    super(OneLine.of(message));
  }
}
