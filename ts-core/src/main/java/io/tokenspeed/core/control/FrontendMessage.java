package io.tokenspeed.core.control;

import java.util.Arrays;
import java.util.HexFormat;

/**
 * One message the TP leader drained from the frontend this round: a new request, a client
 * cancellation or an administrative command. It rides the round's relay exchange so that every
 * rank's loop head applies the same messages in the same order. The payload is opaque to the
 * control plane (the engine encodes a new request's prompt and sampling parameters in it); a
 * cancellation carries none.
 *
 * <p>The record copies its payload in and out, so it is immutable and compares by content.
 *
 * @param kind what the message asks for
 * @param requestId the frontend's request id (non-negative)
 * @param payload the opaque body of a new request; empty for a cancellation
 */
public record FrontendMessage(Kind kind, long requestId, byte[] payload) {

  private static final byte[] EMPTY = new byte[0];

  /** What a frontend message asks for. */
  public enum Kind {
    /** A new request enters the loop. */
    NEW_REQUEST,
    /** The client cancelled request {@code requestId}. */
    CANCEL,
    /**
     * An administrative command every rank applies in the same round (a cache clear, a namespace
     * rotation, the replica's stop): {@code requestId} is the command's sequence number, the
     * payload the engine's encoding of it.
     */
    ADMIN
  }

  public FrontendMessage {
    if (kind == null) {
      throw new IllegalArgumentException(
          "frontend message for request " + requestId + " has no kind");
    }
    if (requestId < 0) {
      throw new IllegalArgumentException("frontend request_id=" + requestId + " must be >= 0");
    }
    payload = payload == null || payload.length == 0 ? EMPTY : payload.clone();
    if (kind == Kind.CANCEL && payload.length != 0) {
      throw new IllegalArgumentException(
          "cancellation of request "
              + requestId
              + " carries payload_bytes="
              + payload.length
              + ", must be 0");
    }
  }

  /** A new request with an opaque body. */
  public static FrontendMessage newRequest(long requestId, byte[] payload) {
    return new FrontendMessage(Kind.NEW_REQUEST, requestId, payload);
  }

  /** An administrative command numbered {@code sequence}, with an opaque body. */
  public static FrontendMessage admin(long sequence, byte[] payload) {
    return new FrontendMessage(Kind.ADMIN, sequence, payload);
  }

  /** A client cancellation. */
  public static FrontendMessage cancel(long requestId) {
    return new FrontendMessage(Kind.CANCEL, requestId, EMPTY);
  }

  /** A copy of the payload. */
  @Override
  public byte[] payload() {
    return payload.clone();
  }

  /** The payload's length in bytes, without copying it. */
  public int payloadLength() {
    return payload.length;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof FrontendMessage m
        && kind == m.kind
        && requestId == m.requestId
        && Arrays.equals(payload, m.payload);
  }

  @Override
  public int hashCode() {
    return (kind.hashCode() * 31 + Long.hashCode(requestId)) * 31 + Arrays.hashCode(payload);
  }

  @Override
  public String toString() {
    String body =
        payload.length <= 16
            ? HexFormat.of().formatHex(payload)
            : HexFormat.of().formatHex(payload, 0, 16) + "..";
    return "FrontendMessage[" + kind + " request=" + requestId + " payload=" + body + "]";
  }
}
