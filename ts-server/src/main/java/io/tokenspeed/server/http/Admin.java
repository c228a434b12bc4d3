package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineStats;
import io.tokenspeed.l3.spi.NamespaceDeletion;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The administrative calls under {@code /admin/}: a full cache clear, an L1-only (Device) clear, a
 * namespace rotation, a weight-version update, and a freeze and its lift. Each needs the configured
 * admin token as {@code Authorization: Bearer TOKEN} (none configured: administration is off) and
 * answers with what it did. The engine runs each between two rounds of its loop (on a
 * tensor-parallel replica, every rank in the same agreed round); a weight update waits for storage
 * retirement on the calling HTTP thread, and its store deletion runs on the loop thread between
 * rounds (no round runs meanwhile), the HTTP thread waiting for its outcome.
 */
final class Admin {
  /** How long a clear, a freeze or an unfreeze waits for the loop to apply it. */
  private static final long CLEAR_TIMEOUT_S = 60;

  private final Engine engine;
  private final byte[] token;

  /**
   * @param token the admin token, or null for administration off
   */
  Admin(Engine engine, String token) {
    this.engine = engine;
    this.token = token == null ? null : token.getBytes(StandardCharsets.UTF_8);
  }

  /** Fails with 403 (off) or 401 (wrong or missing token) unless the request may administrate. */
  void authorize(String authorization) {
    if (token == null) {
      throw new ApiException(
          403,
          "permission_error",
          null,
          null,
          "administration is off: start the server with an admin token (--admin-token)");
    }
    String prefix = "Bearer ";
    byte[] given =
        authorization != null && authorization.startsWith(prefix)
            ? authorization.substring(prefix.length()).getBytes(StandardCharsets.UTF_8)
            : new byte[0];
    if (!MessageDigest.isEqual(given, token)) {
      throw new ApiException(
          401,
          "authentication_error",
          null,
          null,
          "administration needs the admin token as 'Authorization: Bearer TOKEN'");
    }
  }

  ObjectNode clearCache() throws Exception {
    EngineStats before = engine.stats();
    long start = System.nanoTime();
    await(engine.clearCache());
    ObjectNode out = done("clear_cache", start);
    out.put(
        "did",
        "dropped every cached Device and Host block; outstanding storage operations were rejected;"
            + " requests in flight go on; the store's objects stay");
    out.put("device_cached_blocks_before", before.deviceCachedBlocks());
    out.put("host_cached_blocks_before", before.hostCachedBlocks());
    return out;
  }

  ObjectNode clearDeviceCache() throws Exception {
    EngineStats before = engine.stats();
    long start = System.nanoTime();
    await(engine.clearDeviceCache());
    ObjectNode out = done("clear_device_cache", start);
    out.put(
        "did",
        "dropped every cached Device block; Host blocks and Host-only storage I/O were left alone");
    out.put("device_cached_blocks_before", before.deviceCachedBlocks());
    return out;
  }

  /** A freeze ({@code on}) or its lift. */
  ObjectNode freeze(boolean on) throws Exception {
    long start = System.nanoTime();
    await(on ? engine.freeze() : engine.unfreeze());
    ObjectNode out = done(on ? "freeze" : "unfreeze", start);
    out.put(
        "did",
        on
            ? "froze the engine: nothing is computed and no storage operation starts until"
                + " unfreeze; completions, deadlines and cancellations still apply, and requests"
                + " are accepted and wait"
            : "lifted the freeze: waiting requests go on");
    out.put("frozen", engine.frozen());
    return out;
  }

  ObjectNode rotateNamespace(JsonNode body) throws Exception {
    String version = weightVersion(body);
    String previous = engine.weightVersion();
    String oldNamespace = namespace();
    long start = System.nanoTime();
    engine.rotateNamespace(version);
    ObjectNode out = done("rotate_namespace", start);
    out.put(
        "did",
        "cleared the caches, rejected outstanding storage operations and switched later keys to"
            + " the new namespace; the old namespace's objects stay in the store");
    versions(out, previous, version, oldNamespace);
    return out;
  }

  ObjectNode updateWeights(JsonNode body) throws Exception {
    String version = weightVersion(body);
    String previous = engine.weightVersion();
    String oldNamespace = namespace();
    long start = System.nanoTime();
    NamespaceDeletion deletion;
    try {
      deletion = engine.updateWeights(version);
    } catch (TimeoutException e) {
      throw new ApiException(503, "service_unavailable", null, null, e.getMessage());
    }
    ObjectNode out = done("update_weights", start);
    out.put(
        "did",
        "fenced storage, waited for the store's operations to retire, deleted the old namespace's"
            + " objects, cleared the caches and switched later keys to the new namespace");
    versions(out, previous, version, oldNamespace);
    out.put("deleted_objects", deletion.removedObjects());
    if (deletion.remainingObjects() < 0) {
      out.putNull("remaining_objects"); // the store cannot count them: see remaining_reason
    } else {
      out.put("remaining_objects", deletion.remainingObjects());
    }
    out.put("deletion_passes", deletion.passes());
    out.put("deletion_waited_ms", deletion.waitedMs());
    out.put("remaining_reason", deletion.remainingReason());
    return out;
  }

  /** The weight versions and namespaces before and after a rotation or an update. */
  private void versions(ObjectNode out, String previous, String version, String oldNamespace) {
    out.put("previous_weight_version", previous);
    out.put("weight_version", version);
    out.put("previous_namespace", oldNamespace);
    out.put("namespace", namespace());
  }

  private String namespace() {
    return engine.storageNamespace().map(Object::toString).orElse(null);
  }

  private static String weightVersion(JsonNode body) {
    JsonNode v = body == null ? null : body.get("weight_version");
    if (v == null || !v.isTextual() || v.asText().isBlank()) {
      throw ApiException.invalid("weight_version", "weight_version must be a non-empty string");
    }
    if (v.asText().getBytes(StandardCharsets.UTF_8).length > Engine.MAX_WEIGHT_VERSION_BYTES) {
      throw ApiException.invalid(
          "weight_version",
          "weight_version must be at most " + Engine.MAX_WEIGHT_VERSION_BYTES + " UTF-8 bytes");
    }
    return v.asText();
  }

  private static ObjectNode done(String action, long startNs) {
    ObjectNode out = Completions.JSON.createObjectNode();
    out.put("action", action);
    out.put("elapsed_ms", (System.nanoTime() - startNs) / 1_000_000.0);
    return out;
  }

  private static void await(java.util.concurrent.CompletableFuture<Void> f) throws Exception {
    try {
      f.get(CLEAR_TIMEOUT_S, TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      throw e.getCause() instanceof Exception c ? c : e;
    }
  }
}
