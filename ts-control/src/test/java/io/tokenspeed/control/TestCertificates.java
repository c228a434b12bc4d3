package io.tokenspeed.control;

import io.tokenspeed.control.ControlTls.PasswordSource;
import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedKeyManager;

/**
 * Key and trust stores for mesh TLS tests, made with the JDK's {@code keytool} the way
 * docs/control-plane.md tells an operator to: a CA, a rank certificate it signs, and a PKCS12 trust
 * store holding only that CA. A second, foreign CA signs a certificate that the mesh must refuse.
 */
final class TestCertificates {

  static final String PASSWORD = "test-store-password";

  /** The trust store of the deployment: its CA only. */
  final Path trustStore;

  /** A rank's key store: a key and a certificate signed by the deployment's CA. */
  final Path rankStore;

  /** A key store whose certificate another CA signed. */
  final Path foreignStore;

  /** The stores' password, in a file. */
  final Path passwordFile;

  private final Path dir;

  private TestCertificates(Path dir) {
    this.dir = dir;
    this.trustStore = dir.resolve("trust.p12");
    this.rankStore = dir.resolve("rank.p12");
    this.foreignStore = dir.resolve("foreign.p12");
    this.passwordFile = dir.resolve("store.pass");
  }

  /** Makes every store under {@code dir}. */
  static TestCertificates make(Path dir) throws IOException, InterruptedException {
    TestCertificates c = new TestCertificates(dir);
    Files.writeString(c.passwordFile, PASSWORD + "\n", StandardCharsets.UTF_8);
    c.ca("ca");
    c.keytool(
        "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem", "-keystore", "trust.p12");
    c.issue("ca", "rank", "rank.p12");
    c.ca("foreign-ca");
    c.issue("foreign-ca", "foreign", "foreign.p12");
    return c;
  }

  /** Mesh TLS settings with the rank store and the deployment's trust store. */
  ControlTls tls() {
    return ControlTls.ofStores(
        rankStore,
        PasswordSource.file(passwordFile),
        trustStore,
        PasswordSource.file(passwordFile));
  }

  /** A context presenting the rank certificate and trusting the deployment's CA. */
  SSLContext rankContext() throws Exception {
    return tls().load();
  }

  /**
   * A context presenting the foreign certificate and trusting the deployment's CA. Its key manager
   * offers the certificate whatever issuers the acceptor asks for, so that the acceptor has to
   * verify the chain and refuse it (a JDK client would otherwise send no certificate at all).
   */
  SSLContext foreignContext() throws Exception {
    KeyStore keys = KeyStore.getInstance(ControlTls.DEFAULT_STORE_TYPE);
    try (InputStream in = Files.newInputStream(foreignStore)) {
      keys.load(in, PASSWORD.toCharArray());
    }
    KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    kmf.init(keys, PASSWORD.toCharArray());
    X509ExtendedKeyManager km = (X509ExtendedKeyManager) kmf.getKeyManagers()[0];
    X509ExtendedKeyManager anyIssuer =
        new X509ExtendedKeyManager() {
          @Override
          public String chooseEngineClientAlias(
              String[] keyType, Principal[] issuers, SSLEngine engine) {
            return "rank";
          }

          @Override
          public String chooseClientAlias(String[] keyType, Principal[] issuers, Socket socket) {
            return "rank";
          }

          @Override
          public String[] getClientAliases(String keyType, Principal[] issuers) {
            return new String[] {"rank"};
          }

          @Override
          public String[] getServerAliases(String keyType, Principal[] issuers) {
            return km.getServerAliases(keyType, issuers);
          }

          @Override
          public String chooseServerAlias(String keyType, Principal[] issuers, Socket socket) {
            return km.chooseServerAlias(keyType, issuers, socket);
          }

          @Override
          public X509Certificate[] getCertificateChain(String alias) {
            return km.getCertificateChain(alias);
          }

          @Override
          public PrivateKey getPrivateKey(String alias) {
            return km.getPrivateKey(alias);
          }
        };
    TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
    KeyStore trusted = KeyStore.getInstance(ControlTls.DEFAULT_STORE_TYPE);
    try (InputStream in = Files.newInputStream(trustStore)) {
      trusted.load(in, PASSWORD.toCharArray());
    }
    tmf.init(trusted);
    SSLContext context = SSLContext.getInstance(ControlTls.PROTOCOL);
    context.init(new KeyManager[] {anyIssuer}, tmf.getTrustManagers(), null);
    return context;
  }

  /** A self-signed CA key in {@code name}.p12 and its certificate in {@code name}.pem. */
  private void ca(String name) throws IOException, InterruptedException {
    keytool(
        "-genkeypair",
        "-alias",
        "ca",
        "-keyalg",
        "EC",
        "-groupname",
        "secp256r1",
        "-dname",
        "CN=" + name,
        "-ext",
        "bc:c",
        "-validity",
        "2",
        "-keystore",
        name + ".p12");
    keytool(
        "-exportcert", "-rfc", "-alias", "ca", "-keystore", name + ".p12", "-file", name + ".pem");
  }

  /** A key in {@code store} with a certificate for {@code cn} that the CA {@code ca} signed. */
  private void issue(String ca, String cn, String store) throws IOException, InterruptedException {
    keytool(
        "-genkeypair",
        "-alias",
        "rank",
        "-keyalg",
        "EC",
        "-groupname",
        "secp256r1",
        "-dname",
        "CN=" + cn,
        "-validity",
        "2",
        "-keystore",
        store);
    keytool("-certreq", "-alias", "rank", "-keystore", store, "-file", cn + ".csr");
    keytool(
        "-gencert",
        "-rfc",
        "-alias",
        "ca",
        "-keystore",
        ca + ".p12",
        "-infile",
        cn + ".csr",
        "-outfile",
        cn + ".pem",
        "-validity",
        "2",
        "-ext",
        "ku:c=digitalSignature",
        "-ext",
        "eku=serverAuth,clientAuth");
    keytool("-importcert", "-noprompt", "-alias", "ca", "-file", ca + ".pem", "-keystore", store);
    keytool("-importcert", "-alias", "rank", "-file", cn + ".pem", "-keystore", store);
  }

  private void keytool(String... args) throws IOException, InterruptedException {
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "keytool").toString());
    command.add("-J-XX:TieredStopAtLevel=1");
    command.addAll(List.of(args));
    command.addAll(List.of("-storetype", "PKCS12", "-storepass", PASSWORD));
    Process p =
        new ProcessBuilder(command)
            .directory(dir.toFile())
            .redirectErrorStream(true)
            .redirectOutput(dir.resolve("keytool.log").toFile())
            .start();
    if (!p.waitFor(60, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new IOException("keytool did not finish: " + command);
    }
    if (p.exitValue() != 0) {
      throw new IOException(
          "keytool failed ("
              + p.exitValue()
              + "): "
              + command
              + "\n"
              + Files.readString(dir.resolve("keytool.log")));
    }
  }
}
