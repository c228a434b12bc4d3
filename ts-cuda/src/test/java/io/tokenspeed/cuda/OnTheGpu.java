package io.tokenspeed.cuda;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * A GPU test class's device: GPU 0, opened before the class's tests and closed after them (the
 * kernels compile once per process, so each class pays only the module load).
 */
public abstract class OnTheGpu {
  protected static CudaDevice device;

  @BeforeAll
  public static void openTheDevice() {
    device = CudaDevice.open(0);
    System.out.printf("GPU %s, kernels compiled in %d ms%n", device, device.compileMillis());
  }

  @AfterAll
  public static void closeTheDevice() {
    if (device != null) {
      device.close();
      device = null;
    }
  }
}
