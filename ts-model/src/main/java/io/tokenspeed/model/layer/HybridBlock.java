package io.tokenspeed.model.layer;

/**
 * A block of a hybrid model (Jamba): {@code x += mixer(norm1(x)); x += mlp(norm2(x))}, where the
 * mixer is either full attention or a Mamba mixer.
 *
 * @param index position in the stack
 * @param inputNorm the pre-mixer RMSNorm
 * @param mixer an {@link Attention} or a {@link MambaMixer}
 * @param preMlpNorm the pre-MLP RMSNorm
 * @param mlp the dense SwiGLU MLP
 */
public record HybridBlock(
    int index, RmsNorm inputNorm, CachedLayer mixer, RmsNorm preMlpNorm, SwiGluMlp mlp)
    implements ResidualBlock {

  public HybridBlock {
    if (!(mixer instanceof Attention) && !(mixer instanceof MambaMixer)) {
      throw new IllegalArgumentException(
          "block " + index + " mixer=" + mixer + " must be attention or mamba");
    }
  }

  @Override
  public void forward(BatchMetadata batch, float[] x, int hidden) {
    int t = batch.numTokens();
    float[] h = new float[t * hidden];
    float[] delta = new float[t * hidden];
    inputNorm.apply(batch.pool(), x, t, h);
    if (mixer instanceof Attention attention) {
      attention.forward(batch, h, delta);
    } else if (mixer instanceof MambaMixer mamba) {
      mamba.forward(batch, h, delta);
    }
    for (int i = 0; i < t * hidden; i++) {
      x[i] += delta[i];
    }
    preMlpNorm.apply(batch.pool(), x, t, h);
    mlp.forward(batch.pool(), h, t, delta);
    batch.reducePartial(delta, t * hidden);
    for (int i = 0; i < t * hidden; i++) {
      x[i] += delta[i];
    }
  }
}
