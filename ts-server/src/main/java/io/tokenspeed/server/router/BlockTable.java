package io.tokenspeed.server.router;

import java.util.Arrays;

/**
 * A bounded set of 64-bit block hashes, each with a few bits saying where it is held (a backend's
 * tiers): the router's mirror of what a backend's KV events said, in primitives.
 *
 * <pre>
 *   keys:  [ h | 0 | h | h | 0 | … ]   open addressing, linear probing; 0 marks an empty slot
 *   bits:  [ b | . | b | b | . | … ]   the tiers of the key in the same slot (never 0 when held)
 *   hash 0 itself lives apart (zeroBits)
 * </pre>
 *
 * <p><b>Bounded.</b> It holds at most {@code maxBlocks} hashes: taking one more evicts another, the
 * one under a clock hand that sweeps the slots (so an arbitrary one, in O(1) amortized, with no
 * per-entry bookkeeping). Eviction only happens when the events describe more blocks than the bound
 * (the bound is below the backend's tiers, or removals were lost): the router then under-counts a
 * prefix, which costs a routing choice, never a wrong answer. The slots grow by doubling while at
 * most half full, up to twice the bound rounded up to a power of two: about 9 bytes a slot, 18 to
 * 36 bytes a held hash.
 *
 * <p>Deletion shifts the following run back (no tombstones), so a lookup probes at most the run its
 * key hashes into.
 *
 * <p>Not thread-safe: its owner ({@link PrefixIndex}) locks around it.
 */
final class BlockTable {
  private static final int MIN_SLOTS = 64;

  private final int maxBlocks;
  private final int maxSlots;
  private long[] keys;
  private byte[] bits;
  private int mask;
  private int size;
  private byte zeroBits;
  private int hand;
  private long evicted;

  /** A table of at most {@code maxBlocks} hashes, at least 1. */
  BlockTable(int maxBlocks) {
    if (maxBlocks < 1 || maxBlocks > (1 << 29)) {
      throw new IllegalArgumentException("maxBlocks=" + maxBlocks + " must be in [1, 2^29]");
    }
    this.maxBlocks = maxBlocks;
    this.maxSlots = Integer.highestOneBit(Math.max(MIN_SLOTS, 2 * maxBlocks - 1)) << 1;
    int slots = Math.min(MIN_SLOTS, maxSlots);
    keys = new long[slots];
    bits = new byte[slots];
    mask = slots - 1;
  }

  /** The hashes held. */
  int size() {
    return size + (zeroBits != 0 ? 1 : 0);
  }

  /** The most hashes it holds. */
  int maxBlocks() {
    return maxBlocks;
  }

  /** Hashes evicted to stay within the bound, since it was made. */
  long evicted() {
    return evicted;
  }

  /** The bits of {@code hash}, 0 when it is not held. */
  int get(long hash) {
    if (hash == 0) {
      return zeroBits;
    }
    int i = slot(hash);
    while (true) {
      long k = keys[i];
      if (k == hash) {
        return bits[i];
      }
      if (k == 0) {
        return 0;
      }
      i = (i + 1) & mask;
    }
  }

  /**
   * Sets {@code set} on {@code hash}, taking it in when it is not held (evicting another at the
   * bound). Returns the bits it had before.
   */
  int add(long hash, int set) {
    if ((set & 0xff) == 0 || (set & ~0xff) != 0) {
      throw new IllegalArgumentException("bits=" + set + " must be in [1, 255]");
    }
    if (hash == 0) {
      int before = zeroBits;
      if (before == 0 && size() >= maxBlocks) {
        evictOne();
      }
      zeroBits = (byte) (before | set);
      return before;
    }
    int i = slot(hash);
    while (true) {
      long k = keys[i];
      if (k == hash) {
        int before = bits[i];
        bits[i] = (byte) (before | set);
        return before;
      }
      if (k == 0) {
        break;
      }
      i = (i + 1) & mask;
    }
    if (size() >= maxBlocks) {
      evictOne();
      return add(hash, set); // the eviction may have shifted the run
    }
    if (size + 1 > keys.length / 2 && keys.length < maxSlots) {
      grow();
      return add(hash, set);
    }
    keys[i] = hash;
    bits[i] = (byte) set;
    size++;
    return 0;
  }

  /**
   * Clears {@code clear} on {@code hash}; a hash left with no bit is no longer held. Returns the
   * bits it had before (0: it was not held).
   */
  int remove(long hash, int clear) {
    if (hash == 0) {
      int before = zeroBits;
      zeroBits = (byte) (before & ~clear);
      return before;
    }
    int i = slot(hash);
    while (true) {
      long k = keys[i];
      if (k == 0) {
        return 0;
      }
      if (k == hash) {
        int before = bits[i];
        int after = before & ~clear;
        if (after == 0) {
          deleteAt(i);
        } else {
          bits[i] = (byte) after;
        }
        return before;
      }
      i = (i + 1) & mask;
    }
  }

  /** Clears {@code clear} on every hash; those left with no bit go. */
  void removeAll(int clear) {
    long[] oldKeys = keys;
    byte[] oldBits = bits;
    int slots = Math.min(MIN_SLOTS, maxSlots);
    keys = new long[slots];
    bits = new byte[slots];
    mask = slots - 1;
    size = 0;
    hand = 0;
    zeroBits = (byte) (zeroBits & ~clear);
    for (int i = 0; i < oldKeys.length; i++) {
      int after = oldBits[i] & ~clear;
      if (oldKeys[i] != 0 && after != 0) {
        reinsert(oldKeys[i], (byte) after);
      }
    }
  }

  /** How many held hashes carry every bit of {@code mask}. */
  int count(int mask) {
    int n = (zeroBits & mask) == mask && zeroBits != 0 ? 1 : 0;
    for (int i = 0; i < keys.length; i++) {
      if (keys[i] != 0 && (bits[i] & mask) == mask) {
        n++;
      }
    }
    return n;
  }

  private int slot(long hash) {
    // the hashes are SHA-256 prefixes, uniform already; fold the high bits in all the same
    return (int) (hash ^ (hash >>> 32)) & mask;
  }

  private void evictOne() {
    if (size == 0) {
      zeroBits = 0; // the only hash held
      evicted++;
      return;
    }
    while (keys[hand] == 0) {
      hand = (hand + 1) & mask;
    }
    deleteAt(hand);
    evicted++;
  }

  /** Empties slot {@code i} and shifts the rest of its run back where each key may sit. */
  private void deleteAt(int i) {
    int hole = i;
    int j = i;
    while (true) {
      j = (j + 1) & mask;
      long k = keys[j];
      if (k == 0) {
        break;
      }
      int home = slot(k);
      // k may move into the hole when its home is not cyclically within (hole, j]
      boolean between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!between) {
        keys[hole] = k;
        bits[hole] = bits[j];
        hole = j;
      }
    }
    keys[hole] = 0;
    bits[hole] = 0;
    size--;
  }

  private void grow() {
    long[] oldKeys = keys;
    byte[] oldBits = bits;
    keys = new long[oldKeys.length * 2];
    bits = new byte[oldKeys.length * 2];
    mask = keys.length - 1;
    size = 0;
    hand = 0;
    for (int i = 0; i < oldKeys.length; i++) {
      if (oldKeys[i] != 0) {
        reinsert(oldKeys[i], oldBits[i]);
      }
    }
  }

  private void reinsert(long hash, byte b) {
    if (size + 1 > keys.length / 2 && keys.length < maxSlots) {
      grow();
    }
    int i = slot(hash);
    while (keys[i] != 0) {
      i = (i + 1) & mask;
    }
    keys[i] = hash;
    bits[i] = b;
    size++;
  }

  @Override
  public String toString() {
    return "BlockTable[size="
        + size()
        + ", maxBlocks="
        + maxBlocks
        + ", slots="
        + keys.length
        + "]";
  }

  /** For tests: the slots' keys (a copy). */
  long[] keysForTest() {
    return Arrays.copyOf(keys, keys.length);
  }
}
