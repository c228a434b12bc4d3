package io.tokenspeed.l3.redis;

import io.tokenspeed.l3.spi.Store;
import io.tokenspeed.l3.store.StoreContractTest;
import io.tokenspeed.testkit.RedisCluster;
import io.tokenspeed.testkit.RedisServers;
import org.junit.jupiter.api.Tag;

/**
 * The Store SPI contract against a real 3-master Redis Cluster: the same byte round trips and
 * create-only rules, with keys spread over every master and namespace deletion scanning them all.
 */
@Tag("live")
class RedisClusterContractIT extends StoreContractTest {

  @Override
  protected Store newStore(int maxKeyBytes, long maxValueBytes) throws Exception {
    RedisCluster cluster = RedisServers.sharedCluster();
    cluster.flushAll();
    return RedisStore.open(
        RedisStoreSettings.cluster(cluster.uris()).withLimits(maxKeyBytes, maxValueBytes));
  }
}
