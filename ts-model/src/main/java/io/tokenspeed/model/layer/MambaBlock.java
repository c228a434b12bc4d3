package io.tokenspeed.model.layer;

/**
 * Mamba's residual block: {@code x += mixer(RMSNorm(x))}, no MLP.
 *
 * @param index position in the stack
 * @param norm the pre-mixer RMSNorm
 * @param mamba the selective state-space mixer
 */
public record MambaBlock(int index, RmsNorm norm, MambaMixer mamba) implements ResidualBlock {

  @Override
  public CachedLayer mixer() {
    return mamba;
  }

  @Override
  public void forward(BatchMetadata batch, float[] x, int hidden) {
    int t = batch.numTokens();
    float[] h = new float[t * hidden];
    float[] delta = new float[t * hidden];
    norm.apply(batch.pool(), x, t, h);
    mamba.forward(batch, h, delta);
    for (int i = 0; i < t * hidden; i++) {
      x[i] += delta[i];
    }
  }
}
