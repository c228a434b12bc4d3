package io.tokenspeed.server.cli;

import io.tokenspeed.cuda.CudaApi;
import io.tokenspeed.cuda.CudaDevice;
import io.tokenspeed.cuda.CudaException;
import io.tokenspeed.cuda.DeviceCollective;
import io.tokenspeed.cuda.Nccl;
import io.tokenspeed.cuda.NcclCommunicator;
import io.tokenspeed.cuda.model.CudaCausalLm;
import io.tokenspeed.cuda.model.CudaDeviceModel;
import io.tokenspeed.engine.EngineSettings;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.checkpoint.CheckpointException;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * Where a command's model computes: {@code --device cpu} (the default, the CPU backend) or {@code
 * cuda[:N]} (GPU N through CUDA, loaded only when asked for, so machines without a GPU need no
 * CUDA), and {@code --deterministic} for the GPU's batch-invariant kernels. {@link #load} is the
 * one way a command turns them into the model its engines run on.
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

  @Option(
      names = "--load-stages",
      paramLabel = "N",
      description =
          "Host-to-Device loads of a round (Host hits, L3 restores read into the Host) are copied"
              + " in up to N stages of consecutive layers while the forward computes, each layer"
              + " starting once its stage is in; 1 (the default) copies them whole before the"
              + " forward, which a GPU did faster than stages of small copies.")
  private int loadStages = EngineSettings.DEFAULT_LOAD_STAGES;

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
    throw usage("--device=" + device + " is not supported; allowed: cpu, cuda, cuda:N (N >= 0)");
  }

  /** Whether {@code --deterministic} was given. */
  boolean deterministic() {
    return deterministic;
  }

  /** The {@code --device} value as given. */
  String device() {
    return device;
  }

  /**
   * The flags that give a worker process of a multi-process command the same device: {@code
   * --device} and {@code --deterministic} on a GPU, and {@code --load-stages} when not the default
   * (none on the CPU by default: its command line stays as it was).
   */
  List<String> workerArgs() {
    List<String> args = new ArrayList<>();
    if (gpu()) {
      args.addAll(List.of("--device", device));
      if (deterministic) {
        args.add("--deterministic");
      }
    }
    if (loadStages != EngineSettings.DEFAULT_LOAD_STAGES) {
      args.addAll(List.of("--load-stages", Integer.toString(loadStages)));
    }
    return args;
  }

  /**
   * For the commands whose replicas run one rank a process on a GPU of its own only under {@code
   * serve} and {@code generate}: {@code --tp} above 1 with a GPU is a usage error.
   */
  void checkTensorParallel(int tpSize) {
    if (gpu() && tpSize > 1) {
      throw usage(
          "--device="
              + device
              + " with --tp="
              + tpSize
              + " runs under serve and generate (a rank a GPU); here give --device cpu or leave"
              + " --tp out");
    }
  }

  /**
   * For {@code serve} and {@code generate}: a replica of {@code --tp} ranks on GPUs takes the GPUs
   * from {@code cuda:N} on, one a rank ({@code cuda:N+r} for rank r), with the KV split by heads;
   * the launcher checks that they are there before it starts any rank (invalid input naming {@code
   * --device} otherwise). Nothing on the CPU or for one rank.
   */
  void checkTensorParallel(TensorParallelOptions tp) {
    if (!gpu() || tp.size() == 1) {
      return;
    }
    if (tp.kvSplit() != Shard.KvSplit.HEADS) {
      throw new ParameterException(
          spec.commandLine(),
          "--tp-kv="
              + tp.kvSplit().label()
              + " is for the CPU backend: the GPUs split KV by heads (--device="
              + device
              + ")",
          spec.findOption("--device"),
          device);
    }
    if (tp.launcher()) {
      checkAvailable(tp.size());
    }
  }

  /**
   * Checks, without opening it, that the GPU {@code --device} names is there: the CUDA libraries
   * load and the runtime sees it (no context is created, no kernel compiled). A command that starts
   * worker processes calls it first, so that a machine without the GPU fails at once, naming {@code
   * --device}, as invalid input. Nothing on the CPU.
   */
  void checkAvailable() {
    checkAvailable(1);
  }

  /** {@link #checkAvailable()} for {@code ranks} GPUs from the one {@code --device} names on. */
  void checkAvailable(int ranks) {
    if (!gpu()) {
      return;
    }
    int n = ordinal() + ranks - 1;
    try {
      CudaApi api = CudaApi.get();
      int count = api.deviceCount();
      if (n >= count) {
        String why = api.noDeviceReason();
        throw new IllegalArgumentException(
            "--device="
                + device
                + (ranks > 1 ? " with --tp=" + ranks : "")
                + ": cuda:"
                + n
                + " is not a GPU of this machine: "
                + (why != null ? why : count + " GPU(s), cuda:0 to cuda:" + (count - 1)));
      }
    } catch (CudaException e) {
      throw new IllegalArgumentException(
          "--device=" + device + (ranks > 1 ? " with --tp=" + ranks : "") + ": " + e.getMessage(),
          e);
    }
  }

  /**
   * The checkpoint of {@code folder} (named {@code model} in errors) on the device {@code --device}
   * names: on the CPU, {@code tp}'s load (this process's rank's share under {@code --tp}); on a
   * GPU, the device opened, the weights loaded onto it and bound for the engine. The caller owns
   * the result and closes it after every engine it started over it.
   *
   * @throws ParameterException for a malformed {@code --device}, or a GPU with {@code --tp} above 1
   * @throws IllegalArgumentException when the GPU or its libraries are missing (naming {@code
   *     --device}) or the checkpoint cannot be loaded (naming {@code --model})
   */
  EngineModel load(Path folder, String model, TensorParallelOptions tp) {
    if (loadStages < 1) {
      throw new ParameterException(
          spec.commandLine(),
          "--load-stages=" + loadStages + " must be at least 1",
          spec.findOption("--load-stages"),
          Integer.toString(loadStages));
    }
    if (!gpu()) {
      checkTensorParallel(tp.size());
      return EngineModel.onCpu(tp.load(folder, model), tp).withLoadStages(loadStages);
    }
    checkTensorParallel(tp);
    if (tp.ranked()) {
      return loadRank(folder, model, tp);
    }
    CudaDevice gpu = open();
    CudaCausalLm lm = null;
    try {
      lm = load(gpu, folder, model);
      CudaDeviceModel bound = new CudaDeviceModel(lm);
      return EngineModel.onDevice(bound, List.of(bound, lm, gpu)).withLoadStages(loadStages);
    } catch (RuntimeException | Error e) {
      if (lm != null) {
        lm.close();
      }
      gpu.close();
      throw e;
    }
  }

  /**
   * This process's rank r of a replica on GPUs: GPU {@code cuda:N+r}, the replica's host collective
   * (the engine's round agrees through it), an NCCL communicator over the ranks' GPUs (its id
   * agreed through the host collective) and the rank's share of the weights ({@link
   * CudaCausalLm#load(CudaDevice, Path, String, String, boolean, Shard, DeviceCollective)}).
   */
  private EngineModel loadRank(Path folder, String model, TensorParallelOptions tp) {
    int rank = tp.rank();
    List<AutoCloseable> made = new ArrayList<>();
    Collective host = tp.rankCollective();
    made.add(host);
    try {
      CudaDevice gpu = open(ordinal() + rank);
      made.add(gpu);
      gpu.bind();
      NcclCommunicator nccl;
      try {
        nccl = Nccl.open(Nccl.agreeOnId(host), rank, tp.size());
      } catch (CudaException | IllegalStateException e) {
        throw new IllegalArgumentException(
            "--device=" + device + " rank " + rank + ": " + e.getMessage(), e);
      }
      made.add(nccl);
      CudaCausalLm lm;
      try {
        lm =
            CudaCausalLm.load(
                gpu,
                folder,
                model,
                ModelIdentity.DEFAULT_WEIGHT_VERSION,
                deterministic,
                new Shard(rank, tp.size()),
                nccl);
      } catch (CheckpointException e) {
        throw new IllegalArgumentException("--model=" + model + ": " + e.getMessage(), e);
      } catch (IllegalArgumentException | CudaException e) {
        throw new IllegalArgumentException(
            "--device=" + device + " at --tp=" + tp.size() + ": " + e.getMessage(), e);
      }
      made.add(lm);
      CudaDeviceModel bound = new CudaDeviceModel(lm, host);
      made.add(bound);
      // closed binding first, the device last
      List<AutoCloseable> owned = new ArrayList<>(made.reversed());
      return EngineModel.onDevice(bound, owned, tp).withLoadStages(loadStages);
    } catch (RuntimeException | Error e) {
      host.abort("rank " + rank + ": " + e.getMessage());
      for (AutoCloseable c : made.reversed()) {
        try {
          c.close();
        } catch (Exception ignored) {
          // the load's own failure is the one to report
        }
      }
      throw e;
    }
  }

  /** Opens the GPU {@code --device} names; a machine without it is invalid input. */
  private CudaDevice open() {
    return open(ordinal());
  }

  /** Opens GPU {@code cuda:n}; a machine without it is invalid input naming {@code --device}. */
  private CudaDevice open(int n) {
    try {
      return CudaDevice.open(n);
    } catch (CudaException e) {
      throw new IllegalArgumentException("--device=" + device + ": " + e.getMessage(), e);
    }
  }

  /** Loads the checkpoint of {@code folder} (named {@code model}) onto {@code gpu}. */
  private CudaCausalLm load(CudaDevice gpu, Path folder, String model) {
    try {
      return CudaCausalLm.load(
          gpu, folder, model, ModelIdentity.DEFAULT_WEIGHT_VERSION, deterministic);
    } catch (CheckpointException e) {
      throw new IllegalArgumentException("--model=" + model + ": " + e.getMessage(), e);
    } catch (IllegalArgumentException | CudaException e) {
      throw new IllegalArgumentException("--device=" + device + ": " + e.getMessage(), e);
    }
  }

  /** A usage error about {@code --device}'s value (naming its source when not a flag). */
  private ParameterException usage(String message) {
    return new ParameterException(spec.commandLine(), message, spec.findOption("--device"), device);
  }
}
