package io.tokenspeed.control;

/**
 * The most storage operations one rank can have in flight at once, and the most keys they carry
 * together, as the storage credits bound them; the agreement window must hold that much ({@link
 * ControlConfig#withWindowFor}). Each bound comes with the settings that set it, which a window too
 * small for it names.
 *
 * @param operations the most operations in flight, at least 1
 * @param operationsSource the settings that bound {@code operations}, as {@code name=value}
 * @param keys the most keys those operations carry together, at least 1
 * @param keysSource the settings that bound {@code keys}, as {@code name=value}
 */
public record InFlightBound(int operations, String operationsSource, long keys, String keysSource) {

  public InFlightBound {
    if (operations < 1 || keys < 1) {
      throw new IllegalArgumentException(
          "in-flight operations=" + operations + " keys=" + keys + " must both be >= 1");
    }
    if (operationsSource == null
        || operationsSource.isBlank()
        || keysSource == null
        || keysSource.isBlank()) {
      throw new IllegalArgumentException(
          "in-flight bound of "
              + operations
              + " operations and "
              + keys
              + " keys needs the settings that set it");
    }
  }
}
