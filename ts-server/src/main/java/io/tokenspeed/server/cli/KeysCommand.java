package io.tokenspeed.server.cli;

import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.tokenspeed.core.DeploymentIdentity;
import io.tokenspeed.core.PromptKeys;
import io.tokenspeed.server.config.IdentityJson;
import io.tokenspeed.server.keys.PromptKeyListing;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed keys}: the L3 object keys a request for a prompt could read or write, so an
 * operator can see what a prompt touches in the shared store (and compare namespaces of two
 * configurations). The choice of boundaries and rows is {@link PromptKeyListing}'s.
 *
 * <pre>
 *   namespace tsl3-&lt;64 hex&gt;
 *   {"boundary":64,"group":0,"kind":"full","row":0,"page_offset":0,"content_hash":"...","key":"..."}
 *   ...
 * </pre>
 */
@Command(
    name = "keys",
    mixinStandardHelpOptions = true,
    versionProvider = VersionProvider.class,
    sortOptions = false,
    customSynopsis = {
      "tokenspeed keys (--identity=FILE | IDENTITY FLAGS)",
      "                       (--text=STRING | --tokens=ID,ID,...)",
      "                       [--rank=N] [--extra-key=KEY]... [--vocab-size=N]",
      ""
    },
    description = {
      "Lists the L3 object keys a request for a prompt could read or write.",
      "",
      "Prints 'namespace tsl3-...' on the first line, then one JSON line per object key with"
          + " boundary, group, kind, row, page_offset, content_hash and key.",
      "Boundaries: every multiple of prefix_granularity up to the prompt length, then the"
          + " reusable bound (length - 1) when it is not a multiple. At each boundary B a full"
          + " group needs every row below B, a swa group the rows holding tokens"
          + " [B - window + 1, B - 1], a state group the checkpoint at B. Each key is listed"
          + " once, at the first boundary that needs it."
    },
    footer = {
      "",
      "Examples:",
      "  tokenspeed keys --identity examples/identity-tiny-hybrid.json --text \"hello\"",
      "  tokenspeed keys --model-id m --checkpoint-revision r1 --weight-version w1 \\",
      "      --attention-backend cpu-reference --prefix-granularity 64 --dtype bf16 \\",
      "      --group kind=full,bg=16,bytes=4096 --tokens 1,2,3",
      "",
      "Long prompts: put '--tokens' and the list on two lines of a file and pass @FILE.",
      "The identity file format is described in docs/identity-json.md.",
      "Exit codes: 0 success, 1 invalid input, 2 usage error, 70 internal error."
    })
final class KeysCommand implements Callable<Integer> {

  private static final JsonMapper JSON = new JsonMapper();

  @Spec private CommandSpec spec;

  @Option(
      names = "--identity",
      paramLabel = "FILE",
      order = 0,
      description = "Deployment identity and cache layout as JSON (docs/identity-json.md).")
  private Path identityFile;

  // The groups only give the help its sections: validate = false, and picocli keeps these initial
  // instances when none of a group's options is given (the tests cover both cases).
  @ArgGroup(
      validate = false,
      order = 1,
      heading = "%nDeployment identity as flags (instead of --identity):%n")
  private IdentityOptions identityFlags = new IdentityOptions();

  @ArgGroup(validate = false, order = 2, heading = "%nPrompt:%n")
  private PromptOptions prompt = new PromptOptions();

  static final class PromptOptions {
    @Option(
        names = "--text",
        paramLabel = "STRING",
        description = "The prompt as text: one token per UTF-8 byte.")
    String text;

    @Option(
        names = "--tokens",
        paramLabel = "ID,ID,...",
        description = "The prompt as comma-separated token ids.")
    String tokens;

    @Option(names = "--vocab-size", paramLabel = "N", description = "Reject token ids >= N.")
    Integer vocabSize;

    @Option(
        names = "--extra-key",
        paramLabel = "KEY",
        description = "Request-level extra key (adapter name, cache salt), repeatable, in order.")
    List<String> extraKeys;

    @Option(
        names = "--rank",
        paramLabel = "N",
        description = "Attention-TP rank whose keys to list (default: 0).")
    int rank;
  }

  @Override
  public Integer call() {
    DeploymentIdentity identity = identity();
    int rank = prompt.rank;
    if (rank < 0 || rank >= identity.attentionTpSize()) {
      throw usage(
          "--rank="
              + rank
              + " must be in [0, "
              + identity.attentionTpSize()
              + ") for attention_tp_size="
              + identity.attentionTpSize());
    }
    PromptKeys keys =
        PromptKeys.of(
            identity.layout(), tokens(), prompt.extraKeys == null ? List.of() : prompt.extraKeys);
    PromptKeyListing listing = PromptKeyListing.of(identity, keys, rank);
    PrintWriter out = spec.commandLine().getOut();
    out.println("namespace " + listing.namespace());
    for (PromptKeyListing.Entry e : listing.entries()) {
      out.println(jsonLine(e));
    }
    out.flush();
    return 0;
  }

  private DeploymentIdentity identity() {
    List<String> flags = identityFlags.given();
    if (identityFile != null) {
      if (!flags.isEmpty()) {
        throw usage(
            "--identity="
                + identityFile
                + " cannot be combined with "
                + flags.getFirst()
                + ": give the identity as a file or as flags");
      }
      return IdentityJson.read(identityFile);
    }
    if (flags.isEmpty()) {
      throw usage(
          "a deployment identity is required: --identity FILE, or the flags "
              + String.join(", ", IdentityOptions.REQUIRED));
    }
    try {
      return identityFlags.toIdentity();
    } catch (IllegalArgumentException e) {
      throw usage(e.getMessage());
    }
  }

  private int[] tokens() {
    if (prompt.text != null && prompt.tokens != null) {
      throw usage("--text and --tokens cannot be combined: give the prompt one way");
    }
    if (prompt.text == null && prompt.tokens == null) {
      throw usage("a prompt is required: --text STRING or --tokens ID,ID,...");
    }
    if (prompt.vocabSize != null && prompt.vocabSize < 1) {
      throw usage("--vocab-size=" + prompt.vocabSize + " must be at least 1");
    }
    try {
      return prompt.text != null
          ? PromptTokens.fromText(prompt.text, prompt.vocabSize)
          : PromptTokens.fromList(prompt.tokens, prompt.vocabSize);
    } catch (IllegalArgumentException e) {
      throw usage(e.getMessage());
    }
  }

  private static String jsonLine(PromptKeyListing.Entry e) {
    ObjectNode line = JSON.createObjectNode();
    line.put("boundary", e.boundary());
    line.put("group", e.group().groupId());
    line.put("kind", e.group().kind().wireName());
    line.put("row", e.row());
    line.put("page_offset", e.key().cacheKey().pageOffset());
    line.put("content_hash", e.key().cacheKey().pageHash().toHex());
    line.put("key", e.key().toString());
    return line.toString();
  }

  private ParameterException usage(String message) {
    return new ParameterException(spec.commandLine(), message);
  }
}
