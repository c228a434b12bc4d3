package io.tokenspeed.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.UnaryOperator;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class NamespaceTest {

  private static final DeploymentIdentity BASE = TestLayouts.identity(TestLayouts.hybrid());

  private static DeploymentIdentity with(
      DeploymentIdentity d,
      String model,
      String rev,
      String w,
      String dm,
      String dw,
      CacheLayout l,
      int tp,
      int kvp,
      int qcp,
      int latp,
      String backend) {
    return new DeploymentIdentity(model, rev, w, dm, dw, l, tp, kvp, qcp, latp, backend);
  }

  private static CacheLayout layoutWithGroup(int index, CacheGroupSpec replacement) {
    List<CacheGroupSpec> groups = new ArrayList<>(BASE.layout().groups());
    groups.set(index, replacement);
    return new CacheLayout(BASE.layout().prefixGranularity(), BASE.layout().dtype(), groups);
  }

  static Stream<Arguments> identityInputs() {
    DeploymentIdentity b = BASE;
    CacheLayout l = b.layout();
    Map<String, UnaryOperator<DeploymentIdentity>> changes = new LinkedHashMap<>();
    changes.put(
        "model_id",
        d -> with(d, "other", "rev-1", "w1", null, null, l, 2, 1, 1, 1, "cpu-reference"));
    changes.put(
        "checkpoint_revision",
        d -> with(d, "tiny-hybrid", "rev-2", "w1", null, null, l, 2, 1, 1, 1, "cpu-reference"));
    changes.put(
        "weight_version",
        d -> with(d, "tiny-hybrid", "rev-1", "w2", null, null, l, 2, 1, 1, 1, "cpu-reference"));
    changes.put(
        "draft",
        d ->
            with(
                d, "tiny-hybrid", "rev-1", "w1", "draft-m", "dw1", l, 2, 1, 1, 1, "cpu-reference"));
    changes.put(
        "attention_tp_size",
        d -> with(d, "tiny-hybrid", "rev-1", "w1", null, null, l, 4, 1, 1, 1, "cpu-reference"));
    changes.put(
        "kvp_size",
        d -> with(d, "tiny-hybrid", "rev-1", "w1", null, null, l, 2, 2, 1, 1, "cpu-reference"));
    changes.put(
        "qcp_size",
        d -> with(d, "tiny-hybrid", "rev-1", "w1", null, null, l, 2, 1, 2, 1, "cpu-reference"));
    changes.put(
        "linear_attention_tp_size",
        d -> with(d, "tiny-hybrid", "rev-1", "w1", null, null, l, 2, 1, 1, 2, "cpu-reference"));
    changes.put(
        "attention_backend",
        d -> with(d, "tiny-hybrid", "rev-1", "w1", null, null, l, 2, 1, 1, 1, "flash"));
    changes.put(
        "dtype",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                new CacheLayout(64, "fp8", l.groups()),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    changes.put(
        "prefix_granularity",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                new CacheLayout(128, "bf16", l.groups()),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    changes.put(
        "block_granularity",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                layoutWithGroup(0, TestLayouts.full(0, 32, 4096)),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    changes.put(
        "payload_bytes",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                layoutWithGroup(0, TestLayouts.full(0, 16, 8192)),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    changes.put(
        "field_name",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                layoutWithGroup(
                    0,
                    new CacheGroupSpec(
                        0,
                        new GroupKind.FullHistory(),
                        16,
                        List.of(new CacheField("latent", 4096)),
                        null)),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    changes.put(
        "field_offsets",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                layoutWithGroup(
                    0,
                    new CacheGroupSpec(
                        0,
                        new GroupKind.FullHistory(),
                        16,
                        List.of(new CacheField("k", 1024), new CacheField("v", 3072)),
                        null)),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    changes.put(
        "window_tokens",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                layoutWithGroup(
                    1,
                    new CacheGroupSpec(
                        1,
                        new GroupKind.SlidingWindow(256),
                        32,
                        List.of(new CacheField("k", 2048), new CacheField("v", 2048)),
                        new Sharding.HeadPartitioned())),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    changes.put(
        "group_kind",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                layoutWithGroup(
                    1,
                    new CacheGroupSpec(
                        1,
                        new GroupKind.FullHistory(),
                        32,
                        List.of(new CacheField("k", 2048), new CacheField("v", 2048)),
                        new Sharding.HeadPartitioned())),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    changes.put(
        "sharding",
        d ->
            with(
                d,
                "tiny-hybrid",
                "rev-1",
                "w1",
                null,
                null,
                layoutWithGroup(
                    0,
                    new CacheGroupSpec(
                        0,
                        new GroupKind.FullHistory(),
                        16,
                        List.of(new CacheField("kv", 4096)),
                        new Sharding.PageCyclic(2))),
                2,
                1,
                1,
                1,
                "cpu-reference"));
    return changes.entrySet().stream().map(e -> Arguments.of(e.getKey(), e.getValue()));
  }

  @ParameterizedTest(name = "{0} is a namespace input")
  @MethodSource("identityInputs")
  void shouldChangeNamespaceWhenAnIdentityInputChanges(
      String input, UnaryOperator<DeploymentIdentity> change) {
    assertNotEquals(Namespace.of(BASE), Namespace.of(change.apply(BASE)), input);
  }

  @Test
  void shouldGiveDistinctNamespacesForEveryInputChange() {
    Set<Namespace> seen = new HashSet<>();
    seen.add(Namespace.of(BASE));
    identityInputs()
        .forEach(
            a -> {
              @SuppressWarnings("unchecked")
              UnaryOperator<DeploymentIdentity> f = (UnaryOperator<DeploymentIdentity>) a.get()[1];
              assertTrue(seen.add(Namespace.of(f.apply(BASE))), "collision for " + a.get()[0]);
            });
  }

  @Test
  void shouldBeStableForEqualIdentities() {
    DeploymentIdentity copy = TestLayouts.identity(TestLayouts.hybrid());
    assertEquals(Namespace.of(BASE), Namespace.of(copy));
    assertTrue(Namespace.of(BASE).value().matches("tsl3-[0-9a-f]{64}"));
  }

  @Test
  void shouldWriteCanonicalJsonWithSortedKeysAndNoSpaces() {
    Map<String, Object> a = new LinkedHashMap<>();
    a.put("z", 1);
    a.put("a", List.of("x", Map.of("d", 2L, "c", true)));
    assertEquals("{\"a\":[\"x\",{\"c\":true,\"d\":2}],\"z\":1}", CanonicalJson.write(a));
    String json = CanonicalJson.write(BASE.toJsonTree());
    assertTrue(json.contains("\"runtime_compat\":2"), json);
    assertTrue(!json.contains(" "), json);
  }

  @Test
  void shouldPinNamespaceOfCanonicalJsonComputedIndependently() {
    // sha256(b'{"a":1}') computed with Python's hashlib.
    assertEquals(
        "tsl3-015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862",
        Namespace.ofCanonicalJson("{\"a\":1}").value());
  }

  @Test
  void shouldIncludeShardCountsOnlyForPageShardedLayouts() {
    assertTrue(!CanonicalJson.write(BASE.toJsonTree()).contains("group_shard_counts"));
    CacheLayout paged =
        layoutWithGroup(
            0,
            new CacheGroupSpec(
                0,
                new GroupKind.FullHistory(),
                16,
                List.of(new CacheField("kv", 4096)),
                new Sharding.PageCyclic(2)));
    String json = CanonicalJson.write(TestLayouts.identity(paged).toJsonTree());
    assertTrue(json.contains("\"group_shard_counts\":[2,1,1]"), json);
  }

  @Test
  void shouldRejectShardCountThatDoesNotDivideTpSize() {
    CacheLayout paged =
        layoutWithGroup(
            0,
            new CacheGroupSpec(
                0,
                new GroupKind.FullHistory(),
                16,
                List.of(new CacheField("kv", 4096)),
                new Sharding.PageCyclic(3)));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> TestLayouts.identity(paged));
    assertTrue(e.getMessage().contains("shard_count=3"), e.getMessage());
  }
}
