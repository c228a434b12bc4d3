package io.tokenspeed.model.tokenizer;

import java.util.Map;
import java.util.Objects;
import java.util.OptionalInt;

/**
 * The special tokens of a tokenizer: the ids that {@code tokenizer_config.json} names as beginning
 * of sequence, end of sequence and padding (each may be absent), and every token marked special, by
 * content. Special tokens are control symbols: {@link Tokenizer#encodeAsPlainText} treats their
 * text as plain text, {@link Tokenizer#encode} matches it.
 *
 * @param bosId the beginning-of-sequence id ({@code bos_token}), if the checkpoint has one
 * @param eosId the end-of-sequence id ({@code eos_token}), if the checkpoint has one
 * @param padId the padding id ({@code pad_token}), if the checkpoint has one
 * @param idsByContent every special token's id, keyed by its text
 */
public record SpecialTokens(
    OptionalInt bosId, OptionalInt eosId, OptionalInt padId, Map<String, Integer> idsByContent) {

  /** No special tokens at all. */
  public static final SpecialTokens NONE =
      new SpecialTokens(OptionalInt.empty(), OptionalInt.empty(), OptionalInt.empty(), Map.of());

  public SpecialTokens {
    Objects.requireNonNull(bosId, "bosId");
    Objects.requireNonNull(eosId, "eosId");
    Objects.requireNonNull(padId, "padId");
    idsByContent = Map.copyOf(idsByContent);
    for (Map.Entry<String, Integer> e : idsByContent.entrySet()) {
      if (e.getKey().isEmpty() || e.getValue() < 0) {
        throw new IllegalArgumentException(
            "special token needs text and an id >= 0: content=\""
                + e.getKey()
                + "\" id="
                + e.getValue());
      }
    }
    checkId("bosId", bosId);
    checkId("eosId", eosId);
    checkId("padId", padId);
  }

  /** The id of the special token with this text, if there is one. */
  public OptionalInt idOf(String content) {
    Integer id = idsByContent.get(content);
    return id == null ? OptionalInt.empty() : OptionalInt.of(id);
  }

  /** Whether {@code id} is one of the special tokens. */
  public boolean isSpecial(int id) {
    return idsByContent.containsValue(id);
  }

  private static void checkId(String name, OptionalInt id) {
    if (id.isPresent() && id.getAsInt() < 0) {
      throw new IllegalArgumentException(name + "=" + id.getAsInt() + " must be >= 0");
    }
  }
}
