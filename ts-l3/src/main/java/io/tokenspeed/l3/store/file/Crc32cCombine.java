package io.tokenspeed.l3.store.file;

/**
 * Combines the CRC32C checksums of two adjacent byte ranges into the checksum of their
 * concatenation, so that the chunks of one payload can be checksummed on different threads and
 * still be compared against the one checksum in the object's header.
 *
 * <p>A CRC is the remainder of the message polynomial times x^32 modulo the generator, with the
 * pre- and post-conditioning of all ones. For {@code A || B} with {@code |B| = n} bytes, {@code
 * crc(A || B) = crc(A) * x^(8n) mod P xor crc(B)}: the conditioning terms cancel. The product and
 * the powers {@code x^(2^k) mod P} work on the reflected bit order that CRC32C uses (bit 31 is
 * x^0), as zlib's {@code crc32_combine} does for CRC-32; here with the Castagnoli polynomial. Cost:
 * at most 61 carry-less multiplications of 32 bits, independent of the lengths.
 */
final class Crc32cCombine {

  /** The Castagnoli polynomial, reflected. */
  private static final int POLYNOMIAL = 0x82F6_3B78;

  /** {@code X2N[k]} = x^(2^k) mod P, reflected. */
  private static final int[] X2N = new int[64];

  static {
    int p = 1 << 30; // x^1
    X2N[0] = p;
    for (int k = 1; k < X2N.length; k++) {
      p = multiply(p, p);
      X2N[k] = p;
    }
  }

  private Crc32cCombine() {}

  /**
   * The CRC32C of {@code A || B}, given {@code crcA}, {@code crcB} and the length of B in bytes.
   */
  static int combine(int crcA, int crcB, long lengthB) {
    if (lengthB < 0) {
      throw new IllegalArgumentException("lengthB=" + lengthB + " must not be negative");
    }
    return multiply(xPower8n(lengthB), crcA) ^ crcB;
  }

  /** x^(8n) mod P, reflected. */
  private static int xPower8n(long n) {
    int p = 1 << 31; // x^0
    int k = 3; // 8n = n * 2^3
    while (n != 0) {
      if ((n & 1) != 0) {
        p = multiply(X2N[k], p);
      }
      n >>>= 1;
      k++;
    }
    return p;
  }

  /** a * b mod P, reflected; {@code a} is never zero here (a power of x). */
  private static int multiply(int a, int b) {
    int m = 1 << 31;
    int p = 0;
    while (true) {
      if ((a & m) != 0) {
        p ^= b;
        if ((a & (m - 1)) == 0) {
          break;
        }
      }
      m >>>= 1;
      b = (b & 1) != 0 ? (b >>> 1) ^ POLYNOMIAL : b >>> 1;
    }
    return p;
  }
}
