package io.tokenspeed.model.tokenizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Small hand-written tokenizer.json files: supported components work, the rest are refused. */
class BpeTokenizerFormatTest {

  private static final String BYTE_LEVEL =
      "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}";

  @Test
  void shouldApplyMergesByRankLeftmostFirst() {
    BpeTokenizer t =
        BpeTokenizer.fromJson(
            tokenizerJson(List.of("a b", "b c", "a a"), List.of("ab", "bc", "aa"), BYTE_LEVEL, ""),
            null);
    assertArrayEquals(new int[] {256, 'c'}, t.encodeAsPlainText("abc"));
    assertArrayEquals(new int[] {258, 'a'}, t.encodeAsPlainText("aaa"));
    assertEquals("abcaaa", t.decode(new int[] {256, 'c', 258, 'a'}));
  }

  @Test
  void shouldSupportGpt2StylePrefixSpaceAndRegex() {
    String preTokenizer = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}";
    BpeTokenizer t =
        BpeTokenizer.fromJson(
            tokenizerJson(
                List.of("Ġ t", "h e", "Ġt he"), List.of("Ġt", "he", "Ġthe"), preTokenizer, ""),
            null);
    assertArrayEquals(new int[] {258, 258}, t.encodeAsPlainText("the the"));
    assertEquals(" the the", t.decode(t.encodeAsPlainText("the the")));
  }

  @Test
  void shouldUseWholeWordsWhenIgnoreMergesIsSet() {
    String json = tokenizerJson(List.of(), List.of("xyz"), BYTE_LEVEL, ",\"ignore_merges\":true");
    assertArrayEquals(new int[] {256}, BpeTokenizer.fromJson(json, null).encodeAsPlainText("xyz"));
  }

  @Test
  void shouldRefuseAnUnknownModelType() {
    String json = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}";
    assertMessage(json, "unsupported model.type=WordPiece");
  }

  @Test
  void shouldRefuseMissingMerges() {
    String json =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":" + BYTE_LEVEL + "}";
    assertMessage(json, "model.merges is missing");
  }

  @Test
  void shouldRefuseMalformedJson() {
    assertMessage("{\"model\": {\"type\": \"BPE\", ", "malformed JSON at offset");
    assertMessage("{\"model\": tru}", "malformed JSON at offset 10");
  }

  @Test
  void shouldRefuseAnUnsupportedPreTokenizerNamingIt() {
    String json =
        tokenizerJson(List.of(), List.of(), "{\"type\":\"Metaspace\",\"replacement\":\"▁\"}", "");
    assertMessage(json, "unsupported pre_tokenizer.type=Metaspace");
  }

  @Test
  void shouldRefuseAMergeOfTokensMissingFromTheVocab() {
    String json = tokenizerJson(List.of("a b"), List.of(), BYTE_LEVEL, "");
    assertMessage(json, "merge 0 \"a b\" uses a token missing from model.vocab: ab");
  }

  @Test
  void shouldRefuseAnEosTokenThatIsNotInTheVocab() {
    String json = tokenizerJson(List.of(), List.of(), BYTE_LEVEL, "");
    TokenizerFormatException e =
        assertThrows(
            TokenizerFormatException.class,
            () -> BpeTokenizer.fromJson(json, "{\"eos_token\":\"<|nope|>\"}"));
    assertTrue(e.getMessage().contains("eos_token=\"<|nope|>\""), e.getMessage());
  }

  @Test
  void shouldRefuseATokenIdTooLargeForTheDecodingTable() {
    // Found by BpeTokenizerFuzzTest: an id near 2^31 made loading allocate a table of that many
    // entries and fail with an OutOfMemoryError instead of a format error.
    String json =
        tokenizerJson(List.of(), List.of(), BYTE_LEVEL, "").replace("\"C\":67", "\"C\":2147483646");
    assertMessage(json, "model.vocab[\"C\"] is not a token id in [0, 16777216): found 2147483646");
    String added =
        tokenizerJson(List.of(), List.of(), BYTE_LEVEL, "")
            .replace(
                "\"added_tokens\":[]",
                "\"added_tokens\":[{\"id\":16777216,\"content\":\"<x>\",\"special\":true}]");
    assertMessage(added, "added_tokens[0].id is not a token id in [0, 16777216): found 16777216");
  }

  private static void assertMessage(String json, String expected) {
    TokenizerFormatException e =
        assertThrows(TokenizerFormatException.class, () -> BpeTokenizer.fromJson(json, null));
    assertTrue(e.getMessage().contains(expected), () -> "message: " + e.getMessage());
  }

  /**
   * A byte-level BPE tokenizer.json whose vocabulary is the 256 byte characters (id = byte value)
   * followed by {@code extraTokens} from id 256.
   */
  static String tokenizerJson(
      List<String> merges, List<String> extraTokens, String preTokenizer, String modelExtra) {
    List<String> vocab = new ArrayList<>();
    for (int b = 0; b < 256; b++) {
      vocab.add(quote(String.valueOf(ByteLevel.charOf(b))) + ":" + b);
    }
    for (int i = 0; i < extraTokens.size(); i++) {
      vocab.add(quote(extraTokens.get(i)) + ":" + (256 + i));
    }
    List<String> quotedMerges = merges.stream().map(BpeTokenizerFormatTest::quote).toList();
    return "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,"
        + "\"pre_tokenizer\":"
        + preTokenizer
        + ",\"decoder\":{\"type\":\"ByteLevel\"},\"post_processor\":null,"
        + "\"model\":{\"type\":\"BPE\",\"vocab\":{"
        + String.join(",", vocab)
        + "},\"merges\":["
        + String.join(",", quotedMerges)
        + "]"
        + modelExtra
        + "}}";
  }

  private static String quote(String s) {
    StringBuilder sb = new StringBuilder("\"");
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        sb.append('\\').append(c);
      } else if (c < 0x20) {
        sb.append(String.format("\\u%04x", (int) c));
      } else {
        sb.append(c);
      }
    }
    return sb.append('"').toString();
  }
}
