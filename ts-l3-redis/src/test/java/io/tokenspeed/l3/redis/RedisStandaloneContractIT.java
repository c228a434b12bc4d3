package io.tokenspeed.l3.redis;

import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.StoreContractTest;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import org.junit.jupiter.api.Tag;

/**
 * The Store SPI contract (byte round trips of 1 B, 4 KiB, 64 KiB and 1 MiB, exact-length GET,
 * create-only PUT, call order, namespace deletion, limits, racing writers) against one real
 * standalone redis-server, flushed before every store is opened.
 */
@Tag("live")
class RedisStandaloneContractIT extends StoreContractTest {

  @Override
  protected Store newStore(int maxKeyBytes, long maxValueBytes) throws Exception {
    RedisServer server = RedisServers.sharedStandalone();
    server.flushAll();
    return RedisStore.open(
        RedisStoreSettings.standalone(server.uri()).withLimits(maxKeyBytes, maxValueBytes));
  }
}
