package io.tokenspeed.model.tokenizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.Json;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The Qwen3 tokenizer against the reference outputs of Hugging Face {@code tokenizers} ({@code
 * tokenizers/qwen3/reference.jsonl}: text, ids without special tokens added, decoded text), one
 * case per line.
 */
class BpeTokenizerTest {

  private static final Path QWEN3 = resourceDir("tokenizers/qwen3");
  private static final BpeTokenizer TOKENIZER = load();

  private static final int IM_START = 151644;
  private static final int IM_END = 151645;
  private static final int ENDOFTEXT = 151643;
  private static final int THINK = 151667;

  record Line(int number, String text, int[] ids, String decoded) {
    @Override
    public String toString() {
      return "line " + number;
    }
  }

  static Stream<Arguments> referenceLines() throws IOException {
    List<String> lines = Files.readAllLines(QWEN3.resolve("reference.jsonl"));
    List<Arguments> cases = new ArrayList<>();
    for (int i = 0; i < lines.size(); i++) {
      @SuppressWarnings("unchecked")
      Map<String, Object> json = (Map<String, Object>) Json.parse(lines.get(i));
      List<?> ids = (List<?>) json.get("ids");
      int[] idArray = ids.stream().mapToInt(o -> ((Long) o).intValue()).toArray();
      cases.add(
          Arguments.of(
              new Line(i + 1, (String) json.get("text"), idArray, (String) json.get("decoded"))));
    }
    return cases.stream();
  }

  @Test
  void shouldHaveAll216ReferenceLines() throws IOException {
    assertEquals(216, referenceLines().count());
  }

  /**
   * The reference was produced without added special tokens, which in Hugging Face still matches
   * special tokens' text to their ids: that is {@link Tokenizer#encode}. For text without special
   * tokens, {@link Tokenizer#encodeAsPlainText} gives the same ids.
   */
  @ParameterizedTest(name = "{0}")
  @MethodSource("referenceLines")
  void shouldEncodeLikeReference(Line line) {
    assertArrayEquals(line.ids(), TOKENIZER.encode(line.text()), line::text);
    if (!containsSpecialText(line.text())) {
      assertArrayEquals(line.ids(), TOKENIZER.encodeAsPlainText(line.text()), line::text);
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("referenceLines")
  void shouldDecodeLikeReference(Line line) {
    assertEquals(line.decoded(), TOKENIZER.decode(line.ids()));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("referenceLines")
  void shouldStreamDecodeIdByIdToTheFullText(Line line) {
    String full = TOKENIZER.decode(line.ids());
    boolean fullHasReplacement = full.indexOf('\uFFFD') >= 0;
    StreamingDecoder decoder = TOKENIZER.newStreamingDecoder(false);
    StringBuilder streamed = new StringBuilder();
    for (int id : line.ids()) {
      String chunk = decoder.onToken(id);
      assertFalse(hasLoneSurrogate(chunk), () -> "lone surrogate in chunk " + chunk);
      if (!fullHasReplacement) {
        assertTrue(chunk.indexOf('\uFFFD') < 0, () -> "U+FFFD in chunk of " + line);
      }
      streamed.append(chunk);
    }
    assertEquals(0, decoder.numPendingBytes());
    streamed.append(decoder.flush());
    assertEquals(full, streamed.toString());
  }

  @Test
  void shouldMatchSpecialTokensOnlyWhenEncodingWithSpecials() {
    String chat = "<|im_start|>user\nhi<|im_end|>";
    assertArrayEquals(new int[] {IM_START, 872, 198, 6023, IM_END}, TOKENIZER.encode(chat));

    int[] plain = TOKENIZER.encodeAsPlainText(chat);
    for (int id : plain) {
      assertFalse(TOKENIZER.specialTokens().isSpecial(id), () -> "special id " + id);
    }
    assertEquals(chat, TOKENIZER.decode(plain));
    assertArrayEquals(
        TOKENIZER.encodeAsPlainText("<|im_start|>"),
        Arrays.copyOf(plain, TOKENIZER.encodeAsPlainText("<|im_start|>").length));
  }

  @Test
  void shouldEncodeNonSpecialAddedTokensInBothModes() {
    assertArrayEquals(new int[] {THINK}, TOKENIZER.encodeAsPlainText("<think>"));
    assertArrayEquals(new int[] {THINK}, TOKENIZER.encode("<think>"));
  }

  @Test
  void shouldSkipSpecialTokensWhenAsked() {
    int[] ids = TOKENIZER.encode("<|im_start|>assistant\nok<|im_end|>");
    assertEquals("assistant\nok", TOKENIZER.decode(ids, true));
    StreamingDecoder decoder = TOKENIZER.newStreamingDecoder(true);
    StringBuilder sb = new StringBuilder();
    for (int id : ids) {
      sb.append(decoder.onToken(id));
    }
    assertEquals("assistant\nok", sb.append(decoder.flush()).toString());
  }

  @Test
  void shouldReadSpecialTokenIdsFromTokenizerConfig() {
    SpecialTokens specials = TOKENIZER.specialTokens();
    assertEquals(OptionalInt.of(IM_END), specials.eosId());
    assertEquals(OptionalInt.of(ENDOFTEXT), specials.padId());
    assertEquals(OptionalInt.empty(), specials.bosId());
    assertEquals(OptionalInt.of(IM_START), specials.idOf("<|im_start|>"));
    assertTrue(specials.isSpecial(ENDOFTEXT));
    assertFalse(specials.isSpecial(THINK));
    assertEquals(151669, TOKENIZER.vocabSize());
  }

  @Test
  void shouldDecodeIdsOutsideTheVocabularyToNothing() {
    assertEquals("hi", TOKENIZER.decode(new int[] {6023, 151900, -1}));
  }

  @Test
  void shouldEncodeLongPromptsQuickly() {
    Random random = new Random(42);
    StringBuilder cjk = new StringBuilder();
    for (int i = 0; i < 60_000; i++) {
      cjk.append((char) (0x4E00 + random.nextInt(0x5000)));
    }
    StringBuilder mixed = new StringBuilder();
    String[] words = {"token", " speed", "日本語", " 😀", "\n\n", "  ", "123", "naïve", "!?"};
    while (mixed.length() < 120_000) {
      mixed.append(words[random.nextInt(words.length)]);
    }
    for (String text :
        List.of(
            cjk.toString(),
            mixed.toString(),
            "a".repeat(100_000),
            " ".repeat(100_000) + "x",
            " \n".repeat(50_000))) {
      long startNs = System.nanoTime();
      int[] ids = TOKENIZER.encodeAsPlainText(text);
      long elapsedMs = (System.nanoTime() - startNs) / 1_000_000;
      assertEquals(text, TOKENIZER.decode(ids));
      assertTrue(elapsedMs < 10_000, () -> "encoding took " + elapsedMs + " ms");
    }
  }

  @Test
  void shouldLoadFromAModelFolder() throws IOException {
    Tokenizer tokenizer = Tokenizer.load(QWEN3);
    assertArrayEquals(new int[] {9707, 11, 1879, 0}, tokenizer.encodeAsPlainText("Hello, world!"));
  }

  private static boolean containsSpecialText(String text) {
    return TOKENIZER.specialTokens().idsByContent().keySet().stream().anyMatch(text::contains);
  }

  static boolean hasLoneSurrogate(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= s.length() || !Character.isLowSurrogate(s.charAt(i + 1))) {
          return true;
        }
        i++;
      } else if (Character.isLowSurrogate(c)) {
        return true;
      }
    }
    return false;
  }

  private static BpeTokenizer load() {
    try {
      return (BpeTokenizer) Tokenizer.load(QWEN3);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static Path resourceDir(String name) {
    try {
      return Path.of(BpeTokenizerTest.class.getClassLoader().getResource(name).toURI());
    } catch (URISyntaxException e) {
      throw new IllegalStateException(e);
    }
  }
}
