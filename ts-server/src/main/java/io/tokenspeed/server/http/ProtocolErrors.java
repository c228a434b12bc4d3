package io.tokenspeed.server.http;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.helidon.http.DirectHandler;
import io.helidon.http.HeaderNames;
import io.helidon.http.ServerResponseHeaders;
import io.helidon.http.Status;
import io.helidon.webserver.http.DirectHandlers;

/**
 * Answers the requests the web server refuses before any route sees them (a request line over its
 * limit: 414; too many or too large headers: 431 or 400; a malformed or negative {@code
 * Content-Length}, conflicting lengths, a bad chunk: 400; an unsupported HTTP version: 505) with a
 * body in OpenAI's error shape, like every refusal of the routes: {@code {"error": {"message",
 * "type", "param", "code"}}}. The status stays the web server's; the connection closes after these
 * answers (the server cannot tell where the next request would start).
 */
final class ProtocolErrors implements DirectHandler {

  /** One handler for every event type. */
  static DirectHandlers handlers() {
    ProtocolErrors handler = new ProtocolErrors();
    DirectHandlers.Builder b = DirectHandlers.builder();
    for (EventType type : EventType.values()) {
      b.addHandler(type, handler);
    }
    return b.build();
  }

  @Override
  public TransportResponse handle(
      TransportRequest request,
      EventType eventType,
      Status defaultStatus,
      ServerResponseHeaders headers,
      String message) {
    int code = defaultStatus.code();
    ObjectNode out = Completions.JSON.createObjectNode();
    ObjectNode error = out.putObject("error");
    error.put("message", message(code, message));
    error.put("type", code >= 500 ? "internal_error" : "invalid_request_error");
    error.putNull("param");
    error.put("code", codeName(code));
    headers.set(HeaderNames.CONTENT_TYPE, "application/json");
    return TransportResponse.builder()
        .status(defaultStatus)
        .headers(headers)
        .entity(Completions.bytes(out))
        .build();
  }

  private static String message(int code, String detail) {
    String what =
        switch (code) {
          case 413 -> "the request body is too large";
          case 414 -> "the request line (method, path and query) is too long";
          case 431 -> "the request headers are too large";
          case 505 -> "this HTTP version is not supported; use HTTP/1.1";
          default -> code >= 500 ? "the server failed to handle the request" : "malformed request";
        };
    return detail == null || detail.isBlank() ? what : what + ": " + detail;
  }

  private static String codeName(int code) {
    return switch (code) {
      case 413 -> "request_too_large";
      case 414 -> "uri_too_long";
      case 431 -> "headers_too_large";
      case 505 -> "http_version_not_supported";
      default -> code >= 500 ? "internal_error" : "bad_request";
    };
  }
}
