package io.tokenspeed.server.http;

import io.tokenspeed.core.OneLine;

/**
 * A request the server refuses, answered in the OpenAI API's error shape: {@code {"error":
 * {"message", "type", "param", "code"}}} with an HTTP status. The message is one line: a control
 * character or line separator that the request carried into it (a model name, a role or a part type
 * with a line break in it) is written as an escape (backslash, u, four hex digits).
 */
public final class ApiException extends RuntimeException {
  private final int status;
  private final String type;
  private final String param;
  private final String code;

  public ApiException(int status, String type, String param, String code, String message) {
    super(OneLine.of(message));
    this.status = status;
    this.type = type;
    this.param = param;
    this.code = code;
  }

  /** 400: a field of the request is missing, of the wrong type or out of range. */
  public static ApiException invalid(String param, String message) {
    return new ApiException(400, "invalid_request_error", param, null, message);
  }

  /** 404: the request names a model this server does not serve. */
  public static ApiException unknownModel(String model, String served) {
    return new ApiException(
        404,
        "invalid_request_error",
        "model",
        "model_not_found",
        "The model `" + model + "` does not exist; this server serves `" + served + "`");
  }

  /** 503: the server is draining or its engine has failed. */
  public static ApiException unavailable(String message) {
    return new ApiException(503, "service_unavailable", null, null, message);
  }

  public int status() {
    return status;
  }

  public String type() {
    return type;
  }

  /** The request field at fault, or null. */
  public String param() {
    return param;
  }

  /** A machine-readable code, or null. */
  public String code() {
    return code;
  }
}
