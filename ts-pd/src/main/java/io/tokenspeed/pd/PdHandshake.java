package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdFrameDescriptor.*;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.WritableByteChannel;
import java.security.MessageDigest;
import java.security.SecureRandom;

/**
 * Both sides of the handshake that proves the PD secret on a new KV connection, before any other
 * frame is read or written. Its shape is the control plane's (see {@code ReplicaSecret} in
 * ts-control):
 *
 * <pre>
 *   prefill (dialer)                                   decode (acceptor)
 *     HELLO(TSPD, 1, prefill, nonce_d)  ───────────►  checks magic, version, role
 *                                       ◄───────────  HELLO(TSPD, 1, decode, nonce_a)
 *   checks magic, version, role
 *     PROOF(HMAC(k, "TSPD1 dialer" | hello_d | hello_a))  ──►  checks it, else closes and logs
 *                         ◄──  PROOF(HMAC(k, "TSPD1 acceptor" | hello_d | hello_a))
 *   checks it, else fails naming the address
 * </pre>
 *
 * The secret never crosses the wire, each proof is bound to its connection's nonces (no replay),
 * and the acceptor proves only to a dialer that proved first. Both sides run it with blocking I/O;
 * the endpoint's timer closes a channel whose handshake overruns {@code handshake_timeout_ms},
 * which ends it with an I/O error the caller reports as the timeout.
 */
final class PdHandshake {

  private static final SecureRandom RANDOM = new SecureRandom();

  private PdHandshake() {}

  /**
   * The dialer's side; returns once both proofs passed.
   *
   * @param at the peer as the messages name it ({@code decode engine at host:port})
   * @throws PdException of kind {@link PdException.Kind#HANDSHAKE}, naming {@code at}
   * @throws IOException when the channel fails (the caller checks whether it timed out)
   */
  static void dial(WritableByteChannel ch, PdFrameReader reader, PdSecret secret, String at)
      throws IOException {
    ByteBuffer helloD = PdFrameEncoder.hello(ROLE_PREFILL, nonce());
    byte[] helloDBytes = helloD.array().clone();
    writeFully(ch, helloD);
    PdFrame.Hello theirs =
        expect(
            reader,
            PdFrame.Hello.class,
            at,
            "closed the connection without answering this side's HELLO: it refused it (another"
                + " protocol version, or not a decode engine's KV port; its log names the reason)");
    if (theirs.version() != VERSION || theirs.role() != ROLE_DECODE) {
      throw failure(
          at
              + " answered with HELLO version="
              + theirs.version()
              + " role="
              + theirs.role()
              + "; this side speaks version "
              + VERSION
              + " and expects role "
              + ROLE_DECODE
              + " (decode)");
    }
    byte[] helloA = theirs.frame();
    writeFully(ch, PdFrameEncoder.proof(secret.mac(DIALER_LABEL, helloDBytes, helloA)));
    PdFrame.Proof proof =
        expect(
            reader,
            PdFrame.Proof.class,
            at,
            "closed the connection after this side's proof of the PD secret: the two processes were"
                + " not started with the same secret ("
                + PdSecret.ENV
                + " or "
                + PdSecret.FILE_ENV
                + ")");
    if (!MessageDigest.isEqual(secret.mac(ACCEPTOR_LABEL, helloDBytes, helloA), proof.mac())) {
      throw failure(
          "the "
              + at
              + " could not prove the PD secret (an impostor, or a decode engine started with"
              + " another secret); no KV is sent to it");
    }
  }

  /**
   * The acceptor's side; returns once the dialer proved the secret and this side's proof is
   * written.
   *
   * @throws PdProtocolException why the dialer is refused (the caller logs it, naming the peer)
   * @throws IOException when the channel fails (the caller checks whether it timed out)
   */
  static void accept(WritableByteChannel ch, PdFrameReader reader, PdSecret secret)
      throws IOException, PdProtocolException {
    PdFrame.Hello theirs = expectFromDialer(reader, PdFrame.Hello.class);
    if (theirs.version() != VERSION || theirs.role() != ROLE_PREFILL) {
      throw new PdProtocolException(
          "its HELLO says version="
              + theirs.version()
              + " role="
              + theirs.role()
              + "; this side speaks version "
              + VERSION
              + " and accepts role "
              + ROLE_PREFILL
              + " (prefill)");
    }
    byte[] helloD = theirs.frame();
    ByteBuffer helloA = PdFrameEncoder.hello(ROLE_DECODE, nonce());
    byte[] helloABytes = helloA.array().clone();
    writeFully(ch, helloA);
    PdFrame.Proof proof = expectFromDialer(reader, PdFrame.Proof.class);
    if (!MessageDigest.isEqual(secret.mac(DIALER_LABEL, helloD, helloABytes), proof.mac())) {
      throw new PdProtocolException(
          "its proof of the PD secret is wrong (not a process of this deployment, or started with"
              + " another secret)");
    }
    writeFully(ch, PdFrameEncoder.proof(secret.mac(ACCEPTOR_LABEL, helloD, helloABytes)));
  }

  static void writeFully(WritableByteChannel ch, ByteBuffer b) throws IOException {
    while (b.hasRemaining()) {
      ch.write(b);
    }
  }

  private static <T extends PdFrame> T expect(
      PdFrameReader reader, Class<T> type, String at, String onEof) throws IOException {
    PdFrame f;
    try {
      f = reader.next(true);
    } catch (EOFException e) {
      throw failure(at + " " + onEof);
    } catch (PdProtocolException e) {
      throw failure(at + " " + e.getMessage());
    }
    if (!type.isInstance(f)) {
      throw failure(
          at
              + " sent "
              + f.getClass().getSimpleName()
              + " where a "
              + type.getSimpleName()
              + " was due");
    }
    return type.cast(f);
  }

  private static <T extends PdFrame> T expectFromDialer(PdFrameReader reader, Class<T> type)
      throws IOException, PdProtocolException {
    PdFrame f;
    try {
      f = reader.next(true);
    } catch (PdProtocolException e) {
      throw new PdProtocolException("it " + e.getMessage());
    } catch (EOFException e) {
      throw new PdProtocolException(
          "it closed the connection during the handshake, before its "
              + type.getSimpleName().toUpperCase(java.util.Locale.ROOT));
    }
    if (!type.isInstance(f)) {
      throw new PdProtocolException(
          "it sent a "
              + f.getClass().getSimpleName().toUpperCase(java.util.Locale.ROOT)
              + " where a "
              + type.getSimpleName().toUpperCase(java.util.Locale.ROOT)
              + " was due");
    }
    return type.cast(f);
  }

  private static PdException failure(String message) {
    return new PdException(PdException.Kind.HANDSHAKE, message);
  }

  private static byte[] nonce() {
    byte[] b = new byte[DIGEST_BYTES];
    RANDOM.nextBytes(b);
    return b;
  }
}
