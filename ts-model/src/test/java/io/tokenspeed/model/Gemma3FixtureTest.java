package io.tokenspeed.model;

/**
 * Gemma3ForCausalLM (five sliding-window layers of window 16, one global layer, QK-norm, local and
 * global RoPE bases, scaled embeddings, sandwich norms, GELU-tanh, tied head) against Hugging
 * Face's outputs. Prompts of 40 and 133 tokens run past the window.
 */
class Gemma3FixtureTest extends HfFixtureTestBase {
  @Override
  String fixture() {
    return "gemma3";
  }
}
