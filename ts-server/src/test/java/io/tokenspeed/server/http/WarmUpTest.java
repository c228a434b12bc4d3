package io.tokenspeed.server.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.engine.Engine;
import io.tokenspeed.engine.EngineConfig;
import io.tokenspeed.engine.l3.L3Settings;
import io.tokenspeed.model.CausalLm;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import io.tokenspeed.server.config.StorageExtraConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.OptionalInt;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The warm-up with L3 runs its requests through its own engine, server and store client under a
 * namespace of its own, restores from the store, and leaves nothing behind in the shared store.
 */
class WarmUpTest {
  @TempDir Path dir;

  @Test
  void shouldRestoreThroughTheStoreAndLeaveNoObjectBehind() throws Exception {
    Path store = Files.createDirectories(dir.resolve("store"));
    StorageExtraConfig.Resolved l3 =
        StorageExtraConfig.parse(
            "file",
            "{\"path\": \""
                + store.toString().replace("\\", "\\\\")
                + "\", \"async\": {\"min_extension_tokens\": 64}}");
    try (CausalLm model = TestServer.load(dir)) {
      EngineConfig config = EngineConfig.defaults(Engine.deviceParentsFor(model, 2048));
      var tokenizer = ByteTokenizer.plain();
      long ms =
          WarmUp.run(
              model,
              config,
              OptionalInt.empty(),
              tokenizer,
              TestServer.plainChat(tokenizer),
              () -> {
                try {
                  return L3Settings.open(l3.backend(), l3.runtime());
                } catch (Exception e) {
                  throw new IllegalStateException(e);
                }
              },
              1);
      assertTrue(ms > 0);
    }
    try (Stream<Path> left = Files.walk(store)) {
      assertEquals(
          0, left.filter(Files::isRegularFile).count(), "the warm-up's namespace was deleted");
    }
  }
}
