package io.tokenspeed.l3.store.file;

import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.store.StoreTesting;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardWatchEventKinds;
import java.nio.file.WatchService;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The child process of {@link FileStoreProcessIT}: a separate JVM that opens a {@link FileStore} on
 * a shared root and prints one line per fact on standard output.
 *
 * <pre>
 *   put  ROOT LABEL COUNT SEED          PUT objects 0..COUNT-1; prints "created I" / "existed I"
 *   get  ROOT LABEL COUNT SEED          GET them; prints "digest HEX" (SHA-256 of all payloads)
 *   race ROOT LABEL COUNT SEED BARRIER  prints "ready", waits for the BARRIER file, then PUTs
 * </pre>
 *
 * <p>Exit status 0 on success, 2 when a row is not {@code Ok}, 3 when the barrier never appears.
 */
public final class FileStoreChild {

  /** Object sizes by index: one byte, 4 KiB, 64 KiB, 1 MiB, then again. */
  private static final int[] SIZES = {1, 4 << 10, 64 << 10, 1 << 20};

  /** Size of every object of a race. */
  static final int RACE_SIZE = 16 << 10;

  private static final long BARRIER_WAIT_MS = 60_000;

  private FileStoreChild() {}

  /** The size of object {@code index} of a put/get run. */
  static int sizeOf(int index) {
    return SIZES[index % SIZES.length];
  }

  /** The payload of object {@code index} written with {@code seed}. */
  static byte[] payload(long seed, int index, int size) {
    return StoreTesting.bytes(seed * 1_000_003L + index, size);
  }

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    Path root = Path.of(args[1]);
    String namespace = StoreTesting.namespace(args[2]);
    int count = Integer.parseInt(args[3]);
    long seed = Long.parseLong(args[4]);
    int status;
    try (FileStore store = new FileStore(FileStoreSettings.of(root));
        Arena arena = Arena.ofConfined()) {
      MemorySegment host = arena.allocate((2L << 20) + 4096, 64);
      status =
          switch (mode) {
            case "put" -> put(store, host, namespace, count, seed, false);
            case "get" -> get(store, host, namespace, count);
            case "race" -> {
              System.out.println("ready");
              System.out.flush();
              yield awaitBarrier(Path.of(args[5]))
                  ? put(store, host, namespace, count, seed, true)
                  : 3;
            }
            default -> throw new IllegalArgumentException("mode=" + mode + " is not put/get/race");
          };
    }
    System.out.flush();
    System.exit(status);
  }

  private static int put(
      FileStore store, MemorySegment host, String namespace, int count, long seed, boolean race)
      throws Exception {
    for (int i = 0; i < count; i++) {
      int size = race ? RACE_SIZE : sizeOf(i);
      MemorySegment source = host.asSlice(4096 + 7, size);
      MemorySegment.copy(payload(seed, i, size), 0, source, ValueLayout.JAVA_BYTE, 0, size);
      RowResult row =
          store.put(List.of(StoreTesting.key(namespace, i)), List.of(source)).rows().get(0);
      if (!(row instanceof RowResult.Ok ok) || ok.bytes() != size) {
        System.out.println("row " + i + " " + row);
        return 2;
      }
      System.out.println((ok.alreadyExisted() ? "existed " : "created ") + i);
    }
    System.out.println("done");
    return 0;
  }

  private static int get(FileStore store, MemorySegment host, String namespace, int count)
      throws Exception {
    MessageDigest digest = MessageDigest.getInstance("SHA-256");
    for (int i = 0; i < count; i++) {
      MemorySegment destination = host.asSlice(13, sizeOf(i));
      RowResult row =
          store.get(List.of(StoreTesting.key(namespace, i)), List.of(destination)).rows().get(0);
      if (!(row instanceof RowResult.Ok)) {
        System.out.println("row " + i + " " + row);
        return 2;
      }
      digest.update(destination.asByteBuffer());
    }
    System.out.println("digest " + HexFormat.of().formatHex(digest.digest()));
    return 0;
  }

  /** Waits (bounded) until the parent creates {@code barrier}; false on timeout. */
  private static boolean awaitBarrier(Path barrier) throws Exception {
    long deadlineNs = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(BARRIER_WAIT_MS);
    try (WatchService watch = FileSystems.getDefault().newWatchService()) {
      barrier.getParent().register(watch, StandardWatchEventKinds.ENTRY_CREATE);
      while (!Files.exists(barrier)) {
        if (deadlineNs - System.nanoTime() < 0) {
          System.err.println("barrier " + barrier + " did not appear within " + BARRIER_WAIT_MS);
          return false;
        }
        // an event, or a periodic recheck in case the file system reports none
        var key = watch.poll(10, TimeUnit.MILLISECONDS);
        if (key != null) {
          key.pollEvents();
          key.reset();
        }
      }
    }
    return true;
  }
}
