package io.tokenspeed.model.tokenizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import io.tokenspeed.model.checkpoint.JsonMutator;
import io.tokenspeed.testkit.DecoderContract;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;

/**
 * The coverage-guided fuzz target (Jazzer) of {@link BpeTokenizer#fromJson}: a {@code
 * tokenizer.json} and a {@code tokenizer_config.json}. Without {@code JAZZER_FUZZ} it replays the
 * seeds under {@code BpeTokenizerGuidedFuzzTestInputs/tokenizerJson} as a regression test; with it,
 * it fuzzes (docs/reliability/fuzzing.md has the commands and figures). {@link
 * BpeTokenizerFuzzTest} is the seeded share.
 *
 * <p>An input's bytes are read as UTF-8 text (a malformed sequence becomes U+FFFD, as the files'
 * strict readers never hand the decoder anything else); up to its first NUL character it is the
 * {@code tokenizer.json}, after it (if there is one) the {@code tokenizer_config.json}. JSON text
 * holds no raw NUL, so nothing is lost by the split.
 *
 * <p>Every input must load or be refused with a {@link TokenizerFormatException} whose message is
 * one line; never another exception or error, never a hang, never an allocation out of proportion
 * to the input (an id field cannot make it size tables by a number the file does not back). A
 * tokenizer that loads must encode and decode without throwing: ids lie in {@code [0, vocabSize)},
 * streaming decoding gives the full decode's text, and ids outside the vocabulary decode without
 * throwing.
 */
class BpeTokenizerGuidedFuzzTest {

  private static final String[] TEXTS = {
    "hello world",
    " <|end|>x<think>y ",
    "tab\tnew\nline  end",
    "\u00e9t\u00e9 \u4e2d\u6587 \ud83d\ude00!"
  };

  @FuzzTest(maxDuration = "3m")
  void tokenizerJson(byte[] data) {
    String text = new String(data, StandardCharsets.UTF_8);
    int nul = text.indexOf('\0');
    String json = nul < 0 ? text : text.substring(0, nul);
    String config = nul < 0 ? null : text.substring(nul + 1);
    Supplier<String> input =
        () -> "tokenizer.json=" + JsonMutator.quote(json) + " tokenizer_config.json=" + config;
    DecoderContract.Outcome<BpeTokenizer> o =
        DecoderContract.decode(
            TokenizerFormatException.class,
            16L << 20,
            2048,
            data.length,
            input,
            () -> BpeTokenizer.fromJson(json, config));
    if (!o.refused()) {
      use(o.value(), input);
    }
  }

  @Test
  void shouldKeepTheMessageOnOneLineWhenASplitPatternHoldsALineBreak() {
    // Found by this target: the refusal of a Split regex quoted the pattern as is, so a pattern
    // with
    // a line break printed as two lines.
    String json =
        """
        {"model": {"vocab": {"a": 0}, "merges": []},
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
           {"type": "Split", "pattern": {"Regex": "(\\n"}, "behavior": "Isolated"},
           {"type": "ByteLevel"}]}}
        """;
    TokenizerFormatException e =
        assertThrows(TokenizerFormatException.class, () -> BpeTokenizer.fromJson(json, null));
    assertFalse(e.getMessage().contains("\n"), e.getMessage());
    assertTrue(e.getMessage().contains("\"(\\u000a\""), e.getMessage());
  }

  @Test
  void shouldRefuseATokenizerWhoseLargestIdLeavesTheTableEmptyWhenTheFileIsSmall() {
    // Found while reviewing this target's allocation check: one id near 2^24 in a file of about a
    // hundred bytes made loading allocate tables of 2^24 entries (84 MB).
    String json =
        """
        {"model": {"vocab": {"a": 0, "b": 16777215}, "merges": []},
         "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}
        """;
    TokenizerFormatException e =
        assertThrows(TokenizerFormatException.class, () -> BpeTokenizer.fromJson(json, null));
    assertEquals(
        "the largest token id is 16777215, but model.vocab and added_tokens define 2 ids: at most"
            + " 65536 ids below the largest may be undefined (the id table is sized by the largest"
            + " id)",
        e.getMessage());
    String dense = json.replace("16777215", String.valueOf(1 + BpeTokenizer.MAX_UNUSED_IDS));
    assertEquals(2 + BpeTokenizer.MAX_UNUSED_IDS, BpeTokenizer.fromJson(dense, null).vocabSize());
  }

  @Test
  void shouldCountAnIdThatVocabAndAddedTokensBothDefineOnce() {
    // ids 0 and 2^16 + 2 leave 2^16 + 1 undefined; an added token repeating id 0 defines nothing
    // new
    String json =
        """
        {"model": {"vocab": {"a": 0, "b": %d}, "merges": []},
         "added_tokens": [{"id": 0, "content": "a", "special": false}],
         "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}
        """
            .formatted(BpeTokenizer.MAX_UNUSED_IDS + 2);
    TokenizerFormatException e =
        assertThrows(TokenizerFormatException.class, () -> BpeTokenizer.fromJson(json, null));
    assertTrue(
        e.getMessage().contains("model.vocab and added_tokens define 2 ids"), e.getMessage());
  }

  private static void use(BpeTokenizer t, Supplier<String> input) {
    int vocabSize = t.vocabSize();
    assertTrue(vocabSize >= 1 && vocabSize <= BpeTokenizer.MAX_TOKEN_ID_EXCLUSIVE, input);
    for (String text : TEXTS) {
      int[] ids = t.encode(text);
      int[] plain = t.encodeAsPlainText(text);
      for (int[] encoded : List.of(ids, plain)) {
        for (int id : encoded) {
          assertTrue(id >= 0 && id < vocabSize, () -> "id " + id + " for " + input.get());
        }
        for (boolean skip : new boolean[] {false, true}) {
          String full = t.decode(encoded, skip);
          StreamingDecoder stream = t.newStreamingDecoder(skip);
          StringBuilder streamed = new StringBuilder();
          for (int id : encoded) {
            streamed.append(stream.onToken(id));
          }
          streamed.append(stream.flush());
          assertEquals(full, streamed.toString(), () -> "streaming decode of " + input.get());
        }
      }
    }
    int[] odd = {-1, vocabSize, Integer.MAX_VALUE, Integer.MIN_VALUE, 0, vocabSize - 1};
    t.decode(odd, false);
    t.decode(odd, true);
    StreamingDecoder stream = t.newStreamingDecoder(true);
    for (int id : odd) {
      stream.onToken(id);
    }
    stream.flush();
  }
}
