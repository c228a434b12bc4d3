package io.tokenspeed.model;

import io.tokenspeed.core.CacheField;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.model.checkpoint.Checkpoint;
import io.tokenspeed.model.checkpoint.CheckpointException;
import io.tokenspeed.model.checkpoint.Tensor;
import io.tokenspeed.model.checkpoint.TensorShape;
import io.tokenspeed.model.checkpoint.WeightSource;
import io.tokenspeed.model.config.DecoderDims;
import io.tokenspeed.model.config.Gemma3Config;
import io.tokenspeed.model.config.JambaConfig;
import io.tokenspeed.model.config.LlamaConfig;
import io.tokenspeed.model.config.MambaConfig;
import io.tokenspeed.model.config.ModelConfig;
import io.tokenspeed.model.config.ModelConfigs;
import io.tokenspeed.model.config.Qwen2Config;
import io.tokenspeed.model.config.Qwen3Config;
import io.tokenspeed.model.kernel.ComputePool;
import io.tokenspeed.model.kernel.PackedMatrix;
import io.tokenspeed.model.kernel.Rope;
import io.tokenspeed.model.kv.KvCache;
import io.tokenspeed.model.layer.Attention;
import io.tokenspeed.model.layer.BatchMetadata;
import io.tokenspeed.model.layer.CachedLayer;
import io.tokenspeed.model.layer.DecoderBlock;
import io.tokenspeed.model.layer.Embedding;
import io.tokenspeed.model.layer.LmHead;
import io.tokenspeed.model.layer.ResidualBlock;
import io.tokenspeed.model.layer.RmsNorm;
import io.tokenspeed.model.layer.SwiGluMlp;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A decoder-only causal language model loaded from a Hugging Face folder, computed on the CPU.
 *
 * <p>What it guarantees: the weights stay memory-mapped in the {@link Checkpoint} (closed with this
 * model); the layer structure and every tensor shape were checked against {@code config.json} at
 * load, and every tensor of the checkpoint is used; the cache layout it reports is the one its
 * forward pass reads and writes; and a forward pass computes each token's logits bit-identically
 * whatever else is in the batch, however the prompt was chunked, on however many threads, and in
 * whichever physical blocks its KV lives (each kernel states its part of that contract).
 *
 * <p>What it must never do: allocate, free or choose cache blocks, or decide what is cached. A
 * forward pass is handed block tables into a {@link KvCache} and writes exactly the slots of the
 * tokens it computes.
 *
 * <pre>
 *   tokens → Embedding → [DecoderBlock × L: RMSNorm → Attention(paged KV) → +x → RMSNorm → SwiGLU → +x]
 *          → RMSNorm (rows that need logits) → LmHead → logits
 *   Mamba:  [MambaBlock × L: RMSNorm → MambaMixer(state checkpoints) → +x]
 *   Jamba:  [HybridBlock × L: RMSNorm → Attention | MambaMixer → +x → RMSNorm → SwiGLU → +x]
 * </pre>
 *
 * <p>Recurrent mixers keep their state in the State group's checkpoint slots, read and written
 * through the request's state table (see {@code SelectiveScan}); like KV blocks, the forward pass
 * never chooses those slots.
 */
public final class CausalLm implements AutoCloseable {

  /** Element type of the KV the forward pass stores. */
  public static final String KV_DTYPE = "float32";

  private final ModelConfig config;
  private final Checkpoint checkpoint;
  private final ModelIdentity identity;
  private final Embedding embedding;
  private final List<ResidualBlock> blocks;
  private final RmsNorm finalNorm;
  private final LmHead lmHead;
  private final List<GroupKind> groupKinds;
  private final Collective collective;
  private final Shard shard;

  CausalLm(
      ModelConfig config,
      Checkpoint checkpoint,
      ModelIdentity identity,
      Embedding embedding,
      List<? extends ResidualBlock> blocks,
      RmsNorm finalNorm,
      LmHead lmHead,
      List<GroupKind> groupKinds,
      Collective collective,
      Shard shard) {
    this.config = config;
    this.checkpoint = checkpoint;
    this.identity = identity;
    this.embedding = embedding;
    this.blocks = List.copyOf(blocks);
    this.finalNorm = finalNorm;
    this.lmHead = lmHead;
    this.groupKinds = List.copyOf(groupKinds);
    this.collective = collective;
    this.shard = shard;
  }

  /** Loads {@code folder} with the folder name as model id and the default weight version. */
  public static CausalLm load(Path folder) {
    Path name = folder.toAbsolutePath().normalize().getFileName();
    return load(
        folder, name == null ? "model" : name.toString(), ModelIdentity.DEFAULT_WEIGHT_VERSION);
  }

  /**
   * Loads {@code folder}: opens and validates the checkpoint, parses the config, builds the layers.
   *
   * @throws CheckpointException naming the file (and tensor) at fault
   */
  public static CausalLm load(Path folder, String modelId, String weightVersion) {
    return load(folder, modelId, weightVersion, Collective.single());
  }

  /**
   * Loads this rank's share of {@code folder} for a tensor-parallel replica whose ranks are joined
   * by {@code collective} (see {@link Shard} for the split): the attention heads and their KV, the
   * MLP's columns, the vocabulary's rows of the LM head; the embedding, the norms and recurrent
   * mixers whole. Its forward pass computes with the other ranks through {@code collective}, which
   * stays the caller's; every rank must load the same folder.
   *
   * @throws CheckpointException naming the file (and tensor) at fault
   * @throws IllegalArgumentException when the model's dimensions do not split over the ranks
   */
  public static CausalLm load(
      Path folder, String modelId, String weightVersion, Collective collective) {
    return load(folder, modelId, weightVersion, collective, Shard.KvSplit.HEADS);
  }

  /**
   * {@link #load(Path, String, String, Collective)} with the KV of full-history attention split
   * over the ranks by {@code kvSplit}: by heads as there, or by pages ({@link Shard.KvSplit#PAGES}:
   * every rank holds every attention head, its full-history cache groups are page-cyclic over the
   * ranks, and each rank attends over the pages it owns).
   *
   * @throws CheckpointException naming the file (and tensor) at fault
   * @throws IllegalArgumentException when the model's dimensions do not split over the ranks
   */
  public static CausalLm load(
      Path folder,
      String modelId,
      String weightVersion,
      Collective collective,
      Shard.KvSplit kvSplit) {
    Checkpoint ckpt = Checkpoint.open(folder);
    try {
      ModelConfig config;
      try {
        config = ModelConfigs.parse(ckpt.config());
      } catch (IllegalArgumentException e) {
        throw new CheckpointException(
            folder.resolve(Checkpoint.CONFIG_FILE) + ": " + e.getMessage(), e);
      }
      WeightSource weights = new WeightSource(ckpt, config.architecture());
      Shard shard = new Shard(collective.rank(), collective.size(), kvSplit);
      CausalLm model = build(config, weights, ckpt, modelId, weightVersion, collective, shard);
      weights.requireAllTaken();
      return model;
    } catch (RuntimeException e) {
      ckpt.close();
      throw e;
    }
  }

  /**
   * The tensors a checkpoint for {@code config} must hold, in the order the builder asks for them:
   * the builder itself runs against a {@link WeightSource#planning planning} source, so this list
   * is, by construction, the one {@link #load} checks a folder against.
   */
  public static List<TensorShape> expectedTensors(ModelConfig config) {
    try (WeightSource plan = WeightSource.planning(config.architecture())) {
      build(
          config,
          plan,
          null,
          "plan",
          ModelIdentity.DEFAULT_WEIGHT_VERSION,
          Collective.single(),
          Shard.NONE);
      return plan.taken();
    }
  }

  private static CausalLm build(
      ModelConfig config,
      WeightSource weights,
      Checkpoint ckpt,
      String modelId,
      String version,
      Collective tp,
      Shard s) {
    return switch (config) {
      case Gemma3Config c -> Gemma3Builder.build(c, weights, ckpt, modelId, version, tp, s);
      case LlamaConfig c -> buildDecoder(c, weights, ckpt, modelId, version, tp, s);
      case Qwen2Config c -> buildDecoder(c, weights, ckpt, modelId, version, tp, s);
      case Qwen3Config c -> buildDecoder(c, weights, ckpt, modelId, version, tp, s);
      case MambaConfig c -> RecurrentModels.mamba(c, weights, ckpt, modelId, version, tp, s);
      case JambaConfig c -> RecurrentModels.jamba(c, weights, ckpt, modelId, version, tp, s);
    };
  }

  /** The checkpoint revision; a planning pass (no checkpoint) gets an all-zero placeholder. */
  static String revisionOf(Checkpoint ckpt) {
    return ckpt == null ? "0".repeat(64) : ckpt.fingerprint();
  }

  /**
   * One attention layer's projections under {@code a} (such as {@code model.layers.3.self_attn.}):
   * q, k, v and o, with the q/k/v biases and the output bias when the architecture has them; of
   * {@code shard}'s heads only (q, k, v and their biases by rows, o by columns; the output bias
   * whole).
   */
  static Attention attention(
      WeightSource w,
      String a,
      int layer,
      int group,
      DecoderDims d,
      boolean qkvBias,
      boolean outputBias,
      RmsNorm qNorm,
      RmsNorm kNorm,
      Rope rope,
      float scale,
      float softcap,
      Shard shard) {
    int hidden = d.hiddenSize();
    int hd = d.headDim();
    int qWidth = d.numHeads() * hd;
    int kvWidth = d.numKvHeads() * hd;
    Shard.Range qh = shard.queryHeads(d.numHeads());
    Shard.Range kvh = shard.kvHeads(d.numKvHeads());
    int q0 = qh.from() * hd;
    int qn = qh.count() * hd;
    int kv0 = kvh.from() * hd;
    int kvn = kvh.count() * hd;
    return new Attention(
        layer,
        group,
        rows(w.take(a + "q_proj.weight", qWidth, hidden), q0, qn),
        rows(w.take(a + "k_proj.weight", kvWidth, hidden), kv0, kvn),
        rows(w.take(a + "v_proj.weight", kvWidth, hidden), kv0, kvn),
        columns(w.take(a + "o_proj.weight", hidden, qWidth), q0, qn),
        qkvBias ? slice(w.take(a + "q_proj.bias", qWidth), q0, qn) : null,
        qkvBias ? slice(w.take(a + "k_proj.bias", kvWidth), kv0, kvn) : null,
        qkvBias ? slice(w.take(a + "v_proj.bias", kvWidth), kv0, kvn) : null,
        outputBias ? w.take(a + "o_proj.bias", hidden).toFloatArray() : null,
        qNorm,
        kNorm,
        rope,
        qh.count(),
        kvh.count(),
        hd,
        scale,
        softcap);
  }

  /** Rows {@code [from, from + n)} of the matrix {@code t} ({@code [out][in]}). */
  static PackedMatrix rows(Tensor t, int from, int n) {
    return PackedMatrix.block(t, from, n, 0, t.dim(1));
  }

  /** Columns {@code [from, from + n)} of the matrix {@code t} ({@code [out][in]}). */
  static PackedMatrix columns(Tensor t, int from, int n) {
    return PackedMatrix.block(t, 0, t.dim(0), from, n);
  }

  private static float[] slice(Tensor vector, int from, int n) {
    return java.util.Arrays.copyOfRange(vector.toFloatArray(), from, from + n);
  }

  /**
   * A gated MLP's three matrices under {@code p} ({@code gate_proj}, {@code up_proj}, {@code
   * down_proj}), of {@code shard}'s columns of the intermediate width only: gate and up by rows,
   * down by columns.
   */
  static PackedMatrix[] gatedMlp(WeightSource w, String p, int intermediate, int hidden, Shard s) {
    Shard.Range cols = s.even("intermediate_size", intermediate);
    return new PackedMatrix[] {
      rows(w.take(p + "gate_proj.weight", intermediate, hidden), cols.from(), cols.count()),
      rows(w.take(p + "up_proj.weight", intermediate, hidden), cols.from(), cols.count()),
      columns(w.take(p + "down_proj.weight", hidden, intermediate), cols.from(), cols.count())
    };
  }

  /**
   * The weight matrix {@code name} of shape {@code [out][in]}, for {@link
   * io.tokenspeed.model.kernel.MatMul}.
   */
  static PackedMatrix matrix(WeightSource w, String name, int out, int in) {
    return PackedMatrix.of(w.take(name, out, in));
  }

  /**
   * The LM head: the embedding when tied, else {@code lm_head.weight}; soft-capped when > 0; of
   * {@code shard}'s share of the vocabulary.
   */
  static LmHead lmHead(
      WeightSource w,
      Tensor embed,
      boolean tied,
      int vocabSize,
      int hidden,
      float softcap,
      Shard shard) {
    Tensor t = tied ? embed : w.take("lm_head.weight", vocabSize, hidden);
    Shard.Range ids = shard.vocab(vocabSize);
    return new LmHead(
        rows(t, ids.from(), ids.count()), tied, softcap, shard.vocabCounts(vocabSize));
  }

  private static CausalLm buildDecoder(
      ModelConfig config,
      WeightSource w,
      Checkpoint ckpt,
      String modelId,
      String weightVersion,
      Collective tp,
      Shard shard) {
    DecoderDims d = config.dims();
    int hidden = d.hiddenSize();
    float eps = (float) d.rmsNormEps();
    Tensor embed = w.take("model.embed_tokens.weight", d.vocabSize(), hidden);
    Rope rope = new Rope(d.ropeTheta(), d.headDim());
    float scale = (float) (1.0 / Math.sqrt(d.headDim()));
    Map<GroupKind, Integer> groups = new LinkedHashMap<>();
    List<DecoderBlock> blocks = new ArrayList<>();
    for (int l = 0; l < d.numLayers(); l++) {
      String p = "model.layers." + l + ".";
      String a = p + "self_attn.";
      int group = groups.computeIfAbsent(new GroupKind.FullHistory(), k -> groups.size());
      Attention attention =
          attention(
              w,
              a,
              l,
              group,
              d,
              config.qkvBias(),
              config.outputBias(),
              config.qkNorm() ? norm(w, a + "q_norm.weight", d.headDim(), eps) : null,
              config.qkNorm() ? norm(w, a + "k_norm.weight", d.headDim(), eps) : null,
              rope,
              scale,
              0f,
              shard);
      PackedMatrix[] m = gatedMlp(w, p + "mlp.", d.intermediateSize(), hidden, shard);
      SwiGluMlp mlp = new SwiGluMlp(m[0], m[1], m[2]);
      blocks.add(
          new DecoderBlock(
              l,
              norm(w, p + "input_layernorm.weight", hidden, eps),
              attention,
              norm(w, p + "post_attention_layernorm.weight", hidden, eps),
              mlp));
    }
    RmsNorm finalNorm = norm(w, "model.norm.weight", hidden, eps);
    LmHead head = lmHead(w, embed, d.tieWordEmbeddings(), d.vocabSize(), hidden, 0f, shard);
    ModelIdentity identity = new ModelIdentity(modelId, revisionOf(ckpt), weightVersion);
    return new CausalLm(
        config,
        ckpt,
        identity,
        new Embedding(embed, 1f),
        blocks,
        finalNorm,
        head,
        new ArrayList<>(groups.keySet()),
        tp,
        shard);
  }

  private static RmsNorm norm(WeightSource w, String name, int width, float eps) {
    return new RmsNorm(w.take(name, width).toFloatArray(), eps, false);
  }

  public ModelConfig config() {
    return config;
  }

  /** Model id, checkpoint revision (weight fingerprint) and weight version. */
  public ModelIdentity identity() {
    return identity;
  }

  public Checkpoint checkpoint() {
    return checkpoint;
  }

  /**
   * The collective this model's forward pass joins its tensor-parallel ranks through (a single
   * rank's without TP).
   */
  public Collective collective() {
    return collective;
  }

  /** This rank's place in its tensor-parallel replica. */
  public Shard shard() {
    return shard;
  }

  public List<ResidualBlock> blocks() {
    return blocks;
  }

  public int vocabSize() {
    return lmHead.vocabSize();
  }

  /** The layers that keep cache state, in layer order. */
  public List<CachedLayer> cachedLayers() {
    List<CachedLayer> out = new ArrayList<>();
    for (ResidualBlock b : blocks) {
      out.add(b.mixer());
    }
    return out;
  }

  /**
   * The cache layout this model's forward pass uses: one group per distinct {@link GroupKind} of
   * its cached layers (in order of first appearance), each block of {@code blockGranularity} tokens
   * holding every layer's fields in layer order, float32, split over attention-TP ranks as {@link
   * #shardingOf} says (head-partitioned unless the KV is split by pages).
   *
   * <pre>
   *   Llama/Qwen2/Qwen3:  group 0 Full history, bg tokens per block
   *     block = | layers.0.k | layers.0.v | layers.1.k | layers.1.v | ... |
   *     each field = numKvHeads · bg · headDim · 4 bytes
   *   Gemma 3:  group 0 SWA window W (the sliding layers' k/v), group 1 Full history (the global
   *             layers' k/v), numbered by first appearance
   *
   *   Mamba: group 0 State checkpoints, one checkpoint slot per page (bg = P), replicated
   *     slot  = | layers.0.conv | layers.0.ssm | layers.1.conv | layers.1.ssm | ... |
   *     conv  = innerSize · (convKernel-1) · 4 bytes,  ssm = innerSize · stateSize · 4 bytes
   *   Jamba: the State group of its Mamba layers and the Full group of its attention layers,
   *     numbered by the first layer of each kind
   * </pre>
   */
  public CacheLayout cacheLayout(int prefixGranularity, int blockGranularity) {
    List<CacheGroupSpec> specs = new ArrayList<>();
    for (int g = 0; g < groupKinds.size(); g++) {
      List<CacheField> fields = new ArrayList<>();
      for (CachedLayer layer : cachedLayers()) {
        if (layer.cacheGroup() == g) {
          fields.addAll(layer.cacheFields(blockGranularity));
        }
      }
      GroupKind kind = groupKinds.get(g);
      boolean state = kind instanceof GroupKind.StateCheckpoints;
      specs.add(
          new CacheGroupSpec(
              g, kind, state ? prefixGranularity : blockGranularity, fields, shardingOf(kind)));
    }
    return new CacheLayout(prefixGranularity, KV_DTYPE, specs);
  }

  /**
   * How a group of {@code kind} is split over this model's ranks: State checkpoints are replicated;
   * attention KV is head-partitioned, unless the KV is split by pages ({@link Shard#pagesSplit}):
   * then full-history groups are page-cyclic over the ranks and sliding-window groups (every head
   * on every rank, the same bytes) replicated.
   */
  private Sharding shardingOf(GroupKind kind) {
    if (kind instanceof GroupKind.StateCheckpoints) {
      return new Sharding.Replicated();
    }
    if (!shard.pagesSplit()) {
      return new Sharding.HeadPartitioned();
    }
    return kind instanceof GroupKind.FullHistory
        ? new Sharding.PageCyclic(shard.size())
        : new Sharding.Replicated();
  }

  /**
   * Computes one batch: writes the KV of every token it computes into the slots its request's block
   * tables give, and returns logits (every chunk token or the last, per request).
   *
   * @throws IllegalArgumentException when a request's tokens, positions or block tables do not fit
   *     the model or the pools
   */
  public ForwardResult forward(ForwardBatch batch, KvCache kv, ComputePool pool) {
    checkLayout(kv);
    List<ForwardRequest> requests = batch.requests();
    int numTokens = batch.numTokens();
    int hidden = config.hiddenSize();
    int[] tokens = new int[numTokens];
    int[] positions = new int[numTokens];
    int[] tokenRequest = new int[numTokens];
    int[][][] tables = new int[requests.size()][][];
    int row = 0;
    for (int r = 0; r < requests.size(); r++) {
      ForwardRequest req = requests.get(r);
      validate(r, req, kv);
      tables[r] = req.blockTables();
      for (int i = 0; i < req.numTokens(); i++) {
        tokens[row] = req.tokenIds()[i];
        positions[row] = req.startPosition() + i;
        tokenRequest[row] = r;
        row++;
      }
    }
    BatchMetadata meta =
        new BatchMetadata(pool, numTokens, positions, tokenRequest, tables, kv, collective);
    float[] x = new float[numTokens * hidden];
    embedding.lookup(tokens, x);
    LayerGate gate = batch.gate();
    for (int l = 0; l < blocks.size(); l++) {
      gate.awaitLayer(l);
      blocks.get(l).forward(meta, x, hidden);
    }
    int logitRows = 0;
    for (ForwardRequest req : requests) {
      logitRows += req.numLogitRows();
    }
    float[] h = new float[logitRows * hidden];
    int dst = 0;
    int src = 0;
    for (ForwardRequest req : requests) {
      int first = req.allLogits() ? src : src + req.numTokens() - 1;
      int count = req.numLogitRows();
      System.arraycopy(x, first * hidden, h, dst * hidden, count * hidden);
      dst += count;
      src += req.numTokens();
    }
    finalNorm.apply(pool, h, logitRows, h);
    int vocab = vocabSize();
    float[] logits = new float[logitRows * vocab];
    lmHead.apply(pool, collective, h, logitRows, logits);
    return ForwardResult.split(vocab, requests, logits);
  }

  private void checkLayout(KvCache kv) {
    CacheLayout have = kv.layout();
    if (have.numGroups() != groupKinds.size()) {
      throw new IllegalArgumentException(
          "kv cache groups=" + have.numGroups() + " but the model needs " + groupKinds.size());
    }
    CacheLayout want = cacheLayout(have.prefixGranularity(), have.group(0).blockGranularity());
    for (int g = 0; g < have.numGroups(); g++) {
      CacheGroupSpec h = have.group(g);
      CacheLayout wantG = cacheLayout(have.prefixGranularity(), h.blockGranularity());
      CacheGroupSpec w = wantG.group(g);
      if (!h.kind().equals(w.kind())
          || !h.fields().equals(w.fields())
          || (h.kind() instanceof GroupKind.StateCheckpoints
              && h.blockGranularity() != have.prefixGranularity())) {
        throw new IllegalArgumentException(
            "kv cache group " + g + " spec=" + h + " does not match the model's " + w);
      }
    }
    if (!have.dtype().equals(want.dtype())) {
      throw new IllegalArgumentException(
          "kv cache dtype=" + have.dtype() + " but the model stores " + want.dtype());
    }
  }

  private void validate(int r, ForwardRequest req, KvCache kv) {
    int[] numBlocks = new int[kv.layout().numGroups()];
    for (int g = 0; g < numBlocks.length; g++) {
      numBlocks[g] = kv.pool(g).numBlocks();
    }
    ForwardChecks.check(r, req, config, kv.layout(), numBlocks, collective.size());
  }

  /** Unmaps the checkpoint; the model must not be used afterwards. */
  @Override
  public void close() {
    checkpoint.close();
  }
}
