package io.tokenspeed.cuda;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

/**
 * The few dozen calls of the CUDA runtime, the driver, NVRTC and cuBLAS the backend makes, as FFM
 * downcalls, each checked: a status other than success becomes a {@link CudaException} naming the
 * call and the library's error string.
 *
 * <p>Device pointers and opaque handles (streams, events, modules, functions, the cuBLAS handle)
 * travel as {@code long}: on x86-64 a pointer and a 64-bit integer are passed alike. Host pointers
 * are {@link MemorySegment}s. The libraries load on the first {@link #get()}, once per process.
 *
 * <p>Driver calls act on the calling thread's current context: every thread that launches kernels
 * calls {@link #setDevice} first, which makes the device's primary context (the one the runtime
 * uses) current.
 */
public final class CudaApi {

  /** {@code cudaMemcpyKind}: the direction is inferred from the pointers (unified addressing). */
  public static final int MEMCPY_DEFAULT = 4;

  /** {@code cudaStreamNonBlocking}. */
  public static final int STREAM_NON_BLOCKING = 1;

  /** {@code cudaEventDisableTiming}. */
  public static final int EVENT_DISABLE_TIMING = 2;

  /** {@code cudaErrorNotReady}: an event or stream with work still running. */
  static final int ERROR_NOT_READY = 600;

  /** {@code cudaDevAttrMultiProcessorCount}. */
  public static final int ATTR_MULTIPROCESSORS = 16;

  /** {@code cudaDevAttrComputeCapabilityMajor}. */
  public static final int ATTR_CC_MAJOR = 75;

  /** {@code cudaDevAttrComputeCapabilityMinor}. */
  public static final int ATTR_CC_MINOR = 76;

  /** {@code cudaDevAttrMaxSharedMemoryPerBlockOptin}. */
  public static final int ATTR_MAX_SHARED_PER_BLOCK_OPTIN = 97;

  /** {@code CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES}. */
  static final int FUNC_MAX_DYNAMIC_SHARED = 8;

  private static final Linker LINKER = Linker.nativeLinker();

  // runtime
  private final MethodHandle cudaGetErrorString;
  private final MethodHandle cudaGetDeviceCount;
  private final MethodHandle cudaSetDevice;
  private final MethodHandle cudaDeviceGetAttribute;
  private final MethodHandle cudaMemGetInfo;
  private final MethodHandle cudaMalloc;
  private final MethodHandle cudaFree;
  private final MethodHandle cudaMemcpy;
  private final MethodHandle cudaMemcpyAsync;
  private final MethodHandle cudaMemsetAsync;
  private final MethodHandle cudaStreamCreateWithFlags;
  private final MethodHandle cudaStreamDestroy;
  private final MethodHandle cudaStreamSynchronize;
  private final MethodHandle cudaStreamWaitEvent;
  private final MethodHandle cudaEventCreateWithFlags;
  private final MethodHandle cudaEventDestroy;
  private final MethodHandle cudaEventRecord;
  private final MethodHandle cudaEventQuery;
  private final MethodHandle cudaEventSynchronize;
  private final MethodHandle cudaEventElapsedTime;
  private final MethodHandle cudaHostRegister;
  private final MethodHandle cudaHostUnregister;
  private final MethodHandle cudaDeviceSynchronize;
  private final MethodHandle cudaRuntimeGetVersion;
  private final MethodHandle cudaDriverGetVersion;
  private final MethodHandle cudaStreamBeginCapture;
  private final MethodHandle cudaStreamEndCapture;
  private final MethodHandle cudaGraphInstantiate;
  private final MethodHandle cudaGraphLaunch;
  private final MethodHandle cudaGraphExecDestroy;
  private final MethodHandle cudaGraphDestroy;
  // driver
  private final MethodHandle cuGetErrorString;
  private final MethodHandle cuModuleLoadData;
  private final MethodHandle cuModuleGetFunction;
  private final MethodHandle cuModuleUnload;
  private final MethodHandle cuFuncSetAttribute;
  private final MethodHandle cuLaunchKernel;
  private final MethodHandle cuTensorMapEncodeTiled;
  // NVRTC
  private final MethodHandle nvrtcGetErrorString;
  private final MethodHandle nvrtcVersion;
  private final MethodHandle nvrtcCreateProgram;
  private final MethodHandle nvrtcCompileProgram;
  private final MethodHandle nvrtcGetProgramLogSize;
  private final MethodHandle nvrtcGetProgramLog;
  private final MethodHandle nvrtcGetCUBINSize;
  private final MethodHandle nvrtcGetCUBIN;
  private final MethodHandle nvrtcDestroyProgram;
  // cuBLAS
  private final MethodHandle cublasCreate;
  private final MethodHandle cublasDestroy;
  private final MethodHandle cublasSetStream;
  private final MethodHandle cublasSetMathMode;
  private final MethodHandle cublasGemmEx;
  private final MethodHandle cublasGetStatusString;

  private static final class Holder {
    static final CudaApi INSTANCE =
        new CudaApi(CudaLibraries.folders(System.getenv(CudaLibraries.FOLDERS_VARIABLE)));
  }

  /**
   * The process's bindings, loading the libraries on the first call.
   *
   * @throws CudaException naming the missing library and where it was looked for
   */
  public static CudaApi get() {
    try {
      return Holder.INSTANCE;
    } catch (ExceptionInInitializerError e) {
      if (e.getCause() instanceof CudaException c) {
        firstFailure = c.getMessage();
        throw new CudaException(c.getMessage());
      }
      throw e;
    } catch (NoClassDefFoundError e) {
      throw new CudaException(
          firstFailure != null
              ? firstFailure
              : "the CUDA libraries failed to load earlier in this process");
    }
  }

  /** Why the libraries failed to load, for every later caller. */
  private static volatile String firstFailure;

  CudaApi(List<Path> folders) {
    SymbolLookup rt = CudaLibraries.load(CudaLibraries.CUDART, folders);
    SymbolLookup cu = CudaLibraries.load(CudaLibraries.DRIVER, folders);
    SymbolLookup nv = CudaLibraries.load(CudaLibraries.NVRTC, folders);
    SymbolLookup bl = CudaLibraries.load(CudaLibraries.CUBLAS, folders);
    FunctionDescriptor i = FunctionDescriptor.of(JAVA_INT);
    cudaGetErrorString = h(rt, "cudaGetErrorString", FunctionDescriptor.of(ADDRESS, JAVA_INT));
    cudaGetDeviceCount = h(rt, "cudaGetDeviceCount", i.appendArgumentLayouts(ADDRESS));
    cudaSetDevice = h(rt, "cudaSetDevice", i.appendArgumentLayouts(JAVA_INT));
    cudaDeviceGetAttribute =
        h(rt, "cudaDeviceGetAttribute", i.appendArgumentLayouts(ADDRESS, JAVA_INT, JAVA_INT));
    cudaMemGetInfo = h(rt, "cudaMemGetInfo", i.appendArgumentLayouts(ADDRESS, ADDRESS));
    cudaMalloc = h(rt, "cudaMalloc", i.appendArgumentLayouts(ADDRESS, JAVA_LONG));
    cudaFree = h(rt, "cudaFree", i.appendArgumentLayouts(JAVA_LONG));
    cudaMemcpy =
        h(rt, "cudaMemcpy", i.appendArgumentLayouts(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_INT));
    cudaMemcpyAsync =
        h(
            rt,
            "cudaMemcpyAsync",
            i.appendArgumentLayouts(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_INT, JAVA_LONG));
    cudaMemsetAsync =
        h(
            rt,
            "cudaMemsetAsync",
            i.appendArgumentLayouts(JAVA_LONG, JAVA_INT, JAVA_LONG, JAVA_LONG));
    cudaStreamCreateWithFlags =
        h(rt, "cudaStreamCreateWithFlags", i.appendArgumentLayouts(ADDRESS, JAVA_INT));
    cudaStreamDestroy = h(rt, "cudaStreamDestroy", i.appendArgumentLayouts(JAVA_LONG));
    cudaStreamSynchronize = h(rt, "cudaStreamSynchronize", i.appendArgumentLayouts(JAVA_LONG));
    cudaStreamWaitEvent =
        h(rt, "cudaStreamWaitEvent", i.appendArgumentLayouts(JAVA_LONG, JAVA_LONG, JAVA_INT));
    cudaEventCreateWithFlags =
        h(rt, "cudaEventCreateWithFlags", i.appendArgumentLayouts(ADDRESS, JAVA_INT));
    cudaEventDestroy = h(rt, "cudaEventDestroy", i.appendArgumentLayouts(JAVA_LONG));
    cudaEventRecord = h(rt, "cudaEventRecord", i.appendArgumentLayouts(JAVA_LONG, JAVA_LONG));
    cudaEventQuery = h(rt, "cudaEventQuery", i.appendArgumentLayouts(JAVA_LONG));
    cudaEventSynchronize = h(rt, "cudaEventSynchronize", i.appendArgumentLayouts(JAVA_LONG));
    cudaEventElapsedTime =
        h(rt, "cudaEventElapsedTime", i.appendArgumentLayouts(ADDRESS, JAVA_LONG, JAVA_LONG));
    cudaHostRegister =
        h(rt, "cudaHostRegister", i.appendArgumentLayouts(JAVA_LONG, JAVA_LONG, JAVA_INT));
    cudaHostUnregister = h(rt, "cudaHostUnregister", i.appendArgumentLayouts(JAVA_LONG));
    cudaDeviceSynchronize = h(rt, "cudaDeviceSynchronize", i);
    cudaRuntimeGetVersion = h(rt, "cudaRuntimeGetVersion", i.appendArgumentLayouts(ADDRESS));
    cudaDriverGetVersion = h(rt, "cudaDriverGetVersion", i.appendArgumentLayouts(ADDRESS));
    cudaStreamBeginCapture =
        h(rt, "cudaStreamBeginCapture", i.appendArgumentLayouts(JAVA_LONG, JAVA_INT));
    cudaStreamEndCapture =
        h(rt, "cudaStreamEndCapture", i.appendArgumentLayouts(JAVA_LONG, ADDRESS));
    cudaGraphInstantiate =
        h(rt, "cudaGraphInstantiate", i.appendArgumentLayouts(ADDRESS, JAVA_LONG, JAVA_LONG));
    cudaGraphLaunch = h(rt, "cudaGraphLaunch", i.appendArgumentLayouts(JAVA_LONG, JAVA_LONG));
    cudaGraphExecDestroy = h(rt, "cudaGraphExecDestroy", i.appendArgumentLayouts(JAVA_LONG));
    cudaGraphDestroy = h(rt, "cudaGraphDestroy", i.appendArgumentLayouts(JAVA_LONG));

    cuGetErrorString = h(cu, "cuGetErrorString", i.appendArgumentLayouts(JAVA_INT, ADDRESS));
    cuModuleLoadData = h(cu, "cuModuleLoadData", i.appendArgumentLayouts(ADDRESS, ADDRESS));
    cuModuleGetFunction =
        h(cu, "cuModuleGetFunction", i.appendArgumentLayouts(ADDRESS, JAVA_LONG, ADDRESS));
    cuModuleUnload = h(cu, "cuModuleUnload", i.appendArgumentLayouts(JAVA_LONG));
    cuFuncSetAttribute =
        h(cu, "cuFuncSetAttribute", i.appendArgumentLayouts(JAVA_LONG, JAVA_INT, JAVA_INT));
    cuLaunchKernel =
        h(
            cu,
            "cuLaunchKernel",
            i.appendArgumentLayouts(
                JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT,
                JAVA_LONG, ADDRESS, ADDRESS));

    cuTensorMapEncodeTiled =
        h(
            cu,
            "cuTensorMapEncodeTiled",
            i.appendArgumentLayouts(
                ADDRESS, JAVA_INT, JAVA_INT, JAVA_LONG, ADDRESS, ADDRESS, ADDRESS, ADDRESS,
                JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT));

    nvrtcGetErrorString = h(nv, "nvrtcGetErrorString", FunctionDescriptor.of(ADDRESS, JAVA_INT));
    nvrtcVersion = h(nv, "nvrtcVersion", i.appendArgumentLayouts(ADDRESS, ADDRESS));
    nvrtcCreateProgram =
        h(
            nv,
            "nvrtcCreateProgram",
            i.appendArgumentLayouts(ADDRESS, ADDRESS, ADDRESS, JAVA_INT, ADDRESS, ADDRESS));
    nvrtcCompileProgram =
        h(nv, "nvrtcCompileProgram", i.appendArgumentLayouts(JAVA_LONG, JAVA_INT, ADDRESS));
    nvrtcGetProgramLogSize =
        h(nv, "nvrtcGetProgramLogSize", i.appendArgumentLayouts(JAVA_LONG, ADDRESS));
    nvrtcGetProgramLog = h(nv, "nvrtcGetProgramLog", i.appendArgumentLayouts(JAVA_LONG, ADDRESS));
    nvrtcGetCUBINSize = h(nv, "nvrtcGetCUBINSize", i.appendArgumentLayouts(JAVA_LONG, ADDRESS));
    nvrtcGetCUBIN = h(nv, "nvrtcGetCUBIN", i.appendArgumentLayouts(JAVA_LONG, ADDRESS));
    nvrtcDestroyProgram = h(nv, "nvrtcDestroyProgram", i.appendArgumentLayouts(ADDRESS));

    cublasCreate = h(bl, "cublasCreate_v2", i.appendArgumentLayouts(ADDRESS));
    cublasDestroy = h(bl, "cublasDestroy_v2", i.appendArgumentLayouts(JAVA_LONG));
    cublasSetStream = h(bl, "cublasSetStream_v2", i.appendArgumentLayouts(JAVA_LONG, JAVA_LONG));
    cublasSetMathMode = h(bl, "cublasSetMathMode", i.appendArgumentLayouts(JAVA_LONG, JAVA_INT));
    cublasGemmEx =
        h(
            bl,
            "cublasGemmEx",
            i.appendArgumentLayouts(
                JAVA_LONG, // handle
                JAVA_INT, // transa
                JAVA_INT, // transb
                JAVA_INT, // m
                JAVA_INT, // n
                JAVA_INT, // k
                ADDRESS, // alpha (host)
                JAVA_LONG, // A
                JAVA_INT, // Atype
                JAVA_INT, // lda
                JAVA_LONG, // B
                JAVA_INT, // Btype
                JAVA_INT, // ldb
                ADDRESS, // beta (host)
                JAVA_LONG, // C
                JAVA_INT, // Ctype
                JAVA_INT, // ldc
                JAVA_INT, // computeType
                JAVA_INT)); // algo
    cublasGetStatusString =
        h(bl, "cublasGetStatusString", FunctionDescriptor.of(ADDRESS, JAVA_INT));
  }

  private static MethodHandle h(SymbolLookup lib, String name, FunctionDescriptor d) {
    MemorySegment symbol =
        lib.find(name)
            .orElseThrow(
                () ->
                    new CudaException(
                        name + " is missing from the loaded CUDA libraries (CUDA 13 is needed)"));
    return LINKER.downcallHandle(symbol, d);
  }

  private static String cString(MemorySegment p) {
    return p.equals(MemorySegment.NULL) ? "no description" : p.reinterpret(4096).getString(0);
  }

  private static RuntimeException rethrow(Throwable t) {
    if (t instanceof RuntimeException r) {
      return r;
    }
    if (t instanceof Error e) {
      throw e;
    }
    return new IllegalStateException(t);
  }

  // ---------------------------------------------------------------- status checks

  void check(int status, String call) {
    if (status != 0) {
      throw new CudaException(call, status, runtimeError(status));
    }
  }

  String runtimeError(int status) {
    try {
      return cString((MemorySegment) cudaGetErrorString.invokeExact(status));
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  private void checkDriver(int status, String call) {
    if (status == 0) {
      return;
    }
    String text;
    try (Arena a = Arena.ofConfined()) {
      MemorySegment out = a.allocate(ADDRESS);
      int rc = (int) cuGetErrorString.invokeExact(status, out);
      text = rc == 0 ? cString(out.get(ADDRESS, 0)) : "unknown driver error";
    } catch (Throwable t) {
      throw rethrow(t);
    }
    throw new CudaException(call, status, text);
  }

  private void checkNvrtc(int status, String call) {
    if (status == 0) {
      return;
    }
    try {
      throw new CudaException(
          call, status, cString((MemorySegment) nvrtcGetErrorString.invokeExact(status)));
    } catch (CudaException e) {
      throw e;
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  private void checkCublas(int status, String call) {
    if (status == 0) {
      return;
    }
    try {
      throw new CudaException(
          call, status, cString((MemorySegment) cublasGetStatusString.invokeExact(status)));
    } catch (CudaException e) {
      throw e;
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  // ---------------------------------------------------------------- runtime

  /** GPUs the runtime sees; 0 when there are none or no driver (never throws for that). */
  public int deviceCount() {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment n = a.allocate(JAVA_INT);
      int rc = (int) cudaGetDeviceCount.invokeExact(n);
      return rc == 0 ? n.get(JAVA_INT, 0) : 0;
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Why {@link #deviceCount()} is 0, as the runtime says it; null when it sees a GPU. */
  public String noDeviceReason() {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment n = a.allocate(JAVA_INT);
      int rc = (int) cudaGetDeviceCount.invokeExact(n);
      if (rc != 0) {
        return "cudaGetDeviceCount failed: error " + rc + " (" + runtimeError(rc) + ")";
      }
      return n.get(JAVA_INT, 0) == 0 ? "cudaGetDeviceCount found no GPU" : null;
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void setDevice(int ordinal) {
    try {
      check((int) cudaSetDevice.invokeExact(ordinal), "cudaSetDevice(" + ordinal + ")");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public int deviceAttribute(int attribute, int ordinal) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment v = a.allocate(JAVA_INT);
      check(
          (int) cudaDeviceGetAttribute.invokeExact(v, attribute, ordinal),
          "cudaDeviceGetAttribute(" + attribute + ", device " + ordinal + ")");
      return v.get(JAVA_INT, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** {free, total} bytes of the current device. */
  public long[] memInfo() {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment free = a.allocate(JAVA_LONG);
      MemorySegment total = a.allocate(JAVA_LONG);
      check((int) cudaMemGetInfo.invokeExact(free, total), "cudaMemGetInfo");
      return new long[] {free.get(JAVA_LONG, 0), total.get(JAVA_LONG, 0)};
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public long malloc(long bytes) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment p = a.allocate(ADDRESS);
      check((int) cudaMalloc.invokeExact(p, bytes), "cudaMalloc(" + bytes + " bytes)");
      return p.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void free(long pointer) {
    try {
      check((int) cudaFree.invokeExact(pointer), "cudaFree");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** A synchronous copy between any two addresses (host or device; unified addressing). */
  public void memcpy(long dst, long src, long bytes) {
    try {
      check(
          (int) cudaMemcpy.invokeExact(dst, src, bytes, MEMCPY_DEFAULT),
          "cudaMemcpy(" + bytes + " bytes)");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** An asynchronous copy on {@code stream}; host memory must be pinned for it to overlap. */
  public void memcpyAsync(long dst, long src, long bytes, long stream) {
    try {
      check(
          (int) cudaMemcpyAsync.invokeExact(dst, src, bytes, MEMCPY_DEFAULT, stream),
          "cudaMemcpyAsync(" + bytes + " bytes)");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void memsetAsync(long dst, int value, long bytes, long stream) {
    try {
      check(
          (int) cudaMemsetAsync.invokeExact(dst, value, bytes, stream),
          "cudaMemsetAsync(" + bytes + " bytes)");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public long streamCreate(int flags) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment p = a.allocate(ADDRESS);
      check((int) cudaStreamCreateWithFlags.invokeExact(p, flags), "cudaStreamCreateWithFlags");
      return p.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void streamDestroy(long stream) {
    try {
      check((int) cudaStreamDestroy.invokeExact(stream), "cudaStreamDestroy");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void streamSynchronize(long stream) {
    try {
      check((int) cudaStreamSynchronize.invokeExact(stream), "cudaStreamSynchronize");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** {@code cudaStreamCaptureModeThreadLocal}: other threads' calls are not affected. */
  private static final int CAPTURE_THREAD_LOCAL = 1;

  /**
   * Starts recording the work issued on {@code stream} by this thread into a graph instead of
   * running it, until {@link #endCapture}; other threads' calls (the copy threads') are not
   * affected.
   */
  public void beginCapture(long stream) {
    try {
      check(
          (int) cudaStreamBeginCapture.invokeExact(stream, CAPTURE_THREAD_LOCAL),
          "cudaStreamBeginCapture");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Ends the capture {@link #beginCapture} started; returns the graph recorded. */
  public long endCapture(long stream) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment p = a.allocate(ADDRESS);
      check((int) cudaStreamEndCapture.invokeExact(stream, p), "cudaStreamEndCapture");
      return p.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** An executable instance of {@code graph}, which stays the caller's to destroy. */
  public long graphInstantiate(long graph) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment p = a.allocate(ADDRESS);
      check((int) cudaGraphInstantiate.invokeExact(p, graph, 0L), "cudaGraphInstantiate");
      return p.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Replays {@code exec} on {@code stream}, after the work issued there before. */
  public void graphLaunch(long exec, long stream) {
    try {
      check((int) cudaGraphLaunch.invokeExact(exec, stream), "cudaGraphLaunch");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void graphExecDestroy(long exec) {
    try {
      check((int) cudaGraphExecDestroy.invokeExact(exec), "cudaGraphExecDestroy");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void graphDestroy(long graph) {
    try {
      check((int) cudaGraphDestroy.invokeExact(graph), "cudaGraphDestroy");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Makes later work on {@code stream} wait for {@code event}. */
  public void streamWaitEvent(long stream, long event) {
    try {
      check((int) cudaStreamWaitEvent.invokeExact(stream, event, 0), "cudaStreamWaitEvent");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public long eventCreate(int flags) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment p = a.allocate(ADDRESS);
      check((int) cudaEventCreateWithFlags.invokeExact(p, flags), "cudaEventCreateWithFlags");
      return p.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void eventDestroy(long event) {
    try {
      check((int) cudaEventDestroy.invokeExact(event), "cudaEventDestroy");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void eventRecord(long event, long stream) {
    try {
      check((int) cudaEventRecord.invokeExact(event, stream), "cudaEventRecord");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Whether every piece of work before the event's record has completed. */
  public boolean eventDone(long event) {
    try {
      int rc = (int) cudaEventQuery.invokeExact(event);
      if (rc == ERROR_NOT_READY) {
        return false;
      }
      check(rc, "cudaEventQuery");
      return true;
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void eventSynchronize(long event) {
    try {
      check((int) cudaEventSynchronize.invokeExact(event), "cudaEventSynchronize");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Milliseconds between two recorded timing events. */
  public float eventElapsedMs(long start, long end) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment ms = a.allocate(JAVA_FLOAT);
      check((int) cudaEventElapsedTime.invokeExact(ms, start, end), "cudaEventElapsedTime");
      return ms.get(JAVA_FLOAT, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Pins {@code bytes} of host memory at {@code address} for asynchronous copies. */
  public void hostRegister(long address, long bytes) {
    try {
      check(
          (int) cudaHostRegister.invokeExact(address, bytes, 0),
          "cudaHostRegister(" + bytes + " bytes)");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void hostUnregister(long address) {
    try {
      check((int) cudaHostUnregister.invokeExact(address), "cudaHostUnregister");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void deviceSynchronize() {
    try {
      check((int) cudaDeviceSynchronize.invokeExact(), "cudaDeviceSynchronize");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** {runtime, driver} versions as CUDA encodes them (1000 × major + 10 × minor). */
  public int[] versions() {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment r = a.allocate(JAVA_INT);
      MemorySegment d = a.allocate(JAVA_INT);
      check((int) cudaRuntimeGetVersion.invokeExact(r), "cudaRuntimeGetVersion");
      check((int) cudaDriverGetVersion.invokeExact(d), "cudaDriverGetVersion");
      return new int[] {r.get(JAVA_INT, 0), d.get(JAVA_INT, 0)};
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  // ---------------------------------------------------------------- driver: modules and launches

  /** Loads a cubin into the current context; returns the module. */
  public long moduleLoad(MemorySegment image) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment m = a.allocate(ADDRESS);
      checkDriver((int) cuModuleLoadData.invokeExact(m, image), "cuModuleLoadData");
      return m.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public long moduleFunction(long module, String name) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment f = a.allocate(ADDRESS);
      checkDriver(
          (int) cuModuleGetFunction.invokeExact(f, module, a.allocateFrom(name)),
          "cuModuleGetFunction(" + name + ")");
      return f.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void moduleUnload(long module) {
    try {
      checkDriver((int) cuModuleUnload.invokeExact(module), "cuModuleUnload");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Lets {@code function} use up to {@code bytes} of dynamic shared memory per block. */
  public void setMaxDynamicShared(long function, int bytes, String name) {
    try {
      checkDriver(
          (int) cuFuncSetAttribute.invokeExact(function, FUNC_MAX_DYNAMIC_SHARED, bytes),
          "cuFuncSetAttribute(" + name + ", max dynamic shared memory " + bytes + ")");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /**
   * Launches {@code function} on {@code stream}; {@code params} is the array of pointers to each
   * argument's value.
   */
  public void launch(
      long function,
      int gridX,
      int gridY,
      int gridZ,
      int blockX,
      int sharedBytes,
      long stream,
      MemorySegment params,
      String name) {
    try {
      int status =
          (int)
              cuLaunchKernel.invokeExact(
                  function,
                  gridX,
                  gridY,
                  gridZ,
                  blockX,
                  1,
                  1,
                  sharedBytes,
                  stream,
                  params,
                  MemorySegment.NULL);
      if (status != 0) { // the call's description is built only for a failure
        checkDriver(
            status, "cuLaunchKernel(" + name + ", grid " + gridX + "×" + gridY + "×" + gridZ + ")");
      }
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** Bytes of a {@code CUtensorMap}, the descriptor a TMA copy reads (64-byte aligned). */
  public static final int TENSOR_MAP_BYTES = 128;

  /** {@code CU_TENSOR_MAP_DATA_TYPE_UINT16}: 2-byte elements, copied as they are (bf16 here). */
  private static final int TENSOR_MAP_UINT16 = 1;

  /** {@code CU_TENSOR_MAP_SWIZZLE_128B}: wgmma's 128-byte swizzle in shared memory. */
  private static final int TENSOR_MAP_SWIZZLE_128B = 3;

  /** {@code CU_TENSOR_MAP_L2_PROMOTION_L2_256B}. */
  private static final int TENSOR_MAP_L2_256B = 3;

  /**
   * A TMA descriptor (cuTensorMapEncodeTiled) of a tensor of 2-byte elements at device address
   * {@code address}: {@code dims[i]} elements along dimension i (dimension 0 contiguous), {@code
   * strides[i]} bytes between consecutive indices of dimension i + 1 (multiples of 16), copied in
   * boxes of {@code box[i]} elements, with the 128-byte swizzle (box[0] · 2 at most 128 bytes) and
   * no interleave; out-of-range elements of a box read as zeros. Returns the descriptor's {@link
   * #TENSOR_MAP_BYTES} bytes, to be passed to a kernel as a {@code __grid_constant__} argument.
   */
  public byte[] tensorMap(long address, long[] dims, long[] strides, int[] box) {
    int rank = dims.length;
    if (strides.length != rank - 1 || box.length != rank) {
      throw new IllegalArgumentException(
          "a tensor of rank "
              + rank
              + " takes "
              + (rank - 1)
              + " strides and "
              + rank
              + " box sizes");
    }
    try (Arena a = Arena.ofConfined()) {
      MemorySegment map = a.allocate(TENSOR_MAP_BYTES, 64);
      MemorySegment elementStrides = a.allocate(JAVA_INT, rank);
      for (int d = 0; d < rank; d++) {
        elementStrides.setAtIndex(JAVA_INT, d, 1);
      }
      int status =
          (int)
              cuTensorMapEncodeTiled.invokeExact(
                  map,
                  TENSOR_MAP_UINT16,
                  rank,
                  address,
                  a.allocateFrom(JAVA_LONG, dims),
                  a.allocateFrom(JAVA_LONG, strides),
                  a.allocateFrom(JAVA_INT, box),
                  elementStrides,
                  0,
                  TENSOR_MAP_SWIZZLE_128B,
                  TENSOR_MAP_L2_256B,
                  0);
      if (status != 0) {
        checkDriver(
            status,
            "cuTensorMapEncodeTiled(dims "
                + Arrays.toString(dims)
                + ", strides "
                + Arrays.toString(strides)
                + ", box "
                + Arrays.toString(box)
                + ")");
      }
      return map.toArray(JAVA_BYTE);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  // ---------------------------------------------------------------- NVRTC

  /** NVRTC's {major, minor}. */
  public int[] nvrtcVersion() {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment ma = a.allocate(JAVA_INT);
      MemorySegment mi = a.allocate(JAVA_INT);
      checkNvrtc((int) nvrtcVersion.invokeExact(ma, mi), "nvrtcVersion");
      return new int[] {ma.get(JAVA_INT, 0), mi.get(JAVA_INT, 0)};
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /**
   * Compiles CUDA C {@code source} to a cubin with {@code options}.
   *
   * @throws CudaException with NVRTC's log when the source does not compile
   */
  public byte[] compile(String source, String name, List<String> options) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment prog = a.allocate(ADDRESS);
      checkNvrtc(
          (int)
              nvrtcCreateProgram.invokeExact(
                  prog,
                  a.allocateFrom(source),
                  a.allocateFrom(name),
                  0,
                  MemorySegment.NULL,
                  MemorySegment.NULL),
          "nvrtcCreateProgram(" + name + ")");
      long p = prog.get(JAVA_LONG, 0);
      try {
        MemorySegment opts = a.allocate(ADDRESS, Math.max(1, options.size()));
        for (int k = 0; k < options.size(); k++) {
          opts.setAtIndex(ADDRESS, k, a.allocateFrom(options.get(k)));
        }
        int rc = (int) nvrtcCompileProgram.invokeExact(p, options.size(), opts);
        if (rc != 0) {
          MemorySegment size = a.allocate(JAVA_LONG);
          checkNvrtc((int) nvrtcGetProgramLogSize.invokeExact(p, size), "nvrtcGetProgramLogSize");
          MemorySegment log = a.allocate(Math.max(1, size.get(JAVA_LONG, 0)));
          checkNvrtc((int) nvrtcGetProgramLog.invokeExact(p, log), "nvrtcGetProgramLog");
          throw new CudaException(
              "nvrtcCompileProgram("
                  + name
                  + ", "
                  + options
                  + ") failed: error "
                  + rc
                  + " ("
                  + cString((MemorySegment) nvrtcGetErrorString.invokeExact(rc))
                  + "):\n"
                  + log.getString(0).strip());
        }
        MemorySegment size = a.allocate(JAVA_LONG);
        checkNvrtc((int) nvrtcGetCUBINSize.invokeExact(p, size), "nvrtcGetCUBINSize");
        MemorySegment cubin = a.allocate(size.get(JAVA_LONG, 0));
        checkNvrtc((int) nvrtcGetCUBIN.invokeExact(p, cubin), "nvrtcGetCUBIN");
        return cubin.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
      } finally {
        int ignored = (int) nvrtcDestroyProgram.invokeExact(prog);
      }
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  // ---------------------------------------------------------------- cuBLAS

  public long cublasCreate() {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment p = a.allocate(ADDRESS);
      checkCublas((int) cublasCreate.invokeExact(p), "cublasCreate");
      return p.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void cublasDestroy(long handle) {
    try {
      checkCublas((int) cublasDestroy.invokeExact(handle), "cublasDestroy");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void cublasSetStream(long handle, long stream) {
    try {
      checkCublas((int) cublasSetStream.invokeExact(handle, stream), "cublasSetStream");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  public void cublasSetMathMode(long handle, int mode) {
    try {
      checkCublas((int) cublasSetMathMode.invokeExact(handle, mode), "cublasSetMathMode");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** {@code cublasGemmEx} with host-side alpha and beta (float, for a 32F compute type). */
  public void gemmEx(
      long handle,
      int transA,
      int transB,
      int m,
      int n,
      int k,
      MemorySegment alpha,
      long a,
      int aType,
      int lda,
      long b,
      int bType,
      int ldb,
      MemorySegment beta,
      long c,
      int cType,
      int ldc,
      int computeType,
      int algo) {
    try {
      checkCublas(
          (int)
              cublasGemmEx.invokeExact(
                  handle,
                  transA,
                  transB,
                  m,
                  n,
                  k,
                  alpha,
                  a,
                  aType,
                  lda,
                  b,
                  bType,
                  ldb,
                  beta,
                  c,
                  cType,
                  ldc,
                  computeType,
                  algo),
          "cublasGemmEx(m=" + m + ", n=" + n + ", k=" + k + ")");
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }
}
