package io.tokenspeed.l3.store.mooncake;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;

/**
 * The TCP sockets this process listens on, read from Linux's {@code /proc}: the sockets among
 * {@code /proc/self/fd} whose inode {@code /proc/self/net/tcp} or {@code tcp6} lists in state
 * LISTEN. The Mooncake client opens its listeners inside {@code mooncake_store_setup}, on every
 * interface whatever {@code local_hostname} says; the store compares this set before and after
 * setup to name them.
 *
 * <pre>
 *   /proc/self/net/tcp:   sl  local_address rem_address   st ... inode
 *                          0: 0100007F:1F90 00000000:0000 0A ... 41235
 *                             127.0.0.1:8080              LISTEN
 *   IPv4 addresses are one little-endian 32-bit word; IPv6 ones four such words (an IPv4-mapped
 *   IPv6 address, ::ffff:a.b.c.d, is reported as a.b.c.d).
 * </pre>
 */
final class ListeningSockets {

  /** A listening socket: its local address as text, its port, and whether it is a wildcard. */
  record Listener(String address, int port, boolean allInterfaces) {
    @Override
    public String toString() {
      return (address.contains(":") ? "[" + address + "]" : address) + ":" + port;
    }
  }

  private static final String LISTEN = "0A";

  private ListeningSockets() {}

  /** This process's listening TCP sockets; empty when {@code /proc} cannot be read (not Linux). */
  static Optional<Set<Listener>> ofThisProcess() {
    Path proc = Path.of("/proc/self");
    try {
      Set<String> inodes = new HashSet<>();
      try (DirectoryStream<Path> fds = Files.newDirectoryStream(proc.resolve("fd"))) {
        for (Path fd : fds) {
          try {
            String target = Files.readSymbolicLink(fd).toString();
            if (target.startsWith("socket:[") && target.endsWith("]")) {
              inodes.add(target.substring(8, target.length() - 1));
            }
          } catch (IOException closedMeanwhile) {
            // a descriptor closed while the directory was read: not a listener of ours
          }
        }
      }
      Set<Listener> out = new LinkedHashSet<>();
      for (String table : List.of("net/tcp", "net/tcp6")) {
        Path file = proc.resolve(table);
        if (Files.isReadable(file)) {
          parse(Files.readAllLines(file, StandardCharsets.US_ASCII), inodes, out);
        }
      }
      return Optional.of(out);
    } catch (IOException | UnsupportedOperationException e) {
      return Optional.empty();
    }
  }

  /** Adds the LISTEN rows of one {@code /proc/net/tcp*} table whose inode is in {@code inodes}. */
  static void parse(List<String> lines, Set<String> inodes, Set<Listener> out) {
    for (String line : lines.subList(Math.min(1, lines.size()), lines.size())) {
      String[] f = line.trim().split("\\s+");
      if (f.length < 10 || !f[3].equals(LISTEN) || !inodes.contains(f[9])) {
        continue;
      }
      int colon = f[1].indexOf(':');
      if (colon < 0) {
        continue;
      }
      out.add(listener(f[1].substring(0, colon), Integer.parseInt(f[1].substring(colon + 1), 16)));
    }
  }

  /** The listener at a {@code /proc} hex address (8 digits: IPv4, 32: IPv6) and port. */
  static Listener listener(String hex, int port) {
    byte[] bytes = new byte[hex.length() / 2];
    // each 32-bit word is printed as the host's little-endian integer: reverse its bytes
    for (int word = 0; word < bytes.length / 4; word++) {
      for (int b = 0; b < 4; b++) {
        int at = word * 8 + (3 - b) * 2;
        bytes[word * 4 + b] = (byte) Integer.parseInt(hex.substring(at, at + 2), 16);
      }
    }
    if (bytes.length == 16 && isV4Mapped(bytes)) {
      bytes = Arrays.copyOfRange(bytes, 12, 16); // ::ffff:a.b.c.d is a.b.c.d
    }
    boolean wildcard = true;
    for (byte b : bytes) {
      wildcard &= b == 0;
    }
    StringBuilder text = new StringBuilder();
    if (bytes.length == 4) {
      for (int i = 0; i < 4; i++) {
        text.append(i == 0 ? "" : ".").append(bytes[i] & 0xff);
      }
    } else {
      for (int i = 0; i < bytes.length; i += 2) {
        int group = ((bytes[i] & 0xff) << 8) | (bytes[i + 1] & 0xff);
        text.append(i == 0 ? "" : ":").append(Integer.toHexString(group));
      }
    }
    return new Listener(text.toString().toLowerCase(Locale.ROOT), port, wildcard);
  }

  private static boolean isV4Mapped(byte[] v6) {
    for (int i = 0; i < 10; i++) {
      if (v6[i] != 0) {
        return false;
      }
    }
    return v6[10] == (byte) 0xff && v6[11] == (byte) 0xff;
  }
}
