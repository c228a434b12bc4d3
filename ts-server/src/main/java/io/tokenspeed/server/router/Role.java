package io.tokenspeed.server.router;

/** A backend's part in a request: a half of a disaggregated one (docs/pd.md), or all of it. */
enum Role {
  /** Computes the prompt's KV and the first token, and sends the KV to the decode backend. */
  PREFILL("prefill"),
  /** Receives the KV, generates the rest and answers the client. */
  DECODE("decode"),
  /** A fused replica ({@code router --replicas}): serves the whole request. */
  FUSED("fused");

  private final String wireName;

  Role(String wireName) {
    this.wireName = wireName;
  }

  /** The role's name in {@code /pd}, in the metrics' {@code role} label and in messages. */
  String wireName() {
    return wireName;
  }
}
