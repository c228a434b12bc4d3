package io.tokenspeed.model.config;

/**
 * The shape of a Mamba-1 mixer, shared by Mamba and Jamba.
 *
 * <pre>
 *   in_proj  : hidden → 2·innerSize        (x, z)
 *   conv1d   : depthwise over innerSize channels, kernel convKernel, causal
 *   x_proj   : innerSize → timeStepRank + 2·stateSize   (dt, B, C)
 *   dt_proj  : timeStepRank → innerSize (with bias), then softplus
 *   state    : conv  innerSize × (convKernel-1)   the last inputs of each channel
 *              ssm   innerSize × stateSize
 * </pre>
 *
 * @param innerSize channels of the mixer ({@code intermediate_size}, {@code d_inner})
 * @param stateSize SSM state per channel ({@code d_state})
 * @param convKernel taps of the causal convolution ({@code d_conv})
 * @param timeStepRank width of the low-rank time step ({@code dt_rank})
 * @param convBias whether the convolution has a bias
 * @param innerNorms whether dt, B and C are RMS-normalized after x_proj (Jamba)
 */
public record MixerDims(
    int innerSize,
    int stateSize,
    int convKernel,
    int timeStepRank,
    boolean convBias,
    boolean innerNorms) {

  public MixerDims {
    if (innerSize < 1) {
      throw new IllegalArgumentException("intermediate_size=" + innerSize + " must be at least 1");
    }
    if (stateSize < 1) {
      throw new IllegalArgumentException("state_size=" + stateSize + " must be at least 1");
    }
    if (convKernel < 2) {
      throw new IllegalArgumentException("conv_kernel=" + convKernel + " must be at least 2");
    }
    if (timeStepRank < 1) {
      throw new IllegalArgumentException("time_step_rank=" + timeStepRank + " must be at least 1");
    }
  }

  /** Bytes of one layer's conv state in a checkpoint (float32). */
  public long convStateBytes() {
    return (long) innerSize * (convKernel - 1) * Float.BYTES;
  }

  /** Bytes of one layer's SSM state in a checkpoint (float32). */
  public long ssmStateBytes() {
    return (long) innerSize * stateSize * Float.BYTES;
  }

  /** {@code field} as an integer, or {@code "auto"}: {@code ceil(hidden / 16)}. */
  static int timeStepRank(ConfigFields f, String field, int hidden) {
    Object v = f.raw(field);
    if (v == null || "auto".equals(v)) {
      return Math.ceilDiv(hidden, 16);
    }
    return ConfigFields.toInt(field, v);
  }
}
