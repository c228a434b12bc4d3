package io.tokenspeed.server.cli;

import io.tokenspeed.core.DeploymentIdentity;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;
import picocli.CommandLine.IVersionProvider;

/** {@code --version}: the build's version, the runtime compatibility epoch and the JVM. */
final class VersionProvider implements IVersionProvider {

  /** Written by resource filtering at build time. */
  private static final String VERSION_RESOURCE = "/io/tokenspeed/server/version.properties";

  @Override
  public String[] getVersion() {
    return new String[] {
      "tokenspeed " + buildVersion(),
      "runtime_compat " + DeploymentIdentity.RUNTIME_COMPAT,
      "java " + Runtime.version() + " (" + System.getProperty("java.vendor") + ")"
    };
  }

  static String buildVersion() {
    try (InputStream in = VersionProvider.class.getResourceAsStream(VERSION_RESOURCE)) {
      if (in == null) {
        return "unknown";
      }
      Properties p = new Properties();
      p.load(in);
      return p.getProperty("version", "unknown");
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
