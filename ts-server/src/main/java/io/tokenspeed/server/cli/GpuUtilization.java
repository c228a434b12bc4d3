package io.tokenspeed.server.cli;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * The utilization of the GPU a benchmark computes on, sampled by {@code nvidia-smi} while a
 * measurement runs: {@link #start} launches
 *
 * <pre>
 *   nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 -i ID
 * </pre>
 *
 * as a subprocess whose lines (one integer percent per sample) a virtual thread collects, and
 * {@link #stop} ends it and returns their mean and maximum. {@code ID} is the device's CUDA
 * ordinal, or the entry at that ordinal of {@code CUDA_VISIBLE_DEVICES} when it is set (an index or
 * a UUID, both of which {@code -i} takes), so the GPU sampled is the one the model computes on.
 *
 * <p>On the CPU, without {@code nvidia-smi} on the {@code PATH}, or when it cannot start, the
 * sampler samples nothing and {@link #stop} returns empty: a report says "n/a" rather than fail a
 * benchmark over a missing tool. Lines that are not a number (an error message, {@code [N/A]}) are
 * skipped the same way. {@link #close} ends the subprocess whatever happened; it never outlives the
 * measurement.
 */
final class GpuUtilization implements AutoCloseable {

  /** The tool, looked up on the {@code PATH}. */
  static final String COMMAND = "nvidia-smi";

  /** Milliseconds between two samples. */
  static final int PERIOD_MS = 200;

  /**
   * The samples of one measurement.
   *
   * @param samples lines that were a number
   * @param meanPercent their mean
   * @param maxPercent their maximum
   */
  record Figures(int samples, double meanPercent, int maxPercent) {

    /** The figures of {@code nvidia-smi}'s lines; empty when none was a number. */
    static Optional<Figures> of(List<String> lines) {
      long sum = 0;
      int n = 0;
      int max = 0;
      for (String line : lines) {
        int v;
        try {
          v = Integer.parseInt(line.trim());
        } catch (NumberFormatException e) {
          continue;
        }
        sum += v;
        max = Math.max(max, v);
        n++;
      }
      return n == 0 ? Optional.empty() : Optional.of(new Figures(n, (double) sum / n, max));
    }
  }

  private final Process process;
  private final Thread reader;
  private final List<String> lines = Collections.synchronizedList(new ArrayList<>());

  private GpuUtilization(Process process) {
    this.process = process;
    this.reader =
        process == null ? null : Thread.ofVirtual().name("ts-gpu-utilization").start(this::read);
  }

  /**
   * Starts sampling the GPU of {@code deviceName} ({@code cuda:N}); a sampler of nothing for
   * another device, without {@value #COMMAND} on the {@code PATH}, or when it cannot start.
   */
  static GpuUtilization start(String deviceName) {
    Optional<Path> tool = onPath(System.getenv("PATH"));
    if (!deviceName.startsWith("cuda:") || tool.isEmpty()) {
      return new GpuUtilization(null);
    }
    String id = gpuId(deviceName, System.getenv("CUDA_VISIBLE_DEVICES"));
    try {
      Process p =
          new ProcessBuilder(
                  tool.get().toString(),
                  "--query-gpu=utilization.gpu",
                  "--format=csv,noheader,nounits",
                  "-lms",
                  Integer.toString(PERIOD_MS),
                  "-i",
                  id)
              .redirectError(ProcessBuilder.Redirect.DISCARD)
              .start();
      p.getOutputStream().close();
      return new GpuUtilization(p);
    } catch (IOException e) {
      return new GpuUtilization(null);
    }
  }

  /** The executable {@value #COMMAND} in the first folder of {@code path} that has one. */
  static Optional<Path> onPath(String path) {
    if (path == null) {
      return Optional.empty();
    }
    for (String dir : path.split(File.pathSeparator)) {
      if (dir.isEmpty()) {
        continue;
      }
      Path candidate = Path.of(dir, COMMAND);
      if (Files.isRegularFile(candidate) && Files.isExecutable(candidate)) {
        return Optional.of(candidate);
      }
    }
    return Optional.empty();
  }

  /**
   * The {@code -i} of the GPU that {@code deviceName} ({@code cuda:N}) computes on: entry N of
   * {@code visible} ({@code CUDA_VISIBLE_DEVICES}) when it has one, else N.
   */
  static String gpuId(String deviceName, String visible) {
    String ordinal = deviceName.substring(deviceName.indexOf(':') + 1);
    if (visible == null || visible.isBlank()) {
      return ordinal;
    }
    String[] entries = visible.split(",");
    int n = Integer.parseInt(ordinal);
    return n < entries.length ? entries[n].trim() : ordinal;
  }

  private void read() {
    try (BufferedReader in =
        new BufferedReader(
            new InputStreamReader(process.getInputStream(), StandardCharsets.US_ASCII))) {
      for (String line; (line = in.readLine()) != null; ) {
        lines.add(line);
      }
    } catch (IOException e) {
      // the process was ended: what was read stays
    }
  }

  /** Ends the sampling; the figures of what was sampled, empty when nothing was. */
  Optional<Figures> stop() throws InterruptedException {
    if (process == null) {
      return Optional.empty();
    }
    process.destroy();
    if (!process.waitFor(5, TimeUnit.SECONDS)) {
      process.destroyForcibly();
    }
    reader.join(TimeUnit.SECONDS.toMillis(5));
    synchronized (lines) {
      return Figures.of(List.copyOf(lines));
    }
  }

  @Override
  public void close() {
    if (process != null && process.isAlive()) {
      process.destroyForcibly();
    }
  }
}
