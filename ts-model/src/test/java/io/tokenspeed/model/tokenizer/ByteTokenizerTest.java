package io.tokenspeed.model.tokenizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Random;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class ByteTokenizerTest {

  private static final ByteTokenizer WITH_SPECIALS =
      new ByteTokenizer(
          new SpecialTokens(
              OptionalInt.empty(),
              OptionalInt.of(256),
              OptionalInt.empty(),
              Map.of("<eos>", 256, "<sep>", 257)));

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 24);
  }

  @ParameterizedTest(name = "seed {0}")
  @MethodSource("seeds")
  void shouldRoundTripRandomUnicodeWhenSeeded(long seed) {
    String text = randomUnicode(new Random(seed), 1 + (int) (seed * 7 % 200));
    for (Tokenizer tokenizer : new Tokenizer[] {ByteTokenizer.plain(), WITH_SPECIALS}) {
      int[] ids = tokenizer.encodeAsPlainText(text);
      for (int id : ids) {
        assertTrue(id >= 0 && id < ByteTokenizer.NUM_BYTE_IDS, () -> "id " + id);
      }
      assertEquals(text, tokenizer.decode(ids));

      StreamingDecoder decoder = tokenizer.newStreamingDecoder(false);
      StringBuilder streamed = new StringBuilder();
      for (int id : ids) {
        String chunk = decoder.onToken(id);
        assertFalse(BpeTokenizerTest.hasLoneSurrogate(chunk));
        assertTrue(chunk.indexOf('\uFFFD') < 0);
        streamed.append(chunk);
      }
      assertEquals(text, streamed.append(decoder.flush()).toString());
    }
  }

  @Test
  void shouldMatchSpecialTokensOnlyWhenEncodingWithSpecials() {
    assertArrayEquals(new int[] {'a', 256, 'b', 257}, WITH_SPECIALS.encode("a<eos>b<sep>"));
    int[] plain = WITH_SPECIALS.encodeAsPlainText("a<eos>");
    assertEquals(6, plain.length);
    assertEquals("a<eos>b", WITH_SPECIALS.decode(new int[] {'a', 256, 'b'}));
    assertEquals("ab", WITH_SPECIALS.decode(new int[] {'a', 256, 'b'}, true));
    assertEquals(258, WITH_SPECIALS.vocabSize());
    assertEquals(256, ByteTokenizer.plain().vocabSize());
    assertEquals(OptionalInt.of(256), WITH_SPECIALS.specialTokens().eosId());
  }

  @Test
  void shouldHoldBackAnUnfinishedCharacterUntilItCompletes() {
    StreamingDecoder decoder = ByteTokenizer.plain().newStreamingDecoder(false);
    byte[] emoji = "😀".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    for (int i = 0; i < 3; i++) {
      assertEquals("", decoder.onToken(emoji[i] & 0xFF));
      assertEquals(i + 1, decoder.numPendingBytes());
    }
    assertEquals("😀", decoder.onToken(emoji[3] & 0xFF));
    assertEquals("", decoder.flush());
  }

  @Test
  void shouldEmitInvalidBytesAsReplacementAsTheFullDecodeDoes() {
    int[] ids = {0xE2, 0x82, 'A', 0xFF, 0xF0, 0x9F};
    StreamingDecoder decoder = ByteTokenizer.plain().newStreamingDecoder(false);
    StringBuilder streamed = new StringBuilder();
    for (int id : ids) {
      streamed.append(decoder.onToken(id));
    }
    streamed.append(decoder.flush());
    assertEquals(ByteTokenizer.plain().decode(ids), streamed.toString());
  }

  @Test
  void shouldRejectSpecialIdsInsideTheByteRange() {
    SpecialTokens bad =
        new SpecialTokens(
            OptionalInt.empty(), OptionalInt.empty(), OptionalInt.empty(), Map.of("<x>", 3));
    assertThrows(IllegalArgumentException.class, () -> new ByteTokenizer(bad));
  }

  @Test
  void shouldLoadAByteTokenizerFromAFolderWithoutTokenizerJson(@TempDir Path dir)
      throws IOException {
    assertInstanceOf(ByteTokenizer.class, Tokenizer.load(dir));
  }

  /** Code points from ASCII, Latin-1, CJK, emoji and other planes; never a surrogate. */
  static String randomUnicode(Random random, int numCodePoints) {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < numCodePoints; i++) {
      int cp =
          switch (random.nextInt(6)) {
            case 0 -> 0x20 + random.nextInt(0x5F);
            case 1 -> random.nextInt(0x80);
            case 2 -> 0xA0 + random.nextInt(0x700);
            case 3 -> 0x4E00 + random.nextInt(0x5000);
            case 4 -> 0x1F300 + random.nextInt(0x300);
            default -> {
              int c;
              do {
                c = random.nextInt(0x110000);
              } while (c >= 0xD800 && c <= 0xDFFF);
              yield c;
            }
          };
      sb.appendCodePoint(cp);
    }
    return sb.toString();
  }
}
