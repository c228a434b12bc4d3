package io.tokenspeed.pd;

import static io.tokenspeed.pd.PdTesting.await;
import static io.tokenspeed.pd.PdTesting.eventually;
import static io.tokenspeed.pd.PdTesting.loopback;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Randomized transfers over real loopback TCP, one seed per case: several decode receivers and
 * prefill senders at once, rooms with random cache groups, block counts and block sizes, each room
 * registered before or after its BOOTSTRAP arrives, blocks sent from several threads interleaved
 * across rooms in random order. The reference model is the source bytes themselves: every
 * destination byte must equal its source, every counter must add up, and at the end nothing may be
 * open and every destination must have been released exactly once.
 */
class TransferPropertyTest {

  static Stream<Long> seeds() {
    return LongStream.range(0, 16).boxed();
  }

  /** One room of the case. */
  private record Room(
      long id, int receiver, int sender, Bootstrap bootstrap, int[] blocks, boolean registerFirst) {
    long bytes() {
      long n = 0;
      for (int g = 0; g < blocks.length; g++) {
        n += (long) blocks[g] * bootstrap.blockBytes(g);
      }
      return n;
    }
  }

  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldLandEveryByteOfEveryRoomWhenRoomsInterleaveOverSharedConnections(long seed)
      throws Exception {
    SplittableRandom rnd = new SplittableRandom(seed);
    int numReceivers = 1 + rnd.nextInt(3);
    int numSenders = 1 + rnd.nextInt(2);
    int numRooms = 2 + rnd.nextInt(14);
    PdSecret secret = PdSecret.generate();
    PdSettings settings = PdTesting.settings();
    ExecutorService pool = Executors.newFixedThreadPool(4);
    List<TestLanding> landings = new ArrayList<>();
    List<KvReceiver> receivers = new ArrayList<>();
    List<KvSender> senders = new ArrayList<>();
    Arena arena = Arena.ofShared();
    try {
      List<Room> rooms = new ArrayList<>();
      Map<Long, Room> byId = new HashMap<>();
      for (int r = 0; r < numRooms; r++) {
        long id = rnd.nextLong();
        int groups = 1 + rnd.nextInt(3);
        int[] blockBytes = new int[groups];
        int[] blocks = new int[groups];
        for (int g = 0; g < groups; g++) {
          blockBytes[g] = 1 + rnd.nextInt(rnd.nextBoolean() ? 512 : 64 * 1024);
          blocks[g] = rnd.nextInt(9);
        }
        Room room =
            new Room(
                id,
                rnd.nextInt(numReceivers),
                rnd.nextInt(numSenders),
                PdTesting.bootstrap(rnd, 1 + rnd.nextInt(200), blockBytes),
                blocks,
                rnd.nextBoolean());
        rooms.add(room);
        byId.put(id, room);
      }
      for (int i = 0; i < numReceivers; i++) {
        TestLanding landing = new TestLanding((id, g) -> byId.get(id).blocks()[g]);
        if (rnd.nextBoolean()) {
          landing.async(pool);
        }
        landings.add(landing);
        receivers.add(KvReceiver.open(loopback(), secret, settings, landing));
      }
      for (int i = 0; i < numSenders; i++) {
        senders.add(KvSender.open(secret, settings));
      }

      // The decode side: register, then verify, acknowledge and release once landed.
      Map<Long, Registration> registrations = new HashMap<>();
      Map<Long, CompletableFuture<Void>> verified = new HashMap<>();
      for (Room room : rooms) {
        if (room.registerFirst()) {
          registrations.put(room.id(), receivers.get(room.receiver()).expect(room.id()));
        }
      }

      // The prefill side: open every room.
      Map<Long, Transfer> transfers = new HashMap<>();
      for (Room room : rooms) {
        transfers.put(
            room.id(),
            senders
                .get(room.sender())
                .bootstrap(room.id(), receivers.get(room.receiver()).address(), room.bootstrap()));
      }
      // Registrations after their BOOTSTRAP: wait until every receiver has read its BOOTSTRAPs.
      for (int i = 0; i < numReceivers; i++) {
        KvReceiver receiver = receivers.get(i);
        int index = i;
        long expected = rooms.stream().filter(r -> r.receiver() == index).count();
        eventually(
            () -> receiver.metrics().roomsOpened() == expected, "BOOTSTRAPs read by receiver");
      }
      for (Room room : rooms) {
        if (!room.registerFirst()) {
          registrations.put(room.id(), receivers.get(room.receiver()).expect(room.id()));
        }
      }
      for (Room room : rooms) {
        verified.put(
            room.id(),
            registrations
                .get(room.id())
                .landed()
                .thenAccept(
                    landed -> {
                      assertEquals(room.id(), landed.room());
                      assertEquals(7 + (int) (room.id() & 0xFF), landed.firstToken());
                      assertEquals(
                          new CachedTokens(1, 2, room.bootstrap().numTokens()),
                          landed.cachedTokens());
                      PdTesting.assertLandedBytes(
                          room.id(), landed.destinations(), room.bootstrap());
                      assertTrue(landed.acknowledge(), "acknowledged once");
                      assertTrue(!landed.acknowledge(), "a second acknowledge does nothing");
                      landed.destinations().release();
                    })
                .toCompletableFuture());
      }

      // Blocks from several threads, interleaved across rooms, in random order.
      List<Runnable> work = new ArrayList<>();
      Map<Long, MemorySegment[][]> sources = new HashMap<>();
      for (Room room : rooms) {
        Transfer t = transfers.get(room.id());
        Ack ack = await(t.acknowledged(), "ACK of room " + room.id());
        assertEquals(new Ack(room.blocks()), ack);
        MemorySegment[][] src = PdTesting.sources(arena, room.id(), room.bootstrap(), ack);
        sources.put(room.id(), src);
        for (int g = 0; g < src.length; g++) {
          for (int i = 0; i < src[g].length; i++) {
            int group = g;
            int index = i;
            work.add(() -> assertTrue(t.send(group, index, src[group][index])));
          }
        }
      }
      Collections.shuffle(work, new java.util.Random(rnd.nextLong()));
      List<CompletableFuture<Void>> sent = new ArrayList<>();
      for (Runnable w : work) {
        sent.add(CompletableFuture.runAsync(w, pool));
      }
      await(CompletableFuture.allOf(sent.toArray(CompletableFuture[]::new)), "sends");
      for (Room room : rooms) {
        assertTrue(
            transfers
                .get(room.id())
                .done(
                    new DoneInfo(
                        7 + (int) (room.id() & 0xFF),
                        new CachedTokens(1, 2, room.bootstrap().numTokens()))));
      }
      for (Room room : rooms) {
        await(transfers.get(room.id()).received(), "RECEIVED of room " + room.id());
        await(verified.get(room.id()), "verification of room " + room.id());
      }

      // The counters add up, and nothing is left open.
      long totalBytes = rooms.stream().mapToLong(Room::bytes).sum();
      long sentBytes = 0;
      long receivedBytes = 0;
      for (KvSender s : senders) {
        PdMetrics m = s.metrics();
        PdTesting.assertBalanced(m);
        assertEquals(0, m.roomsOpen());
        assertEquals(m.roomsOpened(), m.roomsLanded());
        sentBytes += m.bytesSent();
        assertEquals(0, m.handshakeFailures() + m.connectionFailures(), m::toString);
      }
      long connections = 0;
      for (int i = 0; i < numReceivers; i++) {
        PdMetrics m = receivers.get(i).metrics();
        PdTesting.assertBalanced(m);
        assertEquals(0, m.roomsOpen());
        assertEquals(0, m.registrationsWaiting());
        assertEquals(m.roomsOpened(), m.roomsLanded());
        assertEquals(0, receivers.get(i).openRooms());
        receivedBytes += m.bytesReceived();
        connections += m.connectionsOpened();
        landings.get(i).assertAllReleasedOnce();
      }
      assertEquals(totalBytes, sentBytes);
      assertEquals(totalBytes, receivedBytes);
      assertEquals(numRooms, landings.stream().mapToInt(l -> l.issued.size()).sum());
      // One connection per (sender, receiver) pair that carried a room, reused by its rooms.
      long pairs = rooms.stream().map(r -> r.sender() * 16 + r.receiver()).distinct().count();
      assertEquals(pairs, connections);
    } finally {
      for (KvSender s : senders) {
        s.close();
      }
      for (KvReceiver r : receivers) {
        r.close();
      }
      pool.shutdownNow();
      arena.close();
    }
  }
}
