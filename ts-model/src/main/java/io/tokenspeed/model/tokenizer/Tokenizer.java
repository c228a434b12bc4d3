package io.tokenspeed.model.tokenizer;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Text to token ids and back, as the rest of the engine sees it. Implementations are immutable and
 * thread-safe; a {@link StreamingDecoder} is per sequence.
 *
 * <p>Two ways to encode. {@link #encode} tokenizes as Hugging Face {@code tokenizers} does (with
 * {@code add_special_tokens=False}): special tokens (control symbols like {@code "<|im_start|>"} or
 * {@code "<|endoftext|>"}) written in the text become their ids. It is what an operator checking a
 * checkpoint against another implementation expects, and what the engine uses for text it rendered
 * itself, such as a chat template. {@link #encodeAsPlainText} is for untrusted text inserted into
 * such a template, such as a user's message: special tokens' text is tokenized as the plain
 * characters it consists of, so the text cannot forge a turn boundary. Neither adds beginning- or
 * end-of-sequence tokens; the chat template writes those. Added tokens that are not special
 * (Qwen3's {@code "<think>"}) are part of the ordinary vocabulary and become their ids in both.
 */
public interface Tokenizer {

  /** File holding a Hugging Face tokenizer. */
  String TOKENIZER_JSON = "tokenizer.json";

  /** File naming the special tokens (eos, bos, pad). */
  String TOKENIZER_CONFIG_JSON = "tokenizer_config.json";

  /** Encodes text, matching special tokens to their ids first (as Hugging Face does). */
  int[] encode(String text);

  /** Encodes text, special tokens' text included, as plain text (for untrusted text). */
  int[] encodeAsPlainText(String text);

  /**
   * Decodes ids to text; bytes that are not valid UTF-8 become U+FFFD. Ids outside the vocabulary
   * decode to nothing (a model's embedding is often padded beyond its tokenizer).
   */
  String decode(int[] ids, boolean skipSpecialTokens);

  /** Decodes ids to text, special tokens included. */
  default String decode(int[] ids) {
    return decode(ids, false);
  }

  /** A decoder for one sequence of generated ids. */
  StreamingDecoder newStreamingDecoder(boolean skipSpecialTokens);

  /** One more than the largest id the tokenizer can produce or decode. */
  int vocabSize();

  /** The special tokens: eos, bos, pad and all control symbols. */
  SpecialTokens specialTokens();

  /**
   * Loads the tokenizer of a model folder: {@value #TOKENIZER_JSON} (with {@value
   * #TOKENIZER_CONFIG_JSON} when present) as a {@link BpeTokenizer}; a folder without a {@value
   * #TOKENIZER_JSON} gets a {@link ByteTokenizer} with no special tokens.
   *
   * @throws TokenizerFormatException if a file is malformed or uses an unsupported component
   */
  static Tokenizer load(Path modelDir) throws IOException {
    Path json = modelDir.resolve(TOKENIZER_JSON);
    if (!Files.exists(json)) {
      return ByteTokenizer.plain();
    }
    Path config = modelDir.resolve(TOKENIZER_CONFIG_JSON);
    return BpeTokenizer.fromJson(
        Files.readString(json), Files.exists(config) ? Files.readString(config) : null);
  }
}
