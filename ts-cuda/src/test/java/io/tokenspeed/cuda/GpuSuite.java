package io.tokenspeed.cuda;

import static org.junit.platform.engine.discovery.ClassNameFilter.includeClassNamePatterns;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectPackage;

import java.io.PrintWriter;
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
 */
public final class GpuSuite {
  private GpuSuite() {}

  public static void main(String[] args) {
    LauncherDiscoveryRequest request =
        LauncherDiscoveryRequestBuilder.request()
            .selectors(selectPackage("io.tokenspeed.cuda"))
            .filters(includeClassNamePatterns(".*GpuTest"))
            .build();
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
    boolean ok =
        s.getTestsFoundCount() > 0
            && s.getTotalFailureCount() == 0
            && s.getTestsSkippedCount() == 0
            && s.getTestsAbortedCount() == 0;
    System.exit(ok ? 0 : 1);
  }
}
