package io.tokenspeed.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.SymbolLookup;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Finds the CUDA libraries at run time: the runtime ({@value #CUDART}), the driver ({@value
 * #DRIVER}), NVRTC ({@value #NVRTC}) and cuBLAS ({@value #CUBLAS}), CUDA 13's sonames. Each is
 * looked for, in order, in the folders of {@code TOKENSPEED_CUDA_LIBS} (colon-separated), in {@link
 * #DEFAULT_FOLDERS}, and last by the dynamic loader's own search ({@code LD_LIBRARY_PATH}, the
 * loader cache). Nothing here runs at class loading: a machine without CUDA only learns of it when
 * it asks for the GPU, and then by an error that names every place looked in.
 */
public final class CudaLibraries {

  public static final String CUDART = "libcudart.so.13";
  public static final String DRIVER = "libcuda.so.1";
  public static final String NVRTC = "libnvrtc.so.13";
  public static final String CUBLAS = "libcublas.so.13";

  /** Environment variable with extra folders to search first. */
  public static final String FOLDERS_VARIABLE = "TOKENSPEED_CUDA_LIBS";

  /** Where CUDA 13 and the driver install their libraries on Linux x86-64. */
  public static final List<String> DEFAULT_FOLDERS =
      List.of(
          "/usr/local/cuda/lib64",
          "/usr/local/cuda/targets/x86_64-linux/lib",
          "/usr/local/cuda-13.0/targets/x86_64-linux/lib",
          "/usr/local/nvidia/lib64",
          "/usr/lib/x86_64-linux-gnu",
          "/usr/lib64");

  private CudaLibraries() {}

  /** The folders searched, in order, for {@code extra} (colon-separated; may be null or empty). */
  static List<Path> folders(String extra) {
    List<Path> out = new ArrayList<>();
    if (extra != null) {
      for (String f : extra.split(":")) {
        if (!f.isBlank()) {
          out.add(Path.of(f.strip()));
        }
      }
    }
    for (String f : DEFAULT_FOLDERS) {
      out.add(Path.of(f));
    }
    return out;
  }

  /**
   * Loads {@code soname} for the life of the process.
   *
   * @throws CudaException naming the library and every folder looked in when none loads
   */
  static SymbolLookup load(String soname, List<Path> folders) {
    List<String> tried = new ArrayList<>();
    for (Path folder : folders) {
      Path file = folder.resolve(soname);
      if (Files.isRegularFile(file)) {
        try {
          return SymbolLookup.libraryLookup(file, Arena.global());
        } catch (IllegalArgumentException e) {
          tried.add(file + " (" + e.getMessage() + ")");
        }
      }
    }
    try {
      return SymbolLookup.libraryLookup(soname, Arena.global());
    } catch (IllegalArgumentException e) {
      tried.add("the dynamic loader's search path");
    }
    throw new CudaException(
        soname
            + " not found: looked in "
            + folders
            + (tried.isEmpty() ? "" : "; could not load " + tried)
            + ". Install the NVIDIA driver and CUDA 13, or set "
            + FOLDERS_VARIABLE
            + " to the folders that hold its libraries.");
  }
}
