package io.tokenspeed.model.parallel;

/** The collective of one rank: a reduction leaves the data as it is, a gather copies. */
final class SingleRank implements Collective {
  static final SingleRank INSTANCE = new SingleRank();

  private SingleRank() {}

  @Override
  public int rank() {
    return 0;
  }

  @Override
  public int size() {
    return 1;
  }

  @Override
  public void allReduceSum(float[] data, int offset, int length) {
    java.util.Objects.checkFromIndexSize(offset, length, data.length);
  }

  @Override
  public void allGather(float[] local, int[] counts, float[] out) {
    if (counts.length != 1) {
      throw new IllegalArgumentException("counts of " + counts.length + " ranks, not 1");
    }
    System.arraycopy(local, 0, out, 0, counts[0]);
  }

  @Override
  public void abort(String reason) {}

  @Override
  public void close() {}
}
