package io.tokenspeed.server.cli;

import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.CudaException;
import io.tokenspeed.cuda.model.CudaCausalLm;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.checkpoint.CheckpointException;
import java.nio.file.Path;
import java.util.Locale;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * Where a command's model computes: {@code --device cpu} (the default, the CPU backend) or {@code
 * cuda[:N]} (GPU N through CUDA, loaded only when asked for, so machines without a GPU need no
 * CUDA), and {@code --deterministic} for the GPU's batch-invariant kernels.
 */
final class DeviceOptions {

  @Spec(Spec.Target.MIXEE)
  private CommandSpec spec;

  @Option(
      names = "--device",
      paramLabel = "cpu|cuda[:N]",
      description =
          "Where the model computes: cpu (default), or GPU N through CUDA 13 (cuda means cuda:0).")
  private String device = "cpu";

  @Option(
      names = "--deterministic",
      description =
          "On a GPU, batch-invariant kernels (fixed-order GEMMs instead of cuBLAS): a prefix"
              + " restored from L3 then gives logits bit-identical to its recomputation. Slower."
              + " The CPU backend always is.")
  private boolean deterministic;

  /** Whether {@code --device} names a GPU; a usage error lists the forms. */
  boolean gpu() {
    return ordinal() >= 0;
  }

  /** The GPU ordinal {@code --device} names, or -1 for the CPU. */
  int ordinal() {
    String d = device.strip().toLowerCase(Locale.ROOT);
    if (d.equals("cpu")) {
      return -1;
    }
    if (d.equals("cuda")) {
      return 0;
    }
    if (d.startsWith("cuda:")) {
      try {
        int n = Integer.parseInt(d.substring("cuda:".length()));
        if (n >= 0) {
          return n;
        }
      } catch (NumberFormatException e) {
        // the usage error below says what is allowed
      }
    }
    throw new ParameterException(
        spec.commandLine(),
        "--device=" + device + " is not supported; allowed: cpu, cuda, cuda:N (N >= 0)");
  }

  /** Opens the GPU {@code --device} names; a machine without it is invalid input. */
  CudaDevice open() {
    try {
      return CudaDevice.open(ordinal());
    } catch (CudaException e) {
      throw new IllegalArgumentException("--device=" + device + ": " + e.getMessage(), e);
    }
  }

  /** Loads the checkpoint of {@code folder} (named {@code model}) onto {@code gpu}. */
  CudaCausalLm load(CudaDevice gpu, Path folder, String model) {
    try {
      return CudaCausalLm.load(
          gpu, folder, model, ModelIdentity.DEFAULT_WEIGHT_VERSION, deterministic);
    } catch (CheckpointException e) {
      throw new IllegalArgumentException("--model=" + model + ": " + e.getMessage(), e);
    } catch (IllegalArgumentException | CudaException e) {
      throw new IllegalArgumentException("--device=" + device + ": " + e.getMessage(), e);
    }
  }
}
