package io.tokenspeed.core;

/**
 * What a cache group keeps, and therefore when it covers a boundary {@code B}:
 *
 * <pre>
 *   kind             keeps                       covers B when                       prefix-closed
 *   FullHistory      all KV                      every row in [0, B) is present      yes
 *   SlidingWindow W  the last W tokens           rows holding tokens [B-W+1, B-1]    no
 *   StateCheckpoints recurrent-state snapshots   the checkpoint at B is present      no
 * </pre>
 */
public sealed interface GroupKind
    permits GroupKind.FullHistory, GroupKind.SlidingWindow, GroupKind.StateCheckpoints {

  /** The name used in configuration and in the namespace identity. */
  String wireName();

  /** True when covering {@code B} implies covering every smaller boundary. */
  boolean prefixClosed();

  /** Parses a kind by its wire name; {@code windowTokens} is read only for {@code swa}. */
  static GroupKind parse(String name, Integer windowTokens) {
    if (name == null) {
      throw new IllegalArgumentException("group kind is missing; allowed: full, swa, state");
    }
    GroupKind kind =
        switch (name) {
          case "full" -> new FullHistory();
          case "swa" -> {
            if (windowTokens == null) {
              throw new IllegalArgumentException("group kind=swa needs window_tokens");
            }
            yield new SlidingWindow(windowTokens);
          }
          case "state" -> new StateCheckpoints();
          default ->
              throw new IllegalArgumentException(
                  "group kind=" + name + " is unknown; allowed: full, swa, state");
        };
    if (windowTokens != null && !(kind instanceof SlidingWindow)) {
      throw new IllegalArgumentException(
          "window_tokens=" + windowTokens + " applies only to kind=swa, not kind=" + name);
    }
    return kind;
  }

  /** All KV of the prefix. */
  record FullHistory() implements GroupKind {
    @Override
    public String wireName() {
      return "full";
    }

    @Override
    public boolean prefixClosed() {
      return true;
    }
  }

  /** Attention over the last {@code windowTokens} tokens (the current token included). */
  record SlidingWindow(int windowTokens) implements GroupKind {
    public SlidingWindow {
      if (windowTokens < 1) {
        throw new IllegalArgumentException("window_tokens=" + windowTokens + " must be at least 1");
      }
    }

    @Override
    public String wireName() {
      return "swa";
    }

    @Override
    public boolean prefixClosed() {
      return false;
    }
  }

  /** Recurrent (linear-attention / SSM) state, snapshotted at boundaries. */
  record StateCheckpoints() implements GroupKind {
    @Override
    public String wireName() {
      return "state";
    }

    @Override
    public boolean prefixClosed() {
      return false;
    }
  }
}
