package io.tokenspeed.cache;

import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Runs {@link CacheInvariants} on every {@link CacheFixture} a test created, after the test. It is
 * registered for the whole module through extension auto-detection, so no cache test can skip it.
 */
public final class CacheInvariantsExtension implements BeforeEachCallback, AfterEachCallback {

  @Override
  public void beforeEach(ExtensionContext context) {
    CacheFixture.LIVE.get().clear();
    CacheFixture.POOLS.get().clear();
  }

  @Override
  public void afterEach(ExtensionContext context) {
    try {
      if (context.getExecutionException().isEmpty()) {
        for (CacheFixture f : CacheFixture.LIVE.get()) {
          f.checkInvariants();
        }
        for (BlockPool p : CacheFixture.POOLS.get()) {
          CacheInvariants.checkPool(p);
        }
      }
    } finally {
      CacheFixture.LIVE.get().clear();
      CacheFixture.POOLS.get().clear();
    }
  }
}
