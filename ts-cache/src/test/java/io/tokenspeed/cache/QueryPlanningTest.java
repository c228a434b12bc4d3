package io.tokenspeed.cache;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.PromptKeys;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

class QueryPlanningTest {

  private static final CacheLayout MIXED = Layouts.mixed();
  private static final int[] PROMPT = Layouts.tokens(300, 5);

  @Test
  void shouldAskOnlyForTheHostSuffixMissingLocally() {
    CacheFixture f = new CacheFixture(MIXED, 64, 64);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.DEVICE, f.cache.neededKeys(keys, 128));
    f.put(Tier.HOST, List.of(keys.keyOf(0, 8, 192)));
    List<CacheKey> missing = f.cache.missingKeys(keys, 256);
    for (CacheKey k : missing) {
      assertFalse(f.cache.device().contains(k), "device key asked again: " + k);
      assertFalse(f.cache.host().contains(k), "host key asked again: " + k);
    }
    // full rows 9..15 (row 8 is on the host), swa rows 5..7 at 256, the checkpoint at 256
    assertEquals(7 + 3 + 1, missing.size());
    assertTrue(missing.contains(keys.checkpointKey(2, 256)));
  }

  @Test
  void shouldExtendTheMatchWithL3AssumptionsWithoutAllocating() {
    CacheFixture f = new CacheFixture(MIXED, 64, 64);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    f.put(Tier.DEVICE, f.cache.neededKeys(keys, 64));
    long deviceHeld = f.cache.device().pool().heldBlocks();
    long hostHeld = f.cache.host().pool().heldBlocks();
    int cached = f.cache.device().cachedCount();
    Set<CacheKey> l3 = new HashSet<>(f.cache.missingKeys(keys, 256));
    int[] candidates = f.cache.candidates(keys, 64, keys.reusableBound());
    assertEquals(256, f.cache.matchAssuming(keys, candidates, l3::contains));
    // a missing checkpoint in L3 lowers the planned boundary like any other missing block
    l3.remove(keys.checkpointKey(2, 256));
    assertEquals(64, f.cache.matchAssuming(keys, candidates, l3::contains));
    assertEquals(deviceHeld, f.cache.device().pool().heldBlocks());
    assertEquals(hostHeld, f.cache.host().pool().heldBlocks());
    assertEquals(cached, f.cache.device().cachedCount(), "no pinning either");
  }

  @Test
  void shouldConsiderTailsOnlyThroughHintsOrTheReusableBound() {
    CacheFixture f = new CacheFixture(MIXED, 64, 64);
    PromptKeys keys = PromptKeys.of(MIXED, PROMPT, List.of());
    // blocks of an older, shorter prompt ending at 150 are on the host
    f.put(Tier.HOST, f.cache.neededKeys(keys, 150));
    // Without a hint 150 is no candidate, and 128 lacks its state checkpoint: nothing is reused.
    assertEquals(0, f.cache.probe(keys, keys.reusableBound()).hostHit(), "no hint, no tail");
    f.cache.recordTail(keys, 150);
    assertEquals(150, f.cache.probe(keys, keys.reusableBound()).hostHit());
    // a hint alone never makes a hit
    f.cache.recordTail(keys, 170);
    assertEquals(150, f.cache.probe(keys, keys.reusableBound()).hostHit());
  }
}
