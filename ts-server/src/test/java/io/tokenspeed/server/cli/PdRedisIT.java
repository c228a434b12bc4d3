package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.testkit.RedisServer;
import io.tokenspeed.testkit.RedisServers;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Disaggregated serving over a real {@code redis-server} as the L3 store (docs/pd.md,
 * docs/l3-configuration.md): two {@code serve --engine-role prefill} processes share one Redis,
 * behind a router with a decode engine. The first computes a prompt and writes its pages to Redis;
 * the second, given the same prompt by the round robin, restores them from Redis: the decode
 * engine's usage says {@code storage}, and the text is the one computed. Redis itself shows the
 * traffic: keys after the write, lookups that hit after the restore.
 *
 * <p>The server is started by {@link RedisServers} (an installed {@code redis-server}, else the
 * embedded one); where there is neither, the test fails saying how to install one.
 */
class PdRedisIT {
  private static final Pattern HITS = Pattern.compile("keyspace_hits:(\\d+)");

  @TempDir Path workDir;

  @Test
  void shouldRestoreOnTheSecondPrefillEngineWhatTheFirstWroteToRedis() throws Exception {
    PdDeployment pd = new PdDeployment(workDir);
    try (RedisServer redis = RedisServers.startStandalone(workDir.resolve("redis"))) {
      // a 5 s soft deadline: a cold reader on the two busy cores can take longer than the default
      // to restore, and the case counts on its restore
      List<String> l3 =
          List.of(
              "--kvstore-storage-backend",
              "redis",
              "--kvstore-storage-backend-extra-config",
              "{\"uri\": \""
                  + redis.uri()
                  + "\", \"async\": {\"min_extension_tokens\": 64, \"soft_deadline_ms\": 5000}}");
      AtomicLong hitsWhenWritten = new AtomicLong(-1);
      pd.assertTheSecondPrefillEngineRestores(
          l3,
          () -> {
            long keys = (Long) redis.command("DBSIZE");
            assertTrue(keys > 0, "the first prefill engine's pages are in Redis: DBSIZE " + keys);
            hitsWhenWritten.set(hits(redis));
          });
      long hits = hits(redis);
      assertTrue(
          hits > hitsWhenWritten.get(),
          "the second prefill engine's reads hit Redis: keyspace_hits "
              + hitsWhenWritten.get()
              + " after the write, "
              + hits
              + " after the restore");
    }
  }

  /** Redis's {@code keyspace_hits}: lookups of keys that existed. */
  private static long hits(RedisServer redis) {
    String info = (String) redis.command("INFO", "stats");
    Matcher m = HITS.matcher(info);
    assertTrue(m.find(), () -> "no keyspace_hits in INFO stats: " + info);
    return Long.parseLong(m.group(1));
  }
}
