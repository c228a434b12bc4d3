package io.tokenspeed.pd;

import java.util.Arrays;
import java.util.HexFormat;

/**
 * What a prefill engine tells a decode engine when it opens a room: the prompt's tokens, the
 * identity digest of the model and cache layout it computes with (the decode engine refuses a
 * foreign one through its {@link Landing}), and the KV layout: the bytes of one block of each cache
 * group. The decode side answers with how many blocks of each group it reserved ({@link Ack}).
 *
 * <p>The arrays are copied in and out; {@link #token} and {@link #blockBytes(int)} read without a
 * copy.
 *
 * @param promptTokens the prompt's token ids, at least one
 * @param identityDigest 32 bytes naming the model and layout
 * @param blockBytes bytes per block of each cache group, each positive; at least one group, at most
 *     65,535
 */
public record Bootstrap(int[] promptTokens, byte[] identityDigest, int[] blockBytes) {

  public Bootstrap {
    if (promptTokens == null || promptTokens.length == 0) {
      throw new IllegalArgumentException("bootstrap needs at least one prompt token");
    }
    if (identityDigest == null || identityDigest.length != PdFrameDescriptor.DIGEST_BYTES) {
      throw new IllegalArgumentException(
          "bootstrap identity_digest has "
              + (identityDigest == null ? "no" : identityDigest.length)
              + " bytes, must have "
              + PdFrameDescriptor.DIGEST_BYTES);
    }
    if (blockBytes == null || blockBytes.length == 0 || blockBytes.length > 0xFFFF) {
      throw new IllegalArgumentException(
          "bootstrap cache groups="
              + (blockBytes == null ? 0 : blockBytes.length)
              + " is out of range [1, 65535]");
    }
    for (int g = 0; g < blockBytes.length; g++) {
      if (blockBytes[g] <= 0) {
        throw new IllegalArgumentException(
            "bootstrap block_bytes of group " + g + "=" + blockBytes[g] + " must be positive");
      }
    }
    promptTokens = promptTokens.clone();
    identityDigest = identityDigest.clone();
    blockBytes = blockBytes.clone();
  }

  /** A copy of the prompt's tokens. */
  @Override
  public int[] promptTokens() {
    return promptTokens.clone();
  }

  /** A copy of the identity digest. */
  @Override
  public byte[] identityDigest() {
    return identityDigest.clone();
  }

  /** A copy of the bytes per block of each cache group. */
  @Override
  public int[] blockBytes() {
    return blockBytes.clone();
  }

  /** The number of prompt tokens. */
  public int numTokens() {
    return promptTokens.length;
  }

  /** Prompt token {@code i}. */
  public int token(int i) {
    return promptTokens[i];
  }

  /** The number of cache groups. */
  public int numGroups() {
    return blockBytes.length;
  }

  /** The bytes of one block of cache group {@code group}. */
  public int blockBytes(int group) {
    return blockBytes[group];
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof Bootstrap b
        && Arrays.equals(promptTokens, b.promptTokens)
        && Arrays.equals(identityDigest, b.identityDigest)
        && Arrays.equals(blockBytes, b.blockBytes);
  }

  @Override
  public int hashCode() {
    return (Arrays.hashCode(promptTokens) * 31 + Arrays.hashCode(identityDigest)) * 31
        + Arrays.hashCode(blockBytes);
  }

  @Override
  public String toString() {
    return "Bootstrap[tokens="
        + promptTokens.length
        + ", identity="
        + HexFormat.of().formatHex(identityDigest, 0, 8)
        + "..., block_bytes="
        + Arrays.toString(blockBytes)
        + "]";
  }
}
