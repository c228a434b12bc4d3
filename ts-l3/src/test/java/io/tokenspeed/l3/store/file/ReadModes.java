package io.tokenspeed.l3.store.file;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.l3.spi.StoreConfigurationException;
import io.tokenspeed.l3.store.file.FileStoreSettings.DirectIo;
import java.io.IOException;
import org.junit.jupiter.api.Assumptions;

/**
 * Opening file stores in a given read mode and checking which mode actually ran. A test that asks
 * for {@code direct_io=on} on a file system that refuses O_DIRECT is skipped with the store's
 * reason, never passed silently in buffered mode.
 */
final class ReadModes {

  private ReadModes() {}

  /** The store of {@code settings}; skips the test when direct_io=on and O_DIRECT is refused. */
  static FileStore open(FileStoreSettings settings) throws IOException {
    try {
      return new FileStore(settings);
    } catch (StoreConfigurationException e) {
      Assumptions.abort("this file system refuses O_DIRECT: " + e.getMessage());
      throw e;
    }
  }

  /** Every object {@code store} opened so far was read the way {@code directIo} asks. */
  static void assertRan(FileStore store, DirectIo directIo) {
    FileStoreCounters c = store.counters();
    String where = directIo + " " + store.readMode() + " " + c;
    switch (directIo) {
      case ON -> {
        assertTrue(store.readMode().direct(), where);
        assertTrue(c.directObjects() > 0, where);
        assertEquals(0, c.cachedObjects() + c.bufferedObjects(), where);
      }
      case OFF -> {
        assertFalse(store.readMode().direct(), where);
        assertEquals(0, c.directObjects() + c.cachedObjects(), where);
        assertTrue(c.bufferedObjects() > 0, where);
      }
      case AUTO -> {
        if (store.readMode().direct()) {
          assertEquals(0, c.bufferedObjects(), where);
          assertTrue(c.directObjects() + c.cachedObjects() > 0, where);
        } else {
          assertEquals(0, c.directObjects() + c.cachedObjects(), where);
          assertTrue(c.bufferedObjects() > 0, where);
        }
      }
    }
  }
}
