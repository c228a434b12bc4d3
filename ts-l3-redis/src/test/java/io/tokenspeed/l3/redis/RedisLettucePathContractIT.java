package io.tokenspeed.l3.redis;

import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.StoreContractTest;
import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import org.junit.jupiter.api.Tag;

/**
 * The Store SPI contract on the Lettuce data path (the one {@code tls=true} uses), run on plain TCP
 * against one real standalone redis-server, so that the path is tested where no TLS server is.
 */
@Tag("live")
class RedisLettucePathContractIT extends StoreContractTest {

  @Override
  protected Store newStore(int maxKeyBytes, long maxValueBytes) throws Exception {
    RedisServer server = RedisServers.sharedStandalone();
    server.flushAll();
    return RedisStore.open(
        RedisStoreSettings.standalone(server.uri()).withLimits(maxKeyBytes, maxValueBytes), false);
  }
}
