package io.tokenspeed.model.layer;

/**
 * A decoder block with norms on both sides of each sublayer (Gemma 2/3):
 *
 * <pre>
 *   x += postAttentionNorm(attention(inputNorm(x)))
 *   x += postFeedforwardNorm(mlp(preFeedforwardNorm(x)))
 * </pre>
 *
 * @param index decoder layer index
 * @param inputNorm norm before attention
 * @param attention an {@link Attention} (full history) or a {@link SlidingAttention}
 * @param postAttentionNorm norm of the attention output, before the residual add
 * @param preFeedforwardNorm norm before the MLP
 * @param mlp the GELU-gated MLP
 * @param postFeedforwardNorm norm of the MLP output, before the residual add
 */
public record SandwichBlock(
    int index,
    RmsNorm inputNorm,
    CachedLayer attention,
    RmsNorm postAttentionNorm,
    RmsNorm preFeedforwardNorm,
    GeGluMlp mlp,
    RmsNorm postFeedforwardNorm)
    implements ResidualBlock {

  public SandwichBlock {
    if (!(attention instanceof Attention) && !(attention instanceof SlidingAttention)) {
      throw new IllegalArgumentException(
          "layer " + index + " attention=" + attention + " must be Attention or SlidingAttention");
    }
  }

  @Override
  public void forward(BatchMetadata batch, float[] x, int hidden) {
    int t = batch.numTokens();
    float[] h = new float[t * hidden];
    float[] delta = new float[t * hidden];
    inputNorm.apply(batch.pool(), x, t, h);
    if (attention instanceof SlidingAttention s) {
      s.forward(batch, h, delta);
    } else {
      ((Attention) attention).forward(batch, h, delta);
    }
    postAttentionNorm.apply(batch.pool(), delta, t, delta);
    for (int i = 0; i < t * hidden; i++) {
      x[i] += delta[i];
    }
    preFeedforwardNorm.apply(batch.pool(), x, t, h);
    mlp.forward(batch.pool(), h, t, delta);
    batch.reducePartial(delta, t * hidden);
    postFeedforwardNorm.apply(batch.pool(), delta, t, delta);
    for (int i = 0; i < t * hidden; i++) {
      x[i] += delta[i];
    }
  }

  @Override
  public CachedLayer mixer() {
    return attention;
  }
}
