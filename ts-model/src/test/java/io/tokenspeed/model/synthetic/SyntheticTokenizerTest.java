package io.tokenspeed.model.synthetic;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.PagedRunner;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.Json;
import io.tokenspeed.model.config.ModelConfigs;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.tokenizer.BpeTokenizer;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import io.tokenspeed.model.tokenizer.StreamingDecoder;
import io.tokenspeed.model.tokenizer.Tokenizer;
import java.io.IOException;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Random;
import java.util.Set;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The synthetic models' tokenizer: every word id decodes to a space and a word, every text encodes
 * as the byte tokenizer encodes it and round-trips, and greedy output of each preset reads as text.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SyntheticTokenizerTest {

  /** The README's serving prompt. */
  private static final String README_PROMPT = "All work and no play. ".repeat(12);

  @TempDir Path root;
  private ComputePool pool;

  @BeforeAll
  void startPool() {
    pool = ComputePool.ofThreads(2);
  }

  @AfterAll
  void stopPool() {
    pool.close();
  }

  static int[] presetVocabSizes() {
    return SyntheticCheckpoints.PRESETS.stream()
        .mapToInt(
            p ->
                ModelConfigs.parse(Json.parseObject(SyntheticCheckpoints.presetConfig(p)))
                    .vocabSize())
        .distinct()
        .toArray();
  }

  @ParameterizedTest(name = "vocab_size {0}")
  @MethodSource("presetVocabSizes")
  void shouldDecodeEveryIdOfAPresetsVocabularyToItsByteOrAWord(int vocabSize) throws IOException {
    Tokenizer tokenizer = load(vocabSize);
    assertInstanceOf(BpeTokenizer.class, tokenizer);
    assertEquals(vocabSize, tokenizer.vocabSize());
    for (int b = 0; b < SyntheticTokenizer.NUM_BYTE_IDS; b++) {
      assertEquals(
          ByteTokenizer.plain().decode(new int[] {b}), tokenizer.decode(new int[] {b}), "id " + b);
    }
    Set<String> words = new HashSet<>();
    for (int i = SyntheticTokenizer.NUM_BYTE_IDS; i < vocabSize; i++) {
      int id = i;
      String text = tokenizer.decode(new int[] {id});
      assertTrue(text.matches(" [a-z]{2,9}"), () -> "id " + id + " decodes to \"" + text + "\"");
      assertEquals(SyntheticTokenizer.word(id), text);
      assertTrue(words.add(text), () -> "id " + id + " repeats the word \"" + text + "\"");
    }
  }

  @Test
  void shouldSpellTheFirstWordsOfEachLengthAndTheLongestWord() {
    assertEquals(" ba", SyntheticTokenizer.word(256));
    assertEquals(" ban", SyntheticTokenizer.word(257));
    assertEquals(" bat", SyntheticTokenizer.word(261));
    assertEquals(" be", SyntheticTokenizer.word(262));
    assertEquals(" zut", SyntheticTokenizer.word(256 + 419));
    assertEquals(" baba", SyntheticTokenizer.word(256 + 420));
    assertEquals(" bababa", SyntheticTokenizer.word(256 + 420 + 29_400));
    assertEquals(
        SyntheticTokenizer.MAX_SYLLABLES * 2 + 2,
        SyntheticTokenizer.word(BpeTokenizer.MAX_TOKEN_ID_EXCLUSIVE - 1).length());
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> SyntheticTokenizer.word(255));
    assertTrue(e.getMessage().startsWith("id=255 is not a word id"), e::getMessage);
  }

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 16);
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldEncodeAsTheByteTokenizerAndRoundTripWhenSeeded(long seed) throws IOException {
    Tokenizer tokenizer = load(1024);
    String text = randomText(new Random(seed), 1 + (int) (seed * 13 % 300));
    int[] ids = tokenizer.encode(text);
    assertArrayEquals(ByteTokenizer.plain().encode(text), ids, text);
    assertArrayEquals(ids, tokenizer.encodeAsPlainText(text), text);
    assertEquals(text, tokenizer.decode(ids));
  }

  @Test
  void shouldGiveTheReadmePromptOneTokenPerByte() throws IOException {
    Tokenizer tokenizer = load(32_000);
    int[] ids = tokenizer.encode(README_PROMPT);
    assertEquals(264, ids.length);
    assertEquals(README_PROMPT, tokenizer.decode(ids));
  }

  @Test
  void shouldWriteTheSameAsciiBytesForAVocabularyAndRefuseOneWithoutWords() throws IOException {
    String a = text(1024);
    assertEquals(a, text(1024));
    assertTrue(StandardCharsets.US_ASCII.newEncoder().canEncode(a));
    assertFalse(SyntheticTokenizer.isWritten(256));
    assertTrue(SyntheticTokenizer.isWritten(257));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> text(256));
    assertTrue(
        e.getMessage().startsWith("vocab_size=256 has no synthetic tokenizer"), e::getMessage);
  }

  @Test
  void shouldWriteATokenizerOnlyBesideAVocabularyPastTheBytes() throws IOException {
    String config = SyntheticCheckpointsTest.config("llama");
    int vocab = ModelConfigs.parse(Json.parseObject(config)).vocabSize();
    assertTrue(vocab > SyntheticTokenizer.NUM_BYTE_IDS, "the fixture's vocab_size=" + vocab);
    Path withWords = SyntheticCheckpoints.materialize("llama", config, 0, DType.F32, root);
    assertEquals(text(vocab), Files.readString(withWords.resolve(Tokenizer.TOKENIZER_JSON)));
    Path bytesOnly =
        SyntheticCheckpoints.materialize(
            "bytes",
            config.replace("\"vocab_size\": " + vocab, "\"vocab_size\": 256"),
            0,
            DType.F32,
            root);
    assertTrue(Files.isRegularFile(bytesOnly.resolve("model.safetensors")));
    assertFalse(Files.exists(bytesOnly.resolve(Tokenizer.TOKENIZER_JSON)));
    assertInstanceOf(ByteTokenizer.class, Tokenizer.load(bytesOnly));
  }

  @Test
  void shouldNotReuseTheFolderOfAVersionWithoutTheTokenizer() {
    // version 1 cached llama-100m (seed 0, F32) as llama-100m-87fbc76ae3ad-seed0-f32, without a
    // tokenizer.json: a newer version must look for another folder
    String key =
        SyntheticCheckpoints.key(SyntheticCheckpoints.presetConfig("llama-100m"), 0, DType.F32);
    assertFalse(key.startsWith("87fbc76ae3ad"), key);
  }

  /**
   * Greedy decoding from the README's prompt: the text streamed token by token is the full decode,
   * holds a word, and has no control character and no U+FFFD. The two large presets run in BF16 to
   * keep their files at half the size; the ids they sample come from the same vocabulary.
   */
  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"jamba-tiny", "llama-100m", "gemma3-270m", "qwen2-0.5b"})
  void shouldGreedyGenerateVisibleTextFromEachPreset(String preset) throws IOException {
    DType dtype =
        preset.equals("jamba-tiny") || preset.equals("llama-100m") ? DType.F32 : DType.BF16;
    Path folder = SyntheticCheckpoints.materialize("synthetic:" + preset, 0, dtype, root);
    Tokenizer tokenizer = Tokenizer.load(folder);
    int[] prompt = tokenizer.encode(README_PROMPT);
    int steps = 8;
    int[] out = new int[steps];
    try (CausalLm model = CausalLm.load(folder);
        PagedRunner runner = new PagedRunner(model, 16, 32, -1)) {
      assertEquals(model.vocabSize(), tokenizer.vocabSize(), preset);
      int[][] table = runner.table(runner.rowsFor(prompt.length + steps));
      float[] last =
          model
              .forward(
                  ForwardBatch.of(new ForwardRequest(prompt, 0, table, false)), runner.kv(), pool)
              .last(0);
      out[0] = PagedRunner.argmax(last);
      for (int i = 1; i < steps; i++) {
        out[i] = PagedRunner.argmax(runner.decode(out[i - 1], prompt.length + i - 1, table, pool));
      }
    }
    StreamingDecoder stream = tokenizer.newStreamingDecoder(true);
    StringBuilder streamed = new StringBuilder();
    for (int id : out) {
      streamed.append(stream.onToken(id));
    }
    streamed.append(stream.flush());
    String text = tokenizer.decode(out, true);
    String what = preset + " ids " + Arrays.toString(out) + " text \"" + text + "\"";
    assertEquals(text, streamed.toString(), what);
    assertTrue(text.chars().anyMatch(Character::isLetter), what);
    assertTrue(
        text.chars().allMatch(c -> c == ' ' || c == '\n' || (c > 0x20 && c != 0x7F && c != 0xFFFD)),
        what);
  }

  private Tokenizer load(int vocabSize) throws IOException {
    Path dir = Files.createDirectories(root.resolve("tokenizer-" + vocabSize));
    Path file = dir.resolve(Tokenizer.TOKENIZER_JSON);
    if (!Files.exists(file)) {
      Files.writeString(file, text(vocabSize), StandardCharsets.US_ASCII);
    }
    return Tokenizer.load(dir);
  }

  private static String text(int vocabSize) throws IOException {
    StringWriter out = new StringWriter();
    SyntheticTokenizer.write(vocabSize, out);
    return out.toString();
  }

  /** Text of ASCII words and punctuation, whitespace, accents, CJK and emoji. */
  private static String randomText(Random random, int numPieces) {
    String[] pieces = {
      "the",
      " quick",
      "brown",
      " fox",
      ".",
      ",",
      " ",
      "  ",
      "\n",
      "\t",
      "'s",
      "42",
      " é",
      "ñandú",
      "日本語",
      "😀",
      "\u00a0",
      "<|im_start|>",
      "\"",
      "\\",
      "{}",
      "ǅ",
      "\r\n"
    };
    StringBuilder text = new StringBuilder();
    for (int i = 0; i < numPieces; i++) {
      if (random.nextInt(8) == 0) {
        text.appendCodePoint(0x20 + random.nextInt(0x2FFF));
      } else {
        text.append(pieces[random.nextInt(pieces.length)]);
      }
    }
    return text.toString();
  }
}
