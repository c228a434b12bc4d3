package io.tokenspeed.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.cache.BlockCopy;
import io.tokenspeed.cache.RetractionImage;
import io.tokenspeed.cache.Tier;
import io.tokenspeed.core.CacheGroupSpec;
import io.tokenspeed.core.GroupKind;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.core.storage.PressureSnapshot;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A retracted request resumes from its exact image: its admission loads the image's Host blocks
 * into fresh Device blocks (none published), starts its forward at the image's tokens, drops the
 * image's references once the loads ran, and never starts a fresh L3 preparation.
 */
class RetractionImageTest {
  private static final long MS = 1_000_000L;

  private StmFixture f;
  private Scheduler s;
  private long now;

  @AfterEach
  void invariants() {
    f.checkInvariants(s.heldBlocks()); // the image's references are held by its request
  }

  private ExecutionPlan round() {
    now += MS;
    ExecutionPlan p =
        s.round(new RoundInput(now, PressureSnapshot.IDLE, List.of(), List.of(), true, true));
    s.onForwardDone(p);
    return p;
  }

  /** An image of {@code tokens} tokens in fresh private Host blocks. */
  private RetractionImage image(int tokens) {
    var groups = f.cache.layout().groups();
    int[][] rows = new int[groups.size()][];
    int[] needs = new int[groups.size()];
    for (CacheGroupSpec g : groups) {
      boolean state = g.kind() instanceof GroupKind.StateCheckpoints;
      rows[g.groupId()] = new int[state ? 1 : g.rowsFor(tokens)];
      needs[g.groupId()] = state ? 1 : g.rowsFor(tokens) - g.firstNeededRow(tokens);
    }
    int[][] blocks = f.cache.host().allocate(needs);
    for (CacheGroupSpec g : groups) {
      int gid = g.groupId();
      int first = g.kind() instanceof GroupKind.StateCheckpoints ? 0 : g.firstNeededRow(tokens);
      for (int i = 0; i < blocks[gid].length; i++) {
        rows[gid][first + i] = blocks[gid][i];
      }
    }
    return new RetractionImage(tokens, rows);
  }

  @Test
  void shouldResumeFromTheImageAtItsTokensAndDropItsReferencesAfterTheLoads() {
    f = new StmFixture(StmFixture.config(), 256, 256);
    s = new Scheduler(f.cache, f.stm, new Scheduler.Config(128, 8));
    PromptKeys p = f.prompt(150, 7); // the prompt and two generated tokens, say
    RetractionImage img = image(149);
    Set<Integer> sources = Arrays.stream(img.blocks()).boxed().collect(Collectors.toSet());
    s.resubmitRetracted(1, p, 4, img);
    assertInstanceOf(RequestState.Retracted.class, s.state(1));
    ExecutionPlan r1 = round();
    assertTrue(r1.storage().isEmpty(), "no fresh L3 preparation after a retraction");
    assertEquals(0, f.stm.counters().queriesIssued());
    assertEquals(List.of(new ExecutionPlan.ForwardItem(1, 149, 1, false)), r1.forward());
    assertEquals(sources.size(), r1.deviceCopies().size(), "every image block is loaded");
    for (BlockCopy c : r1.deviceCopies()) {
      assertEquals(Tier.HOST, c.srcTier());
      assertTrue(sources.contains(c.srcBlock()), "a load reads the image, nothing else: " + c);
      assertTrue(!c.publishOnComplete(), "an image block is private: " + c);
    }
    for (int b : sources) {
      assertTrue(!f.cache.host().pool().isAllocated(b), "the loads freed the image's blocks");
    }
    assertEquals(0, f.cache.host().cachedCount(), "an image never becomes a Host entry");
    for (int i = 0; i < 4 && s.state(1) != null; i++) {
      round();
    }
    assertNull(s.state(1), "it finished from its image");
  }

  @Test
  void shouldDropTheImageOfARequestCancelledWhileRetracted() {
    f = new StmFixture(StmFixture.config(), 256, 256);
    s = new Scheduler(f.cache, f.stm, new Scheduler.Config(128, 8));
    RetractionImage img = image(70);
    s.resubmitRetracted(1, f.prompt(80, 3), 4, img);
    now += MS;
    s.round(new RoundInput(now, PressureSnapshot.IDLE, List.of(1L), List.of(), true, true));
    assertNull(s.state(1));
    for (int b : img.blocks()) {
      assertTrue(!f.cache.host().pool().isAllocated(b), "cancelled: its image is freed");
    }
  }

  @Test
  void shouldRefuseAnImageForARequestThatIsNotRetracted() {
    f = new StmFixture(StmFixture.config(), 256, 256);
    s = new Scheduler(f.cache, null, new Scheduler.Config(128, 8));
    s.submit(1, f.prompt(80, 5), 4, false);
    RetractionImage img = image(40);
    assertTrue(!s.attachImage(1, img), "a Submitted request takes no image");
    assertTrue(!s.attachImage(2, img), "nor an unknown one");
    for (int b : img.blocks()) {
      f.cache.host().unref(b);
    }
  }
}
