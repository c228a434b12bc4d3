package io.tokenspeed.l3.redis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class RedisStoreSettingsTest {

  private static final RedisStoreSettings BASE = RedisStoreSettings.standalone("127.0.0.1:6379");

  @Test
  void shouldUseTheDocumentedDefaultsWhenBuiltForOneServer() {
    assertEquals(List.of("127.0.0.1:6379"), BASE.uris());
    assertFalse(BASE.cluster());
    assertEquals("", BASE.username());
    assertEquals(null, BASE.password());
    assertFalse(BASE.tls());
    assertEquals(RedisStoreSettings.DEFAULT_CONNECT_TIMEOUT_MS, BASE.connectTimeoutMs());
    assertEquals(RedisStoreSettings.DEFAULT_COMMAND_TIMEOUT_MS, BASE.commandTimeoutMs());
    assertEquals(RedisStoreSettings.DEFAULT_CONNECTIONS, BASE.connections());
    assertEquals(RedisStoreSettings.DEFAULT_PIPELINE_DEPTH, BASE.pipelineDepth());
    assertEquals(RedisStoreSettings.DEFAULT_MAX_VALUE_BYTES, BASE.maxValueBytes());
    assertEquals(RedisStoreSettings.DEFAULT_MAX_KEY_BYTES, BASE.maxKeyBytes());
  }

  @ParameterizedTest
  @ValueSource(
      strings = {"localhost:6379", "redis://10.0.0.1:7000", "REDIS://host:1", "[::1]:6379"})
  void shouldAcceptAHostAndPortWhenWrittenBareOrAsARedisUri(String uri) {
    RedisStoreSettings s = RedisStoreSettings.standalone(uri);
    assertEquals(1, s.endpoints().size());
    assertTrue(s.endpoints().getFirst().port() > 0);
  }

  @Test
  void shouldStripTheBracketsWhenTheHostIsIpv6() {
    assertEquals("::1", RedisStoreSettings.standalone("[::1]:6379").endpoints().getFirst().host());
  }

  @Test
  void shouldNameTheFieldValueAndRangeWhenASettingIsOutOfRange() {
    assertMessage(
        "redis connect_timeout_ms=5 must be in [10, 600000]", () -> BASE.withTimeouts(5, 1000));
    assertMessage(
        "redis command_timeout_ms=600001 must be in [10, 600000]",
        () -> BASE.withTimeouts(1000, 600_001));
    assertMessage("redis connections=0 must be in [1, 64]", () -> BASE.withConnections(0));
    assertMessage("redis pipeline_depth=0 must be in [1, 1024]", () -> BASE.withPipelineDepth(0));
    assertMessage(
        "redis pipeline_depth=1025 must be in [1, 1024]", () -> BASE.withPipelineDepth(1025));
    assertMessage(
        "redis max_value_bytes=536870913 must be in [1, 536870912]",
        () -> BASE.withLimits(512, (512L << 20) + 1));
    assertMessage("redis max_key_bytes=0 must be in [1, 4096]", () -> BASE.withLimits(0, 1));
  }

  @Test
  void shouldRefuseSeveralServersWhenNotACluster() {
    assertMessage(
        "must name exactly one server when cluster=false",
        () ->
            new RedisStoreSettings(
                List.of("a:1", "b:2"), false, "", null, false, 1000, 1000, 1, 1, 1024, 512));
    assertEquals(2, RedisStoreSettings.cluster(List.of("a:1", "b:2")).endpoints().size());
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "",
        "localhost",
        "localhost:0",
        "localhost:70000",
        "http://localhost:6379",
        "redis://localhost:6379/0",
        "redis://localhost:6379?timeout=1",
        "redis://:6379"
      })
  void shouldRejectTheUriWhenItIsNotHostAndPort(String uri) {
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> RedisStoreSettings.standalone(uri));
    assertTrue(e.getMessage().startsWith("redis uri="), e.getMessage());
  }

  @Test
  void shouldNeverQuoteCredentialsWhenTheUriCarriesThem() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> RedisStoreSettings.standalone("redis://user:hunter2@localhost:6379"));
    assertFalse(e.getMessage().contains("hunter2"), e.getMessage());
    assertTrue(e.getMessage().contains("set username/password instead"), e.getMessage());
  }

  @Test
  void shouldRequireTheSchemeToAgreeWithTheTlsFlag() {
    assertMessage(
        "uses rediss:// but tls=false", () -> RedisStoreSettings.standalone("rediss://h:1"));
    assertMessage(
        "uses redis:// but tls=true",
        () -> RedisStoreSettings.standalone("redis://h:1").withTls(true));
    assertTrue(RedisStoreSettings.standalone("h:1").withTls(true).tls());
  }

  @Test
  void shouldRequireAPasswordWhenAUsernameIsGiven() {
    assertMessage(
        "redis username=tenant needs a password", () -> BASE.withCredentials("tenant", null));
    assertMessage("redis password is empty", () -> BASE.withCredentials("", ""));
    assertMessage("must not contain whitespace", () -> BASE.withCredentials("a b", "pw"));
    assertEquals("tenant", BASE.withCredentials("tenant", "pw").username());
    assertEquals("", BASE.withCredentials(null, "pw").username());
  }

  @Test
  void shouldHideThePasswordWhenPrinted() {
    String text = BASE.withCredentials("tenant", "hunter2").toString();
    assertFalse(text.contains("hunter2"), text);
    assertTrue(text.contains("password=(set)"), text);
    assertTrue(text.contains("username=tenant"), text);
  }

  private static void assertMessage(String expected, Supplier<?> build) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build::get);
    assertTrue(e.getMessage().contains(expected), e.getMessage());
  }
}
