package io.tokenspeed.engine.memory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.Fixtures;
import io.tokenspeed.model.layer.CachedLayer;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

class LoadStagesTest {

  @Test
  void shouldSplitOneGroupIntoRangesOfConsecutiveLayers() {
    // 5 layers, k and v of 8 bytes each: 16 bytes a layer
    CacheLayout layout = layered(new int[] {0, 0, 0, 0, 0}, 8);
    LoadStages two = LoadStages.of(layout, 2).orElseThrow();
    assertEquals(5, two.numLayers());
    assertEquals(2, two.numStages());
    // stage(l) = floor(2l/5): layers 0-2 in stage 0, 3-4 in stage 1
    assertEquals(List.of(0, 0, 0, 1, 1), stagesOf(two));
    assertEquals(0, two.offset(0, 0));
    assertEquals(48, two.length(0, 0));
    assertEquals(48, two.offset(0, 1));
    assertEquals(32, two.length(0, 1));
    assertEquals(1, two.stageOfLayer(99), "a layer past the last waits for everything");

    LoadStages many = LoadStages.of(layout, 64).orElseThrow();
    assertEquals(5, many.numStages(), "never more stages than layers");
    for (int l = 0; l < 5; l++) {
      assertEquals(l, many.stageOfLayer(l));
      assertEquals(16L * l, many.offset(0, l));
      assertEquals(16, many.length(0, l));
    }
  }

  @Test
  void shouldLeaveAGroupOutOfTheStagesWithoutItsLayers() {
    // Jamba-like: layers 0, 2 in group 1 (attention), 1, 3 in group 0 (state)
    CacheLayout layout = layered(new int[] {1, 0, 1, 0}, 4);
    LoadStages s = LoadStages.of(layout, 4).orElseThrow();
    for (int l = 0; l < 4; l++) {
      int own = l % 2 == 0 ? 1 : 0;
      assertEquals(8, s.length(own, l), "layer " + l);
      assertEquals(0, s.length(1 - own, l), "layer " + l + " copies nothing of the other group");
      assertEquals(8L * (l / 2), s.offset(own, l));
    }
  }

  @Test
  void shouldNotStageWhatCannotBeStaged() {
    assertEquals(Optional.empty(), LoadStages.of(layered(new int[] {0, 0, 0}, 4), 1));
    assertEquals(Optional.empty(), LoadStages.of(layered(new int[] {0}, 4), 8), "one layer");
    assertEquals(Optional.empty(), LoadStages.of(MemoryFixtures.hybrid(), 8), "unnamed fields");
    CacheLayout backwards =
        new CacheLayout(
            4,
            "bf16",
            List.of(
                new CacheGroupSpec(
                    0,
                    new GroupKind.FullHistory(),
                    4,
                    List.of(new CacheField("layers.1.k", 4), new CacheField("layers.0.k", 4)),
                    null)));
    assertEquals(Optional.empty(), LoadStages.of(backwards, 8), "fields out of layer order");
    assertThrows(IllegalArgumentException.class, () -> LoadStages.of(backwards, 0));
    LoadStages s = LoadStages.of(layered(new int[] {0, 0}, 4), 2).orElseThrow();
    assertThrows(IllegalArgumentException.class, () -> s.stageOfLayer(-1));
  }

  static List<Long> seeds() {
    return MemoryFixtures.seeds(40).boxed().toList();
  }

  /** Every group's stage ranges tile its block in order: no byte copied twice, none left out. */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldTileEveryBlockWithTheStagesInOrder(long seed) {
    Random rnd = new Random(seed);
    int layers = 2 + rnd.nextInt(12);
    int groups = 1 + rnd.nextInt(Math.min(3, layers));
    int[] groupOf = new int[layers];
    for (int l = 0; l < layers; l++) {
      groupOf[l] = l < groups ? l : rnd.nextInt(groups); // every group has a layer
    }
    CacheLayout layout = layered(groupOf, 1 + rnd.nextInt(9));
    int max = 1 + rnd.nextInt(layers + 3);
    Optional<LoadStages> staged = LoadStages.of(layout, max);
    if (Math.min(max, layers) < 2) {
      assertEquals(Optional.empty(), staged);
      return;
    }
    LoadStages s = staged.orElseThrow();
    assertEquals(Math.min(max, layers), s.numStages());
    int previous = 0;
    for (int l = 0; l < layers; l++) {
      int stage = s.stageOfLayer(l);
      assertTrue(stage == previous || stage == previous + 1, "stages follow the layers");
      previous = stage;
    }
    assertEquals(s.numStages() - 1, previous, "the last layer is in the last stage");
    for (int g = 0; g < groups; g++) {
      long at = 0;
      for (int st = 0; st < s.numStages(); st++) {
        if (s.length(g, st) > 0) {
          assertEquals(at, s.offset(g, st), "group " + g + " stage " + st + " starts where");
          at += s.length(g, st);
        }
      }
      assertEquals(layout.group(g).bytesPerBlock(), at, "group " + g + " covered");
    }
  }

  /**
   * The forward waits on the gate by block index and the stages are cut by the layer a field's name
   * gives: the two agree on every architecture.
   */
  @ParameterizedTest
  @ValueSource(strings = {"llama", "qwen2", "gemma3", "mamba", "jamba"})
  void shouldNameEveryCacheFieldByTheIndexOfItsBlock(String fixture, @TempDir Path dir)
      throws Exception {
    try (CausalLm model = CausalLm.load(Fixtures.extract(fixture, dir))) {
      List<CachedLayer> layers = model.cachedLayers();
      assertEquals(model.blocks().size(), layers.size());
      for (int l = 0; l < layers.size(); l++) {
        for (CacheField f : layers.get(l).cacheFields(4)) {
          assertTrue(f.name().startsWith("layers." + l + "."), f.name() + " in block " + l);
        }
      }
      CacheLayout layout = model.cacheLayout(4, 4);
      LoadStages s = LoadStages.of(layout, 64).orElseThrow();
      assertEquals(layers.size(), s.numLayers());
      for (int l = 0; l < layers.size(); l++) {
        int g = layers.get(l).cacheGroup();
        long own = 0;
        for (CacheField f : layers.get(l).cacheFields(4)) {
          own += f.bytesPerBlock();
        }
        assertEquals(own, s.length(g, s.stageOfLayer(l)), "layer " + l + " of " + fixture);
      }
    }
  }

  private static List<Integer> stagesOf(LoadStages s) {
    return java.util.stream.IntStream.range(0, s.numLayers()).map(s::stageOfLayer).boxed().toList();
  }

  /**
   * A layout whose layer {@code l} puts {@code layers.l.k} and {@code layers.l.v} of {@code bytes}
   * bytes each into group {@code groupOf[l]}.
   */
  static CacheLayout layered(int[] groupOf, long bytes) {
    int groups = 0;
    for (int g : groupOf) {
      groups = Math.max(groups, g + 1);
    }
    List<CacheGroupSpec> specs = new java.util.ArrayList<>();
    for (int g = 0; g < groups; g++) {
      List<CacheField> fields = new java.util.ArrayList<>();
      for (int l = 0; l < groupOf.length; l++) {
        if (groupOf[l] == g) {
          fields.add(new CacheField("layers." + l + ".k", bytes));
          fields.add(new CacheField("layers." + l + ".v", bytes));
        }
      }
      specs.add(new CacheGroupSpec(g, new GroupKind.FullHistory(), 4, fields, null));
    }
    return new CacheLayout(4, "bf16", specs);
  }
}
