package io.tokenspeed.pd;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.zip.CRC32C;

/**
 * A decode engine's KV receiver in a JVM of its own, for {@link PdProcessIT}. It reads the PD
 * secret from the environment, listens on a loopback port it prints ({@code listening PORT}),
 * registers the rooms named on its standard input ({@code expect ROOM}), reserves {@code
 * ceil(tokens / 16)} blocks of every cache group for each, and once a room landed prints {@code
 * landed ROOM CRC FIRST_TOKEN} (the CRC32C of every landed block in group, then index order),
 * acknowledges it and releases its blocks; a failed landing prints {@code failed ROOM REASON}.
 *
 * <p>Arguments: the silence timeout in milliseconds.
 */
public final class ReceiverChild {

  /** Tokens per block of every cache group. */
  static final int TOKENS_PER_BLOCK = 16;

  private ReceiverChild() {}

  public static void main(String[] args) throws Exception {
    long silenceMs = Long.parseLong(args[0]);
    PdSettings settings = PdSettings.defaults().withTimingsMs(10_000, 30_000, 200, silenceMs);
    Landing landing =
        (room, b) -> {
          int[] blocksPerGroup = new int[b.numGroups()];
          Arrays.fill(blocksPerGroup, (b.numTokens() + TOKENS_PER_BLOCK - 1) / TOKENS_PER_BLOCK);
          return CompletableFuture.completedFuture(new ArenaDestinations(b, blocksPerGroup));
        };
    InetSocketAddress bind = new InetSocketAddress(InetAddress.getLoopbackAddress(), 0);
    try (KvReceiver receiver =
            KvReceiver.open(bind, PdSecret.fromEnvironment(), settings, landing);
        BufferedReader in =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
      System.out.println("listening " + receiver.address().getPort());
      String line;
      while ((line = in.readLine()) != null) {
        if (!line.startsWith("expect ")) {
          System.out.println("error: unknown command " + line);
          continue;
        }
        long room = Long.parseLong(line.substring("expect ".length()).trim());
        receiver
            .expect(room)
            .landed()
            .whenComplete(
                (landed, error) -> {
                  if (error != null) {
                    System.out.println("failed " + room + " " + error.getMessage());
                    return;
                  }
                  CRC32C crc = new CRC32C();
                  Destinations d = landed.destinations();
                  for (int g = 0; g < d.numGroups(); g++) {
                    for (int i = 0; i < d.numBlocks(g); i++) {
                      crc.update(d.block(g, i).asByteBuffer());
                    }
                  }
                  System.out.println(
                      "landed "
                          + room
                          + " "
                          + Long.toHexString(crc.getValue())
                          + " "
                          + landed.firstToken());
                  landed.acknowledge();
                  d.release();
                });
      }
    }
  }
}
