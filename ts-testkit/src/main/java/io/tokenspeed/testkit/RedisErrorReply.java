package io.tokenspeed.testkit;

/** An error reply of redis-server ({@code -ERR ...}, {@code -NOPERM ...}) to a harness command. */
public final class RedisErrorReply extends RuntimeException {

  public RedisErrorReply(String message) {
    super(message);
  }
}
