/**
 * Tokenizers: text to token ids and back. {@link io.tokenspeed.model.tokenizer.Tokenizer} is what
 * the engine uses; {@link io.tokenspeed.model.tokenizer.BpeTokenizer} reads a Hugging Face {@code
 * tokenizer.json} (byte-level BPE, pure Java), {@link io.tokenspeed.model.tokenizer.ByteTokenizer}
 * serves checkpoints without one, and {@link io.tokenspeed.model.tokenizer.StreamingDecoder} turns
 * generated ids into text without splitting a character.
 */
package io.tokenspeed.model.tokenizer;
