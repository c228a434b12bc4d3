package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdTesting.await;
import static io.tokenspeed.pd.PdTesting.awaitFailure;
import static io.tokenspeed.pd.PdTesting.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.testkit.ChildJvm;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.zip.CRC32C;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The KV transfer between two processes: a decode receiver in a child JVM ({@link ReceiverChild})
 * and a sender in this one. Rooms land there byte for byte; then the child is killed with SIGKILL
 * mid-transfer, and the sender's open rooms must fail within the silence timeout.
 */
class PdProcessIT {

  private static final long SILENCE_MS = 3_000;

  @Test
  void shouldLandInAnotherProcessAndFailItsRoomsWhenThatProcessIsKilled(@TempDir Path dir)
      throws Exception {
    PdSecret secret = PdSecret.generate();
    PdSettings settings = PdSettings.defaults().withTimingsMs(10_000, 30_000, 200, SILENCE_MS);
    SplittableRandom rnd = new SplittableRandom(2026);
    try (ChildJvm child =
            ChildJvm.launch(ReceiverChild.class)
                .args(List.of(Long.toString(SILENCE_MS)))
                .env(PdSecret.ENV, secret.toHex())
                .openInput()
                .failOn("failed ", "error")
                .start(dir, "decode");
        KvSender sender = KvSender.open(secret, settings);
        Arena arena = Arena.ofShared()) {
      int port =
          Integer.parseInt(
              child.awaitLineStartingWith("listening ", Duration.ofSeconds(60)).substring(10));
      InetSocketAddress at = new InetSocketAddress(InetAddress.getLoopbackAddress(), port);

      // Four rooms land in the child, byte for byte.
      Set<String> expected = new HashSet<>();
      List<Transfer> transfers = new java.util.ArrayList<>();
      for (long room = 1; room <= 4; room++) {
        child.send("expect " + room);
        Bootstrap b =
            PdTesting.bootstrap(rnd, 16 * (1 + rnd.nextInt(20)) - rnd.nextInt(16), 8192, 2048);
        Transfer t = sender.bootstrap(room, at, b);
        Ack ack = await(t.acknowledged(), "ACK of room " + room);
        int blocks =
            (b.numTokens() + ReceiverChild.TOKENS_PER_BLOCK - 1) / ReceiverChild.TOKENS_PER_BLOCK;
        assertEquals(new Ack(new int[] {blocks, blocks}), ack);
        MemorySegment[][] src = PdTesting.sources(arena, room, b, ack);
        CRC32C crc = new CRC32C();
        for (MemorySegment[] group : src) {
          for (MemorySegment block : group) {
            crc.update(block.asByteBuffer());
          }
        }
        int firstToken = 1000 + (int) room;
        expected.add("landed " + room + " " + Long.toHexString(crc.getValue()) + " " + firstToken);
        PdTesting.sendAll(t, src, new DoneInfo(firstToken, new CachedTokens(0, 16, 32)));
        transfers.add(t);
      }
      for (Transfer t : transfers) {
        await(t.received(), "RECEIVED of room " + t.room());
      }
      Set<String> landed = new HashSet<>();
      for (int i = 0; i < 4; i++) {
        landed.add(child.awaitLineStartingWith("landed ", Duration.ofSeconds(60)));
      }
      assertEquals(expected, landed);
      assertEquals(4, sender.metrics().roomsLanded());

      // Two rooms mid-transfer when the child dies.
      List<Transfer> open = new java.util.ArrayList<>();
      MemorySegment big = arena.allocate(1 << 20);
      PdTesting.fill(big, 7);
      long before = sender.metrics().bytesSent();
      for (long room = 10; room <= 11; room++) {
        child.send("expect " + room);
        Bootstrap b = PdTesting.bootstrap(rnd, 64 * ReceiverChild.TOKENS_PER_BLOCK, 1 << 20);
        Transfer t = sender.bootstrap(room, at, b);
        await(t.acknowledged(), "ACK of room " + room);
        for (int i = 0; i < 32; i++) {
          assertTrue(t.send(0, i, big));
        }
        open.add(t);
      }
      eventually(() -> sender.metrics().bytesSent() - before > 4L << 20, "DATA flowing");
      long start = System.nanoTime();
      child.kill();
      for (Transfer t : open) {
        PdException e =
            awaitFailure(
                t.received(),
                PdException.Kind.CONNECTION,
                "the fence of room " + t.room(),
                Duration.ofMillis(SILENCE_MS + 10_000));
        assertTrue(e.getMessage().contains("decode engine at"), e::getMessage);
      }
      long tookMs = PdTesting.millisSince(start);
      assertTrue(
          tookMs <= SILENCE_MS + 5_000,
          "the rooms failed " + tookMs + " ms after the kill; bound " + (SILENCE_MS + 5_000));
      assertEquals(0, sender.metrics().roomsOpen());
      assertEquals(2, sender.metrics().roomsFailed());
      PdTesting.assertBalanced(sender.metrics());
    }
  }
}
