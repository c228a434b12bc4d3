package io.tokenspeed.pd;

import io.tokenspeed.control.ReplicaSecret;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Map;

/**
 * The secret every process of one disaggregated deployment shares (router, prefill and decode
 * engines), proven both ways on every KV connection before any byte of KV moves. It is a secret of
 * the same kind as the replica secret of the control plane ({@link ReplicaSecret}: at least 16
 * bytes, hex, never on a command line, never in {@link #toString}) and is proven by the same
 * handshake shape (HMAC-SHA256 over a role label and both HELLO frames; see {@link
 * PdFrameDescriptor}), read from its own variables: {@value #ENV} (hex) or {@value #FILE_ENV} (a
 * file readable only by its owner).
 */
public final class PdSecret {

  /** Environment variable holding the secret as hex. */
  public static final String ENV = "TOKENSPEED_PD_SECRET";

  /** Environment variable naming a file that holds the secret as hex. */
  public static final String FILE_ENV = "TOKENSPEED_PD_SECRET_FILE";

  private final ReplicaSecret secret;

  private PdSecret(ReplicaSecret secret) {
    this.secret = secret;
  }

  /** A new random secret. */
  public static PdSecret generate() {
    return new PdSecret(ReplicaSecret.generate());
  }

  /** The secret written as hex (32 digits or more). */
  public static PdSecret ofHex(String hex) {
    return new PdSecret(ReplicaSecret.ofHex(hex));
  }

  /** The secret in {@code file}, as hex text. */
  public static PdSecret fromFile(Path file) throws IOException {
    return new PdSecret(ReplicaSecret.fromFile(file));
  }

  /** {@link #fromEnvironment(Map)} over this process's environment. */
  public static PdSecret fromEnvironment() throws IOException {
    return fromEnvironment(System.getenv());
  }

  /**
   * The secret from {@value #ENV} (hex) or, when that is unset, from the file named by {@value
   * #FILE_ENV}; fails naming both when neither is set.
   */
  public static PdSecret fromEnvironment(Map<String, String> env) throws IOException {
    return new PdSecret(ReplicaSecret.fromEnvironment(env, ENV, FILE_ENV, "PD secret"));
  }

  /** Writes the secret as hex to a new file that only its owner may read. */
  public void writeTo(Path file) throws IOException {
    secret.writeTo(file);
  }

  /** The secret as hex, for a launcher that hands it on through the environment. */
  public String toHex() {
    return secret.toHex();
  }

  /** HMAC-SHA256 under the secret over {@code label} and the parts. */
  byte[] mac(String label, byte[]... parts) {
    return secret.hmacSha256(label, parts);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof PdSecret other && secret.equals(other.secret);
  }

  @Override
  public int hashCode() {
    return secret.hashCode() * 17;
  }

  @Override
  public String toString() {
    return "PdSecret[redacted]";
  }
}
