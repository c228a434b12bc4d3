package io.tokenspeed.server.cli;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.regex.Pattern;

/**
 * Turns the {@code --text} and {@code --tokens} options into token ids.
 *
 * <p>There is no tokenizer yet, so {@code --text} uses the simplest reproducible one: each UTF-8
 * byte of the text is one token ({@code 0..255}). {@code --tokens} takes comma-separated decimal
 * ids in {@code [0, vocabSize)}, or {@code [0, 2^31)} when no vocabulary size is given (ts-core
 * keeps token ids as non-negative ints).
 *
 * <p>Errors are {@link IllegalArgumentException}s whose message names the option, the offending
 * value and its position.
 */
final class PromptTokens {

  private static final BigInteger MAX_TOKEN_ID = BigInteger.valueOf(Integer.MAX_VALUE);
  private static final Pattern INTEGER = Pattern.compile("-?[0-9]+");

  private PromptTokens() {}

  static int[] fromText(String text, Integer vocabSize) {
    if (text.isEmpty()) {
      throw new IllegalArgumentException("--text=\"\" is empty: a prompt needs at least one token");
    }
    byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
    int[] tokens = new int[utf8.length];
    for (int i = 0; i < utf8.length; i++) {
      tokens[i] = utf8[i] & 0xFF;
      checkVocab("--text", tokens[i], i, vocabSize);
    }
    return tokens;
  }

  static int[] fromList(String list, Integer vocabSize) {
    if (list.isBlank()) {
      throw new IllegalArgumentException(
          "--tokens=\"" + list + "\" is empty: a prompt needs at least one token");
    }
    String[] parts = list.split(",", -1);
    int[] tokens = new int[parts.length];
    for (int i = 0; i < parts.length; i++) {
      String part = parts[i].trim();
      if (!INTEGER.matcher(part).matches()) {
        throw new IllegalArgumentException(
            "--tokens: token id=\"" + part + "\" at position " + i + " is not an integer");
      }
      BigInteger value = new BigInteger(part);
      if (value.signum() < 0 || value.compareTo(MAX_TOKEN_ID) > 0) {
        throw new IllegalArgumentException(
            "--tokens: token id=" + part + " at position " + i + " is out of range [0, 2^31)");
      }
      tokens[i] = value.intValueExact();
      checkVocab("--tokens", tokens[i], i, vocabSize);
    }
    return tokens;
  }

  private static void checkVocab(String option, int id, int position, Integer vocabSize) {
    if (vocabSize != null && id >= vocabSize) {
      throw new IllegalArgumentException(
          option
              + ": token id="
              + id
              + " at position "
              + position
              + " is out of range [0, "
              + vocabSize
              + ") for --vocab-size="
              + vocabSize);
    }
  }
}
