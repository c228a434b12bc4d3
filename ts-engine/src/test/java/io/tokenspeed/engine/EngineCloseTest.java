package io.tokenspeed.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardResult;
import io.tokenspeed.model.ModelIdentity;
import io.tokenspeed.model.device.DeviceBytes;
import io.tokenspeed.model.device.DeviceModel;
import io.tokenspeed.model.parallel.Collective;
import io.tokenspeed.model.parallel.Shard;
import io.tokenspeed.model.sampling.SamplingParams;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Closing an engine while its loop is inside a forward: close never frees what the loop may still
 * use. It waits for the round to end, or, past its wait, refuses and frees nothing.
 */
class EngineCloseTest {
  @TempDir Path dir;

  /**
   * The CPU model with a forward that, once armed, waits at a gate; it records whether a forward
   * ran after the engine let go of its tiers (what freeing under a running loop would let happen).
   */
  private static final class GatedModel implements DeviceModel {
    final CpuDeviceModel cpu;
    final CountDownLatch entered = new CountDownLatch(1);
    final CountDownLatch gate = new CountDownLatch(1);
    final AtomicBoolean armed = new AtomicBoolean();
    final AtomicBoolean closedModel = new AtomicBoolean();
    final AtomicInteger forwardsAfterClose = new AtomicInteger();

    GatedModel(CausalLm lm) {
      this.cpu = new CpuDeviceModel(lm, 1);
    }

    @Override
    public ForwardResult forward(ForwardBatch batch, DeviceBytes kv) {
      if (armed.getAndSet(false)) {
        entered.countDown();
        try {
          gate.await();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      if (closedModel.get()) {
        forwardsAfterClose.incrementAndGet();
      }
      return cpu.forward(batch, kv);
    }

    @Override
    public String deviceName() {
      return cpu.deviceName();
    }

    @Override
    public boolean computesOnHost() {
      return cpu.computesOnHost();
    }

    @Override
    public ModelIdentity identity() {
      return cpu.identity();
    }

    @Override
    public String attentionBackend() {
      return cpu.attentionBackend();
    }

    @Override
    public Collective collective() {
      return cpu.collective();
    }

    @Override
    public Shard shard() {
      return cpu.shard();
    }

    @Override
    public int vocabSize() {
      return cpu.vocabSize();
    }

    @Override
    public CacheLayout cacheLayout(int prefixGranularity, int blockGranularity) {
      return cpu.cacheLayout(prefixGranularity, blockGranularity);
    }

    @Override
    public DeviceBytes allocate(
        CacheLayout layout, long leadingPad, long tierBytes, int[] poolBlocks) {
      return cpu.allocate(layout, leadingPad, tierBytes, poolBlocks);
    }

    @Override
    public void pinHost(MemorySegment hostTier) {
      cpu.pinHost(hostTier);
    }

    @Override
    public void unpinHost(MemorySegment hostTier) {
      closedModel.set(true); // the engine lets go of its Host tier: it is being freed
      cpu.unpinHost(hostTier);
    }

    @Override
    public void close() {
      cpu.close();
    }
  }

  @Test
  void shouldRefuseToFreeAnythingWhileTheLoopIsInsideAForwardAndFreeOnceItEnds() throws Exception {
    try (CausalLm lm = ContextModels.llama(dir)) {
      GatedModel model = new GatedModel(lm);
      Engine engine = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude());
      model.armed.set(true);
      RequestHandle h = engine.submit(new int[] {1, 2, 3, 4, 5}, SamplingParams.greedy(4));
      assertTrue(model.entered.await(30, TimeUnit.SECONDS), "the forward began");

      IllegalStateException refused =
          assertThrows(IllegalStateException.class, () -> engine.close(200));
      assertTrue(refused.getMessage().contains("nothing was freed"), refused.getMessage());
      assertFalse(model.closedModel.get(), "the tiers were not freed under a running forward");

      model.gate.countDown(); // the long forward ends; the loop sees close at its next round
      engine.close(TimeUnit.SECONDS.toMillis(30));
      assertTrue(model.closedModel.get(), "freed once the loop ended");
      assertEquals(0, model.forwardsAfterClose.get(), "no forward ran on a freed model");
      assertTrue(h.result().isDone(), "the request ended");
      engine.close(); // a later close returns at once
    }
  }

  @Test
  void shouldWaitForALongForwardToEndBeforeFreeing() throws Exception {
    try (CausalLm lm = ContextModels.llama(dir)) {
      GatedModel model = new GatedModel(lm);
      Engine engine = Engine.start(EngineSettings.of(model, EngineTest.small(256)).conclude());
      model.armed.set(true);
      engine.submit(new int[] {1, 2, 3, 4, 5}, SamplingParams.greedy(4));
      assertTrue(model.entered.await(30, TimeUnit.SECONDS), "the forward began");
      Thread closer = Thread.ofVirtual().start(engine::close);
      closer.join(300);
      assertTrue(closer.isAlive(), "close waits while the forward runs");
      assertFalse(model.closedModel.get());
      model.gate.countDown();
      closer.join(TimeUnit.SECONDS.toMillis(60));
      assertFalse(closer.isAlive(), "close returned once the loop ended");
      assertTrue(model.closedModel.get());
      assertEquals(0, model.forwardsAfterClose.get());
    }
  }
}
