package io.tokenspeed.server.trace;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * A request trace in the Mooncake FAST'25 format (kvcache-ai/Mooncake, {@code
 * FAST25-release/traces/}): JSON lines of {@code {"timestamp": ms, "input_length": n,
 * "output_length": m, "hash_ids": [...]}}, in arrival order, each id naming one block of {@link
 * #BLOCK_TOKENS} tokens. Blank lines are skipped; anything else that is not such an object is an
 * error naming the line.
 */
public final class Trace {

  /** Tokens a hash id names. */
  public static final int BLOCK_TOKENS = 512;

  private static final ObjectMapper JSON = new ObjectMapper();

  private Trace() {}

  /**
   * The requests of the trace {@code in} reads, in its order.
   *
   * @param name what errors call the trace (its file)
   * @throws IllegalArgumentException naming {@code name}, the line and what is wrong: not a JSON
   *     object, a field missing or of the wrong type, a value out of range, or a timestamp before
   *     the previous line's
   */
  public static List<TraceRequest> parse(BufferedReader in, String name) throws IOException {
    List<TraceRequest> out = new ArrayList<>();
    long previous = 0;
    String line;
    int number = 0;
    while ((line = in.readLine()) != null) {
      number++;
      if (line.isBlank()) {
        continue;
      }
      TraceRequest r;
      try {
        r = request(line);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(name + ":" + number + ": " + e.getMessage(), e);
      }
      if (r.timestampMs() < previous) {
        throw new IllegalArgumentException(
            name
                + ":"
                + number
                + ": timestamp "
                + r.timestampMs()
                + " comes before the previous line's "
                + previous
                + ": a trace is in arrival order");
      }
      previous = r.timestampMs();
      out.add(r);
    }
    return out;
  }

  private static TraceRequest request(String line) {
    JsonNode n;
    try {
      n = JSON.readTree(line);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("not JSON: " + e.getOriginalMessage());
    }
    if (n == null || !n.isObject()) {
      throw new IllegalArgumentException("a line must be a JSON object");
    }
    JsonNode ids = n.get("hash_ids");
    if (ids == null || !ids.isArray()) {
      throw new IllegalArgumentException("hash_ids must be an array of integers");
    }
    int[] hashIds = new int[ids.size()];
    for (int i = 0; i < hashIds.length; i++) {
      JsonNode id = ids.get(i);
      if (!id.canConvertToInt() || !id.isIntegralNumber()) {
        throw new IllegalArgumentException("hash_ids[" + i + "]=" + id + " is not an integer");
      }
      hashIds[i] = id.intValue();
    }
    return new TraceRequest(
        longField(n, "timestamp"),
        Math.toIntExact(Math.min(Integer.MAX_VALUE, longField(n, "input_length"))),
        Math.toIntExact(Math.min(Integer.MAX_VALUE, longField(n, "output_length"))),
        hashIds);
  }

  private static long longField(JsonNode n, String field) {
    JsonNode v = n.get(field);
    if (v == null || !v.isIntegralNumber() || !v.canConvertToLong()) {
      throw new IllegalArgumentException(field + " must be an integer, not " + v);
    }
    return v.longValue();
  }
}
