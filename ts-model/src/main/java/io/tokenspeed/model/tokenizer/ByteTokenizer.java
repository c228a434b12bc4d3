package io.tokenspeed.model.tokenizer;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A tokenizer for checkpoints without a {@code tokenizer.json}: each UTF-8 byte is its own id
 * (0..255), and optional special tokens take ids from 256 on.
 *
 * <pre>
 *   ids:  0 ........ 255 | 256 ......... 256+k-1
 *         UTF-8 bytes    | special tokens
 * </pre>
 *
 * <p>Every string round-trips: {@code decode(encodeAsPlainText(s)).equals(s)} for any well-formed
 * string. Immutable and thread-safe.
 */
public final class ByteTokenizer implements Tokenizer {

  /** Number of byte ids; special tokens start here. */
  public static final int NUM_BYTE_IDS = 256;

  private static final ByteTokenizer PLAIN = new ByteTokenizer(SpecialTokens.NONE);

  private final SpecialTokens specialTokens;
  private final AddedTokens matcher;
  private final byte[][] tokenBytes;

  /**
   * @param specialTokens special tokens, each with an id of at least {@value #NUM_BYTE_IDS}
   */
  public ByteTokenizer(SpecialTokens specialTokens) {
    this.specialTokens = specialTokens;
    int maxId = NUM_BYTE_IDS - 1;
    List<AddedTokens.Token> tokens = new ArrayList<>();
    for (Map.Entry<String, Integer> e : specialTokens.idsByContent().entrySet()) {
      int id = e.getValue();
      if (id < NUM_BYTE_IDS) {
        throw new IllegalArgumentException(
            "special token \"" + e.getKey() + "\" id=" + id + " must be >= " + NUM_BYTE_IDS);
      }
      maxId = Math.max(maxId, id);
      tokens.add(new AddedTokens.Token(id, e.getKey(), true, false, false, false, false));
    }
    this.matcher = AddedTokens.of(tokens);
    this.tokenBytes = new byte[maxId + 1][];
    for (int b = 0; b < NUM_BYTE_IDS; b++) {
      tokenBytes[b] = new byte[] {(byte) b};
    }
    for (AddedTokens.Token t : tokens) {
      tokenBytes[t.id()] = t.content().getBytes(StandardCharsets.UTF_8);
    }
  }

  /** A byte tokenizer with no special tokens. */
  public static ByteTokenizer plain() {
    return PLAIN;
  }

  @Override
  public int[] encodeAsPlainText(String text) {
    byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
    int[] ids = new int[bytes.length];
    for (int i = 0; i < bytes.length; i++) {
      ids[i] = bytes[i] & 0xFF;
    }
    return ids;
  }

  @Override
  public int[] encode(String text) {
    IntList out = new IntList(text.length() + 8);
    matcher.split(
        text,
        new AddedTokens.Sink() {
          @Override
          public void onText(String piece) {
            out.addAll(encodeAsPlainText(piece));
          }

          @Override
          public void onToken(int id) {
            out.add(id);
          }
        });
    return out.toArray();
  }

  @Override
  public String decode(int[] ids, boolean skipSpecialTokens) {
    byte[] all = new byte[ids.length];
    int pos = 0;
    for (int id : ids) {
      byte[] b = bytesOf(id, skipSpecialTokens);
      if (b == null) {
        continue;
      }
      if (pos + b.length > all.length) {
        all = java.util.Arrays.copyOf(all, Math.max(all.length * 2, pos + b.length));
      }
      System.arraycopy(b, 0, all, pos, b.length);
      pos += b.length;
    }
    return new String(all, 0, pos, StandardCharsets.UTF_8);
  }

  @Override
  public StreamingDecoder newStreamingDecoder(boolean skipSpecialTokens) {
    return new StreamingDecoder(id -> bytesOf(id, skipSpecialTokens));
  }

  private byte[] bytesOf(int id, boolean skipSpecialTokens) {
    if (id < 0 || id >= tokenBytes.length) {
      return null;
    }
    if (skipSpecialTokens && id >= NUM_BYTE_IDS) {
      return null;
    }
    return tokenBytes[id];
  }

  @Override
  public int vocabSize() {
    return tokenBytes.length;
  }

  @Override
  public SpecialTokens specialTokens() {
    return specialTokens;
  }
}
