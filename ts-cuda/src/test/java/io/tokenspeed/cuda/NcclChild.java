package io.tokenspeed.cuda;

/**
 * A process that opens a one-rank NCCL communicator with the environment its parent gave it, for
 * the tests of {@link Nccl#open}'s environment check: prints {@code refused MESSAGE} when open
 * refuses for the environment, {@code opened} when it opens (and closes it), {@code failed
 * EXCEPTION} otherwise.
 */
public final class NcclChild {
  private NcclChild() {}

  public static void main(String[] args) {
    try {
      // a real id only where open goes on to use it: elsewhere it refuses before reading the id
      boolean allowed = "0".equals(System.getenv("NCCL_NVLS_ENABLE"));
      byte[] id = allowed ? Nccl.uniqueId() : new byte[Nccl.UNIQUE_ID_BYTES];
      try (NcclCommunicator c = Nccl.open(id, 0, 1)) {
        System.out.println("opened");
      }
    } catch (IllegalStateException e) {
      System.out.println("refused " + e.getMessage().replace('\n', ' '));
    } catch (RuntimeException e) {
      System.out.println("failed " + e.toString().replace('\n', ' '));
    }
  }
}
