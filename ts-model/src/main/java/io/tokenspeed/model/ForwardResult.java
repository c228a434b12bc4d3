package io.tokenspeed.model;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Logits of a forward pass, per request in batch order: {@code [rows][vocabSize]} flattened, where
 * rows is every token of the chunk or just the last (see {@link ForwardRequest#allLogits()}).
 */
public record ForwardResult(int vocabSize, List<float[]> logits) {

  public ForwardResult {
    logits = List.copyOf(logits);
  }

  /**
   * The result of {@code requests} from the logits of all their rows in batch order ({@code
   * [rows][vocabSize]}, each request's {@link ForwardRequest#numLogitRows()} in turn).
   */
  public static ForwardResult split(int vocabSize, List<ForwardRequest> requests, float[] rows) {
    return split(vocabSize, requests, MemorySegment.ofArray(rows));
  }

  /**
   * The same from float32 rows in memory (for example a device's logits copied to pinned host
   * memory), copied once into each request's array.
   */
  public static ForwardResult split(
      int vocabSize, List<ForwardRequest> requests, MemorySegment rows) {
    List<float[]> perRequest = new ArrayList<>(requests.size());
    long at = 0;
    for (ForwardRequest req : requests) {
      int n = req.numLogitRows() * vocabSize;
      float[] out = new float[n];
      MemorySegment.copy(rows, ValueLayout.JAVA_FLOAT, at, out, 0, n);
      perRequest.add(out);
      at += (long) n * Float.BYTES;
    }
    return new ForwardResult(vocabSize, perRequest);
  }

  /** The logits of request {@code request}, flattened {@code [rows][vocab]}. */
  public float[] logits(int request) {
    return logits.get(request);
  }

  /** Row {@code row} of request {@code request}'s logits. */
  public float[] row(int request, int row) {
    return Arrays.copyOfRange(logits.get(request), row * vocabSize, (row + 1) * vocabSize);
  }

  /** The last row of request {@code request}: the logits that pick its next token. */
  public float[] last(int request) {
    float[] l = logits.get(request);
    return Arrays.copyOfRange(l, l.length - vocabSize, l.length);
  }
}
