package io.tokenspeed.testkit;

import java.util.ArrayList;
import java.util.List;

/**
 * A Redis Cluster of real {@code redis-server} masters on loopback ports, without replicas; each
 * master owns one contiguous third (for three masters) of the 16384 hash slots. Built by {@link
 * RedisServers#startCluster}; closing it kills every node by pid.
 */
public final class RedisCluster implements AutoCloseable {

  private final List<RedisServer> nodes;

  RedisCluster(List<RedisServer> nodes) {
    this.nodes = List.copyOf(nodes);
  }

  /** The masters, in slot order. */
  public List<RedisServer> nodes() {
    return nodes;
  }

  /** Every node as {@code redis://127.0.0.1:port}: the seed list a client needs. */
  public List<String> uris() {
    List<String> uris = new ArrayList<>(nodes.size());
    for (RedisServer node : nodes) {
      uris.add(node.uri());
    }
    return uris;
  }

  /** Removes every key on every master. */
  public void flushAll() {
    for (RedisServer node : nodes) {
      node.flushAll();
    }
  }

  /** {@link RedisServer#createAclUser} on every node: ACL users are per node in a cluster. */
  public void createAclUser(String user, String password, String keyPattern) {
    for (RedisServer node : nodes) {
      node.createAclUser(user, password, keyPattern);
    }
  }

  /** Kills every node. */
  @Override
  public void close() {
    RuntimeException first = null;
    for (RedisServer node : nodes) {
      try {
        node.kill();
      } catch (RuntimeException e) {
        if (first == null) {
          first = e;
        } else {
          first.addSuppressed(e);
        }
      }
    }
    if (first != null) {
      throw first;
    }
  }

  @Override
  public String toString() {
    return "redis cluster " + nodes;
  }
}
