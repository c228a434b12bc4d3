/**
 * {@code tokenspeed router}, the front door of prefill/decode disaggregation ({@code docs/pd.md}):
 * {@link io.tokenspeed.server.router.Router} serves the OpenAI API on the same web server
 * conventions as {@code serve} and sends each completion to a prefill and a decode engine, chosen
 * round robin among the ready ones, configured by {@link
 * io.tokenspeed.server.router.RouterSettings}. Everything else is package-private: the backends and
 * their poll, one request's exchange with both engines, and the upstream requests.
 */
package io.tokenspeed.server.router;
