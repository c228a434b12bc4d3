package io.tokenspeed.pd;

import java.util.concurrent.atomic.AtomicLong;

/** One endpoint's counters, updated by its threads; {@link #snapshot} reads them for export. */
final class Counters {
  final AtomicLong connectionsOpened = new AtomicLong();
  final AtomicLong connectionsOpen = new AtomicLong();
  final AtomicLong handshakeFailures = new AtomicLong();
  final AtomicLong connectionsRefused = new AtomicLong();
  final AtomicLong connectionFailures = new AtomicLong();
  final AtomicLong roomsOpened = new AtomicLong();
  final AtomicLong roomsLanded = new AtomicLong();
  final AtomicLong roomsRefused = new AtomicLong();
  final AtomicLong roomsCancelled = new AtomicLong();
  final AtomicLong roomsFailed = new AtomicLong();
  final AtomicLong roomsOpen = new AtomicLong();
  final AtomicLong registrationsWaiting = new AtomicLong();
  final AtomicLong registrationsExpired = new AtomicLong();
  final AtomicLong bytesSent = new AtomicLong();
  final AtomicLong bytesReceived = new AtomicLong();

  /** How a room ended, for {@link #roomEnded}. */
  enum End {
    LANDED,
    REFUSED,
    CANCELLED,
    FAILED
  }

  void roomOpened() {
    roomsOpened.incrementAndGet();
    roomsOpen.incrementAndGet();
  }

  void roomEnded(End end) {
    switch (end) {
      case LANDED -> roomsLanded.incrementAndGet();
      case REFUSED -> roomsRefused.incrementAndGet();
      case CANCELLED -> roomsCancelled.incrementAndGet();
      case FAILED -> roomsFailed.incrementAndGet();
    }
    roomsOpen.decrementAndGet();
  }

  PdMetrics snapshot() {
    return new PdMetrics(
        connectionsOpened.get(),
        connectionsOpen.get(),
        handshakeFailures.get(),
        connectionsRefused.get(),
        connectionFailures.get(),
        roomsOpened.get(),
        roomsLanded.get(),
        roomsRefused.get(),
        roomsCancelled.get(),
        roomsFailed.get(),
        roomsOpen.get(),
        registrationsWaiting.get(),
        registrationsExpired.get(),
        bytesSent.get(),
        bytesReceived.get());
  }
}
