package io.tokenspeed.server.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.hubspot.jinjava.objects.date.FixedDateTimeProvider;
import io.tokenspeed.server.chat.ChatTemplateException.Reason;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The renderer against Python's Jinja in the environment {@code transformers} renders chat
 * templates in: each case of {@code jinja-features.json} (whitespace control, literals, operators,
 * slices, string and dict methods, loops, tests, filters, {@code tojson}, macros) must render byte
 * for byte as Jinja rendered it, {@code strftime.json} pins {@code strftime_now}, and the
 * differences that remain are pinned here as documented.
 */
class JinjaCompatibilityTest {

  private static final JsonNode FEATURES = References.read("jinja-features.json");

  private static final JinjaEnvironment ENVIRONMENT =
      new JinjaEnvironment(
          ChatTemplateLimits.DEFAULTS, new FixedDateTimeProvider(0), ZoneOffset.UTC);

  static Stream<Arguments> features() {
    return cases(FEATURES.get("cases"));
  }

  static Stream<Arguments> errors() {
    return cases(FEATURES.get("errors"));
  }

  private static Stream<Arguments> cases(JsonNode array) {
    Stream.Builder<Arguments> out = Stream.builder();
    array.forEach(c -> out.add(Arguments.of(c.get("name").asText(), c)));
    return out.build();
  }

  private static String render(String template) {
    return ENVIRONMENT.render(
        TemplateText.prepare(template),
        new LinkedHashMap<>(References.values(FEATURES.get("variables"))),
        "test");
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("features")
  void shouldRenderAsJinjaDoes(String name, JsonNode c) {
    assertEquals(c.get("expected").asText(), render(c.get("template").asText()));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("errors")
  void shouldFailWithTheTemplatesMessage(String name, JsonNode c) {
    ChatTemplateException e =
        assertThrows(ChatTemplateException.class, () -> render(c.get("template").asText()));
    assertEquals(Reason.RAISED, e.reason());
    assertEquals(c.get("error").asText(), e.getMessage());
  }

  /** The instants are local times in the JVM's zone for strftime_now: here Tokyo's, not UTC. */
  @Test
  void shouldFormatTheClockLikePythonsStrftime() {
    JsonNode doc = References.read("strftime.json");
    assertEquals(44, doc.get("cases").size());
    for (JsonNode c : doc.get("cases")) {
      LocalDateTime instant = LocalDateTime.parse(c.get("instant").asText());
      long nowMs = instant.toInstant(ZoneOffset.ofHours(9)).toEpochMilli();
      JinjaEnvironment tokyo =
          new JinjaEnvironment(
              ChatTemplateLimits.DEFAULTS,
              new FixedDateTimeProvider(nowMs),
              ZoneId.of("Asia/Tokyo"));
      String format = c.get("format").asText();
      String template = "{{ strftime_now(" + References.JSON.valueToTree(format) + ") }}";
      assertEquals(
          c.get("expected").asText(),
          tokyo.render(template, new LinkedHashMap<>(), "test"),
          instant + " " + format);
    }
  }

  @Test
  void shouldRefuseAStrftimeDirectiveItDoesNotKnow() {
    ChatTemplateException e =
        assertThrows(ChatTemplateException.class, () -> render("{{ strftime_now('%Q') }}"));
    assertEquals(Reason.TEMPLATE, e.reason());
    assertTrue(e.getMessage().contains("directive %Q"), e.getMessage());
  }

  /** Python's case mapping and C's day names do not follow the JVM's locale (Turkish here). */
  @Test
  void shouldNotDependOnTheJvmsLocale() {
    Locale before = Locale.getDefault();
    try {
      Locale.setDefault(Locale.forLanguageTag("tr-TR"));
      JinjaEnvironment turkish =
          new JinjaEnvironment(
              ChatTemplateLimits.DEFAULTS, new FixedDateTimeProvider(0), ZoneOffset.UTC);
      assertEquals(
          "ISTANBUL i|I|Title I|Thu Jan",
          turkish.render(
              "{{ 'istanbul'|upper }} {{ 'I'|lower }}|{{ 'i'.upper() }}|{{ 'title i'|title }}|"
                  + "{{ strftime_now('%a %b') }}",
              new LinkedHashMap<>(), "test"));
    } finally {
      Locale.setDefault(before);
    }
  }

  /** What differs from Jinja, as docs/chat-templates.md lists it: pinned so a change is seen. */
  @Test
  void shouldKeepTheDocumentedDifferences() {
    // None and undefined are one value: None prints as nothing and takes a default.
    assertEquals("[]", render("[{{ nothing }}]"));
    assertEquals("n", render("{{ nothing|default('n') }}"));
    // Booleans inside a printed list print as JSON does.
    assertEquals("[true, null]", render("{{ [true, none] }}"));
    // An attribute of an undefined value is undefined, not an error.
    assertEquals("[]", render("[{{ nope.attr }}]"));
  }

  @Test
  void shouldNameAFilterATestOrAMethodItDoesNotHave() {
    assertEquals(
        "test: line 1: no filter named 'nosuch'",
        assertThrows(ChatTemplateException.class, () -> render("{{ s|nosuch }}")).getMessage());
    assertEquals(
        "test: line 1: no test named 'nosuch'",
        assertThrows(ChatTemplateException.class, () -> render("{{ s is nosuch }}")).getMessage());
    ChatTemplateException method =
        assertThrows(ChatTemplateException.class, () -> render("{{ s.getBytes() }}"));
    assertEquals(Reason.TEMPLATE, method.reason());
    assertTrue(method.getMessage().contains("'str' object has no method 'getBytes'"));
  }

  @Test
  void shouldNotLetATemplateModifyItsInputs() {
    for (String call : List.of("xs.append(4)", "xs.pop()", "d.update({'k': 1})", "d.pop('k')")) {
      ChatTemplateException e =
          assertThrows(ChatTemplateException.class, () -> render("{{ " + call + " }}"), call);
      assertTrue(e.getMessage().contains("cannot modify"), e.getMessage());
    }
    assertEquals("[1, 2, 3] 3", render("{{ xs }} {{ d|length }}"));
  }

  @Test
  void shouldNotReadFiles() {
    for (String tag : List.of("include", "import", "extends")) {
      ChatTemplateException e =
          assertThrows(
              ChatTemplateException.class,
              () -> render("{% " + tag + " 'tokenizer_config.json' %}"),
              tag);
      assertEquals(Reason.TEMPLATE, e.reason());
    }
  }

  @Test
  void shouldPrintMessageContentAsData() {
    Map<String, Object> bindings = new LinkedHashMap<>();
    bindings.put("content", "{{ raise_exception('x') }} {% for i in range(9) %}{% endfor %}");
    assertEquals(
        "{{ raise_exception('x') }} {% for i in range(9) %}{% endfor %}",
        ENVIRONMENT.render("{{ content }}", bindings, "test"));
  }
}
