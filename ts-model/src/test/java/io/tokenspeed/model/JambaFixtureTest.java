package io.tokenspeed.model;

/**
 * JambaForCausalLM with one expert (Mamba layers 0 and 2 with dt/B/C norms, attention layers 1 and
 * 3 without RoPE, dense SwiGLU MLPs) against Hugging Face: the State and Full groups together.
 */
class JambaFixtureTest extends HfFixtureTestBase {
  @Override
  String fixture() {
    return "jamba";
  }
}
