package io.tokenspeed.model.layer;

/**
 * One pre-norm decoder block: {@code x += attn(norm1(x)); x += mlp(norm2(x))}. Architectures with
 * other arrangements (Gemma's sandwich norms, hybrid mixers) get their own composition of the same
 * layer kinds.
 */
public record DecoderBlock(
    int index, RmsNorm inputNorm, Attention attention, RmsNorm postAttentionNorm, SwiGluMlp mlp)
    implements ResidualBlock {

  @Override
  public CachedLayer mixer() {
    return attention;
  }

  /** Runs the block over the batch's residual rows {@code x} ({@code [T][hidden]}) in place. */
  @Override
  public void forward(BatchMetadata batch, float[] x, int hidden) {
    int t = batch.numTokens();
    float[] h = new float[t * hidden];
    float[] delta = new float[t * hidden];
    inputNorm.apply(batch.pool(), x, t, h);
    attention.forward(batch, h, delta);
    for (int i = 0; i < t * hidden; i++) {
      x[i] += delta[i];
    }
    postAttentionNorm.apply(batch.pool(), x, t, h);
    mlp.forward(batch.pool(), h, t, delta);
    batch.reducePartial(delta, t * hidden);
    for (int i = 0; i < t * hidden; i++) {
      x[i] += delta[i];
    }
  }
}
