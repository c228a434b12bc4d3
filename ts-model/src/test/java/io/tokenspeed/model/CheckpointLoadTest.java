package io.tokenspeed.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.model.checkpoint.DType;
import io.tokenspeed.model.checkpoint.SafetensorsWriter;
import io.tokenspeed.model.checkpoint.SafetensorsWriter.Entry;
import io.tokenspeed.model.kernel.ComputePool;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Loading checkpoints that are fine: shards, half-precision weights, identity and cache layout. */
class CheckpointLoadTest {
  @TempDir Path tmp;

  static int[] prompt(long seed, int n) {
    Random rnd = new Random(seed);
    int[] ids = new int[n];
    for (int i = 0; i < n; i++) {
      ids[i] = rnd.nextInt(512);
    }
    return ids;
  }

  static float[] logits(Path folder, int[] ids) {
    try (CausalLm model = CausalLm.load(folder);
        ComputePool pool = ComputePool.ofCores();
        PagedRunner runner = new PagedRunner(model, 16, 8, -1)) {
      return runner.prefill(ids, runner.table(runner.rowsFor(ids.length)), ids.length, pool);
    }
  }

  static String sha256(Path... files) throws Exception {
    MessageDigest md = MessageDigest.getInstance("SHA-256");
    for (Path f : files) {
      md.update(Files.readAllBytes(f));
    }
    return HexFormat.of().formatHex(md.digest());
  }

  @Test
  void shouldComputeTheSameLogitsFromAShardedCheckpoint() throws Exception {
    Path single = Fixtures.folder("llama");
    Path sharded = Files.createDirectories(tmp.resolve("sharded"));
    Files.copy(single.resolve("config.json"), sharded.resolve("config.json"));
    List<Entry> all = SafetensorsWriter.read(single.resolve("model.safetensors"));
    List<Entry> a = all.subList(0, 9);
    List<Entry> b = all.subList(9, all.size());
    Path fa = sharded.resolve("model-00001-of-00002.safetensors");
    Path fb = sharded.resolve("model-00002-of-00002.safetensors");
    SafetensorsWriter.write(fa, a);
    SafetensorsWriter.write(fb, b);
    Files.writeString(
        sharded.resolve("model.safetensors.index.json"), CheckpointLoaderErrorTest.index(a, b));
    int[] ids = prompt(3, 40);
    assertArrayEquals(logits(single, ids), logits(sharded, ids));
    try (CausalLm model = CausalLm.load(sharded)) {
      assertEquals(2, model.checkpoint().files().size());
      assertEquals(sha256(fa, fb), model.identity().checkpointRevision());
    }
  }

  /**
   * A BF16 (or F16) checkpoint and an F32 one holding exactly the widened values give bit-identical
   * logits: 16-bit weights are widened on read, never approximated differently.
   */
  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"BF16", "F16"})
  void shouldWidenHalfPrecisionWeightsExactly(String dtype) throws IOException {
    List<Entry> half = new ArrayList<>();
    List<Entry> widened = new ArrayList<>();
    for (Entry e : SafetensorsWriter.read(Fixtures.folder("llama").resolve("model.safetensors"))) {
      byte[] h =
          dtype.equals("BF16")
              ? SafetensorsWriter.toBf16(e.bytes())
              : SafetensorsWriter.toF16(e.bytes());
      half.add(new Entry(e.name(), dtype, e.shape(), h));
      widened.add(new Entry(e.name(), "F32", e.shape(), SafetensorsWriter.widen(h, dtype)));
    }
    Path halfDir = Fixtures.copyCheckpoint("llama", tmp.resolve("half"));
    Path wideDir = Fixtures.copyCheckpoint("llama", tmp.resolve("wide"));
    SafetensorsWriter.write(halfDir.resolve("model.safetensors"), half);
    SafetensorsWriter.write(wideDir.resolve("model.safetensors"), widened);
    try (CausalLm model = CausalLm.load(halfDir)) {
      assertEquals(
          DType.valueOf(dtype),
          model.checkpoint().tensors().get("lm_head.weight").dtype(),
          "weights stay 16-bit in the mapping");
    }
    int[] ids = prompt(4, 40);
    float[] fromHalf = logits(halfDir, ids);
    assertArrayEquals(logits(wideDir, ids), fromHalf);
    float[] fromF32 = logits(Fixtures.folder("llama"), ids);
    double delta = HfFixtureTestBase.maxAbsDelta(fromF32, fromHalf);
    assertTrue(delta > 0 && delta < 0.5, dtype + " rounding moved logits by " + delta);
  }

  @Test
  void shouldDeriveTheCacheLayoutFromItsAttentionLayers() {
    try (CausalLm model = CausalLm.load(Fixtures.folder("llama"))) {
      CacheLayout layout = model.cacheLayout(64, 16);
      assertEquals(1, layout.numGroups());
      assertEquals("float32", layout.dtype());
      assertEquals(new GroupKind.FullHistory(), layout.group(0).kind());
      assertEquals(16, layout.group(0).blockGranularity());
      long fieldBytes = 2L * 16 * 16 * 4; // kv heads x bg x head_dim x float
      assertEquals(
          List.of(
              new CacheField("layers.0.k", fieldBytes),
              new CacheField("layers.0.v", fieldBytes),
              new CacheField("layers.1.k", fieldBytes),
              new CacheField("layers.1.v", fieldBytes)),
          layout.group(0).fields());
      assertEquals(4 * fieldBytes, layout.group(0).bytesPerBlock());
      assertEquals(4 * 2L * 4 * 16 * 4, model.cacheLayout(64, 4).group(0).bytesPerBlock());
    }
  }

  @Test
  void shouldFingerprintTheWeightBytesIntoTheIdentity() throws Exception {
    Path dir = Fixtures.copyCheckpoint("llama", tmp);
    ModelIdentity id;
    try (CausalLm model = CausalLm.load(dir, "tiny-llama", "w7")) {
      id = model.identity();
      assertEquals(sha256(dir.resolve("model.safetensors")), id.checkpointRevision());
      assertEquals("tiny-llama", id.modelId());
      assertEquals("w7", id.weightVersion());
      DeploymentIdentity deployment =
          new DeploymentIdentity(
              id.modelId(),
              id.checkpointRevision(),
              id.weightVersion(),
              null,
              null,
              model.cacheLayout(64, 16),
              1,
              1,
              1,
              1,
              "cpu-reference");
      assertTrue(Namespace.of(deployment).value().startsWith("tsl3-"));
    }
    byte[] bytes = Files.readAllBytes(dir.resolve("model.safetensors"));
    bytes[bytes.length - 1] ^= 1;
    Files.write(dir.resolve("model.safetensors"), bytes);
    try (CausalLm model = CausalLm.load(dir)) {
      assertNotEquals(id.checkpointRevision(), model.identity().checkpointRevision());
      assertEquals("llama", model.identity().modelId());
    }
  }

  @Test
  void shouldRejectBlockTablesThatDoNotFit() {
    try (CausalLm model = CausalLm.load(Fixtures.folder("llama"));
        ComputePool pool = ComputePool.ofThreads(1);
        PagedRunner runner = new PagedRunner(model, 16, 8, -1)) {
      int[] ids = prompt(5, 20);
      record Bad(int[][] table, String message) {}
      for (Bad bad :
          List.of(
              new Bad(new int[][] {{1}}, "need 2"),
              new Bad(new int[][] {{1, 0}}, "block id=0"),
              new Bad(new int[][] {{1, 8}}, "block id=8"),
              new Bad(new int[][] {{3, 3}}, "repeats block id=3"),
              new Bad(new int[][] {{1, 2}, {3, 4}}, "block tables=2"))) {
        IllegalArgumentException e =
            assertThrows(
                IllegalArgumentException.class,
                () ->
                    model.forward(
                        ForwardBatch.of(new ForwardRequest(ids, 0, bad.table(), false)),
                        runner.kv(),
                        pool));
        assertTrue(e.getMessage().contains(bad.message()), e.getMessage());
      }
    }
  }
}
