package io.tokenspeed.control;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.util.Arrays;
import java.util.Collections;
import java.util.Map;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * Mutual TLS on the mesh, for ranks of one replica on different hosts. Absent from {@link
 * ControlConfig} (null), the mesh is plain TCP.
 *
 * <p>With TLS, every mesh connection is TLS 1.3 and both ends authenticate: the acceptor requires a
 * client certificate, and each end verifies the other's certificate chain against its trust store.
 * Host names are <em>not</em> checked — a rank address is whatever interface the launcher chose,
 * often an IP — so the trust store is the whole of the policy: it should hold only the CA that
 * issues this deployment's rank certificates, never a public or corporate root. The HELLO/PROOF
 * handshake of {@link ReplicaSecret} still runs inside TLS, so a certificate alone does not make a
 * rank of this replica.
 *
 * <p>Two forms: {@link Stores} names a key store and a trust store on disk, with their passwords
 * read from a file or an environment variable when the mesh opens (the config holds where the
 * password is, never the password, so that {@code toString} cannot leak it); {@link Context} hands
 * over an {@link SSLContext} built by an embedding application. Either way the engines are limited
 * to TLS 1.3 and the acceptor needs client authentication.
 */
public sealed interface ControlTls {

  /** The only protocol the mesh speaks over TLS. */
  String PROTOCOL = "TLSv1.3";

  /** Default store type: PKCS12, what {@code keytool} writes by default. */
  String DEFAULT_STORE_TYPE = "PKCS12";

  /** The context every mesh connection's engine is created from. */
  SSLContext load() throws IOException, GeneralSecurityException;

  /** Stores from {@code keyStorePath} and {@code trustStorePath}, both PKCS12. */
  static ControlTls ofStores(
      Path keyStorePath,
      PasswordSource keyStorePassword,
      Path trustStorePath,
      PasswordSource trustStorePassword) {
    return new Stores(
        keyStorePath,
        DEFAULT_STORE_TYPE,
        keyStorePassword,
        trustStorePath,
        DEFAULT_STORE_TYPE,
        trustStorePassword);
  }

  /** A ready context, for an application that manages its own key material. */
  static ControlTls ofContext(SSLContext sslContext) {
    return new Context(sslContext);
  }

  /**
   * A key store (this rank's private key and certificate chain) and a trust store (the CA of this
   * deployment), loaded when the mesh opens.
   *
   * @param keyStorePath the key store: exactly the keys this rank presents
   * @param keyStoreType its type ({@value #DEFAULT_STORE_TYPE} unless the deployment chose another)
   * @param keyStorePassword where its password is (it also unlocks the private key)
   * @param trustStorePath the trust store: only this deployment's CA
   * @param trustStoreType its type
   * @param trustStorePassword where its password is
   */
  record Stores(
      Path keyStorePath,
      String keyStoreType,
      PasswordSource keyStorePassword,
      Path trustStorePath,
      String trustStoreType,
      PasswordSource trustStorePassword)
      implements ControlTls {

    public Stores {
      require(keyStorePath, "tls.key_store_path");
      requireType(keyStoreType, "tls.key_store_type");
      require(keyStorePassword, "tls.key_store_password");
      require(trustStorePath, "tls.trust_store_path");
      requireType(trustStoreType, "tls.trust_store_type");
      require(trustStorePassword, "tls.trust_store_password");
    }

    @Override
    public SSLContext load() throws IOException, GeneralSecurityException {
      return load(System.getenv());
    }

    /** {@link #load()} with passwords named by environment variables looked up in {@code env}. */
    SSLContext load(Map<String, String> env) throws IOException, GeneralSecurityException {
      char[] keyPassword = keyStorePassword.read("tls.key_store_password", env);
      char[] trustPassword = trustStorePassword.read("tls.trust_store_password", env);
      try {
        KeyStore keys = open(keyStorePath, keyStoreType, keyPassword, "tls.key_store_path");
        if (!hasEntry(keys, true)) {
          throw new IllegalArgumentException(
              "tls.key_store_path=" + keyStorePath + " holds no private key entry");
        }
        KeyStore trusted =
            open(trustStorePath, trustStoreType, trustPassword, "tls.trust_store_path");
        if (!hasEntry(trusted, false)) {
          throw new IllegalArgumentException(
              "tls.trust_store_path=" + trustStorePath + " holds no trusted certificate");
        }
        KeyManagerFactory kmf =
            KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(keys, keyPassword);
        TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
        tmf.init(trusted);
        SSLContext context = SSLContext.getInstance(PROTOCOL);
        context.init(kmf.getKeyManagers(), tmf.getTrustManagers(), null);
        return context;
      } finally {
        Arrays.fill(keyPassword, '\0');
        Arrays.fill(trustPassword, '\0');
      }
    }

    private static KeyStore open(Path path, String type, char[] password, String field)
        throws IOException, GeneralSecurityException {
      if (!Files.isReadable(path)) {
        throw new IllegalArgumentException(field + "=" + path + " is not a readable file");
      }
      KeyStore store = KeyStore.getInstance(type);
      try (InputStream in = Files.newInputStream(path)) {
        store.load(in, password);
      } catch (IOException e) {
        throw new IOException(
            field + "=" + path + " could not be read as " + type + ": " + e.getMessage(), e);
      }
      return store;
    }

    private static boolean hasEntry(KeyStore store, boolean privateKey)
        throws GeneralSecurityException {
      for (String alias : Collections.list(store.aliases())) {
        if (privateKey ? store.isKeyEntry(alias) : store.isCertificateEntry(alias)) {
          return true;
        }
      }
      return false;
    }
  }

  /**
   * An {@link SSLContext} built by the embedding application. Its key manager must present this
   * rank's certificate and its trust manager must accept only this deployment's CA; it must support
   * {@value #PROTOCOL}.
   */
  record Context(SSLContext sslContext) implements ControlTls {

    public Context {
      require(sslContext, "tls.ssl_context");
    }

    @Override
    public SSLContext load() {
      return sslContext;
    }
  }

  /**
   * Where a store's password comes from; {@code toString} names the place, never the password. The
   * password is read when the mesh opens, as UTF-8 text with one trailing line break removed.
   */
  sealed interface PasswordSource {

    /** The password, read now; {@code field} names the setting in errors. */
    char[] read(String field, Map<String, String> env) throws IOException;

    /** The contents of {@code path} (a file only the rank's user can read). */
    static PasswordSource file(Path path) {
      return new FromFile(path);
    }

    /** The value of the environment variable {@code name}. */
    static PasswordSource env(String name) {
      return new FromEnv(name);
    }

    /** The contents of a file. */
    record FromFile(Path path) implements PasswordSource {
      public FromFile {
        require(path, "password file");
      }

      @Override
      public char[] read(String field, Map<String, String> env) throws IOException {
        if (!Files.isReadable(path)) {
          throw new IllegalArgumentException(field + ": file=" + path + " is not readable");
        }
        return stripLineBreak(Files.readString(path, StandardCharsets.UTF_8));
      }
    }

    /** The value of an environment variable. */
    record FromEnv(String name) implements PasswordSource {
      public FromEnv {
        if (name == null || name.isBlank()) {
          throw new IllegalArgumentException(
              "password environment variable name is missing or blank");
        }
      }

      @Override
      public char[] read(String field, Map<String, String> env) {
        String value = env.get(name);
        if (value == null) {
          throw new IllegalArgumentException(
              field + ": environment variable " + name + " is not set");
        }
        return stripLineBreak(value);
      }
    }

    private static char[] stripLineBreak(String s) {
      int end = s.length();
      if (end > 0 && s.charAt(end - 1) == '\n') {
        end--;
        if (end > 0 && s.charAt(end - 1) == '\r') {
          end--;
        }
      }
      char[] out = new char[end];
      s.getChars(0, end, out, 0);
      return out;
    }
  }

  private static void require(Object value, String field) {
    if (value == null) {
      throw new IllegalArgumentException(field + " is missing");
    }
  }

  private static void requireType(String type, String field) {
    if (type == null || type.isBlank()) {
      throw new IllegalArgumentException(field + "=" + type + " must name a key store type");
    }
  }
}
