package io.tokenspeed.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.List;
import org.junit.jupiter.api.Test;

class PrefillProfileTest {

  @Test
  void shouldChargeASampleToItsInnermostProjectClassPastTheSharedHelpers() {
    List<String> softmax =
        List.of(
            "jdk.incubator.vector.FloatVector",
            "io.tokenspeed.model.kernel.FastExp",
            "io.tokenspeed.model.kernel.AttentionTile",
            "io.tokenspeed.model.kernel.PagedAttention",
            "io.tokenspeed.model.layer.Attention");
    assertEquals("io.tokenspeed.model.kernel.AttentionTile", PrefillProfile.projectClass(softmax));
    List<String> silu =
        List.of(
            "io.tokenspeed.model.kernel.VectorMath",
            "io.tokenspeed.model.kernel.FastExp",
            "io.tokenspeed.model.kernel.Activations$$Lambda.0x1",
            "io.tokenspeed.model.kernel.ComputePool");
    assertEquals("activations", PrefillProfile.phaseOf(PrefillProfile.projectClass(silu)));
    assertNull(
        PrefillProfile.projectClass(List.of("java.lang.Thread", "jdk.internal.misc.Unsafe")));
  }

  @Test
  void shouldMapEachKernelClassToItsPhase() {
    String k = "io.tokenspeed.model.kernel.";
    assertEquals("matmul", PrefillProfile.phaseOf(k + "MatMul"));
    assertEquals("matmul", PrefillProfile.phaseOf(k + "PackedMatrix$Panel"));
    assertEquals("attention", PrefillProfile.phaseOf(k + "PagedAttention"));
    assertEquals("norms", PrefillProfile.phaseOf(k + "RmsNormKernel"));
    assertEquals("rope", PrefillProfile.phaseOf(k + "Rope"));
    assertEquals("hand-offs", PrefillProfile.phaseOf(k + "ComputePool"));
    assertEquals("KV pages", PrefillProfile.phaseOf("io.tokenspeed.model.kv.PagedKvPool"));
    assertEquals("embedding, LM head", PrefillProfile.phaseOf("io.tokenspeed.model.layer.LmHead"));
    assertEquals("other", PrefillProfile.phaseOf("io.tokenspeed.model.layer.DecoderBlock"));
  }
}
