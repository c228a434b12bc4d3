package io.tokenspeed.model.device;

import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.sampling.SampledRow;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

/**
 * What a forward-and-sample pass returns ({@link DeviceModel#forwardAndSample}): each request's
 * sampled token, and the logits only where they are on the host anyway or were asked for.
 *
 * @param rows one entry per request of the batch, in batch order: the sampled token (and log
 *     probabilities) of a request that had a {@code RowSampling}, {@code null} for one that had
 *     none; unmodifiable
 * @param logits the pass's logits, or {@code null} when the caller did not ask to keep them and the
 *     model did not bring them to the host
 */
public record SampledForward(List<SampledRow> rows, ForwardResult logits) {

  public SampledForward {
    Objects.requireNonNull(rows, "rows");
    rows = Collections.unmodifiableList(new ArrayList<>(rows)); // null entries are meaningful
    if (logits != null && logits.logits().size() != rows.size()) {
      throw new IllegalArgumentException(
          "logits of " + logits.logits().size() + " requests must match rows.size=" + rows.size());
    }
  }

  /** The sampled row of request {@code request} of the batch, or {@code null} if it had none. */
  public SampledRow row(int request) {
    return rows.get(request);
  }
}
