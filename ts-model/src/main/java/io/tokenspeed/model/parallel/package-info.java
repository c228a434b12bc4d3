/**
 * Tensor parallelism's data plane: the {@link io.tokenspeed.model.parallel.Collective} the sharded
 * forward pass joins its ranks' partial results through, and its shared-memory implementation for
 * the processes of one host.
 */
package io.tokenspeed.model.parallel;
