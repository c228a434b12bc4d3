package io.tokenspeed.model.synthetic;

import io.tokenspeed.model.tokenizer.BpeTokenizer;
import io.tokenspeed.model.tokenizer.ByteLevel;
import java.io.IOException;
import java.io.Writer;

/**
 * The {@code tokenizer.json} of a synthetic checkpoint: a byte-level BPE vocabulary of exactly the
 * model's {@code vocab_size} ids in which every id past the bytes is a word, so that whatever
 * seeded random weights sample reads as text. It is an ordinary Hugging Face file, loaded by {@link
 * BpeTokenizer} like a real checkpoint's.
 *
 * <pre>
 *   ids:  0 ........... 255 | 256 ................................... vocab_size - 1
 *         one byte each     | a space and a word: " ba", " ban", ..., " zut", " baba", ...
 *         (GPT-2's byte     | consonant-vowel syllables and an optional final consonant,
 *          characters)      | fewest syllables first, each word once
 *   merges: none
 * </pre>
 *
 * <p>What it guarantees:
 *
 * <ul>
 *   <li>Encoding is the byte tokenizer's: with no merges, every text becomes one id per UTF-8 byte,
 *       the byte's value, so a prompt has the ids, the length and the full pages it had before the
 *       vocabulary existed, and decoding its ids gives the text back.
 *   <li>Every id from 256 on decodes to a space and a lowercase ASCII word of 1 to {@value
 *       #MAX_SYLLABLES} syllables, no two ids to the same word: greedy output of random weights
 *       reads as words separated by spaces. Ids below 256 decode to their byte, as in any
 *       byte-level vocabulary (a control character or a lone byte of a multi-byte character among
 *       them); they are 0.8 % of llama-100m's ids, but a quarter of jamba-tiny's.
 *   <li>The file is a function of {@code vocab_size} alone, written byte for byte the same (ASCII,
 *       ids ascending).
 * </ul>
 *
 * <p>Why no merges: with merges, a prompt would encode to fewer, different ids, and every prompt
 * length, page count, cached-token figure and greedy id recorded for the synthetic models (tests,
 * documentation, benchmark reports) would move. The words are there for what the model says; what
 * it is told stays one id per byte.
 *
 * <p>Only a vocabulary larger than the bytes gets one: with {@value #NUM_BYTE_IDS} ids or fewer
 * there is no id past them, and the byte tokenizer, which a folder without a {@code tokenizer.json}
 * gets, already decodes every id.
 */
final class SyntheticTokenizer {

  /** Ids that stand for one byte each; words start here. */
  static final int NUM_BYTE_IDS = 256;

  /** Syllables a word needs in the largest vocabulary a tokenizer accepts (2^24 ids). */
  static final int MAX_SYLLABLES = 4;

  private static final String CONSONANTS = "bdfgklmnprstvz";
  private static final String VOWELS = "aeiou";

  /** Final consonants a word may end with, after the choice of none. */
  private static final String CODAS = "nrslt";

  private static final int NUM_SYLLABLES = CONSONANTS.length() * VOWELS.length();
  private static final int NUM_ENDINGS = CODAS.length() + 1;

  private SyntheticTokenizer() {}

  /** True when a model of {@code vocabSize} ids gets a {@code tokenizer.json}. */
  static boolean isWritten(int vocabSize) {
    return vocabSize > NUM_BYTE_IDS;
  }

  /**
   * The text of word id {@code id} (at least {@value #NUM_BYTE_IDS}): a space, then the word. Words
   * are counted in a mixed radix: the ending, then each syllable, least significant first; all
   * words of k syllables come before those of k + 1, so no two ids share a word.
   */
  static String word(int id) {
    if (id < NUM_BYTE_IDS || id >= BpeTokenizer.MAX_TOKEN_ID_EXCLUSIVE) {
      throw new IllegalArgumentException(
          "id="
              + id
              + " is not a word id: allowed ["
              + NUM_BYTE_IDS
              + ", "
              + BpeTokenizer.MAX_TOKEN_ID_EXCLUSIVE
              + ")");
    }
    long index = id - NUM_BYTE_IDS;
    long count = (long) NUM_SYLLABLES * NUM_ENDINGS;
    int syllables = 1;
    while (index >= count) {
      index -= count;
      count *= NUM_SYLLABLES;
      syllables++;
    }
    StringBuilder word = new StringBuilder(2 + 2 * syllables).append(' ');
    int ending = (int) (index % NUM_ENDINGS);
    index /= NUM_ENDINGS;
    for (int s = 0; s < syllables; s++) {
      int syllable = (int) (index % NUM_SYLLABLES);
      index /= NUM_SYLLABLES;
      word.append(CONSONANTS.charAt(syllable / VOWELS.length()))
          .append(VOWELS.charAt(syllable % VOWELS.length()));
    }
    if (ending > 0) {
      word.append(CODAS.charAt(ending - 1));
    }
    return word.toString();
  }

  /**
   * Writes the {@code tokenizer.json} of a {@code vocabSize}-id model to {@code out}.
   *
   * @throws IllegalArgumentException unless {@link #isWritten} holds and the ids fit a tokenizer
   */
  static void write(int vocabSize, Writer out) throws IOException {
    if (!isWritten(vocabSize) || vocabSize > BpeTokenizer.MAX_TOKEN_ID_EXCLUSIVE) {
      throw new IllegalArgumentException(
          "vocab_size="
              + vocabSize
              + " has no synthetic tokenizer: allowed ("
              + NUM_BYTE_IDS
              + ", "
              + BpeTokenizer.MAX_TOKEN_ID_EXCLUSIVE
              + "]");
    }
    out.write(
        """
        {
          "version": "1.0",
          "truncation": null,
          "padding": null,
          "added_tokens": [],
          "normalizer": null,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, \
        "trim_offsets": true, "use_regex": true},
          "post_processor": null,
          "decoder": {"type": "ByteLevel", "add_prefix_space": false, \
        "trim_offsets": true, "use_regex": true},
          "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": {
        """);
    StringBuilder line = new StringBuilder(32);
    for (int id = 0; id < vocabSize; id++) {
      line.setLength(0);
      line.append("      \"");
      if (id < NUM_BYTE_IDS) {
        appendEscaped(line, ByteLevel.charOf(id));
      } else {
        String word = word(id);
        appendEscaped(line, ByteLevel.charOf(' '));
        line.append(word, 1, word.length());
      }
      line.append("\": ").append(id).append(id + 1 < vocabSize ? ",\n" : "\n");
      out.append(line);
    }
    out.write(
        """
            },
            "merges": []
          }
        }
        """);
  }

  /** Appends {@code c} as JSON string content, in ASCII. */
  private static void appendEscaped(StringBuilder out, char c) {
    if (c == '"' || c == '\\') {
      out.append('\\').append(c);
    } else if (c < 0x20 || c > 0x7E) {
      out.append(String.format("\\u%04x", (int) c));
    } else {
      out.append(c);
    }
  }
}
