package io.tokenspeed.core;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.DigestException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.List;

/**
 * Chained SHA-256 content hashes of a prompt's pages: the byte-exact identity under which every
 * replica finds a prefix another replica computed.
 *
 * <p>Page {@code i}'s hash is SHA-256 over this byte sequence:
 *
 * <pre>
 *   +------------------+--------------------+------------+-------------------------+--------------+
 *   | u32le(len(prev)) | prev (32 B, or     | u32le(n)   | n token ids, u32le each | extra keys   |
 *   | 0 for page 0     | nothing for page 0)| n = P      |                         | (optional)   |
 *   +------------------+--------------------+------------+-------------------------+--------------+
 *   extra keys, only when some exist:  u32le(k), then per key u32le(len(utf8)) + utf8 bytes
 * </pre>
 *
 * <p>Only full pages ({@code n = P}) have page hashes. A <em>tail</em> (an exact boundary that is
 * not a multiple of P) hashes its partial last page by the same rule with {@code n} equal to the
 * number of tokens in that partial page, chained on the last full page; a tail hash therefore never
 * equals a full-page hash of the same prefix.
 *
 * <p>Instances reuse one digest and one scratch buffer and are not thread-safe: use one per thread.
 */
public final class PrefixHasher {

  private static final VarHandle U32_LE =
      MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);

  private final int pageTokens;
  private final byte[] extraBytes;
  private final MessageDigest digest;
  private final byte[] scratch;
  private final byte[] out = new byte[ContentHash.BYTES];

  /**
   * @param pageTokens P, tokens per page
   * @param extraKeys adapter name, cache salt and similar request-level keys; empty for none
   */
  public PrefixHasher(int pageTokens, List<String> extraKeys) {
    if (pageTokens < 1 || pageTokens > CacheLayout.MAX_PREFIX_GRANULARITY) {
      throw new IllegalArgumentException(
          "prefix_granularity="
              + pageTokens
              + " must be in [1, "
              + CacheLayout.MAX_PREFIX_GRANULARITY
              + "]");
    }
    this.pageTokens = pageTokens;
    this.extraBytes = encodeExtraKeys(extraKeys == null ? List.of() : extraKeys);
    this.scratch = new byte[4 + ContentHash.BYTES + 4 + 4 * pageTokens];
    try {
      this.digest = MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is not available in this JDK", e);
    }
  }

  /** P, tokens per page. */
  public int pageTokens() {
    return pageTokens;
  }

  /** Hashes of every full page of {@code tokens}; a trailing partial page is ignored. */
  public ContentHash[] pageHashes(int[] tokens) {
    int numPages = tokens.length / pageTokens;
    ContentHash[] out = new ContentHash[numPages];
    ContentHash prev = null;
    for (int p = 0; p < numPages; p++) {
      prev = hashPage(prev, tokens, p * pageTokens, pageTokens);
      out[p] = prev;
    }
    return out;
  }

  /**
   * Hash of the tail ending at {@code boundary}, which must not be a multiple of P, chained on the
   * full page hash below it ({@code null} when the tail lies in page 0).
   */
  public ContentHash tailHash(ContentHash lastFullPage, int[] tokens, int boundary) {
    int rem = boundary % pageTokens;
    if (rem == 0 || boundary > tokens.length || boundary < 1) {
      throw new IllegalArgumentException(
          "tail boundary="
              + boundary
              + " must be in [1, "
              + tokens.length
              + "] and not a multiple of prefix_granularity="
              + pageTokens);
    }
    if ((boundary / pageTokens == 0) != (lastFullPage == null)) {
      throw new IllegalArgumentException(
          "tail boundary=" + boundary + " chains on the page below it; pass its hash (or null)");
    }
    return hashPage(lastFullPage, tokens, boundary - rem, rem);
  }

  /**
   * Hash of {@code count} tokens starting at {@code from}, chained on {@code prev} ({@code null}
   * for the first page). {@code count} is P for a full page, less for a tail.
   */
  public ContentHash hashPage(ContentHash prev, int[] tokens, int from, int count) {
    if (count < 1 || count > pageTokens) {
      throw new IllegalArgumentException(
          "page token count=" + count + " must be in [1, " + pageTokens + "]");
    }
    byte[] buf = scratch;
    int pos = 0;
    if (prev == null) {
      pos = putU32(buf, pos, 0);
    } else {
      pos = putU32(buf, pos, ContentHash.BYTES);
      prev.writeTo(buf, pos);
      pos += ContentHash.BYTES;
    }
    pos = putU32(buf, pos, count);
    int negative = 0;
    for (int i = 0; i < count; i++) {
      int t = tokens[from + i];
      negative |= t;
      U32_LE.set(buf, pos, t);
      pos += 4;
    }
    if (negative < 0) {
      rejectNegative(tokens, from, count);
    }
    digest.update(buf, 0, pos);
    if (extraBytes.length > 0) {
      digest.update(extraBytes);
    }
    try {
      digest.digest(out, 0, ContentHash.BYTES);
    } catch (DigestException e) {
      throw new IllegalStateException("SHA-256 digest of 32 bytes failed", e);
    }
    return ContentHash.of(out);
  }

  private static void rejectNegative(int[] tokens, int from, int count) {
    for (int i = 0; i < count; i++) {
      if (tokens[from + i] < 0) {
        throw new IllegalArgumentException(
            "token id="
                + tokens[from + i]
                + " at position "
                + (from + i)
                + " is out of range [0, 2^31)");
      }
    }
  }

  private static byte[] encodeExtraKeys(List<String> keys) {
    if (keys.isEmpty()) {
      return new byte[0];
    }
    byte[][] encoded = new byte[keys.size()][];
    int total = 4;
    for (int i = 0; i < keys.size(); i++) {
      String k = keys.get(i);
      if (k == null) {
        throw new IllegalArgumentException("extra key at index " + i + " is null");
      }
      encoded[i] = k.getBytes(StandardCharsets.UTF_8);
      total += 4 + encoded[i].length;
    }
    byte[] out = new byte[total];
    int pos = putU32(out, 0, keys.size());
    for (byte[] e : encoded) {
      pos = putU32(out, pos, e.length);
      System.arraycopy(e, 0, out, pos, e.length);
      pos += e.length;
    }
    return out;
  }

  private static int putU32(byte[] b, int pos, int v) {
    U32_LE.set(b, pos, v);
    return pos + 4;
  }
}
