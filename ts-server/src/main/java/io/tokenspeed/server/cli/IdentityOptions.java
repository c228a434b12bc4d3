package io.tokenspeed.server.cli;

import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.server.config.ConfigException;
import io.tokenspeed.server.config.GroupFlag;
import io.tokenspeed.server.config.IdentityJson;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import picocli.CommandLine.Option;

/**
 * The deployment identity given as flags instead of an identity file: the same fields as the JSON
 * format (docs/identity-json.md), with {@code --group} in the compact {@link GroupFlag} form. A
 * flag that is not given is null here, so a command can tell "not given" from "given the default".
 */
final class IdentityOptions {

  /** The flags an identity cannot do without; the others have defaults or are optional. */
  static final List<String> REQUIRED =
      List.of(
          "--model-id",
          "--checkpoint-revision",
          "--weight-version",
          "--attention-backend",
          "--prefix-granularity",
          "--dtype",
          "--group");

  @Option(names = "--model-id", paramLabel = "ID", description = "Model id.")
  String modelId;

  @Option(names = "--checkpoint-revision", paramLabel = "REV", description = "Checkpoint revision.")
  String checkpointRevision;

  @Option(names = "--weight-version", paramLabel = "VERSION", description = "Weight version.")
  String weightVersion;

  @Option(
      names = "--draft-model-id",
      paramLabel = "ID",
      description = "Draft model id (speculative decoding), with --draft-weight-version.")
  String draftModelId;

  @Option(
      names = "--draft-weight-version",
      paramLabel = "VERSION",
      description = "Draft model weight version.")
  String draftWeightVersion;

  @Option(
      names = "--attention-backend",
      paramLabel = "NAME",
      description = "Attention backend, e.g. cpu-reference.")
  String attentionBackend;

  @Option(
      names = "--prefix-granularity",
      paramLabel = "P",
      description = "Tokens per content page (the unit of reuse).")
  Integer prefixGranularity;

  @Option(names = "--dtype", paramLabel = "DTYPE", description = "Cache element type, e.g. bf16.")
  String dtype;

  @Option(
      names = "--group",
      paramLabel = "SPEC",
      description = {
        "A cache group, repeatable, in group id order:",
        "kind=full|swa|state,bg=N,bytes=N[,window=N][,sharding=S[,shards=N]]",
        "(or field=NAME:BYTES, repeatable, instead of bytes=N).",
        "S is replicated (default), head_partitioned or page_cyclic."
      })
  List<String> groups;

  @Option(
      names = "--attention-tp-size",
      paramLabel = "N",
      description = "Attention tensor-parallel size (default: 1).")
  Integer attentionTpSize;

  @Option(names = "--kvp-size", paramLabel = "N", description = "KVP size (default: 1).")
  Integer kvpSize;

  @Option(names = "--qcp-size", paramLabel = "N", description = "QCP size (default: 1).")
  Integer qcpSize;

  @Option(
      names = "--linear-attention-tp-size",
      paramLabel = "N",
      description = "Linear-attention tensor-parallel size (default: 1).")
  Integer linearAttentionTpSize;

  /** The flags that were given, by name, in declaration order. */
  List<String> given() {
    List<String> out = new ArrayList<>();
    for (Map.Entry<String, Object> e : values().entrySet()) {
      if (e.getValue() != null) {
        out.add(e.getKey());
      }
    }
    return out;
  }

  /** Builds the identity; a missing or invalid flag is a {@link ConfigException} naming it. */
  DeploymentIdentity toIdentity() {
    for (Map.Entry<String, Object> e : values().entrySet()) {
      if (e.getValue() == null && REQUIRED.contains(e.getKey())) {
        throw new ConfigException(
            e.getKey()
                + " is missing; without --identity these are required: "
                + String.join(", ", REQUIRED));
      }
    }
    List<CacheGroupSpec> specs = new ArrayList<>();
    for (int i = 0; i < groups.size(); i++) {
      specs.add(GroupFlag.parse(groups.get(i), i));
    }
    return new DeploymentIdentity(
        modelId,
        checkpointRevision,
        weightVersion,
        draftModelId,
        draftWeightVersion,
        new CacheLayout(prefixGranularity, dtype, specs),
        orDefault(attentionTpSize),
        orDefault(kvpSize),
        orDefault(qcpSize),
        orDefault(linearAttentionTpSize),
        attentionBackend);
  }

  private Map<String, Object> values() {
    Map<String, Object> v = new LinkedHashMap<>();
    v.put("--model-id", modelId);
    v.put("--checkpoint-revision", checkpointRevision);
    v.put("--weight-version", weightVersion);
    v.put("--draft-model-id", draftModelId);
    v.put("--draft-weight-version", draftWeightVersion);
    v.put("--attention-backend", attentionBackend);
    v.put("--prefix-granularity", prefixGranularity);
    v.put("--dtype", dtype);
    v.put("--group", groups == null || groups.isEmpty() ? null : groups);
    v.put("--attention-tp-size", attentionTpSize);
    v.put("--kvp-size", kvpSize);
    v.put("--qcp-size", qcpSize);
    v.put("--linear-attention-tp-size", linearAttentionTpSize);
    return v;
  }

  private static int orDefault(Integer size) {
    return size == null ? IdentityJson.DEFAULT_PARALLEL_SIZE : size;
  }
}
