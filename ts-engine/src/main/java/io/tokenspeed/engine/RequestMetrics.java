package io.tokenspeed.engine;

/**
 * One request's figures, from the engine's clock.
 *
 * @param queueNs submission to the round that first admitted it
 * @param ttftNs submission to its first generated token
 * @param tpotNs mean time between later tokens (0 with fewer than two tokens)
 * @param promptTokens tokens of the prompt
 * @param reusedDeviceTokens prompt tokens whose KV was already on the Device at admission
 * @param reusedHostTokens prompt tokens whose KV was loaded from the Host at admission
 * @param reusedStorageTokens of those, the tokens whose Host blocks this engine had restored from
 *     L3 (0 without L3)
 * @param computedTokens tokens the forward computed for it: prefill chunks and decode steps,
 *     including whatever it computed again after a retraction
 */
public record RequestMetrics(
    long queueNs,
    long ttftNs,
    long tpotNs,
    int promptTokens,
    int reusedDeviceTokens,
    int reusedHostTokens,
    int reusedStorageTokens,
    long computedTokens) {}
