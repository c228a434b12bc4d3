package io.tokenspeed.model;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.CheckpointException;
import io.tokenspeed.model.checkpoint.SafetensorsWriter;
import io.tokenspeed.model.checkpoint.SafetensorsWriter.Entry;
import io.tokenspeed.model.config.Qwen3Config;
import io.tokenspeed.model.kernel.ComputePool;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Qwen3 has no Hugging Face fixture here, so a Qwen3 checkpoint is built from the llama fixture's
 * weights plus seeded QK-norm weights and q/k/v/o biases, with a tied LM head, and checked against
 * {@link NaiveDecoder} — itself checked first against Hugging Face's llama outputs.
 */
class Qwen3SyntheticTest {
  @TempDir Path tmp;

  static byte[] f32(float[] v) {
    ByteBuffer b = ByteBuffer.allocate(v.length * 4).order(ByteOrder.LITTLE_ENDIAN);
    for (float f : v) {
      b.putFloat(f);
    }
    return b.array();
  }

  static Entry vector(String name, int n, Random rnd, float center, float spread) {
    float[] v = new float[n];
    for (int i = 0; i < n; i++) {
      v[i] = center + spread * (2 * rnd.nextFloat() - 1);
    }
    return new Entry(name, "F32", new long[] {n}, f32(v));
  }

  static Path qwen3(Path dir, long seed) throws IOException {
    Path out = Fixtures.copyCheckpoint("llama", dir);
    Random rnd = new Random(seed);
    List<Entry> entries = new ArrayList<>();
    for (Entry e : SafetensorsWriter.read(out.resolve("model.safetensors"))) {
      if (!e.name().equals("lm_head.weight")) {
        entries.add(e);
      }
    }
    for (int l = 0; l < 2; l++) {
      String a = "model.layers." + l + ".self_attn.";
      entries.add(vector(a + "q_norm.weight", 16, rnd, 1f, 0.5f));
      entries.add(vector(a + "k_norm.weight", 16, rnd, 1f, 0.5f));
      entries.add(vector(a + "q_proj.bias", 64, rnd, 0f, 0.1f));
      entries.add(vector(a + "k_proj.bias", 32, rnd, 0f, 0.1f));
      entries.add(vector(a + "v_proj.bias", 32, rnd, 0f, 0.1f));
      entries.add(vector(a + "o_proj.bias", 64, rnd, 0f, 0.1f));
    }
    SafetensorsWriter.write(out.resolve("model.safetensors"), entries);
    String cfg = Files.readString(out.resolve("config.json"));
    cfg =
        cfg.replace("LlamaForCausalLM", "Qwen3ForCausalLM")
            .replace("\"model_type\": \"llama\"", "\"model_type\": \"qwen3\"")
            .replace("\"attention_bias\": false", "\"attention_bias\": true")
            .replace("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
    Files.writeString(out.resolve("config.json"), cfg);
    return out;
  }

  static double maxDelta(double[][] want, float[] got, int vocab) {
    double m = 0;
    for (int t = 0; t < want.length; t++) {
      for (int v = 0; v < vocab; v++) {
        m = Math.max(m, Math.abs(want[t][v] - got[t * vocab + v]));
      }
    }
    return m;
  }

  @Test
  void shouldAgreeWithHuggingFaceWhenTheNaiveReferenceRunsLlama() {
    try (CausalLm model = CausalLm.load(Fixtures.folder("llama"));
        Fixtures.Reference ref = new Fixtures.Reference("llama")) {
      double[][] naive = new NaiveDecoder(model).logits(ref.ids(1));
      double delta = maxDelta(naive, ref.logits(1), 512);
      assertTrue(delta < 1e-4, "naive reference vs HF: " + delta);
    }
  }

  @ParameterizedTest(name = "seed {0}")
  @ValueSource(longs = {31, 32})
  void shouldMatchTheNaiveReferenceWithQkNormBiasesAndTiedHead(long seed) throws IOException {
    Path dir = qwen3(tmp, seed);
    try (CausalLm model = CausalLm.load(dir);
        ComputePool pool = ComputePool.ofCores();
        PagedRunner runner = new PagedRunner(model, 16, 16, seed)) {
      assertTrue(model.config() instanceof Qwen3Config c && c.qkNorm() && c.qkvBias());
      int[] ids = CheckpointLoadTest.prompt(seed, 50);
      int[][] table = runner.table(runner.rowsFor(ids.length));
      float[] got = runner.prefill(ids, table, 7, pool);
      double delta = maxDelta(new NaiveDecoder(model).logits(ids), got, model.vocabSize());
      System.out.printf("qwen3 synthetic seed %d: max |dlogit| vs naive=%.3g%n", seed, delta);
      assertTrue(delta < 1e-4, "qwen3 vs naive reference: " + delta);
    }
  }

  @Test
  void shouldRejectQwen3WithoutQkNormWeights() throws IOException {
    Path dir = qwen3(tmp, 5);
    List<Entry> es = new ArrayList<>(SafetensorsWriter.read(dir.resolve("model.safetensors")));
    es.removeIf(e -> e.name().equals("model.layers.1.self_attn.k_norm.weight"));
    SafetensorsWriter.write(dir.resolve("model.safetensors"), es);
    CheckpointException e = assertThrows(CheckpointException.class, () -> CausalLm.load(dir));
    assertTrue(e.getMessage().contains("model.layers.1.self_attn.k_norm.weight is missing"));
  }
}
