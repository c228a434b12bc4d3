package io.tokenspeed.server.cli;

import io.tokenspeed.model.synthetic.SyntheticCheckpoints;
import io.tokenspeed.model.tokenizer.ByteTokenizer;
import io.tokenspeed.model.tokenizer.Tokenizer;
import io.tokenspeed.server.chat.ChatTemplate;
import io.tokenspeed.server.http.Serving;
import io.tokenspeed.server.router.PromptReader;
import io.tokenspeed.server.router.Router;
import io.tokenspeed.server.router.RouterSettings;
import io.tokenspeed.server.router.Routing;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.logging.Level;
import java.util.logging.Logger;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code tokenspeed router}: the front door of a prefill/decode disaggregated deployment
 * (docs/pd.md "Processes and ports"), or of fused data-parallel replicas ({@code --replicas},
 * docs/serving.md "Data-parallel replicas"). It serves the OpenAI API and sends each completion to
 * a prefill and a decode engine (or to one replica) and passes the answering engine's answer on
 * ({@link Router}). The prefill engine or the replica is chosen by the prompt's prefixes the
 * engines hold, from their KV events, and their load ({@code --routing prefix}, the default), or
 * round robin; a decode engine round robin. On SIGTERM it answers new requests 503 (and {@code
 * /ready} 503), lets those being answered finish for up to {@code --shutdown-timeout} seconds, then
 * stops listening and cuts what is left.
 */
@Command(
    name = "router",
    mixinStandardHelpOptions = true,
    versionProvider = VersionProvider.class,
    sortOptions = false,
    description = {
      "Route OpenAI API requests (/v1/completions, /v1/chat/completions, /v1/models) to prefill"
          + " and decode engines (prefill/decode disaggregation, docs/pd.md), or to fused"
          + " replicas (--replicas, docs/serving.md), with /metrics, /health and /ready.",
      "",
      "Each backend is polled (GET /ready and GET /pd); one is chosen while its /ready answers 200"
          + " and its /pd names the role it is given here (a decode engine: with every rank's KV"
          + " endpoint). Either side may be a tensor-parallel replica (serve --tp N): a prefill"
          + " engine is sent the decode replica's KV endpoints, a decode engine the prefill"
          + " replica's size.",
      "",
      "With --routing prefix (the default) the router follows each prefill engine's or replica's"
          + " KV events (GET /kv-events; serve --kv-events-endpoint) and sends a request where"
          + " the longest prefix of its prompt is held, weighed against the engines' load"
          + " (GET /metrics); decode engines are taken round robin."
    })
final class RouterCommand implements Callable<Integer> {

  /** Helidon's own log, held so that its level stays (a logger nobody holds may be collected). */
  private static final Logger HELIDON_LOG = Logger.getLogger("io.helidon");

  /**
   * The client library's idle-connection timeout, in seconds, read when its first client starts.
   */
  private static final String KEEPALIVE_PROPERTY = "jdk.httpclient.keepalive.timeout";

  /** Below {@code serve}'s default header timeout, which closes its idle connections. */
  private static final long KEEPALIVE_S = 5;

  @Spec private CommandSpec spec;

  @Option(
      names = "--prefill",
      split = ",",
      paramLabel = "URL",
      description =
          "The prefill engines' base URLs, http://HOST:PORT, comma-separated (with --decode).")
  private List<String> prefill;

  @Option(
      names = "--decode",
      split = ",",
      paramLabel = "URL",
      description =
          "The decode engines' base URLs, http://HOST:PORT, comma-separated (with --prefill).")
  private List<String> decode;

  @Option(
      names = "--replicas",
      split = ",",
      paramLabel = "URL",
      description =
          "Instead of --prefill and --decode: fused engines' base URLs, http://HOST:PORT,"
              + " comma-separated (data-parallel replicas: each serves whole requests).")
  private List<String> replicas;

  @Option(
      names = "--routing",
      paramLabel = "prefix|round-robin",
      description =
          "How a prefill engine (or a replica) is chosen: by the prompt's prefixes the engines"
              + " hold and their load (prefix), or in turn (round-robin). Default: prefix.")
  private String routing = Routing.PREFIX.wireName();

  @Option(
      names = "--tokenizer",
      paramLabel = "DIR|synthetic:NAME",
      description =
          "The engines' model folder (or their synthetic:NAME), whose tokenizer and chat template"
              + " give a text prompt's or a chat's token ids for the prefix lookup. Without it"
              + " only prompts given as token ids are looked up; the others are routed by load.")
  private String tokenizer;

  @Option(
      names = "--kv-index-blocks",
      paramLabel = "N",
      description =
          "The most block hashes kept per engine (its Device and Host tiers), and for the shared"
              + " L3 store; about 18-36 bytes each. Default: 1048576.")
  private int kvIndexBlocks = RouterSettings.DEFAULT_KV_INDEX_BLOCKS;

  @Option(
      names = "--load-tokens",
      paramLabel = "TOKENS",
      description =
          "The prefill tokens one request an engine runs or holds waiting is priced at, against"
              + " the prefix it holds. Default: 256.")
  private int loadTokens = RouterSettings.DEFAULT_LOAD_TOKENS;

  @Option(
      names = "--port",
      required = true,
      paramLabel = "PORT",
      description = "Port to listen on (0: any free).")
  private int port;

  @Option(names = "--host", paramLabel = "ADDRESS", description = "Address to listen on.")
  private String host = "127.0.0.1";

  @Option(
      names = "--poll-ms",
      paramLabel = "MS",
      description = "How often each backend's /ready and /pd are polled.")
  private long pollMs = RouterSettings.DEFAULT_POLL_MS;

  @Option(
      names = "--connect-timeout-ms",
      paramLabel = "MS",
      description = "How long connecting to a backend, and a poll's answer, may take.")
  private long connectTimeoutMs = RouterSettings.DEFAULT_CONNECT_TIMEOUT_MS;

  @Option(
      names = "--upstream-timeout-ms",
      paramLabel = "MS",
      description =
          "How long a backend may take to start its answer (504 after), and how long its answer"
              + " may stall once started.")
  private long upstreamTimeoutMs = RouterSettings.DEFAULT_UPSTREAM_TIMEOUT_MS;

  @Mixin private WebLimitsOptions web;

  @Option(
      names = "--shutdown-timeout",
      paramLabel = "SECONDS",
      description =
          "On SIGTERM, how long the requests being answered may finish (new ones are answered"
              + " 503) before they are cancelled.")
  private int shutdownTimeout = 30;

  @Override
  public Integer call() throws Exception {
    RouterSettings settings = settings();
    HELIDON_LOG.setLevel(Level.WARNING);
    PrintWriter err = spec.commandLine().getErr();
    // serve closes a keep-alive connection idle for its header timeout (10 s by default) and the
    // client library keeps idle connections 30 s: a completion sent on one the backend has just
    // closed fails (a POST is never retried). The router's process drops them sooner.
    if (System.getProperty(KEEPALIVE_PROPERTY) == null) {
      System.setProperty(KEEPALIVE_PROPERTY, Long.toString(KEEPALIVE_S));
    }
    Router router = Router.start(settings, prompts());
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  err.println(
                      "shutting down: new requests answered 503; "
                          + router.inFlight()
                          + " in flight, up to "
                          + shutdownTimeout
                          + " s to finish");
                  err.flush();
                  try {
                    int left = router.drain(Duration.ofSeconds(shutdownTimeout));
                    if (left > 0) {
                      err.println(
                          "shutting down: cancelling " + left + " requests still in flight");
                    }
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                  router.close();
                  err.println("stopped");
                  err.flush();
                  stopped.countDown();
                },
                "ts-router-shutdown"));
    err.println(
        "listening on http://"
            + host
            + ":"
            + router.port()
            + (settings.fused()
                ? " (replicas " + String.join(", ", settings.replicas())
                : " (prefill "
                    + String.join(", ", settings.prefill())
                    + "; decode "
                    + String.join(", ", settings.decode()))
            + "; routing "
            + settings.routing().wireName()
            + "; GET /ready says which are ready)");
    err.flush();
    stopped.await();
    return 0;
  }

  /** The settings, validated; an invalid one is a usage error naming its flag. */
  RouterSettings settings() {
    WebLimitsOptions.Invalid invalid = web.invalid();
    if (invalid != null) {
      throw usage(invalid.flag(), invalid.message());
    }
    if (shutdownTimeout < 0 || shutdownTimeout > 86_400) {
      throw usage(
          "--shutdown-timeout", "--shutdown-timeout=" + shutdownTimeout + " must be in [0, 86400]");
    }
    try {
      return new RouterSettings(
          prefill,
          decode,
          replicas,
          host,
          port,
          pollMs,
          connectTimeoutMs,
          upstreamTimeoutMs,
          web.maxBodyBytes,
          web.headerTimeoutMs(),
          Routing.of(routing),
          kvIndexBlocks,
          loadTokens);
    } catch (IllegalArgumentException e) {
      String message = e.getMessage();
      int end = message.indexOf('=');
      int space = message.indexOf(' ');
      int cut = end < 0 ? space : space < 0 ? end : Math.min(end, space);
      throw usage(cut > 0 ? message.substring(0, cut) : "", message);
    }
  }

  /**
   * What reads a request's token ids: with {@code --tokenizer}, the engines' tokenizer and chat
   * template (a synthetic model's: the byte tokenizer, which its own encodes as, and the plain
   * template); without, token-id prompts only.
   */
  PromptReader prompts() throws IOException {
    if (tokenizer == null) {
      return PromptReader.tokenIdsOnly();
    }
    if (SyntheticCheckpoints.isSynthetic(tokenizer)) {
      Tokenizer bytes = ByteTokenizer.plain();
      return PromptReader.of(bytes, Serving.chatPrompt(ChatTemplate.plain(), bytes));
    }
    Path dir;
    try {
      dir = Path.of(tokenizer);
    } catch (InvalidPathException e) {
      throw usage("--tokenizer", "--tokenizer=" + tokenizer + " is not a path");
    }
    if (!Files.isDirectory(dir)) {
      throw usage(
          "--tokenizer", "--tokenizer=" + tokenizer + " is not a directory (nor synthetic:NAME)");
    }
    Tokenizer t = ModelOptions.tokenizerOf(dir);
    return PromptReader.of(t, Serving.chatPrompt(ChatTemplate.load(dir), t));
  }

  private ParameterException usage(String flag, String message) {
    OptionSpec option = flag.startsWith("--") ? spec.findOption(flag) : null;
    return option == null
        ? new ParameterException(spec.commandLine(), message)
        : new ParameterException(spec.commandLine(), message, option, null);
  }
}
