package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.server.ReactorRoot;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;
import java.util.stream.Collectors;
import java.util.stream.LongStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class KeysCommandTest {

  static final Path EXAMPLE =
      ReactorRoot.find().resolve("examples").resolve("identity-tiny-hybrid.json");

  /** 200 tokens: three full pages of 64 and a tail at the reusable bound 199. */
  static final String PROMPT = tokenList(200, 7);

  private static final JsonMapper JSON = new JsonMapper();

  @TempDir Path tmp;

  static String tokenList(int n, int seed) {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < n; i++) {
      sb.append(i == 0 ? "" : ",").append((i * 31 + seed) % 50_000);
    }
    return sb.toString();
  }

  static int[] tokens(String list) {
    return Stream.of(list.split(",")).mapToInt(Integer::parseInt).toArray();
  }

  /** The example identity built directly from ts-core records, not through the JSON reader. */
  static DeploymentIdentity exampleIdentity() {
    List<CacheField> kv = List.of(new CacheField("k", 2048), new CacheField("v", 2048));
    return new DeploymentIdentity(
        "tiny-hybrid",
        "rev-1",
        "w1",
        null,
        null,
        new CacheLayout(
            64,
            "bf16",
            List.of(
                new CacheGroupSpec(
                    0, new GroupKind.FullHistory(), 16, kv, new Sharding.HeadPartitioned()),
                new CacheGroupSpec(
                    1, new GroupKind.SlidingWindow(128), 32, kv, new Sharding.HeadPartitioned()),
                new CacheGroupSpec(
                    2,
                    new GroupKind.StateCheckpoints(),
                    64,
                    List.of(new CacheField("ssm", 8192)),
                    new Sharding.Replicated()))),
        1,
        1,
        1,
        1,
        "cpu-reference");
  }

  static final List<ReferenceKeys.Group> EXAMPLE_GROUPS =
      List.of(
          new ReferenceKeys.Group("full", 16, 0, 0),
          new ReferenceKeys.Group("swa", 32, 128, 0),
          new ReferenceKeys.Group("state", 64, 0, 0));

  private CliRun keys(Path identity, String... more) {
    List<String> args = new ArrayList<>(List.of("keys", "--identity", identity.toString()));
    args.addAll(List.of(more));
    CliRun run = CliRun.of(args.toArray(String[]::new));
    assertEquals(0, run.exitCode(), run::toString);
    assertEquals("", run.err(), run::toString);
    return run;
  }

  private Path write(String name, String text) throws IOException {
    return Files.writeString(tmp.resolve(name), text, StandardCharsets.UTF_8);
  }

  private static ObjectNode example() throws IOException {
    return (ObjectNode) JSON.readTree(EXAMPLE.toFile());
  }

  @Test
  void shouldMatchHandComputedLinesWhenPromptHasOnePageAndATail() {
    // Expected values computed independently of this code base by this Python script:
    //   import hashlib, json, struct
    //   identity = {"model_id": "m", "checkpoint_revision": "r1", "weight_version": "w1",
    //     "cache_signature": {"dtype": "bf16", "prefix_granularity": 4, "groups": [
    //       {"group_id": 0, "kind": "full", "block_granularity": 2,
    //        "fields": [{"name": "kv", "offset": 0, "bytes": 16}],
    //        "payload_bytes": 16, "sharding": "replicated"}]},
    //     "attention_tp_size": 1, "kvp_size": 1, "qcp_size": 1,
    //     "linear_attention_tp_size": 1, "attention_backend": "cpu-reference",
    //     "runtime_compat": 2}
    //   ns = "tsl3-" + hashlib.sha256(json.dumps(identity, sort_keys=True,
    //            separators=(",", ":")).encode()).hexdigest()
    //   def page(prev, toks):
    //     head = struct.pack("<I", 0) if prev is None else struct.pack("<I", 32) + prev
    //     return hashlib.sha256(head + struct.pack("<I", len(toks))
    //            + b"".join(struct.pack("<I", t) for t in toks)).digest()
    //   h0 = page(None, [1, 2, 3, 4]); tail5 = page(h0, [5])
    //   print(ns, h0.hex(), tail5.hex())
    // Boundaries: P=4 (rows 0 and 1 of page 0) and the tail 5 = len - 1 (row 2, partial page).
    String ns = "tsl3-a0c49f81080190ae34539d7fd932ee3739428095469e7feb5f5596ec04a78c36";
    String h0 = "65a73aeec7de373d87d0bb665fb1b7e9c490f83287b644f3ea58f3eea1ee271f";
    String tail5 = "80aef99c0abf24f66beb575177a35bb616d707a4eeab8c06f14fb1f364ae78d4";
    CliRun run =
        CliRun.of(
            "keys",
            "--model-id=m",
            "--checkpoint-revision=r1",
            "--weight-version=w1",
            "--attention-backend=cpu-reference",
            "--prefix-granularity=4",
            "--dtype=bf16",
            "--group=kind=full,bg=2,bytes=16",
            "--tokens=1,2,3,4,5,6");
    assertEquals(0, run.exitCode(), run::toString);
    assertEquals(
        List.of(
            "namespace " + ns,
            "{\"boundary\":4,\"group\":0,\"kind\":\"full\",\"row\":0,\"page_offset\":0,"
                + ("\"content_hash\":\"" + h0 + "\",\"key\":\"" + ns + "_" + h0 + "|g0|o0|r0\"}"),
            "{\"boundary\":4,\"group\":0,\"kind\":\"full\",\"row\":1,\"page_offset\":1,"
                + ("\"content_hash\":\"" + h0 + "\",\"key\":\"" + ns + "_" + h0 + "|g0|o1|r0\"}"),
            "{\"boundary\":5,\"group\":0,\"kind\":\"full\",\"row\":2,\"page_offset\":0,"
                + ("\"content_hash\":\"" + tail5 + "\",\"key\":\"" + ns + "_" + tail5)
                + "|g0|o0|r0\"}"),
        run.outLines());
  }

  @Test
  void shouldListKeysOfTheReferenceModelWhenHybridPromptSpansPagesAndATail() {
    CliRun run = keys(EXAMPLE, "--tokens", PROMPT);
    String ns = Namespace.of(exampleIdentity()).value();
    List<String> expected = new ArrayList<>();
    expected.add("namespace " + ns);
    expected.addAll(ReferenceKeys.lines(ns, 64, EXAMPLE_GROUPS, tokens(PROMPT), List.of(), 0));
    assertEquals(expected, run.outLines());
    // Three aligned boundaries and the tail: full rows 0..12, swa windows, four checkpoints.
    assertEquals(1 + 13 + (2 + 2 + 2 + 1) + 4, run.outLines().size());
  }

  @Test
  void shouldChangeContentHashesButNotNamespaceWhenExtraKeysAreGiven() {
    String text = "an adapter-specific prompt that crosses one page boundary of sixty-four bytes!";
    CliRun plain = keys(EXAMPLE, "--text", text);
    CliRun salted = keys(EXAMPLE, "--text", text, "--extra-key", "adapter-a", "--extra-key", "s");
    int[] bytes = text.chars().toArray();
    String ns = Namespace.of(exampleIdentity()).value();
    assertEquals(
        ReferenceKeys.lines(ns, 64, EXAMPLE_GROUPS, bytes, List.of("adapter-a", "s"), 0),
        salted.outLines().subList(1, salted.outLines().size()));
    assertEquals(plain.namespaceLine(), salted.namespaceLine());
    assertNotEquals(plain.outLines().get(1), salted.outLines().get(1));
  }

  @Test
  void shouldKeepNamespaceWhenIdentityKeysAreReordered() throws IOException {
    CliRun base = keys(EXAMPLE, "--tokens", PROMPT);
    ObjectNode reversed = reorder(example(), keys -> Collections.reverse(keys));
    ObjectNode shuffled = reorder(example(), keys -> Collections.shuffle(keys, new Random(42)));
    assertNotEquals(example().toString(), reversed.toString());
    for (ObjectNode variant : List.of(reversed, shuffled)) {
      Path file = write("reordered.json", variant.toPrettyString());
      assertEquals(base.out(), keys(file, "--tokens", PROMPT).out());
    }
  }

  /** A deep copy of {@code node} with the keys of every object permuted by {@code permute}. */
  private static ObjectNode reorder(ObjectNode node, Consumer<List<String>> permute) {
    List<String> names = new ArrayList<>();
    node.fieldNames().forEachRemaining(names::add);
    permute.accept(names);
    ObjectNode out = JSON.createObjectNode();
    for (String name : names) {
      out.set(name, reorderAny(node.get(name), permute));
    }
    return out;
  }

  private static JsonNode reorderAny(JsonNode node, Consumer<List<String>> permute) {
    if (node instanceof ObjectNode o) {
      return reorder(o, permute);
    }
    if (node instanceof ArrayNode a) {
      ArrayNode out = JSON.createArrayNode();
      for (Iterator<JsonNode> it = a.elements(); it.hasNext(); ) {
        out.add(reorderAny(it.next(), permute));
      }
      return out;
    }
    return node;
  }

  @Test
  void shouldKeepNamespaceWhenNonIdentityFieldsAreAdded() throws IOException {
    CliRun base = keys(EXAMPLE, "--tokens", PROMPT);
    ObjectNode config = example();
    config.put("dp_replica_id", 3);
    config.put("dp_rank", 1);
    config.put("dp_size", 4);
    config.put("host_allocation_id", "host-alloc-17");
    config.putObject("scheduling").put("max_running_requests", 64).put("chunked_prefill", 512);
    config.putObject("storage").put("backend", "redis").putObject("async").put("workers", 4);
    Path file = write("engine-config.json", config.toPrettyString());
    assertEquals(base.out(), keys(file, "--tokens", PROMPT).out());
  }

  static Stream<Arguments> identityChanges() {
    Map<String, Consumer<ObjectNode>> changes = new LinkedHashMap<>();
    changes.put("model_id", c -> c.put("model_id", "tiny-hybrid-2"));
    changes.put("checkpoint_revision", c -> c.put("checkpoint_revision", "rev-2"));
    changes.put("weight_version", c -> c.put("weight_version", "w2"));
    changes.put(
        "draft model",
        c -> c.put("draft_model_id", "tiny-draft").put("draft_weight_version", "dw1"));
    changes.put("attention_tp_size", c -> c.put("attention_tp_size", 2));
    changes.put("kvp_size", c -> c.put("kvp_size", 2));
    changes.put("qcp_size", c -> c.put("qcp_size", 2));
    changes.put("linear_attention_tp_size", c -> c.put("linear_attention_tp_size", 2));
    changes.put("attention_backend", c -> c.put("attention_backend", "flash"));
    changes.put("dtype", c -> cache(c).put("dtype", "fp8"));
    changes.put("prefix_granularity", c -> cache(c).put("prefix_granularity", 128));
    changes.put("block_granularity", c -> group(c, 0).put("block_granularity", 32));
    changes.put("window_tokens", c -> group(c, 1).put("window_tokens", 256));
    changes.put(
        "bytes_per_block",
        c -> ((ObjectNode) group(c, 0).get("fields").get(0)).put("bytes_per_block", 1024));
    changes.put(
        "field name", c -> ((ObjectNode) group(c, 0).get("fields").get(0)).put("name", "key"));
    changes.put("sharding", c -> group(c, 0).put("sharding", "replicated"));
    changes.put(
        "page_cyclic", c -> group(c, 0).put("sharding", "page_cyclic").put("shard_count", 1));
    changes.put("group kind", c -> group(c, 1).put("kind", "full").remove("window_tokens"));
    changes.put(
        "group order",
        c -> {
          ArrayNode groups = (ArrayNode) cache(c).get("groups");
          groups.insert(0, groups.remove(2));
        });
    changes.put("group removed", c -> ((ArrayNode) cache(c).get("groups")).remove(1));
    return changes.entrySet().stream().map(e -> Arguments.of(e.getKey(), e.getValue()));
  }

  private static ObjectNode cache(ObjectNode config) {
    return (ObjectNode) config.get("cache");
  }

  private static ObjectNode group(ObjectNode config, int index) {
    return (ObjectNode) cache(config).get("groups").get(index);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("identityChanges")
  void shouldChangeNamespaceWhenAnIdentityFieldChanges(String field, Consumer<ObjectNode> change)
      throws IOException {
    String base = keys(EXAMPLE, "--text", "x").namespaceLine();
    ObjectNode config = example();
    change.accept(config);
    Path file = write("changed.json", config.toPrettyString());
    assertNotEquals(base, keys(file, "--text", "x").namespaceLine(), field);
  }

  @Test
  void shouldGiveTheSameOutputWhenIdentityComesFromFlags() {
    CliRun fromFile = keys(EXAMPLE, "--tokens", PROMPT);
    CliRun fromFlags =
        CliRun.of(
            "keys",
            "--model-id",
            "tiny-hybrid",
            "--checkpoint-revision",
            "rev-1",
            "--weight-version",
            "w1",
            "--attention-backend",
            "cpu-reference",
            "--prefix-granularity",
            "64",
            "--dtype",
            "bf16",
            "--group",
            "kind=full,bg=16,field=k:2048,field=v:2048,sharding=head_partitioned",
            "--group",
            "kind=swa,bg=32,window=128,field=k:2048,field=v:2048,sharding=head_partitioned",
            "--group",
            "kind=state,bg=64,field=ssm:8192",
            "--tokens",
            PROMPT);
    assertEquals(fromFile.toString(), fromFlags.toString());
  }

  @Test
  void shouldPrintOnlyTheNamespaceWhenPromptIsOneToken() {
    CliRun run = keys(EXAMPLE, "--tokens", "5");
    assertEquals(List.of("namespace " + Namespace.of(exampleIdentity()).value()), run.outLines());
  }

  @Test
  void shouldListTheTailBelowTheLastPageWhenPromptEndsOnAPageBoundary() throws IOException {
    CliRun run = keys(EXAMPLE, "--tokens", tokenList(128, 3));
    List<Integer> boundaries = new ArrayList<>();
    for (String line : run.outLines().subList(1, run.outLines().size())) {
      int b = JSON.readTree(line).get("boundary").intValue();
      if (boundaries.isEmpty() || boundaries.getLast() != b) {
        boundaries.add(b);
      }
    }
    // 128 is a full page (written after prefill); 127 = len - 1 is the reusable tail.
    assertEquals(List.of(64, 127, 128), boundaries);
  }

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 40);
  }

  /**
   * Random layouts, shardings, ranks, extra keys and prompts through the flags path, compared with
   * the brute-force reference and with a namespace built from ts-core records.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldMatchReferenceModelWhenLayoutAndPromptAreRandom(long seed) {
    Random rnd = new Random(seed);
    int p = List.of(1, 2, 4, 8, 16).get(rnd.nextInt(5));
    int tp = List.of(1, 2, 4).get(rnd.nextInt(3));
    int rank = rnd.nextInt(tp);
    int numGroups = 1 + rnd.nextInt(3);
    List<String> args =
        new ArrayList<>(
            List.of(
                "keys",
                "--model-id=model-" + seed,
                "--checkpoint-revision=r",
                "--weight-version=w",
                "--attention-backend=b",
                "--prefix-granularity=" + p,
                "--dtype=bf16",
                "--attention-tp-size=" + tp,
                "--rank=" + rank));
    List<ReferenceKeys.Group> refGroups = new ArrayList<>();
    List<CacheGroupSpec> specs = new ArrayList<>();
    for (int g = 0; g < numGroups; g++) {
      String kind = List.of("full", "swa", "state").get(rnd.nextInt(3));
      int bg = divisorOf(p, rnd);
      int window = kind.equals("swa") ? 1 + rnd.nextInt(3 * p + 1) : 0;
      int shards = 0;
      String sharding = "replicated";
      if (!kind.equals("state") && rnd.nextBoolean()) {
        shards = divisorOf(tp, rnd);
        sharding = "page_cyclic";
      } else if (rnd.nextBoolean()) {
        sharding = "head_partitioned";
      }
      long bytes = 1 + rnd.nextInt(4096);
      String flag =
          "kind=%s,bg=%d,bytes=%d,sharding=%s".formatted(kind, bg, bytes, sharding)
              + (window > 0 ? ",window=" + window : "")
              + (shards > 0 ? ",shards=" + shards : "");
      args.add("--group=" + flag);
      refGroups.add(new ReferenceKeys.Group(kind, bg, window, shards));
      specs.add(
          new CacheGroupSpec(
              g,
              GroupKind.parse(kind, window > 0 ? window : null),
              bg,
              List.of(new CacheField("kv", bytes)),
              Sharding.parse(sharding, shards > 0 ? shards : null)));
    }
    List<String> extra = new ArrayList<>();
    for (int i = rnd.nextInt(3); i > 0; i--) {
      String key = List.of("lora-a", "salt-é", "", "x").get(rnd.nextInt(4));
      extra.add(key);
      args.add("--extra-key=" + key);
    }
    int[] tokens = new int[1 + rnd.nextInt(5 * p + 2)];
    for (int i = 0; i < tokens.length; i++) {
      tokens[i] = rnd.nextInt(1000);
    }
    args.add(
        "--tokens="
            + Arrays.stream(tokens).mapToObj(Integer::toString).collect(Collectors.joining(",")));

    DeploymentIdentity identity =
        new DeploymentIdentity(
            "model-" + seed,
            "r",
            "w",
            null,
            null,
            new CacheLayout(p, "bf16", specs),
            tp,
            1,
            1,
            1,
            "b");
    String ns = Namespace.of(identity).value();
    List<String> expected = new ArrayList<>();
    expected.add("namespace " + ns);
    expected.addAll(ReferenceKeys.lines(ns, p, refGroups, tokens, extra, rank));

    CliRun run = CliRun.of(args.toArray(String[]::new));
    assertEquals(0, run.exitCode(), () -> args + "\n" + run);
    assertEquals(expected, run.outLines(), () -> String.join(" ", args));
  }

  private static int divisorOf(int n, Random rnd) {
    List<Integer> divisors = new ArrayList<>();
    for (int d = 1; d <= n; d++) {
      if (n % d == 0) {
        divisors.add(d);
      }
    }
    return divisors.get(rnd.nextInt(divisors.size()));
  }
}
