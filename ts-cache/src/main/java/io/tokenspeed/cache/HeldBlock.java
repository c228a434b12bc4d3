package io.tokenspeed.cache;

/** One reference a holder (a request, a copy in flight, a ticket) owns on a block. */
public record HeldBlock(Tier tier, int blockId) {}
