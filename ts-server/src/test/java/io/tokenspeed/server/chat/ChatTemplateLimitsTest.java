package io.tokenspeed.server.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.hubspot.jinjava.objects.date.FixedDateTimeProvider;
import io.tokenspeed.server.chat.ChatTemplateException.Reason;
import java.io.IOException;
import java.nio.file.Path;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The bounds of one render ({@link ChatTemplateLimits}): output size, work and nesting, each met by
 * hostile messages or a runaway template, each failing with {@link Reason#LIMIT} and the bound's
 * name; and a long conversation within the defaults.
 */
class ChatTemplateLimitsTest {

  private static ChatTemplate compile(String template, ChatTemplateLimits limits) {
    return ChatTemplate.compile(
        template, Map.of(), limits, new FixedDateTimeProvider(0), ZoneOffset.UTC);
  }

  private static ChatTemplateException limit(ChatTemplate template, List<ChatMessage> messages) {
    ChatTemplateException e =
        assertThrows(ChatTemplateException.class, () -> template.render(messages, true));
    assertEquals(Reason.LIMIT, e.reason(), e.getMessage());
    return e;
  }

  @Test
  void shouldBoundTheOutputWhateverTheMessagesHold(@TempDir Path dir) throws IOException {
    References.copy("qwen3/tokenizer_config.json", dir.resolve("tokenizer_config.json"));
    ChatTemplate qwen3 = ChatTemplate.load(dir, new ChatTemplateLimits(10_000, 1 << 20, 64));
    List<ChatMessage> big = List.of(ChatMessage.user("x".repeat(20_000)));
    assertEquals(
        "rendered prompt is longer than maxOutputChars=10000 characters",
        limit(qwen3, big).getMessage());
    assertTrue(qwen3.render(List.of(ChatMessage.user("x".repeat(9_000))), true).length() < 10_000);
  }

  @Test
  void shouldBoundStringsBuiltOnTheWay() {
    ChatTemplateLimits limits = new ChatTemplateLimits(1000, 1 << 20, 64);
    ChatTemplate replacing =
        compile("{{ messages[0].content.replace('a', 'aaaaaaaaaa')|length }}", limits);
    ChatTemplateException e =
        assertThrows(
            ChatTemplateException.class,
            () -> replacing.render(List.of(ChatMessage.user("a".repeat(500))), true));
    assertEquals(Reason.LIMIT, e.reason());
    assertEquals("string result longer than maxOutputChars=1000 characters", e.getMessage());
    ChatTemplate json = compile("{{ messages|tojson|length }}", limits);
    e =
        assertThrows(
            ChatTemplateException.class,
            () -> json.render(List.of(ChatMessage.user("a".repeat(2000))), true));
    assertEquals(Reason.LIMIT, e.reason());
    assertEquals("tojson output longer than maxOutputChars=1000 characters", e.getMessage());
    ChatTemplate repeat = compile("{{ '-' * messages[0].content|int }}", limits);
    assertEquals("-----", repeat.render(List.of(ChatMessage.user("5")), true));
    e =
        assertThrows(
            ChatTemplateException.class,
            () -> repeat.render(List.of(ChatMessage.user("1000000000000")), true));
    assertEquals(Reason.LIMIT, e.reason());
    assertEquals("string repetition longer than maxOutputChars=1000 characters", e.getMessage());
  }

  /** Loops with empty bodies cost steps too; a message decides whether this one spins. */
  @Test
  void shouldBoundTheWorkOfOneRender() {
    ChatTemplate runaway =
        compile(
            "{% if messages[0].content == 'spin' %}{% for a in range(100000) %}"
                + "{% for b in range(100000) %}{% endfor %}{% endfor %}{% endif %}ok",
            ChatTemplateLimits.DEFAULTS);
    assertEquals("ok", runaway.render(List.of(ChatMessage.user("x")), true));
    assertEquals(
        "rendering took more than maxRenderSteps="
            + ChatTemplateLimits.DEFAULT_MAX_RENDER_STEPS
            + " template steps (too many messages, or a template that loops without end)",
        limit(runaway, List.of(ChatMessage.user("spin"))).getMessage());
  }

  @Test
  void shouldRefuseATemplateThatPassesALimitOnTheLoadChecks() {
    ChatTemplateException e =
        assertThrows(
            ChatTemplateException.class,
            () ->
                compile(
                    "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                        + "{% endfor %}",
                    ChatTemplateLimits.DEFAULTS));
    assertEquals(Reason.INVALID, e.reason());
    assertTrue(e.getMessage().contains("maxRenderSteps="), e.getMessage());
  }

  @Test
  void shouldBoundTheStepsForManyMessages() {
    List<ChatMessage> many = new ArrayList<>();
    for (int i = 0; i < 1000; i++) {
      many.add(ChatMessage.user("m" + i));
    }
    String perMessage = "{% for m in messages %}{{ m.content }}{% endfor %}";
    ChatTemplate tight = compile(perMessage, new ChatTemplateLimits(1 << 20, 1500, 64));
    assertTrue(limit(tight, many).getMessage().contains("maxRenderSteps=1500"));
    ChatTemplate roomy = compile(perMessage, new ChatTemplateLimits(1 << 20, 3000, 64));
    assertTrue(roomy.render(many, true).endsWith("m999"));
  }

  @Test
  void shouldBoundRecursion() {
    ChatTemplate recursive =
        compile(
            "{% macro down(n) %}{{ n }}{% if n < messages[0].content|int %}{{ down(n + 1) }}"
                + "{% endif %}{% endmacro %}{{ down(0) }}",
            ChatTemplateLimits.DEFAULTS);
    assertTrue(recursive.render(List.of(ChatMessage.user("30")), true).endsWith("2930"));
    assertEquals(
        "rendering nested loops and macro calls deeper than maxRenderDepth=64 (a macro that"
            + " recurses without end?)",
        limit(recursive, List.of(ChatMessage.user("100000"))).getMessage());
  }

  @Test
  void shouldRefuseAHugeRange() {
    ChatTemplate huge =
        compile("{{ range(messages[0].content|int)|length }}", ChatTemplateLimits.DEFAULTS);
    assertEquals("100000", huge.render(List.of(ChatMessage.user("100000")), true));
    ChatTemplateException e =
        assertThrows(
            ChatTemplateException.class,
            () -> huge.render(List.of(ChatMessage.user("200000")), true));
    assertTrue(e.getMessage().contains("range too big: 200000 numbers"), e.getMessage());
  }

  @Test
  void shouldRenderALongConversationWithinTheDefaults(@TempDir Path dir) throws IOException {
    References.copy("qwen3/tokenizer_config.json", dir.resolve("tokenizer_config.json"));
    ChatTemplate qwen3 = ChatTemplate.load(dir);
    List<ChatMessage> chat = new ArrayList<>();
    chat.add(ChatMessage.system("sys"));
    for (int i = 0; i < 5000; i++) {
      chat.add(ChatMessage.user("question " + i));
      chat.add(ChatMessage.assistant("<think>\nhm\n</think>\n\nanswer " + i));
    }
    String rendered = qwen3.render(chat, true);
    assertTrue(rendered.endsWith("answer 4999<|im_end|>\n<|im_start|>assistant\n"));
  }

  @Test
  void shouldNameTheFieldOfAnInvalidLimit() {
    assertEquals(
        "maxOutputChars=0 must be >= 1",
        assertThrows(IllegalArgumentException.class, () -> new ChatTemplateLimits(0, 1, 1))
            .getMessage());
    assertEquals(
        "maxRenderSteps=-1 must be >= 1",
        assertThrows(IllegalArgumentException.class, () -> new ChatTemplateLimits(1, -1, 1))
            .getMessage());
    assertEquals(
        "maxRenderDepth=257 must be in [1, 256]",
        assertThrows(IllegalArgumentException.class, () -> new ChatTemplateLimits(1, 1, 257))
            .getMessage());
  }
}
