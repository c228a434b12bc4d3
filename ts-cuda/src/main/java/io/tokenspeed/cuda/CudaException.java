package io.tokenspeed.cuda;

/**
 * A CUDA call that failed: names the call, the library's error code and the library's own error
 * string (for example {@code cudaMalloc(1073741824 bytes) failed: error 2 (out of memory)}).
 */
public final class CudaException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final String call;
  private final int code;

  public CudaException(String call, int code, String description) {
    super(call + " failed: error " + code + " (" + description + ")");
    this.call = call;
    this.code = code;
  }

  /**
   * A failure that is not one call's status (a library that is missing, a kernel that failed to
   * compile).
   */
  public CudaException(String message) {
    super(message);
    this.call = "";
    this.code = 0;
  }

  /** The call that failed, with the arguments that identify it; empty when no call failed. */
  public String call() {
    return call;
  }

  /** The library's status code; 0 when no call failed. */
  public int code() {
    return code;
  }
}
