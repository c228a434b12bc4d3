package io.tokenspeed.control;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import io.tokenspeed.testkit.DecoderContract;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.function.Supplier;

/**
 * The coverage-guided fuzz target of {@link FrameDecoder} (Jazzer). Without {@code JAZZER_FUZZ} it
 * replays the seeds under {@code FrameGuidedFuzzTestInputs/frames} as a regression test; with it,
 * it fuzzes (docs/reliability/fuzzing.md has the commands and figures).
 *
 * <p>An input is a mode byte and a frame. Mode {@code 0} (even) hands the frame to the decoder as
 * it is; mode {@code 1} (odd) first rewrites its body length and checksum to match, as a peer with
 * a buggy encoder would send, so that the fuzzer's edits reach the body checks instead of stopping
 * at the checksum.
 *
 * <p>For every input the decoder must return a value: a frame that re-encodes to exactly the input
 * (acceptance is canonical) or a {@link Decoded.Malformed} with a clear one-line detail; never an
 * exception. Its allocation stays proportional to the input (a length or count field cannot make it
 * reserve memory the bytes do not back), and a header it accepts declares a length within the
 * limit.
 */
class FrameGuidedFuzzTest {

  private static final FrameDecoder DECODER = new FrameDecoder(Frames.MAX);

  @FuzzTest(maxDuration = "3m")
  void frames(byte[] data) {
    if (data.length == 0) {
      return;
    }
    byte[] frame = Arrays.copyOfRange(data, 1, data.length);
    if ((data[0] & 1) == 1 && frame.length >= FrameDescriptor.FRAMING_BYTES) {
      Frames.withCrc(Frames.withBodyLength(frame));
    }
    Supplier<String> input = () -> HexFormat.of().formatHex(frame);
    long before = DecoderContract.allocatedBytes();
    Decoded d;
    try {
      d = DECODER.decode(frame);
    } catch (RuntimeException e) {
      throw new AssertionError("decode threw for " + input.get(), e);
    }
    DecoderContract.assertAllocationWithin(
        before, 64 << 10, 64, frame.length, input, () -> DECODER.decode(frame));
    assertNotNull(d, input);
    switch (d) {
      case Decoded.Ok(Frame f) ->
          assertArrayEquals(
              frame, FrameEncoder.encode(f, Frames.MAX), () -> "not canonical: " + input.get());
      case Decoded.Malformed m -> {
        assertNotNull(m.reason(), input);
        DecoderContract.assertClearMessage(new IllegalArgumentException(m.detail()), input);
      }
    }
    byte[] header = Arrays.copyOf(frame, Math.max(frame.length, FrameDescriptor.HEADER_BYTES));
    if (DECODER.checkHeader(header, 0, frame.length) == null) {
      int length = FrameDecoder.frameLength(header, 0);
      assertTrue(
          length >= FrameDescriptor.FRAMING_BYTES && length <= Frames.MAX,
          () -> "header accepted with length " + length + ": " + input.get());
    }
  }
}
