package io.tokenspeed.model;

/**
 * The model's inputs to the deployment identity ({@code io.tokenspeed.core.DeploymentIdentity}):
 * what the cached bytes mean as far as the weights go.
 *
 * @param modelId the model's name (by default the checkpoint folder's name)
 * @param checkpointRevision SHA-256 (hex) of the weight files' bytes in file-name order
 * @param weightVersion the operator's weight version label
 */
public record ModelIdentity(String modelId, String checkpointRevision, String weightVersion) {

  /** The weight version used when the operator gives none. */
  public static final String DEFAULT_WEIGHT_VERSION = "1";

  public ModelIdentity {
    for (String[] f :
        new String[][] {
          {"model_id", modelId},
          {"checkpoint_revision", checkpointRevision},
          {"weight_version", weightVersion}
        }) {
      if (f[1] == null || f[1].isBlank()) {
        throw new IllegalArgumentException(f[0] + "=" + f[1] + " must be non-empty");
      }
    }
    if (!checkpointRevision.matches("[0-9a-f]{64}")) {
      throw new IllegalArgumentException(
          "checkpoint_revision=" + checkpointRevision + " must be 64 lowercase hex characters");
    }
  }
}
