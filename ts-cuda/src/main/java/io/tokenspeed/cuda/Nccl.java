package io.tokenspeed.cuda;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import io.tokenspeed.model.parallel.Collective;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * NCCL 2 ({@value #LIBRARY}) through FFM: the communicator of a tensor-parallel replica's GPUs
 * ({@link NcclCommunicator}), its unique id, and the library's version. Every call is checked: a
 * status other than {@code ncclSuccess} becomes a {@link CudaException} naming the call and NCCL's
 * error string (with the library's last error message when it has one).
 *
 * <p>The library is looked for as the CUDA libraries are ({@link CudaLibraries}): the folders of
 * {@code TOKENSPEED_CUDA_LIBS}, {@link CudaLibraries#DEFAULT_FOLDERS}, then the folders where
 * PyTorch's wheels put it ({@code .../site-packages/nvidia/nccl/lib} of the active virtual
 * environment, of each {@code python3} on {@code PATH}, and of the system's Python 3: {@link
 * #wheelFolders}), then the dynamic loader's own search. It loads on the first call that needs it,
 * once per process; a machine without NCCL learns of it only then.
 *
 * <p>A replica's ranks open their communicators together: rank 0 makes the {@link #uniqueId()},
 * every rank learns it over the replica's host collective ({@link #agreeOnId(Collective)}), and
 * every rank calls {@link #open} with it, each from its own process on its own GPU.
 *
 * <p>NVLink multicast (NVLS) stays off in this project. NCCL reads {@code NCCL_NVLS_ENABLE} from
 * the process's environment when a communicator initializes, and a Java process cannot change its
 * own environment: whoever starts a rank's process puts {@link #REQUIRED_ENVIRONMENT} into it, and
 * {@link #open} refuses to run without it.
 */
public final class Nccl {

  /** NCCL 2's soname. */
  public static final String LIBRARY = "libnccl.so.2";

  /**
   * The environment every rank's process must start with: NVLink multicast off. A launcher of rank
   * processes adds these variables to each child's environment; {@link #open} checks them.
   */
  public static final Map<String, String> REQUIRED_ENVIRONMENT = Map.of("NCCL_NVLS_ENABLE", "0");

  /** {@code NCCL_UNIQUE_ID_BYTES}: the size of an {@code ncclUniqueId}. */
  public static final int UNIQUE_ID_BYTES = 128;

  /** Where a PyTorch wheel ({@code nvidia-nccl-cu*}) puts the library under site-packages. */
  static final Path WHEEL_FOLDER = Path.of("nvidia", "nccl", "lib");

  /** {@code ncclFloat32} of {@code ncclDataType_t}. */
  static final int FLOAT32 = 7;

  /** {@code ncclSum} of {@code ncclRedOp_t}. */
  static final int SUM = 0;

  /** {@code ncclSuccess} of {@code ncclResult_t}. */
  static final int SUCCESS = 0;

  /** {@code ncclUniqueId}: {@code struct { char internal[128]; }}, passed by value. */
  private static final MemoryLayout UNIQUE_ID =
      MemoryLayout.structLayout(
              MemoryLayout.sequenceLayout(UNIQUE_ID_BYTES, JAVA_BYTE).withName("internal"))
          .withName("ncclUniqueId");

  private static final Linker LINKER = Linker.nativeLinker();

  private final MethodHandle ncclGetVersion;
  private final MethodHandle ncclGetUniqueId;
  private final MethodHandle ncclCommInitRank;
  private final MethodHandle ncclAllReduce;
  private final MethodHandle ncclAllGather;
  private final MethodHandle ncclCommDestroy;
  private final MethodHandle ncclCommAbort;
  private final MethodHandle ncclCommGetAsyncError;
  private final MethodHandle ncclGetErrorString;

  /** {@code ncclGetLastError} (NCCL 2.13 and later); null where the library lacks it. */
  private final MethodHandle ncclGetLastError;

  private static final class Holder {
    static final Nccl INSTANCE = new Nccl(folders());
  }

  /** Why the library failed to load, for every later caller. */
  private static volatile String firstFailure;

  /**
   * The process's bindings, loading the library on the first call.
   *
   * @throws CudaException naming {@value #LIBRARY} and where it was looked for
   */
  static Nccl get() {
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
              : LIBRARY + " failed to load earlier in this process");
    }
  }

  Nccl(List<Path> folders) {
    SymbolLookup lib = load(folders);
    FunctionDescriptor i = FunctionDescriptor.of(JAVA_INT);
    ncclGetVersion = h(lib, "ncclGetVersion", i.appendArgumentLayouts(ADDRESS));
    ncclGetUniqueId = h(lib, "ncclGetUniqueId", i.appendArgumentLayouts(ADDRESS));
    ncclCommInitRank =
        h(lib, "ncclCommInitRank", i.appendArgumentLayouts(ADDRESS, JAVA_INT, UNIQUE_ID, JAVA_INT));
    ncclAllReduce =
        h(
            lib,
            "ncclAllReduce",
            i.appendArgumentLayouts(
                JAVA_LONG, // sendbuff
                JAVA_LONG, // recvbuff
                JAVA_LONG, // count (size_t)
                JAVA_INT, // datatype
                JAVA_INT, // op
                JAVA_LONG, // comm
                JAVA_LONG)); // stream
    ncclAllGather =
        h(
            lib,
            "ncclAllGather",
            i.appendArgumentLayouts(
                JAVA_LONG, // sendbuff
                JAVA_LONG, // recvbuff
                JAVA_LONG, // sendcount (size_t)
                JAVA_INT, // datatype
                JAVA_LONG, // comm
                JAVA_LONG)); // stream
    ncclCommDestroy = h(lib, "ncclCommDestroy", i.appendArgumentLayouts(JAVA_LONG));
    ncclCommAbort = h(lib, "ncclCommAbort", i.appendArgumentLayouts(JAVA_LONG));
    ncclCommGetAsyncError =
        h(lib, "ncclCommGetAsyncError", i.appendArgumentLayouts(JAVA_LONG, ADDRESS));
    ncclGetErrorString = h(lib, "ncclGetErrorString", FunctionDescriptor.of(ADDRESS, JAVA_INT));
    ncclGetLastError =
        lib.find("ncclGetLastError")
            .map(s -> LINKER.downcallHandle(s, FunctionDescriptor.of(ADDRESS, JAVA_LONG)))
            .orElse(null);
  }

  // ---------------------------------------------------------------- finding the library

  /** The folders searched, in order, for {@value #LIBRARY} in this process. */
  static List<Path> folders() {
    return folders(
        System.getenv(CudaLibraries.FOLDERS_VARIABLE),
        wheelFolders(Path.of("/"), System.getenv("VIRTUAL_ENV"), System.getenv("PATH")));
  }

  /**
   * The folders searched, in order, for {@value #LIBRARY}: those of {@link CudaLibraries#folders}
   * for {@code extra} (the {@code TOKENSPEED_CUDA_LIBS} entries first), then {@code wheels} ({@link
   * #wheelFolders}), each folder once.
   */
  static List<Path> folders(String extra, List<Path> wheels) {
    List<Path> out = new ArrayList<>(CudaLibraries.folders(extra));
    for (Path f : wheels) {
      if (!out.contains(f)) {
        out.add(f);
      }
    }
    return out;
  }

  /**
   * Where PyTorch's wheels put NCCL ({@code nvidia/nccl/lib} under site-packages; the CUDA 13
   * wheel, {@code nvidia-nccl-cu13}, too), each folder once, in order:
   *
   * <ol>
   *   <li>the environments of Python: {@code lib/python3*}{@code /site-packages} under {@code
   *       virtualEnv} (the active virtual environment, may be null) and under the prefix of each
   *       {@code python3} on {@code path} (the folder above the one that holds it, and above each
   *       file a {@code python3} link leads to), so that the virtual environment or conda
   *       environment that holds PyTorch is found when its {@code python3} is the one run;
   *   <li>the system's, under {@code root}: {@code usr/lib/python3*}{@code /site-packages}, {@code
   *       usr/local/lib/python3*}{@code /dist-packages} and {@code /site-packages}, and Debian's
   *       {@code usr/lib/python3/dist-packages}.
   * </ol>
   *
   * Only {@code python3*} folders that exist are listed (the newest version first), but for
   * Debian's, which always is.
   */
  static List<Path> wheelFolders(Path root, String virtualEnv, String path) {
    List<Path> out = new ArrayList<>();
    for (Path prefix : pythonPrefixes(virtualEnv, path)) {
      for (Path python : pythons(prefix.resolve("lib"))) {
        add(out, python.resolve("site-packages").resolve(WHEEL_FOLDER));
      }
    }
    for (Path python : pythons(root.resolve("usr/lib"))) {
      add(out, python.resolve("site-packages").resolve(WHEEL_FOLDER));
    }
    List<Path> local = pythons(root.resolve("usr/local/lib"));
    for (Path python : local) {
      add(out, python.resolve("dist-packages").resolve(WHEEL_FOLDER));
    }
    for (Path python : local) {
      add(out, python.resolve("site-packages").resolve(WHEEL_FOLDER));
    }
    add(out, root.resolve("usr/lib/python3/dist-packages").resolve(WHEEL_FOLDER));
    return out;
  }

  private static void add(List<Path> folders, Path folder) {
    if (!folders.contains(folder)) {
      folders.add(folder);
    }
  }

  /** Links followed from one {@code python3} at most (a loop of links ends there). */
  private static final int MAX_LINKS = 8;

  /**
   * The installation prefixes of Python 3 that {@code virtualEnv} and the {@code python3} files on
   * {@code path} name, in order, each once: {@code /opt/env} for {@code /opt/env/bin/python3}, and
   * for a link the prefix of each file it leads to.
   */
  static List<Path> pythonPrefixes(String virtualEnv, String path) {
    List<Path> out = new ArrayList<>();
    if (virtualEnv != null && !virtualEnv.isBlank()) {
      add(out, Path.of(virtualEnv.strip()));
    }
    if (path == null) {
      return out;
    }
    for (String entry : path.split(":")) {
      if (entry.isBlank() || !Path.of(entry).isAbsolute()) {
        continue;
      }
      Path file = Path.of(entry).resolve("python3");
      for (int links = 0; links <= MAX_LINKS; links++) {
        if (!Files.exists(file, LinkOption.NOFOLLOW_LINKS)) {
          break;
        }
        Path bin = file.getParent();
        if (bin != null && bin.getParent() != null) {
          add(out, bin.getParent());
        }
        if (!Files.isSymbolicLink(file)) {
          break;
        }
        try {
          file = bin.resolve(Files.readSymbolicLink(file)).normalize();
        } catch (IOException | UnsupportedOperationException e) {
          break;
        }
      }
    }
    return out;
  }

  /** The {@code python3*} folders of {@code parent}, the newest version first; none if absent. */
  private static List<Path> pythons(Path parent) {
    List<Path> out = new ArrayList<>();
    if (!Files.isDirectory(parent)) {
      return out;
    }
    try (DirectoryStream<Path> found = Files.newDirectoryStream(parent, "python3*")) {
      for (Path p : found) {
        if (Files.isDirectory(p)) {
          out.add(p);
        }
      }
    } catch (IOException e) {
      return out; // an unreadable folder holds nothing to load
    }
    out.sort(
        Comparator.comparingInt((Path p) -> minorVersion(p.getFileName().toString()))
            .reversed()
            .thenComparing(p -> p.getFileName().toString()));
    return out;
  }

  /** 12 for {@code python3.12}; -1 for {@code python3} or a name without a minor version. */
  private static int minorVersion(String name) {
    String rest = name.substring("python3".length());
    if (!rest.startsWith(".")) {
      return -1;
    }
    int end = 1;
    while (end < rest.length() && Character.isDigit(rest.charAt(end))) {
      end++;
    }
    return end == 1 || end > 5 ? -1 : Integer.parseInt(rest.substring(1, end));
  }

  /**
   * Loads {@value #LIBRARY} from the first of {@code folders} that holds it, else through the
   * dynamic loader.
   *
   * @throws CudaException naming {@value #LIBRARY}, every folder looked in, and how to install it
   */
  static SymbolLookup load(List<Path> folders) {
    try {
      return CudaLibraries.load(LIBRARY, folders);
    } catch (CudaException e) {
      throw new CudaException(
          e.getMessage()
              + " NCCL is not part of CUDA: install NCCL 2 (NVIDIA's libnccl2 package, or the"
              + " nvidia-nccl-cu13 wheel that PyTorch brings, which puts it in"
              + " site-packages/nvidia/nccl/lib), or add the folder that holds "
              + LIBRARY
              + " to "
              + CudaLibraries.FOLDERS_VARIABLE
              + ".");
    }
  }

  private static MethodHandle h(SymbolLookup lib, String name, FunctionDescriptor d) {
    MemorySegment symbol =
        lib.find(name)
            .orElseThrow(
                () -> new CudaException(name + " is missing from " + LIBRARY + " (NCCL 2)"));
    return LINKER.downcallHandle(symbol, d);
  }

  // ---------------------------------------------------------------- the environment

  /**
   * Checks that the environment {@code getenv} reads holds {@link #REQUIRED_ENVIRONMENT}.
   *
   * @throws IllegalStateException naming each variable that is missing or differs, and the fix
   */
  static void requireEnvironment(Function<String, String> getenv) {
    List<String> wrong = new ArrayList<>();
    List<String> wanted = new ArrayList<>();
    for (Map.Entry<String, String> e : REQUIRED_ENVIRONMENT.entrySet()) {
      String actual = getenv.apply(e.getKey());
      wanted.add(e.getKey() + "=" + e.getValue());
      if (!e.getValue().equals(actual)) {
        wrong.add(e.getKey() + (actual == null ? " is not set" : "=" + actual));
      }
    }
    if (!wrong.isEmpty()) {
      wanted.sort(null);
      throw new IllegalStateException(
          "NCCL must run with NVLink multicast off, but in this process's environment "
              + String.join(", ", wrong)
              + ": NCCL reads it when a communicator opens and a Java process cannot set its own"
              + " environment, so start each rank's process with "
              + String.join(" ", wanted)
              + " (Nccl.REQUIRED_ENVIRONMENT)");
    }
  }

  // ---------------------------------------------------------------- the public calls

  /**
   * NCCL's version code ({@code ncclGetVersion}): {@code major * 10000 + minor * 100 + patch} since
   * 2.9 (22703 is 2.27.3); see {@link #versionText}.
   *
   * @throws CudaException when the library is missing or the call fails
   */
  public static int version() {
    return get().getVersion();
  }

  /** {@code 2.27.3} for the version code 22703 (and {@code 2.8.4} for 2804, the older coding). */
  public static String versionText(int code) {
    return code >= 10000
        ? code / 10000 + "." + code / 100 % 100 + "." + code % 100
        : code / 1000 + "." + code / 100 % 10 + "." + code % 100;
  }

  /**
   * A new unique id ({@code ncclGetUniqueId}, {@value #UNIQUE_ID_BYTES} bytes) for one
   * communicator: rank 0 makes it and every rank opens with it. It names a bootstrap endpoint rank
   * 0's process listens on, so it is made afresh for each communicator.
   *
   * @throws CudaException when the library is missing or the call fails
   */
  public static byte[] uniqueId() {
    return get().getUniqueId();
  }

  /**
   * Opens this rank's communicator of {@code size} ranks ({@code ncclCommInitRank}), on the GPU the
   * calling thread has bound (the caller binds the rank's GPU first, as {@link CudaDevice#bind()}
   * does). Every rank of the communicator calls it with the same {@code uniqueId}, each from its
   * own process or thread; it returns once all of them have joined.
   *
   * @throws IllegalStateException when this process lacks {@link #REQUIRED_ENVIRONMENT}
   * @throws IllegalArgumentException for an id that is not {@value #UNIQUE_ID_BYTES} bytes or a
   *     rank outside {@code [0, size)}
   * @throws CudaException when the library is missing or the call fails
   */
  public static NcclCommunicator open(byte[] uniqueId, int rank, int size) {
    requireEnvironment(System::getenv);
    if (uniqueId.length != UNIQUE_ID_BYTES) {
      throw new IllegalArgumentException(
          "an NCCL unique id is " + UNIQUE_ID_BYTES + " bytes, not " + uniqueId.length);
    }
    if (size < 1 || rank < 0 || rank >= size) {
      throw new IllegalArgumentException("rank " + rank + " of " + size + " ranks");
    }
    Nccl nccl = get();
    return new NcclCommunicator(nccl, nccl.commInitRank(uniqueId, rank, size), rank, size);
  }

  /**
   * The unique id of a new communicator, agreed over the replica's host collective: rank 0 makes it
   * ({@link #uniqueId()}), every rank returns rank 0's bytes. Only rank 0 touches NCCL here; the
   * other ranks load it when they {@link #open}. Every rank of {@code host} calls it together.
   */
  public static byte[] agreeOnId(Collective host) {
    return agreeOnId(host, Nccl::uniqueId);
  }

  /**
   * {@link #agreeOnId(Collective)} with rank 0's id from {@code idOfRankZero} (called on rank 0
   * only): rank 0 contributes its {@value #UNIQUE_ID_BYTES} bytes as floats 0 to 255, the other
   * ranks zeros, and the collective's sum (exact: one term is not zero) is rank 0's bytes on every
   * rank.
   *
   * @throws IllegalStateException when the sum is not a byte per element (the ranks' calls did not
   *     match)
   */
  static byte[] agreeOnId(Collective host, Supplier<byte[]> idOfRankZero) {
    float[] values = new float[UNIQUE_ID_BYTES];
    if (host.rank() == 0) {
      byte[] id = idOfRankZero.get();
      if (id.length != UNIQUE_ID_BYTES) {
        throw new IllegalArgumentException(
            "an NCCL unique id is " + UNIQUE_ID_BYTES + " bytes, not " + id.length);
      }
      for (int k = 0; k < UNIQUE_ID_BYTES; k++) {
        values[k] = id[k] & 0xFF;
      }
    }
    host.allReduceSum(values, 0, UNIQUE_ID_BYTES);
    byte[] out = new byte[UNIQUE_ID_BYTES];
    for (int k = 0; k < UNIQUE_ID_BYTES; k++) {
      float v = values[k];
      int b = (int) v;
      if (b != v || b < 0 || b > 255) {
        throw new IllegalStateException(
            "rank "
                + host.rank()
                + " of "
                + host.size()
                + " received "
                + v
                + " for byte "
                + k
                + " of the NCCL unique id: the ranks did not agree on it");
      }
      out[k] = (byte) b;
    }
    return out;
  }

  // ---------------------------------------------------------------- bindings

  int getVersion() {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment v = a.allocate(JAVA_INT);
      check((int) ncclGetVersion.invokeExact(v), "ncclGetVersion", 0L);
      return v.get(JAVA_INT, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  byte[] getUniqueId() {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment id = a.allocate(UNIQUE_ID);
      check((int) ncclGetUniqueId.invokeExact(id), "ncclGetUniqueId", 0L);
      return id.toArray(JAVA_BYTE);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** The new communicator ({@code ncclComm_t}) of {@code rank} of {@code size}. */
  long commInitRank(byte[] uniqueId, int rank, int size) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment comm = a.allocate(ADDRESS);
      MemorySegment id = a.allocate(UNIQUE_ID);
      MemorySegment.copy(uniqueId, 0, id, JAVA_BYTE, 0, UNIQUE_ID_BYTES);
      check(
          (int) ncclCommInitRank.invokeExact(comm, size, id, rank),
          "ncclCommInitRank(rank " + rank + " of " + size + ")",
          0L);
      return comm.get(JAVA_LONG, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** {@code ncclAllReduce} of float32 sums. */
  void allReduceSum(long send, long recv, long count, long comm, long stream, String call) {
    try {
      check(
          (int) ncclAllReduce.invokeExact(send, recv, count, FLOAT32, SUM, comm, stream),
          call,
          comm);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** {@code ncclAllGather} of float32 values. */
  void allGather(long send, long recv, long countPerRank, long comm, long stream, String call) {
    try {
      check(
          (int) ncclAllGather.invokeExact(send, recv, countPerRank, FLOAT32, comm, stream),
          call,
          comm);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  void commDestroy(long comm, String call) {
    try {
      check((int) ncclCommDestroy.invokeExact(comm), call, 0L);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  void commAbort(long comm, String call) {
    try {
      check((int) ncclCommAbort.invokeExact(comm), call, 0L);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  /** The communicator's asynchronous error ({@code ncclResult_t}; 0 while there is none). */
  int commAsyncError(long comm, String call) {
    try (Arena a = Arena.ofConfined()) {
      MemorySegment result = a.allocate(JAVA_INT);
      check((int) ncclCommGetAsyncError.invokeExact(comm, result), call, comm);
      return result.get(JAVA_INT, 0);
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  // ---------------------------------------------------------------- status checks

  /**
   * Throws for a status other than {@code ncclSuccess}: the call, the status, NCCL's error string,
   * and the library's last error message (of {@code comm}, or the process's for 0) when it has one.
   */
  void check(int status, String call, long comm) {
    if (status != SUCCESS) {
      throw new CudaException(call, status, describe(status, comm));
    }
  }

  /** NCCL's text for {@code status}, with its last error message when it has one. */
  String describe(int status, long comm) {
    try {
      String text = cString((MemorySegment) ncclGetErrorString.invokeExact(status));
      if (ncclGetLastError != null) {
        MemorySegment last = (MemorySegment) ncclGetLastError.invokeExact(comm);
        String detail = last.equals(MemorySegment.NULL) ? "" : cString(last).strip();
        if (!detail.isEmpty() && !detail.equals(text)) {
          text = text + ": " + detail;
        }
      }
      return text;
    } catch (Throwable t) {
      throw rethrow(t);
    }
  }

  private static String cString(MemorySegment p) {
    return p.equals(MemorySegment.NULL) ? "no description" : p.reinterpret(4096).getString(0);
  }

  static RuntimeException rethrow(Throwable t) {
    if (t instanceof RuntimeException r) {
      return r;
    }
    if (t instanceof Error e) {
      throw e;
    }
    return new IllegalStateException(t);
  }
}
