package io.tokenspeed.cuda;

import static org.junit.platform.engine.discovery.ClassNameFilter.excludeClassNamePatterns;
import static org.junit.platform.engine.discovery.ClassNameFilter.includeClassNamePatterns;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectPackage;

import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import org.junit.platform.launcher.Launcher;
import org.junit.platform.launcher.LauncherDiscoveryRequest;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;
import org.junit.platform.launcher.listeners.SummaryGeneratingListener;
import org.junit.platform.launcher.listeners.TestExecutionSummary;

/**
 * Runs the GPU suite: every class named {@code *GpuTest} under {@code io.tokenspeed.cuda}, through
 * the JUnit Platform's launcher, on a machine with a GPU ({@code bin/test-gpu} starts it there).
 * Prints the summary and each failure; exits 0 only when tests ran and none failed or was skipped.
 *
 * <p>Arguments narrow the classes: a regular expression of class names to run (several: any of
 * them; each must match the whole name, package included: {@code '.*Gemma3.*'}), or one starting
 * with {@code !} for classes to leave out, so that a kernel still on trial runs in a process of its
 * own (a kernel that traps leaves its CUDA context unusable for the rest of the process): {@code
 * bin/test-gpu '!.*Wgmma.*'}, then {@code bin/test-gpu '.*Wgmma.*'}.
 */
public final class GpuSuite {
  private GpuSuite() {}

  public static void main(String[] args) {
    List<String> include = new ArrayList<>();
    List<String> exclude = new ArrayList<>();
    for (String a : args) {
      (a.startsWith("!") ? exclude : include).add(a.startsWith("!") ? a.substring(1) : a);
    }
    var builder =
        LauncherDiscoveryRequestBuilder.request()
            .selectors(selectPackage("io.tokenspeed.cuda"))
            .filters(includeClassNamePatterns(".*GpuTest"));
    if (!include.isEmpty()) {
      builder.filters(includeClassNamePatterns(include.toArray(String[]::new)));
    }
    if (!exclude.isEmpty()) {
      builder.filters(excludeClassNamePatterns(exclude.toArray(String[]::new)));
    }
    LauncherDiscoveryRequest request = builder.build();
    Launcher launcher = LauncherFactory.create();
    SummaryGeneratingListener listener = new SummaryGeneratingListener();
    launcher.execute(request, listener);
    TestExecutionSummary s = listener.getSummary();
    PrintWriter out = new PrintWriter(System.out, true);
    s.printFailuresTo(out, 40);
    s.printTo(out);
    out.printf(
        "GPU suite: %d tests, %d succeeded, %d failed, %d skipped, %d aborted%n",
        s.getTestsFoundCount(),
        s.getTestsSucceededCount(),
        s.getTotalFailureCount(),
        s.getTestsSkippedCount(),
        s.getTestsAbortedCount());
    if (s.getTestsFoundCount() == 0) {
      out.printf(
          "GPU suite: no test class matched %s; a pattern matches the whole class name, package"
              + " included (e.g. '.*CudaCausalLmGpu.*', not 'CudaCausalLmGpu.*')%n",
          String.join(" ", args));
    }
    boolean ok =
        s.getTestsFoundCount() > 0
            && s.getTotalFailureCount() == 0
            && s.getTestsSkippedCount() == 0
            && s.getTestsAbortedCount() == 0;
    System.exit(ok ? 0 : 1);
  }
}
