package io.tokenspeed.core;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.regex.Pattern;

/**
 * The L3 namespace of a deployment: {@code tsl3-} followed by the lowercase hex SHA-256 of the
 * canonical JSON of its {@link DeploymentIdentity}. The literal prefix identifies the cache; the
 * identity's {@code runtime_compat} is its single compatibility epoch, so there is no second
 * version number in the name.
 */
public record Namespace(String value) {

  /** The literal prefix of every namespace. */
  public static final String PREFIX = "tsl3-";

  private static final Pattern FORMAT = Pattern.compile("tsl3-[0-9a-f]{64}");

  public Namespace {
    if (value == null || !FORMAT.matcher(value).matches()) {
      throw new IllegalArgumentException(
          "namespace=" + value + " must be 'tsl3-' followed by 64 lowercase hex characters");
    }
  }

  /** Derives the namespace of {@code identity}. */
  public static Namespace of(DeploymentIdentity identity) {
    return ofCanonicalJson(CanonicalJson.write(identity.toJsonTree()));
  }

  /** Derives the namespace from already canonical JSON text. */
  static Namespace ofCanonicalJson(String canonicalJson) {
    try {
      byte[] digest =
          MessageDigest.getInstance("SHA-256")
              .digest(canonicalJson.getBytes(StandardCharsets.UTF_8));
      return new Namespace(PREFIX + HexFormat.of().formatHex(digest));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is not available in this JDK", e);
    }
  }

  @Override
  public String toString() {
    return value;
  }
}
