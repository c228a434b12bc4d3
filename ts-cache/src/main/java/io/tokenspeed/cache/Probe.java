package io.tokenspeed.cache;

/**
 * The two-tier probe of one prompt: the Device hit, and the longer hit when Host blocks extend it
 * from that Device floor. Both are boundaries in tokens; {@code hostHit >= deviceHit}.
 */
public record Probe(int deviceHit, int hostHit) {
  public Probe {
    if (deviceHit < 0 || hostHit < deviceHit) {
      throw new IllegalArgumentException(
          "probe device_hit=" + deviceHit + " host_hit=" + hostHit + " is inconsistent");
    }
  }
}
