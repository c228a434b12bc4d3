package io.tokenspeed.pd;

/**
 * A frame of the KV-transfer protocol as {@link PdFrameReader} reads it (layouts in {@link
 * PdFrameDescriptor}). DATA is read as its {@link Data} prefix only: the block's bytes go straight
 * from the socket into a destination segment.
 */
sealed interface PdFrame {

  /** HELLO; {@code frame} is the whole frame as read (both proofs cover it). */
  record Hello(int version, int role, byte[] frame) implements PdFrame {}

  /** PROOF: the 32-byte HMAC. */
  record Proof(byte[] mac) implements PdFrame {}

  /** BOOTSTRAP of {@code room}. */
  record Open(long room, Bootstrap bootstrap) implements PdFrame {}

  /** ACK of {@code room}. */
  record Accepted(long room, Ack ack) implements PdFrame {}

  /** REFUSE of {@code room}. */
  record Refuse(long room, String reason) implements PdFrame {}

  /** The prefix of a DATA frame: the block of {@code blockBytes} bytes follows on the channel. */
  record Data(long room, int group, int index, int blockBytes) implements PdFrame {}

  /** DONE of {@code room}. */
  record Done(long room, DoneInfo info, int crc32c) implements PdFrame {}

  /** RECEIVED of {@code room}. */
  record Received(long room) implements PdFrame {}

  /** CANCEL of {@code room}. */
  record Cancel(long room, String reason) implements PdFrame {}

  /** PING. */
  record Ping() implements PdFrame {}
}
