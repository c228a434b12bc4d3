package io.tokenspeed.server.trace;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.StringReader;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class TraceTest {

  private static List<TraceRequest> parse(String text) throws IOException {
    return Trace.parse(new BufferedReader(new StringReader(text)), "t.jsonl");
  }

  @Test
  void shouldReadTheMooncakeFormatInOrder() throws IOException {
    List<TraceRequest> t =
        parse(
            """
            {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}

            {"timestamp": 3000, "input_length": 915, "output_length": 355, "hash_ids": [0, 462]}
            {"timestamp": 3000, "input_length": 512, "output_length": 0, "hash_ids": [7]}
            """);
    assertEquals(3, t.size());
    assertEquals(6758, t.get(0).inputLength());
    assertEquals(14, t.get(0).numBlocks());
    assertEquals(512, t.get(0).blockTokens(12));
    assertEquals(6758 - 13 * 512, t.get(0).blockTokens(13));
    assertArrayEquals(new int[] {0, 462}, t.get(1).hashIds());
    assertEquals(3000, t.get(1).timestampMs());
    assertEquals(355, t.get(1).outputLength());
    assertEquals(512, t.get(2).blockTokens(0));
  }

  @ParameterizedTest(name = "{1}")
  @CsvSource(
      delimiter = '|',
      value = {
        "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 1, \"hash_ids\": [0, 1]}"
            + " | t.jsonl:1: input_length=1025 does not fit 2 blocks of 512 tokens: it must be in"
            + " [513, 1024]",
        "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [0, 1]}"
            + " | t.jsonl:1: input_length=512 does not fit 2 blocks",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": []}"
            + " | t.jsonl:1: hash_ids must name at least one block",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [-3]}"
            + " | t.jsonl:1: hash_ids holds -3",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1.5]}"
            + " | t.jsonl:1: hash_ids[0]=1.5 is not an integer",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1} | t.jsonl:1: hash_ids must be"
            + " an array",
        "{\"timestamp\": -1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}"
            + " | t.jsonl:1: timestamp=-1 must be >= 0",
        "{\"timestamp\": 0, \"input_length\": \"5\", \"output_length\": 1, \"hash_ids\": [1]}"
            + " | t.jsonl:1: input_length must be an integer",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": -2, \"hash_ids\": [1]}"
            + " | t.jsonl:1: output_length=-2 must be >= 0",
        "[1, 2] | t.jsonl:1: a line must be a JSON object",
        "{\"timestamp\": 0, | t.jsonl:1: not JSON"
      })
  void shouldNameTheLineAndWhatIsWrong(String line, String message) {
    var e = assertThrows(IllegalArgumentException.class, () -> parse(line.strip() + "\n"));
    assertTrue(e.getMessage().startsWith(message.strip()), e.getMessage());
  }

  @Test
  void shouldRefuseATraceOutOfArrivalOrder() {
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                parse(
                    """
                    {"timestamp": 5, "input_length": 5, "output_length": 1, "hash_ids": [1]}
                    {"timestamp": 4, "input_length": 5, "output_length": 1, "hash_ids": [1]}
                    """));
    assertEquals(
        "t.jsonl:2: timestamp 4 comes before the previous line's 5: a trace is in arrival order",
        e.getMessage());
  }
}
