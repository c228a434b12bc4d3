package io.tokenspeed.model;

/** LlamaForCausalLM (GQA 4:2, RoPE θ=10⁴, untied head) against Hugging Face's outputs. */
class LlamaFixtureTest extends HfFixtureTestBase {
  @Override
  String fixture() {
    return "llama";
  }
}
