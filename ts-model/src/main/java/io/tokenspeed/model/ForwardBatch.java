package io.tokenspeed.model;

import java.util.List;

/**
 * The requests of one forward pass: prefill chunks and decode steps, in any mix and order, and the
 * {@link LayerGate} the pass waits on before each layer ({@link LayerGate#OPEN} when the cache it
 * reads is all in place).
 */
public record ForwardBatch(List<ForwardRequest> requests, LayerGate gate) {

  public ForwardBatch {
    if (requests == null || requests.isEmpty()) {
      throw new IllegalArgumentException("a forward batch needs at least one request");
    }
    if (gate == null) {
      throw new IllegalArgumentException("a layer gate is required (LayerGate.OPEN for none)");
    }
    requests = List.copyOf(requests);
  }

  /** A batch whose cache is all in place. */
  public ForwardBatch(List<ForwardRequest> requests) {
    this(requests, LayerGate.OPEN);
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
