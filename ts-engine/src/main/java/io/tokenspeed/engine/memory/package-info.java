/**
 * The data plane's memory: the Device and Host KV tiers as off-heap allocations laid out in the
 * cache's LCM parents ({@link io.tokenspeed.engine.memory.BlockGeometry}), the model's view of the
 * Device tier ({@link io.tokenspeed.engine.memory.DevicePools}), and the ordered copy thread
 * between the tiers ({@link io.tokenspeed.engine.memory.DeviceHandle}).
 */
package io.tokenspeed.engine.memory;
