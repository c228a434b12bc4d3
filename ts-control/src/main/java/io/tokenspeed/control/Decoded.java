package io.tokenspeed.control;

/**
 * What {@link FrameDecoder} makes of some bytes: a valid frame, or the reason they are not one.
 * Malformed input is an expected outcome here, never an exception.
 */
public sealed interface Decoded {

  /** The bytes are one valid frame. */
  record Ok(Frame frame) implements Decoded {}

  /**
   * The bytes are not a valid frame.
   *
   * @param reason the class of defect
   * @param detail the offending values
   */
  record Malformed(Reason reason, String detail) implements Decoded {
    @Override
    public String toString() {
      return reason + ": " + detail;
    }
  }

  /** The classes of defect the decoder tells apart. */
  enum Reason {
    /** Fewer bytes than the header or the declared length needs. */
    TRUNCATED,
    /** The first four bytes are not "TSCP". */
    BAD_MAGIC,
    /** A protocol version this build does not speak. */
    UNSUPPORTED_VERSION,
    /** An unknown frame type or nonzero reserved flags. */
    BAD_TYPE,
    /** A declared length that disagrees with the bytes present or the type's fixed size. */
    BAD_LENGTH,
    /** A declared length above the receiver's max_frame_bytes. */
    TOO_LARGE,
    /** The CRC32C does not match. */
    BAD_CHECKSUM,
    /** A field outside its range: an enum ordinal, a count, a mask, a negative value. */
    BAD_FIELD,
    /** Bytes left after the last field of the body. */
    TRAILING_BYTES
  }
}
