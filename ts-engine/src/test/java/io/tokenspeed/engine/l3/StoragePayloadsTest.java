package io.tokenspeed.engine.l3;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.l3.store.memory.MemoryStore;
import io.tokenspeed.l3.store.memory.MemoryStoreSettings;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The startup checks of what a rank stores: owner-independent bytes, value and key limits. */
class StoragePayloadsTest {

  private static CacheLayout layout(Sharding sharding, long fieldBytes) {
    return new CacheLayout(
        64,
        "bf16",
        List.of(
            new CacheGroupSpec(
                0,
                new GroupKind.FullHistory(),
                16,
                List.of(new CacheField("k", fieldBytes), new CacheField("v", fieldBytes)),
                sharding)));
  }

  private static Namespace namespace(CacheLayout layout, int tp) {
    return Namespace.of(
        new DeploymentIdentity(
            "m", "0".repeat(64), "1", null, null, layout, tp, 1, 1, 1, "cpu-reference"));
  }

  @Test
  void shouldRejectHeadPartitionedFieldsInsideAPageShardedGroup() {
    CacheLayout l = layout(new Sharding.PageCyclic(1), 64);
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () -> StoragePayloads.validate(l, 2, namespace(l, 2), new MemoryStore()));
    assertTrue(
        e.getMessage().startsWith("group 0 is page_cyclic over 1 owners among 2 attention-TP"),
        e::getMessage);
    CacheLayout whole = layout(new Sharding.PageCyclic(2), 64);
    assertDoesNotThrow(
        () -> StoragePayloads.validate(whole, 2, namespace(whole, 2), new MemoryStore()));
  }

  @Test
  void shouldRejectABlockOverTheStoresLargestValue() {
    CacheLayout l = layout(new Sharding.HeadPartitioned(), 600);
    MemoryStore small = new MemoryStore(new MemoryStoreSettings(1024, 1000, 1 << 20));
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () -> StoragePayloads.validate(l, 1, namespace(l, 1), small));
    assertTrue(
        e.getMessage()
            .equals(
                "group 0 stores 1200-byte objects, over the memory store's largest value of 1000"
                    + " bytes"),
        e::getMessage);
    MemoryStore enough = new MemoryStore(new MemoryStoreSettings(1024, 1200, 1 << 20));
    assertDoesNotThrow(() -> StoragePayloads.validate(l, 1, namespace(l, 1), enough));
  }

  @Test
  void shouldRejectKeysOverTheStoresLongestKey() {
    CacheLayout l = layout(new Sharding.HeadPartitioned(), 64);
    MemoryStore shortKeys = new MemoryStore(new MemoryStoreSettings(100, 1 << 20, 1 << 20));
    var e =
        assertThrows(
            IllegalArgumentException.class,
            () -> StoragePayloads.validate(l, 1, namespace(l, 1), shortKeys));
    assertTrue(e.getMessage().startsWith("group 0's object keys take "), e::getMessage);
    assertTrue(e.getMessage().endsWith("longest key of 100 bytes"), e::getMessage);
  }
}
