package io.tokenspeed.server.config;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * {@link FileNames}: why a file name cannot be used, for a given file-name encoding and environment
 * (so that every locale case is tested in whatever locale the tests run).
 */
class FileNamesTest {

  private static final Charset ASCII = StandardCharsets.US_ASCII;

  private static final String JDK_REASON =
      "Malformed input or input contains unmappable characters";

  private static final String ASCII_LE =
      "cannot be a file name in this JVM: its file-name encoding (sun.jnu.encoding) is US-ASCII,"
          + " which cannot represent U+00E9; ";

  @Test
  void shouldSayNoLocaleIsSetAndHowToFixItWhenTheEncodingIsAscii() {
    assertEquals(
        ASCII_LE
            + "no locale is set (LC_ALL, LC_CTYPE and LANG are unset), so the C locale and its"
            + " ASCII apply: set a UTF-8 locale, for example LANG=C.UTF-8",
        FileNames.whyInvalid("/tmp/l\u00e93", JDK_REASON, ASCII, Map.of("LANG", "")));
  }

  @Test
  void shouldNameTheLocaleThatIsNotUtf8() {
    assertEquals(
        ASCII_LE
            + "the locale LANG=C is not a UTF-8 one: set a UTF-8 locale, for example LANG=C.UTF-8",
        FileNames.whyInvalid("/tmp/l\u00e93", JDK_REASON, ASCII, Map.of("LANG", "C")));
  }

  @Test
  void shouldNameTheVariableThatWinsWhenSeveralAreSet() {
    assertEquals(
        ASCII_LE
            + "the locale LC_ALL=POSIX is not a UTF-8 one: set a UTF-8 locale, for example"
            + " LC_ALL=C.UTF-8",
        FileNames.whyInvalid(
            "/tmp/l\u00e93",
            JDK_REASON,
            ASCII,
            Map.of("LANG", "C.UTF-8", "LC_CTYPE", "C.UTF-8", "LC_ALL", "POSIX")));
  }

  @Test
  void shouldSayAUtf8LocaleIsMissingFromTheMachine() {
    assertEquals(
        ASCII_LE
            + "LC_CTYPE=en_US.utf8 names a locale that this machine does not have (see locale -a),"
            + " so the C locale applies: set a UTF-8 locale, for example LC_CTYPE=C.UTF-8",
        FileNames.whyInvalid("/tmp/l\u00e93", JDK_REASON, ASCII, Map.of("LC_CTYPE", "en_US.utf8")));
  }

  @Test
  void shouldExplainTheReplacementCharacterOfAnUndecodableCommandLine() {
    assertEquals(
        "cannot be a file name in this JVM: its file-name encoding (sun.jnu.encoding) is US-ASCII,"
            + " which cannot represent U+FFFD (the replacement character: the JVM read bytes of its"
            + " command line that US-ASCII cannot decode); no locale is set (LC_ALL, LC_CTYPE and"
            + " LANG are unset), so the C locale and its ASCII apply: set a UTF-8 locale, for example"
            + " LANG=C.UTF-8",
        FileNames.whyInvalid("/tmp/l\ufffd\ufffd3", JDK_REASON, ASCII, Map.of()));
  }

  @Test
  void shouldGiveNoLocaleAdviceWhenTheEncodingIsAlreadyUtf8() {
    assertEquals(
        "cannot be a file name in this JVM: its file-name encoding (sun.jnu.encoding) is UTF-8,"
            + " which cannot represent U+DC00 (half of a surrogate pair: the text is not valid"
            + " Unicode)",
        FileNames.whyInvalid(
            "/tmp/\ud83d\ude00/\udc00", JDK_REASON, StandardCharsets.UTF_8, Map.of()));
  }

  @Test
  void shouldNameASupplementaryCharacterByItsCodePoint() {
    assertEquals(
        "cannot be a file name in this JVM: its file-name encoding (sun.jnu.encoding) is US-ASCII,"
            + " which cannot represent U+1D800; the locale LANG=C is not a UTF-8 one: set a UTF-8"
            + " locale, for example LANG=C.UTF-8",
        FileNames.whyInvalid(
            "/tmp/" + Character.toString(0x1D800), JDK_REASON, ASCII, Map.of("LANG", "C")));
  }

  @Test
  void shouldKeepTheJdkReasonWhenEveryCharacterHasBytes() {
    assertEquals(
        "is not a valid path: Nul character not allowed",
        FileNames.whyInvalid("a\u0000b", "Nul character not allowed", ASCII, Map.of()));
  }

  @Test
  void shouldQuoteWithEveryCharacterOutsidePrintableAsciiEscaped() {
    assertEquals(
        "\"/tmp/l\\u00e9 \\\"x\\\"\\\\\\u0000\\ud83d\\ude00\"",
        FileNames.quote("/tmp/l\u00e9 \"x\"\\\u0000\ud83d\ude00"));
  }
}
