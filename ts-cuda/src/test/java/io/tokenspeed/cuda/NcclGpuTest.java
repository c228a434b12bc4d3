package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.testkit.ChildJvm;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * NCCL on the GPU: a communicator of one rank on GPU 0 (a valid NCCL communicator), whose sum and
 * gather must leave every bit of the rank's values as they were; its release; and the refusal to
 * open in a process whose environment lets NVLink multicast on. bin/test-gpu starts the suite with
 * {@code NCCL_NVLS_ENABLE=0} ({@link Nccl#REQUIRED_ENVIRONMENT}).
 */
class NcclGpuTest extends OnTheGpu {

  private static final int COUNT = 1 << 20;

  /** Random floats over many magnitudes and both signs, with zeros of both signs. */
  private static float[] values(long seed, int n) {
    Random r = new Random(seed);
    float[] v = new float[n];
    for (int i = 0; i < n; i++) {
      v[i] = (float) ((r.nextDouble() * 2 - 1) * Math.pow(2, r.nextInt(60) - 30));
    }
    v[0] = 0f;
    v[1] = -0f;
    v[2] = Float.MIN_VALUE;
    v[3] = -Float.MAX_VALUE;
    return v;
  }

  private static void assertSameBits(float[] expected, float[] actual, String what) {
    assertEquals(expected.length, actual.length, what);
    for (int i = 0; i < expected.length; i++) {
      if (Float.floatToRawIntBits(expected[i]) != Float.floatToRawIntBits(actual[i])) {
        throw new AssertionError(
            what + ": element " + i + " is " + actual[i] + ", expected " + expected[i]);
      }
    }
  }

  /** A one-rank communicator on GPU 0, its id agreed over the host collective of one rank. */
  private static NcclCommunicator openAlone() {
    device.bind();
    byte[] id = Nccl.agreeOnId(Collective.single());
    assertEquals(Nccl.UNIQUE_ID_BYTES, id.length);
    NcclCommunicator c = Nccl.open(id, 0, 1);
    assertEquals(0, c.rank());
    assertEquals(1, c.size());
    return c;
  }

  @Test
  void shouldReportItsVersion() {
    int version = Nccl.version();
    System.out.printf("NCCL %s (version code %d)%n", Nccl.versionText(version), version);
    assertTrue(version >= 20000, "NCCL 2's version code: " + version);
    assertEquals("0", System.getenv("NCCL_NVLS_ENABLE"), "bin/test-gpu sets it");
  }

  @Test
  void shouldLeaveEveryBitOfOneRanksSumAsItWas() {
    float[] v = values(11, COUNT);
    try (NcclCommunicator c = openAlone();
        DeviceBuffer b = device.allocate((long) COUNT * Float.BYTES)) {
      b.write(0, v);
      c.allReduceSum(b.pointer(), COUNT, device.stream());
      c.allReduceSum(b.pointer(), 0, device.stream()); // nothing to sum
      device.synchronize();
      c.checkAsyncError();
      assertSameBits(v, b.readFloats(0, COUNT), "the sum over one rank");
      // a part of the buffer: the rest stays as it was
      c.allReduceSum(b.at(4 * Float.BYTES), 1000, device.stream());
      device.synchronize();
      assertSameBits(v, b.readFloats(0, COUNT), "the sum of a part");
    }
  }

  @Test
  void shouldCopyOneRanksGather() {
    float[] v = values(12, COUNT);
    try (NcclCommunicator c = openAlone();
        DeviceBuffer send = device.allocate((long) COUNT * Float.BYTES);
        DeviceBuffer recv = device.allocateZeroed((long) COUNT * Float.BYTES)) {
      send.write(0, v);
      c.allGather(send.pointer(), recv.pointer(), COUNT, device.stream());
      device.synchronize();
      c.checkAsyncError();
      assertSameBits(v, recv.readFloats(0, COUNT), "the gather of one rank");
      assertSameBits(v, send.readFloats(0, COUNT), "the gather's source");
      // in place: this rank's slot of the output is the input
      c.allGather(recv.pointer(), recv.pointer(), COUNT, device.stream());
      device.synchronize();
      assertSameBits(v, recv.readFloats(0, COUNT), "the gather in place");
    }
  }

  @Test
  void shouldReleaseOnceAndRefuseLaterCalls() {
    NcclCommunicator closed = openAlone();
    closed.close();
    closed.close(); // a second close does nothing
    closed.abort(); // nor does an abort after it
    assertThrows(IllegalStateException.class, () -> closed.allReduceSum(0L, 1, device.stream()));
    assertThrows(IllegalStateException.class, () -> closed.allGather(0L, 0L, 1, device.stream()));
    assertThrows(IllegalStateException.class, closed::checkAsyncError);

    NcclCommunicator aborted = openAlone();
    aborted.abort();
    aborted.abort();
    aborted.close();
    assertThrows(IllegalStateException.class, () -> aborted.allReduceSum(0L, 1, device.stream()));

    try (NcclCommunicator c = openAlone()) {
      assertThrows(IllegalArgumentException.class, () -> c.allReduceSum(0L, -1, device.stream()));
    }
    assertThrows(IllegalArgumentException.class, () -> Nccl.open(new byte[16], 0, 1));
    assertThrows(
        IllegalArgumentException.class, () -> Nccl.open(new byte[Nccl.UNIQUE_ID_BYTES], 1, 1));
  }

  @Test
  void shouldRefuseToOpenWithMulticastOn(@TempDir Path dir) throws Exception {
    ChildJvm child =
        ChildJvm.launch(NcclChild.class)
            .maxHeap("256m")
            .env("NCCL_NVLS_ENABLE", "1")
            .start(dir, "nvls-on");
    try {
      ChildJvm.Finished done = child.finish(Duration.ofSeconds(120));
      assertEquals(0, done.exitStatus(), done.describe());
      String refused = done.value("refused");
      assertTrue(refused != null, done.describe());
      assertTrue(refused.contains("NCCL_NVLS_ENABLE=1"), refused);
    } finally {
      child.close();
    }
  }
}
