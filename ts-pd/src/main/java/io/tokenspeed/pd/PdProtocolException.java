package io.tokenspeed.pd;

/**
 * A peer broke the protocol (a frame of a bad type, length or content, or one naming a room or a
 * block it has no business naming); the connection closes, naming the peer and this message.
 */
final class PdProtocolException extends Exception {
  PdProtocolException(String message) {
    super(message, null, false, false);
  }
}
