package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.server.chat.ChatTemplate;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Chat through the checkpoint's own template: a model folder whose {@code tokenizer_config.json}
 * holds a chat template, loaded as {@code serve} loads it. The chat answer equals the completion of
 * the rendered conversation; a template's {@code raise_exception} is a 400 naming messages.
 */
class ChatServingTest {
  @TempDir Path dir;

  static final String TEMPLATE =
      "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
          + "{{ raise_exception('the system message must come first') }}{% endif %}"
          + "[{{ m.role | upper }}] {{ m.content }}\\n{% endfor %}"
          + "{% if add_generation_prompt %}[ASSISTANT] {% endif %}";

  @Test
  void shouldRenderChatWithTheCheckpointsTemplate() throws Exception {
    Path source = TestServer.checkpoint(dir);
    Path folder = Files.createDirectories(dir.resolve("with-template"));
    try (var files = Files.list(source)) {
      for (Path f : (Iterable<Path>) files::iterator) {
        Files.copy(f, folder.resolve(f.getFileName()), StandardCopyOption.REPLACE_EXISTING);
      }
    }
    Files.writeString(
        folder.resolve("tokenizer_config.json"), "{\"chat_template\": \"" + TEMPLATE + "\"}");
    ChatTemplate template = ChatTemplate.load(folder);
    assertTrue(template.fromCheckpoint());
    try (TestServer server =
        TestServer.over(
            CausalLm.load(folder),
            null,
            1 << 20,
            true,
            Serving.chatPrompt(template, io.tokenspeed.model.tokenizer.ByteTokenizer.plain()))) {
      HttpResponse<String> chat =
          server.post(
              "/v1/chat/completions",
              "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                  + "{\"role\":\"user\",\"content\":\"Hello!\"}],"
                  + "\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,"
                  + "\"stream_options\":null}");
      assertEquals(200, chat.statusCode(), chat.body());
      JsonNode answer = TestServer.json(chat.body());
      String rendered = "[SYSTEM] Be brief.\n[USER] Hello!\n[ASSISTANT] ";
      assertEquals(rendered.length(), answer.get("usage").get("prompt_tokens").asInt());
      HttpResponse<String> completion =
          server.post(
              "/v1/completions",
              "{\"prompt\":"
                  + TestServer.JSON.valueToTree(rendered)
                  + ",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}");
      assertEquals(
          TestServer.json(completion.body()).get("choices").get(0).get("text").asText(),
          answer.get("choices").get(0).get("message").get("content").asText());

      HttpResponse<String> refused =
          server.post(
              "/v1/chat/completions",
              "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
                  + "{\"role\":\"system\",\"content\":\"late\"}]}");
      assertEquals(400, refused.statusCode(), refused.body());
      JsonNode error = TestServer.json(refused.body()).get("error");
      assertEquals("messages", error.get("param").asText());
      assertTrue(error.get("message").asText().contains("the system message must come first"));

      HttpResponse<String> image =
          server.post(
              "/v1/chat/completions",
              "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                  + "\"image_url\":{\"url\":\"x\"}}]}]}");
      assertEquals(400, image.statusCode(), image.body());
      assertTrue(image.body().contains("only text parts"), image.body());
    }
  }
}
