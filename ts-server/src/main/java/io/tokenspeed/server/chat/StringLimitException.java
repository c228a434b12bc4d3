package io.tokenspeed.server.chat;

import jinjava.javax.el.ELException;

/**
 * A method or filter would build a string longer than {@link ChatTemplateLimits#maxOutputChars()};
 * the render fails with {@link ChatTemplateException.Reason#LIMIT}.
 */
final class StringLimitException extends ELException {

  private static final long serialVersionUID = 1L;

  StringLimitException(String what, long maxChars) {
    super(what + " longer than maxOutputChars=" + maxChars + " characters");
  }
}
