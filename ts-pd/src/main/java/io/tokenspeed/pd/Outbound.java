package io.tokenspeed.pd;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;

/** What a connection's writer writes, in queue order. */
sealed interface Outbound {

  /** A control frame; {@code afterWrite} (may be null) runs on the writer once it is written. */
  record Control(ByteBuffer frame, Runnable afterWrite) implements Outbound {}

  /** A DATA frame, written straight from {@code bytes} unless the transfer stopped sending. */
  record Block(Transfer transfer, int group, int index, MemorySegment bytes) implements Outbound {}

  /** DONE, its checksum taken when written, unless the transfer stopped sending. */
  record Finish(Transfer transfer, DoneInfo info) implements Outbound {}

  /** PING. */
  record Ping() implements Outbound {}

  /** Ends the writer. */
  record Stop() implements Outbound {}
}
