package io.tokenspeed.model;

import java.util.List;

/** The requests of one forward pass: prefill chunks and decode steps, in any mix and order. */
public record ForwardBatch(List<ForwardRequest> requests) {

  public ForwardBatch {
    if (requests == null || requests.isEmpty()) {
      throw new IllegalArgumentException("a forward batch needs at least one request");
    }
    requests = List.copyOf(requests);
  }

  /** A batch of one request. */
  public static ForwardBatch of(ForwardRequest... requests) {
    return new ForwardBatch(List.of(requests));
  }

  /** Tokens of all requests. */
  public int numTokens() {
    int n = 0;
    for (ForwardRequest r : requests) {
      n = Math.addExact(n, r.numTokens());
    }
    return n;
  }
}
