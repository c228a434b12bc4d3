package io.tokenspeed.model;

/** Qwen2ForCausalLM (GQA with q/k/v biases) against Hugging Face's outputs. */
class Qwen2FixtureTest extends HfFixtureTestBase {
  @Override
  String fixture() {
    return "qwen2";
  }
}
