package io.tokenspeed.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Finding the CUDA libraries: where it looks, and what it says when one is missing. */
class CudaLibrariesTest {

  @Test
  void shouldCompileForHoppersOwnTargetOnlyOnComputeCapabilityNine() {
    assertEquals("sm_90a", CudaDevice.compileTarget(9, 0));
    assertEquals("sm_80", CudaDevice.compileTarget(8, 0));
    assertEquals("sm_89", CudaDevice.compileTarget(8, 9));
    assertEquals("sm_100", CudaDevice.compileTarget(10, 0));
  }

  @Test
  void shouldSearchTheConfiguredFoldersFirst() {
    List<Path> folders = CudaLibraries.folders(" /opt/a : /opt/b ::");
    assertEquals(Path.of("/opt/a"), folders.get(0));
    assertEquals(Path.of("/opt/b"), folders.get(1));
    assertEquals(2 + CudaLibraries.DEFAULT_FOLDERS.size(), folders.size());
    assertEquals(CudaLibraries.DEFAULT_FOLDERS.size(), CudaLibraries.folders(null).size());
  }

  @Test
  void shouldNameTheLibraryAndEveryFolderWhenNoneLoads(@TempDir Path dir) throws Exception {
    String soname = "libtokenspeed-missing-cuda.so.13";
    CudaException e =
        assertThrows(CudaException.class, () -> CudaLibraries.load(soname, List.of(dir)));
    assertTrue(e.getMessage().startsWith(soname + " not found: looked in [" + dir), e::getMessage);
    assertTrue(e.getMessage().contains(CudaLibraries.FOLDERS_VARIABLE), e::getMessage);
    // a file that is not a library is named with the loader's reason
    Files.writeString(dir.resolve(soname), "not an ELF file");
    e = assertThrows(CudaException.class, () -> CudaLibraries.load(soname, List.of(dir)));
    assertTrue(e.getMessage().contains("could not load [" + dir.resolve(soname)), e::getMessage);
  }

  @Test
  void shouldNameTheCallAndTheLibrarysErrorString() {
    CudaException e = new CudaException("cudaMalloc(1024 bytes)", 2, "out of memory");
    assertEquals("cudaMalloc(1024 bytes) failed: error 2 (out of memory)", e.getMessage());
    assertEquals("cudaMalloc(1024 bytes)", e.call());
    assertEquals(2, e.code());
  }

  @Test
  void shouldShipTheKernelSource() throws Exception {
    try (var in = CudaDevice.class.getResourceAsStream(CudaDevice.KERNELS)) {
      String source = new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
      for (String kernel :
          List.of(
              "embed_f32",
              "embed_bf16",
              "rmsnorm",
              "qkv_rope_store",
              "paged_attention",
              "silu_mul",
              "add_bias",
              "copy_blocks")) {
        assertTrue(source.contains("__global__ void " + kernel + "("), kernel);
      }
    }
  }
}
