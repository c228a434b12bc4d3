package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.RowResult;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The GET decoder: exact-length copy, untouched destinations otherwise, and abandonment. */
class SegmentReplyDecoderTest {

  private static final byte SENTINEL = (byte) 0xA5;

  private Arena arena;
  private MemorySegment destination;
  private final AtomicLong late = new AtomicLong();

  @BeforeEach
  void allocate() {
    arena = Arena.ofShared();
    destination = arena.allocate(4096 + 64).asSlice(7, 4096);
    destination.fill(SENTINEL);
  }

  @AfterEach
  void free() {
    arena.close();
  }

  @Test
  void shouldCopyTheValueWhenItsLengthEqualsTheDestinations() {
    byte[] value = bytes(4096, 1);
    SegmentReplyDecoder d = decoder();
    d.set(ByteBuffer.wrap(value));
    assertEquals(new RowResult.Ok(4096, false), d.row());
    assertEquals(-1, destination.mismatch(MemorySegment.ofArray(value)));
  }

  @Test
  void shouldCopyFromADirectBufferAtItsPositionWhenTheSocketBufferIsOffHeap() {
    byte[] value = bytes(4096, 2);
    ByteBuffer direct = ByteBuffer.allocateDirect(4096 + 10);
    direct.position(10);
    direct.put(value);
    direct.position(10);
    SegmentReplyDecoder d = decoder();
    d.set(direct);
    assertEquals(new RowResult.Ok(4096, false), d.row());
    assertEquals(-1, destination.mismatch(MemorySegment.ofArray(value)));
  }

  @Test
  void shouldReportInvalidAndLeaveTheDestinationWhenTheLengthDiffers() {
    for (int length : new int[] {0, 1, 4095, 4097, 8192}) {
      SegmentReplyDecoder d = decoder();
      d.set(ByteBuffer.wrap(bytes(length, length)));
      assertEquals(new RowResult.Invalid(length), d.row());
      assertUntouched();
    }
  }

  @Test
  void shouldReportMissingWhenTheReplyIsNil() {
    SegmentReplyDecoder d = decoder();
    d.set((ByteBuffer) null);
    assertEquals(RowResult.MISSING, d.row());
    assertUntouched();
  }

  @Test
  void shouldReportInvalidWhenTheReplyIsASimpleString() {
    SegmentReplyDecoder d = decoder();
    d.setSingle(ByteBuffer.wrap("OK".getBytes()));
    assertEquals(new RowResult.Invalid(2), d.row());
    assertUntouched();
  }

  @Test
  void shouldDropTheReplyAndCountItWhenItArrivesAfterAbandon() {
    SegmentReplyDecoder d = decoder();
    d.abandon();
    d.set(ByteBuffer.wrap(bytes(4096, 3)));
    assertNull(d.row());
    assertEquals(1, late.get());
    assertUntouched();
  }

  @Test
  void shouldReturnFromAbandonOnlyAfterACopyInProgressFinished() throws Exception {
    byte[] value = bytes(4096, 4);
    CountDownLatch copying = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    SegmentReplyDecoder d = decoder();
    // The "event loop" holds the decoder's monitor the way a long copy does, then decodes.
    Thread eventLoop =
        Thread.ofPlatform()
            .start(
                () -> {
                  synchronized (d) {
                    copying.countDown();
                    await(release);
                    d.set(ByteBuffer.wrap(value));
                  }
                });
    assertTrue(copying.await(5, TimeUnit.SECONDS));
    Thread abandoner = Thread.ofPlatform().start(d::abandon);
    abandoner.join(100);
    assertTrue(abandoner.isAlive(), "abandon() returned while a copy was in progress");
    release.countDown();
    abandoner.join(5000);
    eventLoop.join(5000);
    assertEquals(new RowResult.Ok(4096, false), d.row(), "the copy that started completes");
    d.set(ByteBuffer.wrap(bytes(4096, 5)));
    assertEquals(-1, destination.mismatch(MemorySegment.ofArray(value)), "no write after abandon");
  }

  private SegmentReplyDecoder decoder() {
    return new SegmentReplyDecoder(RedisLinks.CODEC, destination, late);
  }

  private static void await(CountDownLatch latch) {
    try {
      latch.await(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private void assertUntouched() {
    for (long i = 0; i < destination.byteSize(); i++) {
      if (destination.get(ValueLayout.JAVA_BYTE, i) != SENTINEL) {
        throw new AssertionError("destination byte " + i + " was written");
      }
    }
  }

  private static byte[] bytes(int length, long seed) {
    byte[] b = new byte[length];
    new Random(seed).nextBytes(b);
    return b;
  }
}
