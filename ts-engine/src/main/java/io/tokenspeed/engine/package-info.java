/**
 * The engine host of one replica: the Device and Host KV tiers as off-heap memory, the ordered copy
 * thread between them, and the event loop that runs the scheduler's plans on the model.
 */
package io.tokenspeed.engine;
