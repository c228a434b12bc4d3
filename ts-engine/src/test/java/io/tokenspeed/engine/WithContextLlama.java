package io.tokenspeed.engine;

import io.tokenspeed.model.CausalLm;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.io.TempDir;

/**
 * An engine test class's model: the untied Llama of {@link ContextModels#llama}, whose output
 * depends on its context, loaded once before the class's tests and closed after them.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class WithContextLlama {
  protected CausalLm model;

  @BeforeAll
  void loadTheModel(@TempDir Path dir) {
    model = ContextModels.llama(dir);
  }

  @AfterAll
  void closeTheModel() {
    model.close();
  }
}
