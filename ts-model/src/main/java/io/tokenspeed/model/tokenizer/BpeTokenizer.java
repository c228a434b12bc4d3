package io.tokenspeed.model.tokenizer;

import java.nio.charset.StandardCharsets;
import java.text.Normalizer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Set;
import java.util.function.UnaryOperator;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The byte-level BPE tokenizer of a Hugging Face {@code tokenizer.json} (GPT-2, Llama 3, Qwen), in
 * pure Java. Encoding runs the stages the file declares, in the reference's order:
 *
 * <pre>
 *   text ──► added tokens ──► normalizer ──► pre-tokenizer ──► BPE per word ──► ids
 *            (split off,      (NFC, ...)     (Split regex,     (merges by rank,
 *             become ids)                     ByteLevel)        cached per word)
 * </pre>
 *
 * and decoding maps each id to its bytes (byte-level decoder) and reads them as UTF-8. It
 * reproduces the ids and text of Hugging Face {@code tokenizers} exactly on the Qwen3 reference
 * (216 texts of ASCII, whitespace, accents, CJK and emoji, checked by the tests).
 *
 * <h2>Why our own implementation</h2>
 *
 * The alternative was {@code ai.djl.huggingface:tokenizers} (0.38.0), a JNI binding of the Rust
 * library. It would be exact by construction, but its jar is 18 MB (a 15 MB {@code
 * libtokenizers.so} per platform), it pulls in {@code ai.djl:api} and through it gson, JNA,
 * commons-compress and slf4j, and at first use it extracts the native library into {@code
 * ~/.djl.ai} (unless {@code DJL_CACHE_DIR} or {@code ENGINE_CACHE_DIR} point elsewhere), falling
 * back to a download where no library is bundled for the platform. That is a native dependency
 * writing outside the temporary directories, with its own memory management across JNI, for a job
 * that is a few hundred lines of Java: a regex, a byte table and a merge loop. This implementation
 * matches the reference on every test line, so the engine stays pure Java: nothing is extracted,
 * downloaded or written at run time. The cost is that a tokenizer using a component not listed
 * below is refused (with a {@link TokenizerFormatException} naming it) instead of working; support
 * grows by adding components here, each checked against reference outputs.
 *
 * <h2>Supported components</h2>
 *
 * <ul>
 *   <li>model: {@code BPE} with {@code vocab} and {@code merges} (as {@code "a b"} strings or
 *       {@code ["a","b"]} pairs), {@code unk_token}, {@code ignore_merges}; no dropout, subword
 *       prefix or suffix, or byte fallback.
 *   <li>normalizer: none, {@code NFC}, {@code NFD}, {@code NFKC}, {@code NFKD}, {@code Sequence}.
 *   <li>pre_tokenizer: {@code Split} (regex or string, every behavior, invert), {@code ByteLevel}
 *       (prefix space, GPT-2 regex), {@code Sequence}; a {@code ByteLevel} step is required.
 *   <li>decoder: {@code ByteLevel}. post_processor: none, {@code ByteLevel}, or {@code
 *       TemplateProcessing} (accepted but not applied: encoding never adds bos/eos, see {@link
 *       Tokenizer}). truncation and padding are batch settings and are ignored.
 * </ul>
 *
 * <h2>Regexes</h2>
 *
 * The reference evaluates {@code Split} patterns with Oniguruma; they are compiled here with {@link
 * Pattern#UNICODE_CHARACTER_CLASS}, so that {@code \s} is Unicode white space (no-break space, em
 * space, ideographic space) as Oniguruma's is for UTF-8 text, and {@code (?i)} folds case by
 * Unicode rules. The patterns of GPT-2, Llama 3 and Qwen use only classes, alternation, counted
 * repetition and lookahead, which mean the same in both engines.
 *
 * <p>Immutable apart from the BPE word cache: thread-safe.
 */
public final class BpeTokenizer implements Tokenizer {

  /**
   * Token ids must lie below this (2^24, about 64 times the largest vocabularies in use). Decoding
   * keeps a table indexed by id, so an id of two billion in a damaged file would otherwise ask for
   * gigabytes before anything else is checked.
   */
  public static final int MAX_TOKEN_ID_EXCLUSIVE = 1 << 24;

  /**
   * The most ids below the largest one that may be left undefined (2^16). The id table is sized by
   * the largest id, so without this a file of a hundred bytes naming one id near {@link
   * #MAX_TOKEN_ID_EXCLUSIVE} would make loading allocate about 84 MB; real vocabularies are dense
   * (their added tokens follow the model's vocabulary), so the table stays proportional to the
   * file.
   */
  public static final int MAX_UNUSED_IDS = 1 << 16;

  /** GPT-2's pre-tokenizer regex, used by a {@code ByteLevel} step with {@code use_regex}. */
  static final String GPT2_PATTERN =
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

  private final BpeModel model;
  private final UnaryOperator<String> normalizer;
  private final List<PreTokenizerStep> preTokenizer;

  /** Added tokens matched on raw text / on normalized text, by whether specials are matched. */
  private final AddedTokens rawAll;

  private final AddedTokens rawPlain;
  private final AddedTokens normalizedAll;
  private final AddedTokens normalizedPlain;

  /** Bytes of each id for decoding; null where an id has no token. */
  private final byte[][] tokenBytes;

  private final boolean[] specialIds;
  private final SpecialTokens specialTokens;

  private BpeTokenizer(
      BpeModel model,
      UnaryOperator<String> normalizer,
      List<PreTokenizerStep> preTokenizer,
      List<AddedTokens.Token> added,
      byte[][] tokenBytes,
      SpecialTokens specialTokens) {
    this.model = model;
    this.normalizer = normalizer;
    this.preTokenizer = List.copyOf(preTokenizer);
    List<AddedTokens.Token> raw = added.stream().filter(t -> !t.normalized()).toList();
    List<AddedTokens.Token> norm = added.stream().filter(AddedTokens.Token::normalized).toList();
    this.rawAll = AddedTokens.of(raw);
    this.rawPlain = AddedTokens.of(raw.stream().filter(t -> !t.special()).toList());
    this.normalizedAll = AddedTokens.of(norm);
    this.normalizedPlain = AddedTokens.of(norm.stream().filter(t -> !t.special()).toList());
    this.tokenBytes = tokenBytes;
    this.specialIds = new boolean[tokenBytes.length];
    for (AddedTokens.Token t : added) {
      if (t.special()) {
        specialIds[t.id()] = true;
      }
    }
    this.specialTokens = specialTokens;
  }

  /** One JSON document of a tokenizer folder, read by the module's strict JSON reader. */
  private static Object parseJson(String text, String file) {
    try {
      return io.tokenspeed.model.checkpoint.Json.parse(text);
    } catch (IllegalArgumentException e) {
      throw new TokenizerFormatException(file + ": " + e.getMessage());
    }
  }

  /**
   * Builds a tokenizer from the text of a {@code tokenizer.json} and, if not null, of a {@code
   * tokenizer_config.json} (for bos, eos and pad).
   *
   * @throws TokenizerFormatException if either is malformed or uses an unsupported component
   */
  public static BpeTokenizer fromJson(String tokenizerJson, String tokenizerConfigJson) {
    Map<String, Object> root =
        asObject(parseJson(tokenizerJson, "tokenizer.json"), "tokenizer.json");
    Map<String, Object> modelJson = requireObject(root, "model", "tokenizer.json");
    String modelType = optString(modelJson, "type", "model");
    if (modelType == null && modelJson.containsKey("merges")) {
      modelType = "BPE"; // older files omit the type
    }
    if (!"BPE".equals(modelType)) {
      throw unsupported("model.type", modelType, "BPE");
    }
    checkModelOptions(modelJson);

    Map<String, Object> vocabJson = requireObject(modelJson, "vocab", "model");
    Map<String, Integer> vocab = new HashMap<>(vocabJson.size() * 2);
    int maxId = -1;
    for (Map.Entry<String, Object> e : vocabJson.entrySet()) {
      int id = asId(e.getValue(), "model.vocab[\"" + e.getKey() + "\"]");
      vocab.put(e.getKey(), id);
      maxId = Math.max(maxId, id);
    }
    String[][] merges = readMerges(modelJson);

    String unk = optString(modelJson, "unk_token", "model");
    int unkId = -1;
    if (unk != null) {
      Integer id = vocab.get(unk);
      if (id == null) {
        throw new TokenizerFormatException("model.unk_token=\"" + unk + "\" is not in model.vocab");
      }
      unkId = id;
    }
    boolean ignoreMerges = optBoolean(modelJson, "ignore_merges", "model");
    BpeModel model = new BpeModel(vocab, merges, unkId, ignoreMerges);

    List<AddedTokens.Token> added = readAddedTokens(root);
    for (AddedTokens.Token t : added) {
      maxId = Math.max(maxId, t.id());
    }

    UnaryOperator<String> normalizer = readNormalizer(root.get("normalizer"), "normalizer");
    List<PreTokenizerStep> preTokenizer = new ArrayList<>();
    readPreTokenizer(root.get("pre_tokenizer"), "pre_tokenizer", preTokenizer);
    if (preTokenizer.stream().noneMatch(s -> s instanceof ByteLevelStep)) {
      throw new TokenizerFormatException(
          "pre_tokenizer has no ByteLevel step: only byte-level BPE is supported");
    }
    checkDecoder(root.get("decoder"), "decoder");
    checkPostProcessor(root.get("post_processor"), "post_processor");

    Set<Integer> ids = new HashSet<>(vocab.values()); // an added token may repeat a vocab id
    for (AddedTokens.Token t : added) {
      ids.add(t.id());
    }
    int definedIds = ids.size();
    if (maxId + 1 - definedIds > MAX_UNUSED_IDS) {
      throw new TokenizerFormatException(
          "the largest token id is "
              + maxId
              + ", but model.vocab and added_tokens define "
              + definedIds
              + " ids: at most "
              + MAX_UNUSED_IDS
              + " ids below the largest may be undefined (the id table is sized by the largest id)");
    }
    byte[][] tokenBytes = new byte[maxId + 1][];
    for (Map.Entry<String, Integer> e : vocab.entrySet()) {
      tokenBytes[e.getValue()] = ByteLevel.decodeToken(e.getKey());
    }
    Map<String, Integer> specialByContent = new HashMap<>();
    Map<String, Integer> addedByContent = new HashMap<>();
    for (AddedTokens.Token t : added) {
      tokenBytes[t.id()] = ByteLevel.decodeToken(t.content());
      addedByContent.put(t.content(), t.id());
      if (t.special()) {
        specialByContent.put(t.content(), t.id());
      }
    }
    SpecialTokens specials =
        readSpecialTokens(tokenizerConfigJson, addedByContent, vocab, specialByContent);
    return new BpeTokenizer(model, normalizer, preTokenizer, added, tokenBytes, specials);
  }

  @Override
  public int[] encodeAsPlainText(String text) {
    return encode(text, false);
  }

  @Override
  public int[] encode(String text) {
    return encode(text, true);
  }

  private int[] encode(String text, boolean withSpecials) {
    IntList out = new IntList(text.length() / 3 + 8);
    AddedTokens normalizedTokens = withSpecials ? normalizedAll : normalizedPlain;
    AddedTokens.Sink words =
        new AddedTokens.Sink() {
          @Override
          public void onText(String piece) {
            encodePlain(piece, out);
          }

          @Override
          public void onToken(int id) {
            out.add(id);
          }
        };
    (withSpecials ? rawAll : rawPlain)
        .split(
            text,
            new AddedTokens.Sink() {
              @Override
              public void onText(String segment) {
                normalizedTokens.split(normalizer.apply(segment), words);
              }

              @Override
              public void onToken(int id) {
                out.add(id);
              }
            });
    return out.toArray();
  }

  /** Pre-tokenizes text that holds no added token and runs BPE on each word. */
  private void encodePlain(String text, IntList out) {
    List<String> pieces = new ArrayList<>();
    pieces.add(text);
    for (PreTokenizerStep step : preTokenizer) {
      List<String> next = new ArrayList<>(pieces.size() * 4);
      for (String piece : pieces) {
        step.split(piece, next);
      }
      pieces = next;
    }
    for (String word : pieces) {
      model.encodeWord(word, word.getBytes(StandardCharsets.UTF_8), out);
    }
  }

  @Override
  public String decode(int[] ids, boolean skipSpecialTokens) {
    int length = 0;
    for (int id : ids) {
      byte[] b = bytesOf(id, skipSpecialTokens);
      length += b == null ? 0 : b.length;
    }
    byte[] all = new byte[length];
    int pos = 0;
    for (int id : ids) {
      byte[] b = bytesOf(id, skipSpecialTokens);
      if (b != null) {
        System.arraycopy(b, 0, all, pos, b.length);
        pos += b.length;
      }
    }
    return new String(all, StandardCharsets.UTF_8);
  }

  @Override
  public StreamingDecoder newStreamingDecoder(boolean skipSpecialTokens) {
    return new StreamingDecoder(id -> bytesOf(id, skipSpecialTokens));
  }

  private byte[] bytesOf(int id, boolean skipSpecialTokens) {
    if (id < 0 || id >= tokenBytes.length || (skipSpecialTokens && specialIds[id])) {
      return null;
    }
    return tokenBytes[id];
  }

  @Override
  public int vocabSize() {
    return tokenBytes.length;
  }

  @Override
  public SpecialTokens specialTokens() {
    return specialTokens;
  }

  // ---------------------------------------------------------------- pre-tokenizer steps

  /** One pre-tokenizer stage: splits a piece into smaller pieces, appended to {@code out}. */
  sealed interface PreTokenizerStep permits SplitStep, ByteLevelStep {
    void split(String piece, List<String> out);
  }

  /** What a {@code Split} step does with the pattern's matches. */
  enum Behavior {
    REMOVED,
    ISOLATED,
    MERGED_WITH_PREVIOUS,
    MERGED_WITH_NEXT,
    CONTIGUOUS
  }

  /** Splits on a pattern; matches are kept, dropped or merged as {@code behavior} says. */
  record SplitStep(Pattern pattern, Behavior behavior, boolean invert) implements PreTokenizerStep {

    @Override
    public void split(String piece, List<String> out) {
      if (piece.isEmpty()) {
        return;
      }
      // Segments of the piece as [start, end, isMatch] triples.
      List<int[]> segments = new ArrayList<>();
      Matcher m = pattern.matcher(piece);
      int prev = 0;
      while (m.find()) {
        if (m.start() == m.end()) {
          continue;
        }
        if (prev != m.start()) {
          segments.add(new int[] {prev, m.start(), invert ? 1 : 0});
        }
        segments.add(new int[] {m.start(), m.end(), invert ? 0 : 1});
        prev = m.end();
      }
      if (prev != piece.length()) {
        segments.add(new int[] {prev, piece.length(), invert ? 1 : 0});
      }
      List<int[]> merged = new ArrayList<>(segments.size());
      switch (behavior) {
        case ISOLATED -> merged = segments;
        case REMOVED -> {
          for (int[] s : segments) {
            if (s[2] == 0) {
              merged.add(s);
            }
          }
        }
        case MERGED_WITH_PREVIOUS -> {
          boolean previousMatch = false;
          for (int[] s : segments) {
            boolean isMatch = s[2] == 1;
            if (isMatch && !previousMatch && !merged.isEmpty()) {
              merged.getLast()[1] = s[1];
            } else {
              merged.add(s);
            }
            previousMatch = isMatch;
          }
        }
        case MERGED_WITH_NEXT -> {
          boolean previousMatch = false;
          for (int i = segments.size() - 1; i >= 0; i--) {
            int[] s = segments.get(i);
            boolean isMatch = s[2] == 1;
            if (isMatch && !previousMatch && !merged.isEmpty()) {
              merged.getLast()[0] = s[0];
            } else {
              merged.add(s);
            }
            previousMatch = isMatch;
          }
          merged = merged.reversed();
        }
        case CONTIGUOUS -> {
          boolean previousMatch = false;
          for (int[] s : segments) {
            boolean isMatch = s[2] == 1;
            if (isMatch == previousMatch && !merged.isEmpty()) {
              merged.getLast()[1] = s[1];
            } else {
              merged.add(s);
            }
            previousMatch = isMatch;
          }
        }
      }
      for (int[] s : merged) {
        if (s[0] < s[1]) {
          out.add(piece.substring(s[0], s[1]));
        }
      }
    }
  }

  /**
   * The {@code ByteLevel} pre-tokenizer: optionally adds a leading space and splits with GPT-2's
   * regex. Its byte-to-character mapping is implicit here, since {@link BpeModel} works on bytes.
   */
  record ByteLevelStep(boolean addPrefixSpace, Pattern regex) implements PreTokenizerStep {

    @Override
    public void split(String piece, List<String> out) {
      String p = addPrefixSpace && !piece.startsWith(" ") ? " " + piece : piece;
      if (regex == null) {
        if (!p.isEmpty()) {
          out.add(p);
        }
        return;
      }
      new SplitStep(regex, Behavior.ISOLATED, false).split(p, out);
    }
  }

  // ---------------------------------------------------------------- reading tokenizer.json

  static Pattern compileRegex(String regex, String field) {
    try {
      return Pattern.compile(regex, Pattern.UNICODE_CHARACTER_CLASS | Pattern.UNICODE_CASE);
    } catch (java.util.regex.PatternSyntaxException e) {
      throw new TokenizerFormatException(
          field + " is not a supported regex: \"" + regex + "\": " + e.getDescription());
    }
  }

  private static void checkModelOptions(Map<String, Object> model) {
    Object dropout = model.get("dropout");
    if (dropout != null && !(dropout instanceof Number n && n.doubleValue() == 0.0)) {
      throw unsupported("model.dropout", dropout, "null");
    }
    for (String affix : List.of("continuing_subword_prefix", "end_of_word_suffix")) {
      String value = optString(model, affix, "model");
      if (value != null && !value.isEmpty()) {
        throw unsupported("model." + affix, value, "null or \"\"");
      }
    }
    if (optBoolean(model, "byte_fallback", "model")) {
      throw unsupported("model.byte_fallback", true, "false");
    }
  }

  private static String[][] readMerges(Map<String, Object> model) {
    Object mergesJson = model.get("merges");
    if (!(mergesJson instanceof List<?> list)) {
      throw new TokenizerFormatException(
          "model.merges is missing or not an array: found " + typeName(mergesJson));
    }
    String[][] merges = new String[list.size()][];
    for (int i = 0; i < list.size(); i++) {
      Object merge = list.get(i);
      String[] pair = null;
      if (merge instanceof String s) {
        int space = s.indexOf(' ', 1);
        if (space > 0 && s.indexOf(' ', space + 1) < 0) {
          pair = new String[] {s.substring(0, space), s.substring(space + 1)};
        }
      } else if (merge instanceof List<?> l
          && l.size() == 2
          && l.get(0) instanceof String a
          && l.get(1) instanceof String b) {
        pair = new String[] {a, b};
      }
      if (pair == null || pair[0].isEmpty() || pair[1].isEmpty()) {
        throw new TokenizerFormatException(
            "model.merges[" + i + "] is not a pair of tokens: " + merge);
      }
      merges[i] = pair;
    }
    return merges;
  }

  private static List<AddedTokens.Token> readAddedTokens(Map<String, Object> root) {
    Object json = root.get("added_tokens");
    if (json == null) {
      return List.of();
    }
    if (!(json instanceof List<?> list)) {
      throw new TokenizerFormatException("added_tokens is not an array: found " + typeName(json));
    }
    List<AddedTokens.Token> tokens = new ArrayList<>(list.size());
    for (int i = 0; i < list.size(); i++) {
      String path = "added_tokens[" + i + "]";
      Map<String, Object> t = asObject(list.get(i), path);
      String content = optString(t, "content", path);
      if (content == null) {
        throw new TokenizerFormatException(path + ".content is missing");
      }
      tokens.add(
          new AddedTokens.Token(
              asId(t.get("id"), path + ".id"),
              content,
              optBoolean(t, "special", path),
              optBoolean(t, "normalized", path),
              optBoolean(t, "lstrip", path),
              optBoolean(t, "rstrip", path),
              optBoolean(t, "single_word", path)));
    }
    return tokens;
  }

  private static UnaryOperator<String> readNormalizer(Object json, String path) {
    if (json == null) {
      return UnaryOperator.identity();
    }
    Map<String, Object> n = asObject(json, path);
    String type = optString(n, "type", path);
    return switch (type == null ? "" : type) {
      case "NFC" -> s -> Normalizer.normalize(s, Normalizer.Form.NFC);
      case "NFD" -> s -> Normalizer.normalize(s, Normalizer.Form.NFD);
      case "NFKC" -> s -> Normalizer.normalize(s, Normalizer.Form.NFKC);
      case "NFKD" -> s -> Normalizer.normalize(s, Normalizer.Form.NFKD);
      case "Sequence" -> {
        List<?> list = requireList(n, "normalizers", path);
        List<UnaryOperator<String>> steps = new ArrayList<>();
        for (int i = 0; i < list.size(); i++) {
          steps.add(readNormalizer(list.get(i), path + ".normalizers[" + i + "]"));
        }
        yield s -> {
          for (UnaryOperator<String> step : steps) {
            s = step.apply(s);
          }
          return s;
        };
      }
      default -> throw unsupported(path + ".type", type, "NFC, NFD, NFKC, NFKD, Sequence");
    };
  }

  private static void readPreTokenizer(Object json, String path, List<PreTokenizerStep> out) {
    if (json == null) {
      return;
    }
    Map<String, Object> p = asObject(json, path);
    String type = optString(p, "type", path);
    switch (type == null ? "" : type) {
      case "Sequence" -> {
        List<?> list = requireList(p, "pretokenizers", path);
        for (int i = 0; i < list.size(); i++) {
          readPreTokenizer(list.get(i), path + ".pretokenizers[" + i + "]", out);
        }
      }
      case "ByteLevel" -> {
        boolean useRegex = !p.containsKey("use_regex") || optBoolean(p, "use_regex", path);
        out.add(
            new ByteLevelStep(
                optBoolean(p, "add_prefix_space", path),
                useRegex ? compileRegex(GPT2_PATTERN, path) : null));
      }
      case "Split" -> {
        Map<String, Object> pattern = requireObject(p, "pattern", path);
        Pattern compiled;
        if (pattern.get("Regex") instanceof String regex) {
          compiled = compileRegex(regex, path + ".pattern.Regex");
        } else if (pattern.get("String") instanceof String literal) {
          compiled = Pattern.compile(Pattern.quote(literal));
        } else {
          throw new TokenizerFormatException(
              path + ".pattern must hold a \"Regex\" or a \"String\": found " + pattern.keySet());
        }
        String behavior = optString(p, "behavior", path);
        Behavior b =
            switch (behavior == null ? "" : behavior) {
              case "Removed" -> Behavior.REMOVED;
              case "Isolated" -> Behavior.ISOLATED;
              case "MergedWithPrevious" -> Behavior.MERGED_WITH_PREVIOUS;
              case "MergedWithNext" -> Behavior.MERGED_WITH_NEXT;
              case "Contiguous" -> Behavior.CONTIGUOUS;
              default ->
                  throw unsupported(
                      path + ".behavior",
                      behavior,
                      "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
            };
        out.add(new SplitStep(compiled, b, optBoolean(p, "invert", path)));
      }
      default -> throw unsupported(path + ".type", type, "Sequence, Split, ByteLevel");
    }
  }

  private static void checkDecoder(Object json, String path) {
    if (json == null) {
      throw new TokenizerFormatException(
          path + " is missing: byte-level BPE needs a ByteLevel decoder");
    }
    Map<String, Object> d = asObject(json, path);
    String type = optString(d, "type", path);
    if ("Sequence".equals(type)) {
      List<?> list = requireList(d, "decoders", path);
      if (list.size() == 1) {
        checkDecoder(list.getFirst(), path + ".decoders[0]");
        return;
      }
      throw new TokenizerFormatException(
          path
              + " is a Sequence of "
              + list.size()
              + " decoders: only a ByteLevel decoder is supported");
    }
    if (!"ByteLevel".equals(type)) {
      throw unsupported(path + ".type", type, "ByteLevel");
    }
  }

  private static void checkPostProcessor(Object json, String path) {
    if (json == null) {
      return;
    }
    Map<String, Object> p = asObject(json, path);
    String type = optString(p, "type", path);
    switch (type == null ? "" : type) {
      case "ByteLevel", "TemplateProcessing" -> {}
      case "Sequence" -> {
        List<?> list = requireList(p, "processors", path);
        for (int i = 0; i < list.size(); i++) {
          checkPostProcessor(list.get(i), path + ".processors[" + i + "]");
        }
      }
      default -> throw unsupported(path + ".type", type, "ByteLevel, TemplateProcessing, Sequence");
    }
  }

  private static SpecialTokens readSpecialTokens(
      String configJson,
      Map<String, Integer> addedByContent,
      Map<String, Integer> vocab,
      Map<String, Integer> specialByContent) {
    if (configJson == null) {
      return new SpecialTokens(
          OptionalInt.empty(), OptionalInt.empty(), OptionalInt.empty(), specialByContent);
    }
    Map<String, Object> config =
        asObject(parseJson(configJson, "tokenizer_config.json"), "tokenizer_config.json");
    OptionalInt[] ids = new OptionalInt[3];
    String[] fields = {"bos_token", "eos_token", "pad_token"};
    for (int i = 0; i < fields.length; i++) {
      Object value = config.get(fields[i]);
      String path = "tokenizer_config.json " + fields[i];
      if (value instanceof Map<?, ?> object) {
        value = object.get("content");
      }
      if (value == null) {
        ids[i] = OptionalInt.empty();
        continue;
      }
      if (!(value instanceof String content)) {
        throw new TokenizerFormatException(path + " is not a string: found " + typeName(value));
      }
      Integer id = addedByContent.get(content);
      if (id == null) {
        id = vocab.get(content);
      }
      if (id == null) {
        throw new TokenizerFormatException(
            path + "=\"" + content + "\" is neither an added token nor in model.vocab");
      }
      ids[i] = OptionalInt.of(id);
    }
    return new SpecialTokens(ids[0], ids[1], ids[2], specialByContent);
  }

  // ---------------------------------------------------------------- JSON field access

  @SuppressWarnings("unchecked")
  private static Map<String, Object> asObject(Object value, String path) {
    if (value instanceof Map<?, ?> map) {
      return (Map<String, Object>) map;
    }
    throw new TokenizerFormatException(path + " is not an object: found " + typeName(value));
  }

  private static Map<String, Object> requireObject(
      Map<String, Object> parent, String field, String path) {
    Object value = parent.get(field);
    if (value == null) {
      throw new TokenizerFormatException(path + "." + field + " is missing");
    }
    return asObject(value, path + "." + field);
  }

  private static List<?> requireList(Map<String, Object> parent, String field, String path) {
    Object value = parent.get(field);
    if (value instanceof List<?> list) {
      return list;
    }
    throw new TokenizerFormatException(
        path + "." + field + " is missing or not an array: found " + typeName(value));
  }

  private static String optString(Map<String, Object> parent, String field, String path) {
    Object value = parent.get(field);
    if (value == null || value instanceof String) {
      return (String) value;
    }
    throw new TokenizerFormatException(
        path + "." + field + " is not a string: found " + typeName(value));
  }

  private static boolean optBoolean(Map<String, Object> parent, String field, String path) {
    Object value = parent.get(field);
    if (value == null || value instanceof Boolean) {
      return value != null && (Boolean) value;
    }
    throw new TokenizerFormatException(
        path + "." + field + " is not a boolean: found " + typeName(value));
  }

  private static int asId(Object value, String path) {
    if (value instanceof Long l && l >= 0 && l < MAX_TOKEN_ID_EXCLUSIVE) {
      return (int) (long) l;
    }
    throw new TokenizerFormatException(
        path + " is not a token id in [0, " + MAX_TOKEN_ID_EXCLUSIVE + "): found " + value);
  }

  private static TokenizerFormatException unsupported(String field, Object value, String allowed) {
    return new TokenizerFormatException(
        "unsupported " + field + "=" + value + " (supported: " + allowed + ")");
  }

  private static String typeName(Object value) {
    return switch (value) {
      case null -> "nothing";
      case String s -> "a string";
      case Boolean b -> "a boolean";
      case Number n -> "a number";
      case List<?> l -> "an array";
      case Map<?, ?> m -> "an object";
      default -> value.getClass().getSimpleName();
    };
  }
}
