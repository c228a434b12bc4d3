package io.tokenspeed.control;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Map;
import java.util.Set;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The secret that the ranks of one replica share, proven in the mesh handshake without being sent.
 *
 * <p><b>Why.</b> Anything that can reach a rank's port could otherwise join the mesh as a missing
 * rank and inject completion facts, pressure or frontend messages into every round. Each connection
 * therefore proves knowledge of this secret both ways, as an HMAC-SHA256 over a role label and both
 * sides' HELLO frames (each carrying a fresh 32-byte nonce):
 *
 * <pre>
 *   dialer                                  acceptor
 *     HELLO(fields, nonce_d)  ───────────►  checks the fields (replica, world, rank, limits)
 *                             ◄───────────  HELLO(fields, nonce_a)
 *   checks the fields
 *     PROOF(HMAC(k, "TSCP2 dialer"   | hello_d | hello_a)) ──►  checks it, else closes and logs
 *                             ◄── PROOF(HMAC(k, "TSCP2 acceptor" | hello_d | hello_a))
 *   checks it, else fails naming the address                 the rank joins unless it already
 *                                                             joined, else closes and logs
 * </pre>
 *
 * The secret never crosses the wire, a proof is bound to its connection's nonces (no replay), and
 * the acceptor reveals its proof only to a dialer that proved first. Whether the rank already
 * joined is checked last, once the claim is proven.
 *
 * <p><b>Where it comes from.</b> The launcher generates one per replica ({@link #generate}) and
 * hands it to every rank through a file readable only by its owner ({@link #writeTo}, then {@value
 * #FILE_ENV}) or the environment variable {@value #ENV} (hex), never on a command line, where other
 * users of the host could read it. {@link #fromEnvironment} reads either.
 *
 * <p>{@link #toString} never shows the bytes.
 */
public final class ReplicaSecret {

  /** Environment variable holding the secret as hex. */
  public static final String ENV = "TOKENSPEED_CONTROL_SECRET";

  /** Environment variable naming a file that holds the secret as hex. */
  public static final String FILE_ENV = "TOKENSPEED_CONTROL_SECRET_FILE";

  /** The shortest secret accepted, in bytes (128 bits). */
  public static final int MIN_BYTES = 16;

  /** The length {@link #generate} uses, in bytes. */
  public static final int GENERATED_BYTES = 32;

  private static final String ALGORITHM = "HmacSHA256";
  private static final SecureRandom RANDOM = new SecureRandom();

  private final byte[] key;

  private ReplicaSecret(byte[] key) {
    if (key.length < MIN_BYTES) {
      throw new IllegalArgumentException(
          "the replica secret has " + key.length + " bytes, must have >= " + MIN_BYTES);
    }
    this.key = key.clone();
  }

  /** A new random secret of {@value #GENERATED_BYTES} bytes. */
  public static ReplicaSecret generate() {
    byte[] b = new byte[GENERATED_BYTES];
    RANDOM.nextBytes(b);
    return new ReplicaSecret(b);
  }

  /** The secret written as hex ({@code 2 * MIN_BYTES} digits or more). */
  public static ReplicaSecret ofHex(String hex) {
    String h = hex == null ? "" : hex.strip();
    byte[] b;
    try {
      b = HexFormat.of().parseHex(h);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "the replica secret must be hex digits (" + h.length() + " characters given)", e);
    }
    return new ReplicaSecret(b);
  }

  /** The secret in {@code file}, as hex text. */
  public static ReplicaSecret fromFile(Path file) throws IOException {
    return ofHex(Files.readString(file, StandardCharsets.US_ASCII));
  }

  /** {@link #fromEnvironment(Map)} over this process's environment. */
  public static ReplicaSecret fromEnvironment() throws IOException {
    return fromEnvironment(System.getenv());
  }

  /**
   * The secret from {@value #ENV} (hex) or, when that is unset, from the file named by {@value
   * #FILE_ENV}; fails naming both when neither is set.
   */
  public static ReplicaSecret fromEnvironment(Map<String, String> env) throws IOException {
    return fromEnvironment(env, ENV, FILE_ENV, "replica secret");
  }

  /**
   * A secret read as {@link #fromEnvironment(Map)} reads the replica secret, from other variables:
   * {@code hexVariable} (hex) or, when that is unset, the file named by {@code fileVariable}. For
   * another secret of the same kind (the PD secret of ts-pd); {@code what} names it in the error
   * that names both variables when neither is set.
   */
  public static ReplicaSecret fromEnvironment(
      Map<String, String> env, String hexVariable, String fileVariable, String what)
      throws IOException {
    String hex = env.get(hexVariable);
    if (hex != null && !hex.isBlank()) {
      return ofHex(hex);
    }
    String file = env.get(fileVariable);
    if (file != null && !file.isBlank()) {
      return fromFile(Path.of(file));
    }
    throw new IllegalArgumentException(
        "no "
            + what
            + ": set "
            + fileVariable
            + " to a file holding it as hex (the launcher writes one per "
            + (ENV.equals(hexVariable) ? "replica" : "deployment")
            + "), or "
            + hexVariable
            + " to the hex itself");
  }

  /** Writes the secret as hex to a new file that only its owner may read. */
  public void writeTo(Path file) throws IOException {
    Set<PosixFilePermission> ownerOnly = PosixFilePermissions.fromString("rw-------");
    try {
      Files.createFile(file, PosixFilePermissions.asFileAttribute(ownerOnly));
    } catch (UnsupportedOperationException e) {
      Files.createFile(file);
    }
    Files.writeString(file, toHex(), StandardCharsets.US_ASCII, StandardOpenOption.WRITE);
  }

  /** The secret as hex, for a launcher that hands it to ranks through the environment. */
  public String toHex() {
    return HexFormat.of().formatHex(key);
  }

  /** HMAC-SHA256 under this secret over {@code label} and then each part, in order. */
  Bytes32 mac(String label, byte[]... parts) {
    try {
      Mac mac = Mac.getInstance(ALGORITHM);
      mac.init(new SecretKeySpec(key, ALGORITHM));
      mac.update(label.getBytes(StandardCharsets.US_ASCII));
      for (byte[] p : parts) {
        mac.update(p);
      }
      return Bytes32.of(mac.doFinal());
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HMAC-SHA256 is unavailable in this JDK", e);
    }
  }

  /**
   * HMAC-SHA256 under this secret over {@code label} (ASCII) and then each part, in order: the
   * proof another handshake of the same shape (ts-pd's) computes. The key itself never leaves.
   */
  public byte[] hmacSha256(String label, byte[]... parts) {
    return mac(label, parts).bytes();
  }

  /** Compares two MACs in time independent of where they differ. */
  static boolean sameMac(Bytes32 a, Bytes32 b) {
    return MessageDigest.isEqual(a.bytes(), b.bytes());
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof ReplicaSecret other && MessageDigest.isEqual(key, other.key);
  }

  @Override
  public int hashCode() {
    return Arrays.hashCode(key) * 31;
  }

  @Override
  public String toString() {
    return "ReplicaSecret[" + key.length + " bytes, redacted]";
  }
}
