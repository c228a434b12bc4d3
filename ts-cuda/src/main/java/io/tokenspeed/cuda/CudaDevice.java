package io.tokenspeed.cuda;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * One GPU, opened for the engine: its primary context, one compute stream, a cuBLAS handle on that
 * stream, and the project's kernels ({@code kernels.cu}) compiled by NVRTC for its architecture
 * (once per process and architecture) and loaded.
 *
 * <p>Work is issued from one thread at a time (the event loop's); {@link #bind()} makes the device
 * current on a thread that has not used it yet.
 */
public final class CudaDevice implements AutoCloseable {

  /** The kernels' source, a resource beside this class. */
  static final String KERNELS = "kernels.cu";

  private static final Map<String, byte[]> CUBINS = new ConcurrentHashMap<>();

  /** Dynamic shared memory a launch may use without asking for more (48 KiB). */
  private static final int DEFAULT_SHARED_LIMIT = 48 * 1024;

  private final CudaApi api;
  private final int ordinal;
  private final int ccMajor;
  private final int ccMinor;
  private final int multiprocessors;
  private final int sharedBytesPerBlock;
  private final long stream;
  private final long cublas;
  private final long module;
  private final Map<String, Long> functions = new HashMap<>();
  private final Map<String, Integer> sharedLimits = new HashMap<>();
  private final long compileMillis;

  /** The launches' argument block (see {@link KernelArgs}); also the lock launches take. */
  private final KernelArgs launchArgs = new KernelArgs(Arena.ofAuto());

  private boolean closed;

  private CudaDevice(CudaApi api, int ordinal) {
    this.api = api;
    this.ordinal = ordinal;
    api.setDevice(ordinal);
    this.ccMajor = api.deviceAttribute(CudaApi.ATTR_CC_MAJOR, ordinal);
    this.ccMinor = api.deviceAttribute(CudaApi.ATTR_CC_MINOR, ordinal);
    this.multiprocessors = api.deviceAttribute(CudaApi.ATTR_MULTIPROCESSORS, ordinal);
    this.sharedBytesPerBlock =
        api.deviceAttribute(CudaApi.ATTR_MAX_SHARED_PER_BLOCK_OPTIN, ordinal);
    long t0 = System.nanoTime();
    byte[] cubin =
        CUBINS.computeIfAbsent(compileTarget(ccMajor, ccMinor), CudaDevice::compileKernels);
    this.compileMillis = (System.nanoTime() - t0) / 1_000_000;
    try (Arena a = Arena.ofConfined()) {
      this.module = api.moduleLoad(a.allocateFrom(ValueLayout.JAVA_BYTE, cubin));
    }
    this.stream = api.streamCreate(CudaApi.STREAM_NON_BLOCKING);
    this.cublas = api.cublasCreate();
    api.cublasSetStream(cublas, stream);
  }

  /**
   * Opens GPU {@code ordinal}.
   *
   * @throws CudaException when the libraries are missing, there is no such GPU, or the kernels do
   *     not compile or load
   */
  public static CudaDevice open(int ordinal) {
    CudaApi api = CudaApi.get();
    int count = api.deviceCount();
    if (ordinal < 0 || ordinal >= count) {
      String why = api.noDeviceReason();
      throw new CudaException(
          "cuda:"
              + ordinal
              + " is not a GPU of this machine: "
              + (why != null ? why : count + " GPU(s), cuda:0 to cuda:" + (count - 1)));
    }
    return new CudaDevice(api, ordinal);
  }

  /**
   * The target NVRTC compiles the kernels for: the device's own architecture, and on compute
   * capability 9.0 its architecture-specific target {@code sm_90a}, whose instructions (wgmma,
   * setmaxnreg) run on Hopper only; the kernels guard them with {@code __CUDA_ARCH_FEAT_SM90_ALL}.
   */
  static String compileTarget(int major, int minor) {
    return "sm_" + major + minor + (major == 9 && minor == 0 ? "a" : "");
  }

  private static byte[] compileKernels(String arch) {
    String source;
    try (InputStream in = CudaDevice.class.getResourceAsStream(KERNELS)) {
      if (in == null) {
        throw new CudaException(KERNELS + " is missing from the ts-cuda jar");
      }
      source = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new CudaException("cannot read " + KERNELS + ": " + e.getMessage());
    }
    // No fast-math: the kernels' float arithmetic is IEEE's, as the CPU path's.
    return CudaApi.get()
        .compile(source, KERNELS, List.of("--gpu-architecture=" + arch, "-std=c++17"));
  }

  public CudaApi api() {
    return api;
  }

  public int ordinal() {
    return ordinal;
  }

  /** The architecture the kernels were compiled for, such as {@code sm_90}. */
  public String arch() {
    return "sm_" + ccMajor + ccMinor;
  }

  /**
   * Whether the kernels were compiled for sm_90a (compute capability 9.0, Hopper: {@link
   * #compileTarget}), the only target whose {@code wgmma} kernels ({@code gemm_fixed_wgmma_*}) run;
   * elsewhere they are stubs that trap.
   */
  public boolean wgmma() {
    return runsWgmma(ccMajor, ccMinor);
  }

  /**
   * Whether compute capability {@code major.minor} runs the wgmma kernels: 9.0 only (its target
   * sm_90a; wgmma is no instruction of sm_80, sm_89 or of Blackwell's sm_100a and sm_120a).
   */
  static boolean runsWgmma(int major, int minor) {
    return major == 9 && minor == 0;
  }

  public int multiprocessors() {
    return multiprocessors;
  }

  /**
   * The most shared memory a block may use once its kernel asks for it (the opt-in limit: 227 KiB
   * on sm_90), in bytes.
   */
  public int sharedBytesPerBlock() {
    return sharedBytesPerBlock;
  }

  /** Milliseconds this open spent compiling the kernels (0 when already compiled). */
  public long compileMillis() {
    return compileMillis;
  }

  /** The compute stream: every kernel and GEMM of the forward pass runs on it, in order. */
  public long stream() {
    return stream;
  }

  long cublas() {
    return cublas;
  }

  /** Makes this device current on the calling thread. */
  public void bind() {
    api.setDevice(ordinal);
  }

  /** Allocates {@code bytes} of device memory (uninitialized). */
  public DeviceBuffer allocate(long bytes) {
    if (bytes <= 0) {
      throw new IllegalArgumentException("bytes=" + bytes + " must be positive");
    }
    return new DeviceBuffer(this, api.malloc(bytes), bytes);
  }

  /** Allocates {@code bytes} of device memory set to zero. */
  public DeviceBuffer allocateZeroed(long bytes) {
    DeviceBuffer b = allocate(bytes);
    api.memsetAsync(b.pointer(), 0, bytes, stream);
    api.streamSynchronize(stream);
    return b;
  }

  /** Waits for every piece of work issued on the compute stream. */
  public void synchronize() {
    api.streamSynchronize(stream);
  }

  /** The kernel {@code name} of {@code kernels.cu}. */
  long function(String name) {
    return functions.computeIfAbsent(name, n -> api.moduleFunction(module, n));
  }

  /**
   * Launches kernel {@code name} on the compute stream with a one-dimensional block of {@code
   * threads}; each argument is a {@link Long} (device pointer, 64-bit integer, or 0L for null), an
   * {@link Integer}, a {@link Float} or a {@link Double}, in the kernel's parameter order.
   */
  public void launch(
      String name, int gridX, int gridY, int threads, int sharedBytes, Object... args) {
    launchGrid3(name, gridX, gridY, 1, threads, sharedBytes, args);
  }

  /** {@link #launch} with a three-dimensional grid. */
  public void launchGrid3(
      String name, int gridX, int gridY, int gridZ, int threads, int sharedBytes, Object... args) {
    long f = function(name);
    if (sharedBytes > DEFAULT_SHARED_LIMIT && sharedLimits.getOrDefault(name, 0) < sharedBytes) {
      api.setMaxDynamicShared(f, sharedBytes, name);
      sharedLimits.put(name, sharedBytes);
    }
    synchronized (launchArgs) {
      api.launch(
          f, gridX, gridY, gridZ, threads, sharedBytes, stream, launchArgs.pack(name, args), name);
    }
  }

  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    bind();
    api.streamSynchronize(stream);
    api.cublasDestroy(cublas);
    api.streamDestroy(stream);
    api.moduleUnload(module);
  }

  @Override
  public String toString() {
    return "cuda:" + ordinal + " (" + arch() + ", " + multiprocessors + " SMs)";
  }
}
