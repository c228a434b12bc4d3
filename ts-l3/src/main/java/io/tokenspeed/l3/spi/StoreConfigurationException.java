package io.tokenspeed.l3.spi;

import java.io.IOException;

/**
 * The backend refused a call because of how this deployment is configured, not because it is
 * unreachable or broken: a permission the store's user lacks (Redis {@code NOPERM}), credentials
 * the server rejects ({@code WRONGPASS}, {@code NOAUTH}). A store throws it only when the refusal
 * came before any transfer, so the call has stopped touching every buffer it was given.
 *
 * <p>The executor reads it as its own class of failure (architecture §8):
 *
 * <pre>
 *   thrown                      rows      retired?   object evidence?   outage?   counted as
 *   StoreConfigurationException FAILED    yes        no                 no        configuration
 *                                                                                  failure
 * </pre>
 *
 * It is not an outage: waiting for a cooldown and probing again cannot fix an ACL, and treating it
 * as one would cool the store down forever (cooldown, probe, refusal, cooldown ...). The executor
 * logs each distinct message once and counts the refusals in its metrics, so an operator sees the
 * misconfiguration while every job still completes at once with FAILED rows. The keys carry no
 * object evidence: the same keys may be read after the configuration is repaired.
 *
 * <p>The message must let an operator fix the configuration without reading code: which store,
 * which user or credential, and which command or key the backend refused.
 *
 * <p>It extends {@link IOException} because the refusal arrives over the store's connection; a
 * caller that only knows {@code IOException} still sees a failed call.
 */
public final class StoreConfigurationException extends IOException {

  private static final long serialVersionUID = 1L;

  /**
   * @param message one line naming the store, the user or credential, and the refused command
   * @param cause the backend's own error, or null
   */
  public StoreConfigurationException(String message, Throwable cause) {
    super(message, cause);
    if (message == null || message.isBlank()) {
      throw new IllegalArgumentException("a configuration failure needs a message");
    }
  }
}
