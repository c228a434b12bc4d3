package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;
import java.util.Random;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Device↔Host copies are byte-exact while the compute stream is busy: random blocks go up from
 * pinned host memory, move within the device, and come down again, by {@code cudaMemcpyAsync} or by
 * the gather kernel, and every byte is checked against a host-side model of the same moves.
 */
class CopyEngineGpuTest extends OnTheGpu {
  static final int BLOCK = 16 * 1024;
  static final int BLOCKS = 4096; // 64 MiB

  @ParameterizedTest
  @ValueSource(booleans = {false, true})
  void shouldMoveEveryByteExactlyWhileTheComputeStreamIsBusy(boolean gatherKernel) {
    long bytes = (long) BLOCK * BLOCKS;
    Random rnd = new Random(gatherKernel ? 2 : 1);
    try (Arena arena = Arena.ofShared();
        DeviceBuffer dev = device.allocateZeroed(bytes);
        DeviceBuffer busyA = device.allocateZeroed(256L << 20);
        DeviceBuffer busyB = device.allocateZeroed(256L << 20);
        DeviceBuffer busy = device.allocate(2 * Long.BYTES);
        CopyEngine copies = new CopyEngine(device)) {
      busy.write(0, new int[] {lo(busyA), hi(busyA), lo(busyB), hi(busyB)});
      MemorySegment up = arena.allocate(bytes, 4096);
      MemorySegment down = arena.allocate(bytes, 4096);
      byte[] noise = new byte[BLOCK];
      for (int b = 0; b < BLOCKS; b++) {
        rnd.nextBytes(noise);
        MemorySegment.copy(noise, 0, up, ValueLayout.JAVA_BYTE, (long) b * BLOCK, BLOCK);
      }
      byte[] model = new byte[(int) bytes]; // what the device should hold
      try (PinnedHost pinUp = PinnedHost.register(device, up);
          PinnedHost pinDown = PinnedHost.register(device, down)) {
        long t0 = System.nanoTime();
        long moved = 0;
        for (int round = 0; round < 8; round++) {
          // keep the compute stream busy meanwhile: 256 MiB device to device by one thread block
          device.launch(
              "copy_blocks", 1, 1, 1024, 0, busy.pointer(), busy.pointer() + 8, busyA.bytes());
          // one batch's destinations are distinct, as the engine's are: copies of one launch run
          // in no particular order
          int n = 256;
          long[] srcs = new long[n];
          long[] dsts = new long[n];
          int[] targets = rnd.ints(0, BLOCKS).distinct().limit(n).toArray();
          for (int i = 0; i < n; i++) {
            int hb = rnd.nextInt(BLOCKS);
            int db = targets[i];
            srcs[i] = up.address() + (long) hb * BLOCK;
            dsts[i] = dev.pointer() + (long) db * BLOCK;
            MemorySegment.copy(
                up, ValueLayout.JAVA_BYTE, (long) hb * BLOCK, model, db * BLOCK, BLOCK);
          }
          issue(copies, gatherKernel, srcs, dsts, n);
          moved += (long) n * BLOCK;
          // a move within the device, after the loads (same stream: in order)
          int from = rnd.nextInt(BLOCKS);
          int to = rnd.nextInt(BLOCKS);
          issue(
              copies,
              gatherKernel,
              new long[] {dev.pointer() + (long) from * BLOCK},
              new long[] {dev.pointer() + (long) to * BLOCK},
              1);
          System.arraycopy(model, from * BLOCK, model, to * BLOCK, BLOCK);
        }
        try (CopyEngine.Fence f = copies.fence()) {
          f.await();
          assertTrue(f.isDone());
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        // everything down, in random block order
        int[] order = new int[BLOCKS];
        for (int i = 0; i < BLOCKS; i++) {
          order[i] = i;
        }
        for (int i = BLOCKS - 1; i > 0; i--) {
          int j = rnd.nextInt(i + 1);
          int t = order[i];
          order[i] = order[j];
          order[j] = t;
        }
        long[] srcs = new long[BLOCKS];
        long[] dsts = new long[BLOCKS];
        for (int i = 0; i < BLOCKS; i++) {
          srcs[i] = dev.pointer() + (long) order[i] * BLOCK;
          dsts[i] = down.address() + (long) order[i] * BLOCK;
        }
        issue(copies, gatherKernel, srcs, dsts, BLOCKS);
        copies.synchronize();
        device.synchronize();
        byte[] got = down.toArray(ValueLayout.JAVA_BYTE);
        for (int b = 0; b < BLOCKS; b++) {
          for (int i = 0; i < BLOCK; i++) {
            if (got[b * BLOCK + i] != model[b * BLOCK + i]) {
              assertEquals(model[b * BLOCK + i], got[b * BLOCK + i], "block " + b + " byte " + i);
            }
          }
        }
        System.out.printf(
            Locale.ROOT,
            "%s: %d MiB of 16 KiB blocks up in %.1f ms with the compute stream busy%n",
            gatherKernel ? "gather kernel" : "cudaMemcpyAsync",
            moved >> 20,
            seconds * 1e3);
      }
    }
  }

  private static void issue(CopyEngine c, boolean kernel, long[] srcs, long[] dsts, int n) {
    if (kernel) {
      c.gather(srcs, dsts, n, BLOCK);
    } else {
      for (int i = 0; i < n; i++) {
        c.copy(dsts[i], srcs[i], BLOCK);
      }
    }
  }

  private static int lo(DeviceBuffer b) {
    return (int) b.pointer();
  }

  private static int hi(DeviceBuffer b) {
    return (int) (b.pointer() >>> 32);
  }
}
