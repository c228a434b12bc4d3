package io.tokenspeed.core;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Everything that decides what the bytes of a cached object mean, and nothing else. Its canonical
 * JSON hashes into the {@link Namespace}: two deployments share L3 objects exactly when their
 * identities are equal.
 *
 * <p>Inputs: model and checkpoint revision, weight version (and the draft model's, when speculative
 * decoding is on), the cache signature (dtype, page size, and per group its kind, window, block
 * granularity, fields with their offsets, payload bytes and sharding), attention-TP size, KVP, QCP
 * and linear-attention TP geometry, the ordered group shard counts when any group is page-sharded,
 * the attention backend and {@link #RUNTIME_COMPAT}.
 *
 * <p>Never inputs, by construction (this record has no field for them): Host allocation ids, cyclic
 * owner ranks, DP replica ids, and every scheduling, queue or credit setting. Changing those must
 * never split or merge namespaces.
 */
public record DeploymentIdentity(
    String modelId,
    String checkpointRevision,
    String weightVersion,
    String draftModelId,
    String draftWeightVersion,
    CacheLayout layout,
    int attentionTpSize,
    int kvpSize,
    int qcpSize,
    int linearAttentionTpSize,
    String attentionBackend) {

  /**
   * The single runtime compatibility epoch. A different epoch starts a separate namespace even with
   * the same weights; objects are never converted.
   */
  public static final int RUNTIME_COMPAT = 2;

  public DeploymentIdentity {
    requireText("model_id", modelId);
    requireText("checkpoint_revision", checkpointRevision);
    requireText("weight_version", weightVersion);
    requireText("attention_backend", attentionBackend);
    if ((draftModelId == null) != (draftWeightVersion == null)) {
      throw new IllegalArgumentException(
          "draft_model_id="
              + draftModelId
              + " and draft_weight_version="
              + draftWeightVersion
              + " must be given together");
    }
    if (draftModelId != null) {
      requireText("draft_model_id", draftModelId);
      requireText("draft_weight_version", draftWeightVersion);
    }
    if (layout == null) {
      throw new IllegalArgumentException("cache layout is missing");
    }
    requirePositive("attention_tp_size", attentionTpSize);
    requirePositive("kvp_size", kvpSize);
    requirePositive("qcp_size", qcpSize);
    requirePositive("linear_attention_tp_size", linearAttentionTpSize);
    for (CacheGroupSpec g : layout.groups()) {
      int d = g.sharding().shardCount();
      if (attentionTpSize % d != 0) {
        throw new IllegalArgumentException(
            "group "
                + g.groupId()
                + " shard_count="
                + d
                + " does not divide attention_tp_size="
                + attentionTpSize);
      }
    }
  }

  /** The identity as a JSON-ready tree; {@link CanonicalJson} gives its canonical bytes. */
  public Map<String, Object> toJsonTree() {
    Map<String, Object> root = new LinkedHashMap<>();
    root.put("model_id", modelId);
    root.put("checkpoint_revision", checkpointRevision);
    root.put("weight_version", weightVersion);
    if (draftModelId != null) {
      root.put("draft_model_id", draftModelId);
      root.put("draft_weight_version", draftWeightVersion);
    }
    root.put("cache_signature", cacheSignature(layout));
    root.put("attention_tp_size", attentionTpSize);
    root.put("kvp_size", kvpSize);
    root.put("qcp_size", qcpSize);
    root.put("linear_attention_tp_size", linearAttentionTpSize);
    if (layout.pageSharded()) {
      List<Object> counts = new ArrayList<>();
      for (CacheGroupSpec g : layout.groups()) {
        counts.add(g.sharding().shardCount());
      }
      root.put("group_shard_counts", counts);
    }
    root.put("attention_backend", attentionBackend);
    root.put("runtime_compat", RUNTIME_COMPAT);
    return root;
  }

  private static Map<String, Object> cacheSignature(CacheLayout layout) {
    Map<String, Object> sig = new LinkedHashMap<>();
    sig.put("dtype", layout.dtype());
    sig.put("prefix_granularity", layout.prefixGranularity());
    List<Object> groups = new ArrayList<>();
    for (CacheGroupSpec g : layout.groups()) {
      Map<String, Object> gm = new LinkedHashMap<>();
      gm.put("group_id", g.groupId());
      gm.put("kind", g.kind().wireName());
      if (g.kind() instanceof GroupKind.SlidingWindow(int window)) {
        gm.put("window_tokens", window);
      }
      gm.put("block_granularity", g.blockGranularity());
      List<Object> fields = new ArrayList<>();
      long offset = 0;
      for (CacheField f : g.fields()) {
        fields.add(Map.of("name", f.name(), "offset", offset, "bytes", f.bytesPerBlock()));
        offset += f.bytesPerBlock();
      }
      gm.put("fields", fields);
      gm.put("payload_bytes", g.bytesPerBlock());
      gm.put("sharding", g.sharding().wireName());
      groups.add(gm);
    }
    sig.put("groups", groups);
    return sig;
  }

  private static void requireText(String field, String value) {
    if (value == null || value.isBlank()) {
      throw new IllegalArgumentException(field + "=" + value + " must be non-empty");
    }
  }

  private static void requirePositive(String field, int value) {
    if (value < 1) {
      throw new IllegalArgumentException(field + "=" + value + " must be at least 1");
    }
  }
}
