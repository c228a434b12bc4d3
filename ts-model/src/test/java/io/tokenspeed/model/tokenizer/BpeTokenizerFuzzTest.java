package io.tokenspeed.model.tokenizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.checkpoint.Json;
import io.tokenspeed.model.checkpoint.JsonMutator;
import io.tokenspeed.testkit.DecoderContract;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * Loads tens of thousands of damaged {@code tokenizer.json} (and {@code tokenizer_config.json})
 * documents. Each must either load or be refused with a {@link TokenizerFormatException} whose
 * message is one line — never another exception or error, and never a hang. A tokenizer that loads
 * must then encode and decode without throwing: every id it produces lies in {@code [0,
 * vocabSize)}, and streaming decoding gives the same text as a full decode. Undamaged documents
 * round-trip their text.
 *
 * <p>The valid documents vary every supported component (normalizer, Split and ByteLevel
 * pre-tokenizers, merges as strings or pairs, added tokens, decoder and post-processor forms); the
 * damage is to the text (truncation, stray characters, tokens swapped, deep nesting) and to the
 * tree (members dropped, values of other types, huge or negative ids, broken merges, unknown keys).
 * A failure message carries the seed, the input's number and the document, so it replays.
 */
class BpeTokenizerFuzzTest {

  private static final long SEED = 20261203L;
  private static final int BATCHES = 6;
  private static final int PER_BATCH = 5_000;

  private static final String[] TEXTS = {
    "hello world",
    "abc abcabc helloworld",
    " <|end|>x<think>y ",
    "tab\tnew\nline  end",
    "\u00e9t\u00e9 \u4e2d\u6587 \ud83d\ude00!",
    "",
    "hello<|end|>hello<|end|>",
  };

  private static final String[][] MERGES = {
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"},
    {"Ġw", "or"}, {"Ġwor", "l"}, {"Ġworl", "d"}, {"a", "b"}, {"ab", "c"}, {"Ġ", "a"}
  };

  private enum Mutation {
    TEXT_DAMAGED,
    TREE_DAMAGED,
    CONFIG_DAMAGED,
    VALID
  }

  private record Doc(Object tree, String text, Object configTree, String config) {}

  @Test
  void shouldLoadOrRefuseWithAFormatExceptionWhenFuzzedWithDamagedTokenizerJson() {
    SplittableRandom rnd = new SplittableRandom(SEED);
    List<Doc> corpus = new ArrayList<>();
    for (int i = 0; i < 32; i++) {
      corpus.add(doc(rnd));
    }
    Map<Mutation, int[]> counts = new EnumMap<>(Mutation.class); // [loaded, refused]
    for (Mutation m : Mutation.values()) {
      counts.put(m, new int[2]);
    }
    for (int batch = 0; batch < BATCHES; batch++) {
      int first = batch * PER_BATCH;
      assertTimeoutPreemptively(
          Duration.ofSeconds(60),
          () -> {
            for (int i = first; i < first + PER_BATCH; i++) {
              Mutation m = Mutation.values()[rnd.nextInt(Mutation.values().length)];
              Doc d = corpus.get(rnd.nextInt(corpus.size()));
              String json = d.text();
              String config = d.config();
              switch (m) {
                case TEXT_DAMAGED -> json = damageText(json, rnd);
                case TREE_DAMAGED -> json = damageTree(d.tree(), rnd);
                case CONFIG_DAMAGED ->
                    config =
                        config == null || rnd.nextBoolean()
                            ? damageText(config == null ? "{}" : config, rnd)
                            : damageTree(d.configTree(), rnd);
                case VALID -> {}
              }
              counts.get(m)[check(json, config, m, i) ? 0 : 1]++;
            }
          },
          () -> "seed=" + SEED + ": batch starting at input " + first + " did not finish");
    }
    for (Mutation m : Mutation.values()) {
      int[] c = counts.get(m);
      assertTrue(m == Mutation.VALID ? c[1] == 0 : c[1] > 0 && c[0] > 0, m + " " + toString(c));
    }
  }

  /** True when the documents loaded (and the tokenizer passed its checks), false when refused. */
  private static boolean check(String json, String config, Mutation m, int i) {
    String replay =
        "seed="
            + SEED
            + " input "
            + i
            + " ("
            + m
            + "): tokenizer.json="
            + shorten(json)
            + " tokenizer_config.json="
            + shorten(config)
            + ": ";
    BpeTokenizer t;
    try {
      t = BpeTokenizer.fromJson(json, config);
    } catch (TokenizerFormatException e) {
      DecoderContract.assertClearMessage(e, () -> replay); // present, not blank, one line
      return false;
    } catch (Throwable e) {
      throw new AssertionError(replay + "threw " + e, e);
    }
    try {
      int vocabSize = t.vocabSize();
      assertTrue(
          vocabSize <= BpeTokenizer.MAX_TOKEN_ID_EXCLUSIVE,
          () -> replay + "vocabSize " + vocabSize);
      for (String text : TEXTS) {
        int[] ids = t.encode(text);
        int[] plain = t.encodeAsPlainText(text);
        for (int[] encoded : List.of(ids, plain)) {
          for (int id : encoded) {
            assertTrue(
                id >= 0 && id < vocabSize,
                () -> replay + "id " + id + " outside [0, " + vocabSize + ") for " + text);
          }
          for (boolean skip : new boolean[] {false, true}) {
            String full = t.decode(encoded, skip);
            StreamingDecoder stream = t.newStreamingDecoder(skip);
            StringBuilder streamed = new StringBuilder();
            for (int id : encoded) {
              streamed.append(stream.onToken(id));
            }
            streamed.append(stream.flush());
            assertEquals(full, streamed.toString(), () -> replay + "streaming decode of " + text);
          }
        }
        if (m == Mutation.VALID || m == Mutation.CONFIG_DAMAGED) {
          assertEquals(text, t.decode(plain), () -> replay + "round trip of " + text);
          assertEquals(text, t.decode(ids), () -> replay + "round trip of " + text);
        }
      }
      int[] odd = {-1, vocabSize, Integer.MAX_VALUE, Integer.MIN_VALUE, 0, vocabSize - 1};
      t.decode(odd, false);
      t.decode(odd, true);
      StreamingDecoder stream = t.newStreamingDecoder(true);
      for (int id : odd) {
        stream.onToken(id);
      }
      stream.flush();
      if (m == Mutation.VALID) {
        assertArrayEquals(
            new int[] {t.specialTokens().idOf("<|end|>").orElseThrow()},
            t.encode("<|end|>"),
            replay);
      }
    } catch (AssertionError e) {
      throw e;
    } catch (Throwable e) {
      throw new AssertionError(replay + "a loaded tokenizer threw " + e, e);
    }
    return true;
  }

  private static String damageText(String text, SplittableRandom rnd) {
    JsonMutator.TextMutation[] all = JsonMutator.TextMutation.values();
    return JsonMutator.mutateText(all[rnd.nextInt(all.length)], text, rnd);
  }

  private static String damageTree(Object tree, SplittableRandom rnd) {
    JsonMutator.TreeMutation[] all = JsonMutator.TreeMutation.values();
    return JsonMutator.write(
        JsonMutator.mutateTree(all[rnd.nextInt(all.length)], tree, rnd).root());
  }

  // ---------------------------------------------------------------- valid documents

  /** A valid pair of documents whose components are drawn at random. */
  private static Doc doc(SplittableRandom rnd) {
    Map<String, Object> vocab = new LinkedHashMap<>();
    for (int b = 0; b < 256; b++) {
      vocab.put(String.valueOf(ByteLevel.charOf(b)), (long) b);
    }
    List<Object> merges = new ArrayList<>();
    boolean pairs = rnd.nextBoolean();
    for (String[] merge : MERGES) {
      vocab.putIfAbsent(merge[0] + merge[1], (long) vocab.size());
      merges.add(pairs ? List.of(merge[0], merge[1]) : merge[0] + " " + merge[1]);
    }
    long end = vocab.size();
    List<Object> added =
        List.of(
            addedToken(end, "<|end|>", true, false),
            addedToken(end + 1, "<think>", false, rnd.nextBoolean()));

    Map<String, Object> model = new LinkedHashMap<>();
    if (rnd.nextBoolean()) {
      model.put("type", "BPE");
    }
    model.put("dropout", rnd.nextBoolean() ? null : 0.0);
    model.put("unk_token", null);
    model.put("continuing_subword_prefix", rnd.nextBoolean() ? null : "");
    model.put("end_of_word_suffix", rnd.nextBoolean() ? null : "");
    model.put("fuse_unk", false);
    model.put("byte_fallback", false);
    model.put("ignore_merges", rnd.nextBoolean());
    model.put("vocab", vocab);
    model.put("merges", merges);

    Map<String, Object> root = new LinkedHashMap<>();
    root.put("version", "1.0");
    root.put("truncation", null);
    root.put("padding", null);
    root.put("added_tokens", added);
    root.put(
        "normalizer",
        switch (rnd.nextInt(3)) {
          case 0 -> null;
          case 1 -> Map.of("type", "NFC");
          default -> Map.of("type", "Sequence", "normalizers", List.of(Map.of("type", "NFC")));
        });
    Map<String, Object> byteLevel = new LinkedHashMap<>();
    byteLevel.put("type", "ByteLevel");
    byteLevel.put("add_prefix_space", false);
    byteLevel.put("trim_offsets", true);
    byteLevel.put("use_regex", rnd.nextBoolean());
    if (rnd.nextBoolean()) {
      root.put("pre_tokenizer", byteLevel);
    } else {
      Map<String, Object> split = new LinkedHashMap<>();
      split.put("type", "Split");
      split.put(
          "pattern",
          rnd.nextBoolean() ? Map.of("Regex", "\\s+|\\w+|[^\\s\\w]+") : Map.of("String", " "));
      String[] behaviors = {"Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
      split.put("behavior", behaviors[rnd.nextInt(behaviors.length)]);
      split.put("invert", rnd.nextBoolean());
      root.put(
          "pre_tokenizer", Map.of("type", "Sequence", "pretokenizers", List.of(split, byteLevel)));
    }
    root.put("post_processor", rnd.nextBoolean() ? null : Map.of("type", "ByteLevel"));
    root.put(
        "decoder",
        rnd.nextBoolean()
            ? Map.of("type", "ByteLevel")
            : Map.of("type", "Sequence", "decoders", List.of(Map.of("type", "ByteLevel"))));
    root.put("model", model);

    Map<String, Object> config = new LinkedHashMap<>();
    config.put("bos_token", null);
    config.put("eos_token", "<|end|>");
    config.put("pad_token", Map.of("content", "<|end|>", "special", true));
    config.put("model_max_length", 32768L);
    String text = JsonMutator.write(root);
    String configText = rnd.nextInt(4) == 0 ? null : JsonMutator.write(config);
    // The trees as the decoder's reader gives them, so that mutations see the same types.
    return new Doc(
        Json.parse(text),
        text,
        configText == null ? Json.parse("{}") : Json.parse(configText),
        configText);
  }

  private static Map<String, Object> addedToken(
      long id, String content, boolean special, boolean normalized) {
    Map<String, Object> t = new LinkedHashMap<>();
    t.put("id", id);
    t.put("content", content);
    t.put("single_word", false);
    t.put("lstrip", false);
    t.put("rstrip", false);
    t.put("normalized", normalized);
    t.put("special", special);
    return t;
  }

  private static String shorten(String s) {
    return s == null ? "null" : s.length() <= 4_000 ? s : s.substring(0, 4_000) + "...";
  }

  private static String toString(int[] c) {
    return Arrays.toString(c);
  }
}
