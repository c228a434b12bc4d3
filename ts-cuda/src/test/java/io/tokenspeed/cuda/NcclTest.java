package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.LocalCollective;
import io.tokenspeed.testkit.ChildJvm;
import java.lang.foreign.Arena;
import java.lang.foreign.SymbolLookup;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The NCCL binding without a GPU or NCCL: where it looks for the library and what it says when it
 * is missing, the environment it requires, and the unique id's agreement over a host collective.
 * The calls into NCCL themselves are NcclGpuTest's.
 */
class NcclTest {

  private static final Path WHEEL = Path.of("nvidia/nccl/lib");

  /**
   * Whether the dynamic loader finds NCCL on this machine (the missing-library error can't come).
   */
  private static boolean loaderFindsNccl() {
    try {
      SymbolLookup.libraryLookup(Nccl.LIBRARY, Arena.global());
      return true;
    } catch (IllegalArgumentException e) {
      return false;
    }
  }

  @Test
  void shouldNameTheLibraryEveryFolderAndTheFixWhenNcclIsMissing(@TempDir Path root)
      throws Exception {
    assumeFalse(loaderFindsNccl(), "the dynamic loader finds " + Nccl.LIBRARY + " here");
    Path configured = Files.createDirectories(root.resolve("configured"));
    Files.createDirectories(root.resolve("usr/local/lib/python3.12/dist-packages"));
    List<Path> folders = new ArrayList<>(List.of(configured));
    folders.addAll(Nccl.wheelFolders(root, null, null));
    CudaException e = assertThrows(CudaException.class, () -> Nccl.load(folders));
    String m = e.getMessage();
    assertTrue(m.startsWith(Nccl.LIBRARY + " not found: looked in [" + configured), m);
    for (Path f : folders) {
      assertTrue(m.contains(f.toString()), () -> f + " is not named in: " + m);
    }
    assertTrue(m.contains("the dynamic loader's search path"), m);
    assertTrue(m.contains(CudaLibraries.FOLDERS_VARIABLE), m);
    assertTrue(m.contains("site-packages/nvidia/nccl/lib"), m);
    assertTrue(m.contains("libnccl2"), m);
    // the constructor fails the same way, before binding anything
    e = assertThrows(CudaException.class, () -> new Nccl(List.of(configured)));
    assertTrue(e.getMessage().startsWith(Nccl.LIBRARY + " not found"), e::getMessage);
  }

  @Test
  void shouldNameAFileThatIsNotALibraryWithTheLoadersReason(@TempDir Path dir) throws Exception {
    assumeFalse(loaderFindsNccl(), "the dynamic loader finds " + Nccl.LIBRARY + " here");
    Files.writeString(dir.resolve(Nccl.LIBRARY), "not an ELF file");
    CudaException e = assertThrows(CudaException.class, () -> Nccl.load(List.of(dir)));
    assertTrue(
        e.getMessage().contains("could not load [" + dir.resolve(Nccl.LIBRARY)), e::getMessage);
  }

  @Test
  void shouldSearchTheConfiguredFoldersThenCudasThenPyTorchsWheels(@TempDir Path root)
      throws Exception {
    Files.createDirectories(root.resolve("usr/lib/python3.12"));
    Files.createDirectories(root.resolve("usr/local/lib/python3.9"));
    Files.createDirectories(root.resolve("usr/local/lib/python3.12"));
    Files.createDirectories(root.resolve("usr/local/lib/perl5"));
    Files.writeString(root.resolve("usr/local/lib/python3.11"), "a file, not a folder");

    List<Path> wheels = Nccl.wheelFolders(root, null, null);
    List<Path> system =
        List.of(
            root.resolve("usr/lib/python3.12/site-packages").resolve(WHEEL),
            root.resolve("usr/local/lib/python3.12/dist-packages").resolve(WHEEL),
            root.resolve("usr/local/lib/python3.9/dist-packages").resolve(WHEEL),
            root.resolve("usr/local/lib/python3.12/site-packages").resolve(WHEEL),
            root.resolve("usr/local/lib/python3.9/site-packages").resolve(WHEEL),
            root.resolve("usr/lib/python3/dist-packages").resolve(WHEEL));
    assertEquals(system, wheels);

    List<Path> folders = Nccl.folders(" /opt/a : /opt/b ::", wheels);
    List<Path> expected = new ArrayList<>(List.of(Path.of("/opt/a"), Path.of("/opt/b")));
    for (String f : CudaLibraries.DEFAULT_FOLDERS) {
      expected.add(Path.of(f));
    }
    expected.addAll(system);
    assertEquals(expected, folders);

    // with no Python installed, Debian's folder is still looked in
    Path bare = Files.createDirectories(root.resolve("bare"));
    assertEquals(
        List.of(bare.resolve("usr/lib/python3/dist-packages").resolve(WHEEL)),
        Nccl.wheelFolders(bare, null, ""));
    // Debian's python3 folder is listed once
    Files.createDirectories(bare.resolve("usr/lib/python3"));
    assertEquals(
        List.of(
            bare.resolve("usr/lib/python3/site-packages").resolve(WHEEL),
            bare.resolve("usr/lib/python3/dist-packages").resolve(WHEEL)),
        Nccl.wheelFolders(bare, null, null));

    // this machine's list: the configured folders first, Debian's wheel folder last
    List<Path> here = Nccl.folders("/opt/first", Nccl.wheelFolders(Path.of("/"), null, null));
    assertEquals(Path.of("/opt/first"), here.get(0));
    assertEquals(Path.of("/usr/lib/python3/dist-packages/nvidia/nccl/lib"), here.getLast());
  }

  /** PyTorch in a virtual environment, as on the GPU machines: its python3 leads to the wheels. */
  @Test
  void shouldSearchTheEnvironmentsOfThePython3OnThePathFirst(@TempDir Path root) throws Exception {
    Path venv = root.resolve("opt/torch/.venv");
    Path base = root.resolve("usr");
    Files.createDirectories(base.resolve("bin"));
    Files.writeString(base.resolve("bin/python3.12"), "the interpreter");
    Files.createSymbolicLink(base.resolve("bin/python3"), Path.of("python3.12"));
    Files.createDirectories(venv.resolve("bin"));
    Files.createSymbolicLink(venv.resolve("bin/python3"), base.resolve("bin/python3"));
    Files.createDirectories(venv.resolve("lib/python3.12/site-packages").resolve(WHEEL));
    Path linked = Files.createDirectories(root.resolve("local/bin"));
    Files.createSymbolicLink(linked.resolve("python3"), venv.resolve("bin/python3"));
    Path active = root.resolve("active");
    Files.createDirectories(active.resolve("lib/python3.11"));
    Path noPython = Files.createDirectories(root.resolve("elsewhere/bin"));

    // a link to the environment's python3 leads to the environment, and on to its interpreter's
    assertEquals(
        List.of(active, root.resolve("local"), venv, base),
        Nccl.pythonPrefixes(
            active.toString(), noPython + ":relative/bin::" + linked + ":" + venv.resolve("bin")));
    assertEquals(List.of(venv, base), Nccl.pythonPrefixes(" ", venv.resolve("bin").toString()));
    assertEquals(List.of(), Nccl.pythonPrefixes(null, null));

    Path bare = Files.createDirectories(root.resolve("bare"));
    assertEquals(
        List.of(
            active.resolve("lib/python3.11/site-packages").resolve(WHEEL),
            venv.resolve("lib/python3.12/site-packages").resolve(WHEEL),
            bare.resolve("usr/lib/python3/dist-packages").resolve(WHEEL)),
        Nccl.wheelFolders(bare, active.toString(), linked.toString()));
  }

  @Test
  void shouldRequireNvlinkMulticastOff() {
    assertEquals(Map.of("NCCL_NVLS_ENABLE", "0"), Nccl.REQUIRED_ENVIRONMENT);
    assertDoesNotThrow(() -> Nccl.requireEnvironment(Map.of("NCCL_NVLS_ENABLE", "0")::get));

    IllegalStateException unset =
        assertThrows(IllegalStateException.class, () -> Nccl.requireEnvironment(name -> null));
    assertEquals(
        "NCCL must run with NVLink multicast off, but in this process's environment"
            + " NCCL_NVLS_ENABLE is not set: NCCL reads it when a communicator opens and a Java"
            + " process cannot set its own environment, so start each rank's process with"
            + " NCCL_NVLS_ENABLE=0 (Nccl.REQUIRED_ENVIRONMENT)",
        unset.getMessage());

    IllegalStateException on =
        assertThrows(
            IllegalStateException.class,
            () -> Nccl.requireEnvironment(Map.of("NCCL_NVLS_ENABLE", "1")::get));
    assertTrue(on.getMessage().contains("environment NCCL_NVLS_ENABLE=1:"), on::getMessage);
  }

  /** Opening in a process started with multicast on: refused before NCCL is looked for. */
  @ParameterizedTest(name = "NCCL_NVLS_ENABLE=''{0}''")
  @ValueSource(strings = {"1", ""})
  void shouldRefuseToOpenInAProcessWithMulticastOn(String value, @TempDir Path dir)
      throws Exception {
    ChildJvm child =
        ChildJvm.launch(NcclChild.class)
            .maxHeap("64m")
            .env("NCCL_NVLS_ENABLE", value)
            .start(dir, "nvls-" + value);
    try {
      ChildJvm.Finished done = child.finish(Duration.ofSeconds(60));
      assertEquals(0, done.exitStatus(), done.describe());
      String refused = done.value("refused");
      assertTrue(refused != null, done.describe());
      assertTrue(refused.contains("NCCL_NVLS_ENABLE=" + value + ":"), refused);
      assertTrue(refused.contains("NCCL_NVLS_ENABLE=0 (Nccl.REQUIRED_ENVIRONMENT)"), refused);
    } finally {
      child.close();
    }
  }

  @Test
  void shouldSpellTheVersionCode() {
    assertEquals("2.27.3", Nccl.versionText(22703));
    assertEquals("2.18.1", Nccl.versionText(21801));
    assertEquals("2.8.4", Nccl.versionText(2804));
  }

  @ParameterizedTest(name = "{0} ranks")
  @ValueSource(ints = {2, 4})
  void shouldGiveEveryRankRankZerosIdExactly(int size) throws Exception {
    for (long seed = 1; seed <= 6; seed++) {
      byte[] id = new byte[Nccl.UNIQUE_ID_BYTES];
      new Random(seed * 31 + size).nextBytes(id);
      if (seed == 1) { // the extremes of a byte, both signs
        id[0] = 0;
        id[1] = (byte) 0xFF;
        id[2] = Byte.MIN_VALUE;
        id[3] = Byte.MAX_VALUE;
      }
      for (byte[] got : agreeOnThreads(size, id)) {
        assertArrayEquals(id, got, "seed " + seed);
      }
    }
  }

  @Test
  void shouldAgreeAloneOnTheReplicaOfOneRank() {
    byte[] id = new byte[Nccl.UNIQUE_ID_BYTES];
    new Random(7).nextBytes(id);
    assertArrayEquals(id, Nccl.agreeOnId(Collective.single(), () -> id.clone()));
  }

  @Test
  void shouldRejectASumThatIsNotAByte() {
    Collective wrong =
        new Collective() {
          @Override
          public int rank() {
            return 1;
          }

          @Override
          public int size() {
            return 2;
          }

          @Override
          public void allReduceSum(float[] data, int offset, int length) {
            data[offset + 5] = 256.5f; // another call's values
          }

          @Override
          public void allGather(float[] local, int[] counts, float[] out) {}

          @Override
          public void abort(String reason) {}

          @Override
          public void close() {}
        };
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () ->
                Nccl.agreeOnId(
                    wrong,
                    () -> {
                      throw new AssertionError("rank 1 made an id");
                    }));
    assertTrue(e.getMessage().contains("rank 1 of 2 received 256.5 for byte 5"), e::getMessage);
  }

  /** Each rank on its own thread over one {@link LocalCollective}; only rank 0 may make the id. */
  private static List<byte[]> agreeOnThreads(int size, byte[] id) throws Exception {
    LocalCollective[] ranks = LocalCollective.group(size);
    ExecutorService pool = Executors.newFixedThreadPool(size);
    try {
      List<Future<byte[]>> results = new ArrayList<>();
      for (LocalCollective rank : ranks) {
        results.add(
            pool.submit(
                () ->
                    Nccl.agreeOnId(
                        rank,
                        () -> {
                          if (rank.rank() != 0) {
                            throw new AssertionError("rank " + rank.rank() + " made an id");
                          }
                          return id.clone();
                        })));
      }
      List<byte[]> out = new ArrayList<>();
      for (Future<byte[]> f : results) {
        out.add(f.get());
      }
      return out;
    } finally {
      pool.shutdownNow();
    }
  }
}
