package io.tokenspeed.server.cli;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * A brute-force reference for {@code tokenspeed keys}, written from concepts.md and architecture §7
 * without ts-core's hashing or key code: it hashes pages itself, tries every boundary {@code
 * 1..len} and every row below it, and keeps a row when the token-range rule of its group kind says
 * so. Only the namespace is taken as input.
 */
final class ReferenceKeys {

  /** A group as the reference sees it: kind, bg, window (swa only), page-cyclic shard count. */
  record Group(String kind, int bg, int window, int cyclicShards) {}

  private ReferenceKeys() {}

  static List<String> lines(
      String namespace, int p, List<Group> groups, int[] tokens, List<String> extra, int rank) {
    int len = tokens.length;
    List<String> out = new ArrayList<>();
    Set<String> seen = new LinkedHashSet<>();
    for (int b = 1; b <= len; b++) {
      boolean listed = (b % p == 0) || (b == len - 1);
      if (!listed) {
        continue;
      }
      for (int g = 0; g < groups.size(); g++) {
        Group group = groups.get(g);
        for (int row = 0; row * group.bg() < b; row++) {
          if (!needed(group, row, b)) {
            continue;
          }
          int firstToken = row * group.bg();
          int page = firstToken / p;
          String hash =
              (page + 1) * p <= b
                  ? hex(pageHash(tokens, p, page + 1, 0, extra))
                  : hex(pageHash(tokens, p, page, b - page * p, extra));
          int offset = (firstToken % p) / group.bg();
          int payload = group.cyclicShards() > 0 ? rank / group.cyclicShards() : rank;
          String key = namespace + "_" + hash + "|g" + g + "|o" + offset + "|r" + payload;
          if (seen.add(key)) {
            out.add(
                "{\"boundary\":%d,\"group\":%d,\"kind\":\"%s\",\"row\":%d,\"page_offset\":%d,\"content_hash\":\"%s\",\"key\":\"%s\"}"
                    .formatted(b, g, group.kind(), row, offset, hash, key));
          }
        }
      }
    }
    return out;
  }

  /** Does row {@code row} (tokens {@code [row*bg, min((row+1)*bg, B))}) matter at boundary B? */
  private static boolean needed(Group group, int row, int boundary) {
    int first = row * group.bg();
    int last = Math.min((row + 1) * group.bg(), boundary) - 1;
    return switch (group.kind()) {
      case "full" -> true;
      case "swa" -> last >= boundary - group.window() + 1 && first <= boundary - 1;
      case "state" -> last == boundary - 1;
      default -> throw new IllegalArgumentException(group.kind());
    };
  }

  /**
   * Hash of {@code fullPages} full pages chained, then (when {@code tailTokens > 0}) of the partial
   * page of {@code tailTokens} tokens after them.
   */
  static byte[] pageHash(int[] tokens, int p, int fullPages, int tailTokens, List<String> extra) {
    byte[] prev = null;
    for (int page = 0; page < fullPages; page++) {
      prev = sha256(prev, tokens, page * p, p, extra);
    }
    return tailTokens == 0 ? prev : sha256(prev, tokens, fullPages * p, tailTokens, extra);
  }

  private static byte[] sha256(byte[] prev, int[] tokens, int from, int count, List<String> extra) {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    u32(b, prev == null ? 0 : prev.length);
    if (prev != null) {
      b.writeBytes(prev);
    }
    u32(b, count);
    for (int i = from; i < from + count; i++) {
      u32(b, tokens[i]);
    }
    if (!extra.isEmpty()) {
      u32(b, extra.size());
      for (String k : extra) {
        byte[] utf8 = k.getBytes(StandardCharsets.UTF_8);
        u32(b, utf8.length);
        b.writeBytes(utf8);
      }
    }
    try {
      return MessageDigest.getInstance("SHA-256").digest(b.toByteArray());
    } catch (NoSuchAlgorithmException e) {
      throw new AssertionError(e);
    }
  }

  private static void u32(ByteArrayOutputStream b, int v) {
    b.write(v);
    b.write(v >>> 8);
    b.write(v >>> 16);
    b.write(v >>> 24);
  }

  private static String hex(byte[] digest) {
    return HexFormat.of().formatHex(digest);
  }
}
