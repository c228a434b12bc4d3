package io.tokenspeed.model;

/** MambaForCausalLM (2 Mamba-1 mixers, conv kernel 4, state 8, tied head) against Hugging Face. */
class MambaFixtureTest extends HfFixtureTestBase {
  @Override
  String fixture() {
    return "mamba";
  }
}
