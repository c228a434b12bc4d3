package io.tokenspeed.model;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.CheckpointException;
import io.tokenspeed.model.checkpoint.SafetensorsWriter;
import io.tokenspeed.model.checkpoint.SafetensorsWriter.Entry;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every way a checkpoint folder can be broken gets a folder built with exactly that defect (from
 * the llama fixture), and the loader's message must name the file and, where one is at fault, the
 * tensor.
 */
class CheckpointLoaderErrorTest {

  @TempDir Path tmp;

  /** Breaks a copy of the llama checkpoint in {@code dir}. */
  @FunctionalInterface
  interface Defect {
    void apply(Path dir) throws IOException;
  }

  static List<Entry> fixture(Path dir) {
    return new ArrayList<>(SafetensorsWriter.read(dir.resolve("model.safetensors")));
  }

  static void rewrite(Path dir, List<Entry> entries) {
    SafetensorsWriter.write(dir.resolve("model.safetensors"), entries);
  }

  static void editConfig(Path dir, String from, String to) throws IOException {
    Path cfg = dir.resolve("config.json");
    String text = Files.readString(cfg);
    if (!text.contains(from)) {
      throw new IllegalStateException("config.json has no " + from);
    }
    Files.writeString(cfg, text.replace(from, to));
  }

  static void raw(Path dir, long headerLength, String header, int dataBytes) {
    SafetensorsWriter.writeRaw(
        dir.resolve("model.safetensors"),
        headerLength,
        header.getBytes(StandardCharsets.UTF_8),
        new byte[dataBytes]);
  }

  static void shard(Path dir, String indexJson, List<Entry> first, List<Entry> second)
      throws IOException {
    Files.delete(dir.resolve("model.safetensors"));
    SafetensorsWriter.write(dir.resolve("model-00001-of-00002.safetensors"), first);
    SafetensorsWriter.write(dir.resolve("model-00002-of-00002.safetensors"), second);
    Files.writeString(dir.resolve("model.safetensors.index.json"), indexJson);
  }

  static String index(List<Entry> first, List<Entry> second) {
    StringBuilder sb = new StringBuilder("{\"metadata\": {}, \"weight_map\": {");
    List<String> parts = new ArrayList<>();
    first.forEach(e -> parts.add("\"" + e.name() + "\": \"model-00001-of-00002.safetensors\""));
    second.forEach(e -> parts.add("\"" + e.name() + "\": \"model-00002-of-00002.safetensors\""));
    return sb.append(String.join(", ", parts)).append("}}").toString();
  }

  static Stream<Arguments> defects() {
    String q = "model.layers.0.self_attn.q_proj.weight";
    return Stream.of(
        Arguments.of(
            "truncated below the length field",
            (Defect) d -> Files.write(d.resolve("model.safetensors"), new byte[5]),
            List.of("model.safetensors", "truncated file", "size=5")),
        Arguments.of(
            "truncated inside the data section",
            (Defect)
                d -> {
                  byte[] all = Files.readAllBytes(d.resolve("model.safetensors"));
                  Files.write(d.resolve("model.safetensors"), Arrays.copyOf(all, all.length - 100));
                },
            List.of("model.safetensors", "tensor model.norm.weight", "leaves the data section")),
        Arguments.of(
            "header length beyond the file",
            (Defect) d -> raw(d, 1_000_000, "{}", 0),
            List.of("model.safetensors", "header length=1000000", "beyond the file")),
        Arguments.of(
            "malformed header JSON",
            (Defect)
                d -> {
                  String h = "{\"a\": {\"dtype\": \"F32\",}}";
                  raw(d, h.length(), h, 0);
                },
            List.of("model.safetensors", "malformed JSON at offset")),
        Arguments.of(
            "tensor byte range leaves the data section",
            (Defect)
                d -> {
                  String h =
                      "{\"w\": {\"dtype\": \"F32\", \"shape\": [1024], \"data_offsets\": [0, 4096]}}";
                  raw(d, h.length(), h, 64);
                },
            List.of("model.safetensors", "tensor w", "[0, 4096)", "leaves the data section of 64")),
        Arguments.of(
            "byte range disagrees with shape",
            (Defect)
                d -> {
                  String h =
                      "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 8]}}";
                  raw(d, h.length(), h, 64);
                },
            List.of("model.safetensors", "tensor w", "needs 16")),
        Arguments.of(
            "unsupported dtype",
            (Defect)
                d -> {
                  String h =
                      "{\"w\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [0, 16]}}";
                  raw(d, h.length(), h, 16);
                },
            List.of("model.safetensors", "tensor w", "dtype=F64")),
        Arguments.of(
            "shape disagrees with config.json",
            (Defect)
                d -> {
                  List<Entry> es = fixture(d);
                  es.replaceAll(e -> e.name().equals(q) ? e.withShape(32, 128) : e);
                  rewrite(d, es);
                },
            List.of("model.safetensors", "tensor " + q, "[32, 128]", "implies [64, 64]")),
        Arguments.of(
            "missing tensor",
            (Defect)
                d -> {
                  List<Entry> es = fixture(d);
                  es.removeIf(e -> e.name().equals("model.layers.1.mlp.up_proj.weight"));
                  rewrite(d, es);
                },
            List.of("tensor model.layers.1.mlp.up_proj.weight is missing", "LlamaForCausalLM")),
        Arguments.of(
            "unexpected tensor",
            (Defect)
                d -> {
                  List<Entry> es = fixture(d);
                  es.add(es.getFirst().withName("model.layers.7.extra.weight"));
                  rewrite(d, es);
                },
            List.of("model.safetensors", "tensor model.layers.7.extra.weight is unexpected")),
        Arguments.of(
            "weight stored as integers",
            (Defect)
                d -> {
                  List<Entry> es = fixture(d);
                  es.replaceAll(
                      e -> e.name().equals(q) ? new Entry(q, "I32", e.shape(), e.bytes()) : e);
                  rewrite(d, es);
                },
            List.of("model.safetensors", "tensor " + q, "dtype=I32")),
        Arguments.of(
            "unknown architectures entry",
            (Defect) d -> editConfig(d, "LlamaForCausalLM", "FooForCausalLM"),
            List.of("config.json", "architectures=[FooForCausalLM] is not supported")),
        Arguments.of(
            "unknown model_type",
            (Defect) d -> editConfig(d, "\"model_type\": \"llama\"", "\"model_type\": \"foo\""),
            List.of("config.json", "model_type=foo is not supported")),
        Arguments.of(
            "model_type of another architecture",
            (Defect) d -> editConfig(d, "\"model_type\": \"llama\"", "\"model_type\": \"qwen2\""),
            List.of("config.json", "model_type=qwen2 does not match")),
        Arguments.of(
            "malformed config.json",
            (Defect) d -> editConfig(d, "\"vocab_size\": 512", "\"vocab_size\": 512,"),
            List.of("config.json", "malformed JSON")),
        Arguments.of(
            "config.json missing",
            (Defect) d -> Files.delete(d.resolve("config.json")),
            List.of("config.json", "missing")),
        Arguments.of(
            "no weight files",
            (Defect) d -> Files.delete(d.resolve("model.safetensors")),
            List.of("model.safetensors.index.json", "no weights")),
        Arguments.of(
            "index names a shard that does not exist",
            (Defect)
                d -> {
                  List<Entry> es = fixture(d);
                  List<Entry> a = es.subList(0, 5);
                  List<Entry> b = es.subList(5, es.size());
                  shard(d, index(a, b), a, b);
                  Files.delete(d.resolve("model-00002-of-00002.safetensors"));
                },
            List.of(
                "model.safetensors.index.json",
                "model-00002-of-00002.safetensors",
                "does not exist")),
        Arguments.of(
            "index lists a tensor its shard lacks",
            (Defect)
                d -> {
                  List<Entry> es = fixture(d);
                  List<Entry> a = es.subList(0, 5);
                  List<Entry> b = es.subList(5, es.size());
                  shard(d, index(a, b), a, b.subList(1, b.size()));
                },
            List.of("model-00002-of-00002.safetensors", "tensor " + fixtureName(5), "missing")),
        Arguments.of(
            "shard holds a tensor the index does not list",
            (Defect)
                d -> {
                  List<Entry> es = fixture(d);
                  List<Entry> a = es.subList(0, 5);
                  List<Entry> b = es.subList(5, es.size());
                  shard(d, index(a, b.subList(1, b.size())), a, b);
                },
            List.of("model-00002-of-00002.safetensors", "tensor " + fixtureName(5), "unexpected")));
  }

  static String fixtureName(int i) {
    return SafetensorsWriter.read(Fixtures.folder("llama").resolve("model.safetensors"))
        .get(i)
        .name();
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("defects")
  void shouldNameTheFileAndTensorWhenTheCheckpointIsBroken(
      String defect, Defect apply, List<String> expected) throws IOException {
    Path dir = Fixtures.copyCheckpoint("llama", tmp);
    apply.apply(dir);
    CheckpointException e = assertThrows(CheckpointException.class, () -> CausalLm.load(dir));
    for (String s : expected) {
      assertTrue(
          e.getMessage().contains(s), defect + ": message lacks \"" + s + "\": " + e.getMessage());
    }
  }
}
