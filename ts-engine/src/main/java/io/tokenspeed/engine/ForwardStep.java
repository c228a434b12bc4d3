package io.tokenspeed.engine;

import io.tokenspeed.cache.Admission;
import io.tokenspeed.cache.CacheCoordinator;
import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.engine.memory.BlockTransfer;
import io.tokenspeed.engine.memory.DevicePools;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import io.tokenspeed.model.LayerGate;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.device.SampledForward;
import io.tokenspeed.model.sampling.FinishReason;
import io.tokenspeed.model.sampling.RowSampling;
import io.tokenspeed.model.sampling.SampledRow;
import io.tokenspeed.model.sampling.TokenLogprobs;
import io.tokenspeed.scheduler.ExecutionPlan;
import io.tokenspeed.scheduler.Scheduler;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.LongSupplier;

/**
 * The forward step of a round: builds the batch from the plan (each request's tokens and block
 * tables, the State groups' tables with the checkpoints the chunk materializes), runs the model
 * over the Device pools, publishes those checkpoints on the Device, and takes the next token of
 * every request whose known tokens are all computed.
 *
 * <p>The model samples those tokens itself ({@link DeviceModel#forwardAndSample}): the step hands
 * it each such request's {@link RowSampling} (params, seed, step, log probabilities asked) and gets
 * the tokens back, so a model that samples on its device never copies a logits row to the host. The
 * tokens are the host {@code Sampler}'s whichever model computes them, so sampling where the logits
 * are changes no output.
 *
 * <p>It never allocates KV blocks for requests or decides what is cached: the scheduler's plan and
 * tables say where everything lives. The only blocks it allocates are the fresh Device blocks of
 * State checkpoints at aligned boundaries, which it publishes after the forward.
 */
final class ForwardStep {
  /**
   * A diagnostic: {@code -Dtokenspeed.sampling=host} samples on the host even where the model
   * samples on the device (its logits come down every round), the baseline that device sampling is
   * measured against.
   */
  static final boolean HOST_SAMPLING = "host".equals(System.getProperty("tokenspeed.sampling"));

  private final DeviceModel model;
  private final CacheLayout layout;
  private final CacheCoordinator cache;
  private final Scheduler scheduler;
  private final DevicePools device;
  private final Copies copies;
  private final EngineObserver observer;
  private final Map<Long, ActiveRequest> active;

  /** Whether the layout has State groups, whose tables each chunk builds for itself. */
  private final boolean hasStateGroups;

  /** Times the forward and stamps sampled tokens (the settings' clock). */
  private final LongSupplier nanoClock;

  private long forwardNanos;

  /** A request that ended at a sampled token. */
  record Finished(ActiveRequest request, FinishReason reason) {}

  ForwardStep(
      DeviceModel model,
      CacheLayout layout,
      CacheCoordinator cache,
      Scheduler scheduler,
      DevicePools device,
      Copies copies,
      EngineObserver observer,
      Map<Long, ActiveRequest> active,
      LongSupplier nanoClock) {
    this.nanoClock = nanoClock;
    this.model = model;
    this.layout = layout;
    this.cache = cache;
    this.scheduler = scheduler;
    this.device = device;
    this.copies = copies;
    this.observer = observer;
    this.active = active;
    this.hasStateGroups =
        layout.groups().stream().anyMatch(g -> g.kind() instanceof GroupKind.StateCheckpoints);
  }

  /** Nanoseconds inside the model's forward pass (its sampling included) since start. */
  long forwardNanos() {
    return forwardNanos;
  }

  /**
   * Runs the plan's forward batch and samples the next token of every request whose known tokens
   * are all computed after its chunk; the copies it depends on must have completed, but for the
   * round's staged loads, which the model waits for layer by layer through {@code loads}.
   */
  SampledForward forward(ExecutionPlan plan, LayerGate loads) throws InterruptedException {
    List<ForwardRequest> reqs = new ArrayList<>(plan.forward().size());
    List<RowSampling> rows = new ArrayList<>(plan.forward().size());
    List<Checkpoint> checkpoints = new ArrayList<>();
    for (ExecutionPlan.ForwardItem item : plan.forward()) {
      ActiveRequest a = active.get(item.requestId());
      int start = item.startToken();
      int end = start + item.numTokens();
      Admission adm = scheduler.admission(a.id);
      if (adm != a.admission) {
        a.admission = adm;
        a.stateInWorkingSlot = false;
        a.kvTokens = adm.hit(); // on the Device once this round's loads are done
        a.modelTables = null; // another admission, other tables
      }
      int[][] tables = modelTables(a);
      if (hasStateGroups) {
        tables = tables.clone(); // the State groups' tables are the chunk's own
        for (var g : layout.groups()) {
          if (g.kind() instanceof GroupKind.StateCheckpoints) {
            int gid = g.groupId();
            int[] t = stateTable(a, gid, a.cacheTables[gid], start, end, checkpoints);
            tables[gid] = device.modelTable(gid, t);
          }
        }
      }
      int[] ids = Arrays.copyOfRange(a.tokens, start, end);
      reqs.add(ForwardRequest.sharing(ids, start, tables, false));
      // a prefill chunk before the prompt's end has nothing to sample yet
      rows.add(end == a.known ? a.sampling.rowSampling(a.handle.topLogprobs()) : null);
    }
    copies.checkForwardMayRun();
    long forwardStart = nanoClock.getAsLong();
    ForwardBatch batch = new ForwardBatch(reqs, loads);
    SampledForward out =
        HOST_SAMPLING
            ? model.forwardAndSampleOnHost(batch, device.bytes(), rows, observer.wantsLogits())
            : model.forwardAndSample(batch, device.bytes(), rows, observer.wantsLogits());
    forwardNanos += nanoClock.getAsLong() - forwardStart;
    for (ExecutionPlan.ForwardItem item : plan.forward()) {
      ActiveRequest a = active.get(item.requestId());
      a.stateInWorkingSlot = true;
      a.kvTokens = Math.max(a.kvTokens, item.startToken() + item.numTokens());
      a.computedTokens += item.numTokens();
    }
    publishCheckpoints(checkpoints);
    return out;
  }

  /**
   * The request's block tables in the model's blocks: translated again only when the scheduler's
   * tables changed since the last round (a row added every {@code bg} tokens, a window row
   * released, a new admission), so that a decode round does not translate every request's whole
   * table. With assertions on (the tests), each reuse is checked against a fresh translation.
   */
  private int[][] modelTables(ActiveRequest a) {
    int changes = scheduler.blockTablesChanges(a.id);
    if (a.modelTables == null || a.tablesChanges != changes) {
      a.cacheTables = scheduler.blockTables(a.id);
      a.modelTables = device.modelTables(a.cacheTables);
      a.tablesChanges = changes;
    }
    assert Arrays.deepEquals(a.cacheTables, scheduler.blockTables(a.id))
            && Arrays.deepEquals(a.modelTables, device.modelTables(a.cacheTables))
        : "request " + a.id + ": reused block tables differ from the scheduler's";
    return a.modelTables;
  }

  /**
   * A State checkpoint a forward materializes at an aligned boundary of the prompt's full pages, to
   * publish after it: written by the model straight into {@code block}, or copied there from the
   * working slot ({@code copyFrom}) when the boundary is where the chunk ends.
   */
  private record Checkpoint(int groupId, int block, CacheKey key, int copyFrom) {}

  /**
   * The model's table of a State group for one chunk, built from the scheduler's two slots [input
   * checkpoint, working block]. The model ({@code SelectiveScan}) reads the state at row
   * ceil(start/P)−1, writes the state after every boundary B = (i+1)·P it crosses to row i unless
   * that row is a hole, and the running state to row ceil(end/P)−1:
   *
   * <pre>
   *   row ceil(start/P)−1   the running state: the input checkpoint before the request's first
   *                         forward, the working slot after it
   *   row ceil(end/P)−1     the working slot (a checkpoint ending the chunk is copied out of it
   *                         afterwards: the working slot goes on changing)
   *   row i, B = (i+1)·P    a fresh block when B is an aligned boundary of the prompt's full pages
   *   crossed in the chunk  whose checkpoint the Device lacks (published after the forward; when
   *                         it is also the input row, the running state is copied in first); else
   *                         a hole
   * </pre>
   *
   * A published block is never written: when the model would write the row it reads and that row
   * holds the published input checkpoint, the chunk runs from a copy in the working slot.
   */
  private int[] stateTable(
      ActiveRequest a, int g, int[] slots, int start, int end, List<Checkpoint> checkpoints)
      throws InterruptedException {
    int p = layout.prefixGranularity();
    int working = slots[1];
    int inRow = start == 0 ? -1 : Math.ceilDiv(start, p) - 1;
    int workRow = Math.ceilDiv(end, p) - 1;
    int current = inRow < 0 ? 0 : a.stateInWorkingSlot ? working : slots[0];
    if (inRow >= 0 && current == 0) {
      throw new IllegalStateException(
          "request " + a.id + " resumes at " + start + " without an input checkpoint");
    }
    int[] t = new int[workRow + 1];
    t[workRow] = working;
    List<BlockTransfer> before = new ArrayList<>();
    boolean inputPlaced = false;
    int limit = cache.isCurrent(a.admission) ? a.keys.numFullPages() * p : 0;
    for (int b = (start / p + 1) * p; b <= Math.min(end, limit); b += p) {
      CacheKey key = a.keys.checkpointKey(g, b);
      if (cache.device().contains(key)) {
        continue;
      }
      int[] needs = new int[layout.numGroups()];
      needs[g] = 1;
      int[][] fresh = cache.device().allocate(needs);
      if (fresh == null) {
        continue; // no room for a copy: this checkpoint is simply not published
      }
      int block = fresh[g][0];
      int row = b / p - 1;
      if (row == workRow) {
        checkpoints.add(new Checkpoint(g, block, key, working));
        continue;
      }
      if (row == inRow) {
        before.add(new BlockTransfer.DeviceCopy(g, current, block)); // read there, then written
        inputPlaced = true;
      }
      t[row] = block;
      checkpoints.add(new Checkpoint(g, block, key, 0));
    }
    if (inRow >= 0 && !inputPlaced) {
      int boundary = (inRow + 1) * p;
      // the chunk's running state must end in the working slot: when it crosses the input row's
      // boundary, or when it stays in that row (a resumption from an image mid-page), it runs
      // from a copy there
      if (current != working && ((boundary > start && boundary <= end) || inRow == workRow)) {
        before.add(new BlockTransfer.DeviceCopy(g, current, working));
        current = working;
      }
      t[inRow] = current;
    }
    copies.await(before);
    return t;
  }

  private void publishCheckpoints(List<Checkpoint> checkpoints) throws InterruptedException {
    List<BlockTransfer> copyOps = new ArrayList<>();
    for (Checkpoint c : checkpoints) {
      if (c.copyFrom() != 0) {
        copyOps.add(new BlockTransfer.DeviceCopy(c.groupId(), c.copyFrom(), c.block()));
      }
    }
    copies.await(copyOps);
    for (Checkpoint c : checkpoints) {
      cache.device().noteWrite(c.block());
      cache.device().publish(c.key(), c.block());
      cache.device().unref(c.block());
    }
  }

  /**
   * Appends and streams the token the forward sampled for every request of the plan whose known
   * tokens are all computed, after storing its log probabilities when the request asked for them;
   * returns those that a stop token or their token limit ended.
   */
  List<Finished> sample(ExecutionPlan plan, SampledForward out) {
    long now = nanoClock.getAsLong();
    List<Finished> finished = new ArrayList<>();
    List<ExecutionPlan.ForwardItem> items = plan.forward();
    boolean observeLogits = out.logits() != null && observer.wantsLogits();
    for (int i = 0; i < items.size(); i++) {
      ExecutionPlan.ForwardItem item = items.get(i);
      ActiveRequest a = active.get(item.requestId());
      SampledRow row = out.row(i);
      if (a == null || (row == null && item.startToken() + item.numTokens() != a.known)) {
        continue; // a prefill chunk before the prompt's end: nothing sampled
      }
      int token = checkedToken(a, item, row);
      if (observeLogits) {
        observer.onLogits(a.id, a.generated(), out.logits().last(i));
      }
      if (row.logprobs() != null) {
        a.handle.addLogprobs(a.generated(), row.logprobs());
      }
      Optional<FinishReason> done = a.sampling.onToken(token);
      a.tokens[a.known++] = token;
      if (a.firstTokenNs == 0) {
        a.firstTokenNs = now;
      }
      a.lastTokenNs = now;
      a.handle.emit(token);
      done.ifPresent(reason -> finished.add(new Finished(a, reason)));
    }
    return finished;
  }

  /**
   * The token of a request's sampled row, once the row is what the forward was asked for: present
   * exactly when the chunk ends at the request's known tokens, an id of the vocabulary, with log
   * probabilities exactly when the request asked for them. A device model's reply is checked before
   * it changes a request.
   */
  private int checkedToken(ActiveRequest a, ExecutionPlan.ForwardItem item, SampledRow row) {
    int end = item.startToken() + item.numTokens();
    boolean logprobsAsked = a.handle.topLogprobs() != TokenLogprobs.NO_LOGPROBS;
    if (row == null
        || end != a.known
        || row.token() >= model.vocabSize()
        || (row.logprobs() != null) != logprobsAsked) {
      throw new IllegalStateException(
          "request "
              + a.id
              + ": the model returned "
              + row
              + " for topLogprobs="
              + a.handle.topLogprobs()
              + " after a chunk ending at "
              + end
              + " of known="
              + a.known
              + " tokens (vocabSize="
              + model.vocabSize()
              + ")");
    }
    return row.token();
  }
}
