package io.tokenspeed.server.cli;

import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed bench}: the benchmarks users run ({@code ttft}, {@code serve}, {@code trace},
 * {@code route}).
 */
@Command(
    name = "bench",
    mixinStandardHelpOptions = true,
    description =
        "Benchmarks: ttft (L3 against recomputation, per store), serve (the HTTP serving path:"
            + " its overhead, and load with shared prefixes over one and two servers), trace (a"
            + " request trace replayed against servers), route (prefix-aware routing against"
            + " round robin over fused replicas).",
    subcommands = {
      BenchTtftCommand.class,
      BenchServeCommand.class,
      BenchTraceCommand.class,
      BenchRouteCommand.class
    })
final class BenchCommand implements Callable<Integer> {
  @Spec private CommandSpec spec;

  @Override
  public Integer call() {
    throw new ParameterException(
        spec.commandLine(), "a benchmark is required: ttft, serve, trace, route");
  }
}
