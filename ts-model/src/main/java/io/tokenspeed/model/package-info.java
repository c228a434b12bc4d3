/**
 * Models from Hugging Face checkpoints, computed on the CPU: checkpoint loading (memory-mapped
 * safetensors), the layer kinds that architectures compose, the forward pass over paged KV and
 * State, tokenizers, synthetic seeded checkpoints and sampling. A forward pass is handed block
 * tables and pools; it never decides what is cached. Depends on {@code ts-core} only.
 */
package io.tokenspeed.model;
