package io.tokenspeed.server.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code tokenspeed generate --tp N} as users run it: the launcher (the shaded jar) starts one
 * process per rank, joined by shared memory and the control-plane mesh. The ids equal TP = 1's; a
 * rank killed with SIGKILL or frozen with SIGSTOP mid-generation makes the replica stop within the
 * round timeout, and the launcher exits non-zero naming the rank.
 */
class GenerateTpIT {
  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir Path workDir;

  /** The untied tiny Llama of the test resources (4 heads, 2 KV heads, vocab 256). */
  private String model() throws IOException {
    Path config = workDir.resolve("tiny-untied.json");
    try (InputStream in = getClass().getResourceAsStream("/models/tiny-untied.json")) {
      Files.write(config, in.readAllBytes());
    }
    return "synthetic:" + config;
  }

  private List<String> generate(String model, int[] ids, int maxTokens, String... extra) {
    List<String> args =
        new ArrayList<>(
            List.of(
                "generate",
                "--model",
                model,
                "--tokens",
                IntStream.of(ids).mapToObj(Integer::toString).collect(Collectors.joining(",")),
                "--max-tokens",
                Integer.toString(maxTokens),
                "--ignore-eos",
                "--threads",
                "1"));
    args.addAll(List.of(extra));
    return args;
  }

  @ParameterizedTest(name = "TP={0} KV by {1}")
  @org.junit.jupiter.params.provider.CsvSource({"2, heads", "4, heads", "2, pages", "4, pages"})
  void shouldGenerateTheIdsOfASingleRank(int tp, String kv) throws Exception {
    String model = model();
    int[] prompt = new SplittableRandom(tp).ints(70, 0, 256).toArray();
    JarProcess.Result one =
        JarProcess.run(
            workDir, jvm(), java.util.Map.of(), generate(model, prompt, 24, "--json"), 120);
    assertEquals(0, one.exitCode(), one::err);
    JarProcess.Result many =
        JarProcess.run(
            workDir,
            jvm(),
            java.util.Map.of(),
            generate(model, prompt, 24, "--json", "--tp", Integer.toString(tp), "--tp-kv", kv),
            180);
    assertEquals(0, many.exitCode(), many::err);
    JsonNode a = JSON.readTree(one.out());
    JsonNode b = JSON.readTree(many.out());
    assertArrayEquals(ids(a), ids(b), "TP=" + tp + " vs TP=1: " + many.err());
    assertEquals(24, ids(b).length);
  }

  private static int[] ids(JsonNode n) {
    int[] t = new int[n.get("tokens").size()];
    for (int i = 0; i < t.length; i++) {
      t[i] = n.get("tokens").get(i).asInt();
    }
    return t;
  }

  private static List<String> jvm() {
    return List.of("--add-modules", "jdk.incubator.vector");
  }

  @Test
  void shouldStopAndNameARankKilledMidGeneration() throws Exception {
    Broken run = breakRank("KILL");
    assertNotEquals(0, run.exitCode(), run.err());
    assertTrue(run.err().contains("rank 1 was killed by signal 9"), run.err());
  }

  @Test
  void shouldStopAndNameARankFrozenMidGeneration() throws Exception {
    Broken run = breakRank("STOP");
    assertNotEquals(0, run.exitCode(), run.err());
    assertTrue(run.err().contains("rank 1"), run.err());
    assertTrue(
        run.seconds() < 3 + 5 + 30, "stopped within the round timeout: " + run.seconds() + " s");
  }

  private record Broken(int exitCode, String err, double seconds) {}

  /**
   * Starts a long TP = 2 generation (3 s round timeout), sends {@code signal} to rank 1 once the
   * first tokens are out, and waits for the launcher: its exit status, stderr and the seconds from
   * the signal to its end. No process of the replica outlives it.
   */
  private Broken breakRank(String signal) throws Exception {
    int[] prompt = new SplittableRandom(5).ints(30, 0, 256).toArray();
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    command.addAll(jvm());
    Path jar = Path.of(System.getProperty("tokenspeed.jar", "target/tokenspeed.jar"));
    command.addAll(List.of("-jar", jar.toAbsolutePath().toString()));
    command.addAll(generate(model(), prompt, 3000, "--tp", "2", "--tp-timeout", "3"));
    Path out = workDir.resolve("stdout-" + signal + ".txt");
    Path err = workDir.resolve("stderr-" + signal + ".txt");
    Process launcher =
        new ProcessBuilder(command)
            .directory(workDir.toFile())
            .redirectOutput(out.toFile())
            .redirectError(err.toFile())
            .start();
    List<ProcessHandle> replica = new ArrayList<>();
    try {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
      while (Files.size(out) < 20) {
        assertTrue(launcher.isAlive(), () -> "the launcher ended early: " + read(err));
        assertTrue(System.nanoTime() < deadline, () -> "no tokens came: " + read(err));
        Thread.sleep(20);
      }
      launcher.descendants().forEach(replica::add);
      Optional<ProcessHandle> rank1 =
          replica.stream()
              .filter(
                  p ->
                      p.info()
                          .arguments()
                          .map(a -> List.of(a).contains("--tp-rank=1"))
                          .orElse(false))
              .findFirst();
      assertTrue(rank1.isPresent(), "rank 1 among " + replica.size() + " processes");
      Process kill =
          new ProcessBuilder("kill", "-" + signal, Long.toString(rank1.get().pid())).start();
      assertEquals(0, kill.waitFor(), "kill -" + signal);
      long signalled = System.nanoTime();
      assertTrue(launcher.waitFor(60, TimeUnit.SECONDS), () -> "the launcher hangs: " + read(err));
      double seconds = (System.nanoTime() - signalled) / 1e9;
      for (ProcessHandle p : replica) {
        p.onExit().get(10, TimeUnit.SECONDS);
      }
      System.out.printf(
          "after SIG%s to rank 1: exit %d in %.2f s; stderr:%n%s%n",
          signal, launcher.exitValue(), seconds, read(err));
      return new Broken(launcher.exitValue(), read(err), seconds);
    } finally {
      launcher.destroyForcibly();
      for (ProcessHandle p : replica) {
        p.destroyForcibly();
      }
    }
  }

  /**
   * A fresh TP = 2 replica restores what another wrote: with the KV split by heads each owner reads
   * its slice of every page; split by pages, each page is read once, by its owner.
   */
  @ParameterizedTest(name = "KV by {0}")
  @ValueSource(strings = {"heads", "pages"})
  void shouldRestoreOnAFreshTp2ReplicaWhatAnotherWroteThroughTheFileStore(String kv)
      throws Exception {
    String model = model();
    int[] prompt = new SplittableRandom(11).ints(200, 0, 256).toArray();
    String config =
        "{\"path\": \""
            + workDir.resolve("store").toString().replace("\\", "\\\\")
            + "\", \"async\": {\"min_extension_tokens\": 64}}";
    String[] l3 = {
      "--json",
      "--tp",
      "2",
      "--tp-kv",
      kv,
      "--kvstore-storage-backend",
      "file",
      "--kvstore-storage-backend-extra-config",
      config
    };
    JarProcess.Result recomputed =
        JarProcess.run(
            workDir, jvm(), java.util.Map.of(), generate(model, prompt, 8, "--json"), 120);
    assertEquals(0, recomputed.exitCode(), recomputed::err);
    JarProcess.Result writer =
        JarProcess.run(workDir, jvm(), java.util.Map.of(), generate(model, prompt, 8, l3), 180);
    assertEquals(0, writer.exitCode(), writer::err);
    JarProcess.Result reader =
        JarProcess.run(workDir, jvm(), java.util.Map.of(), generate(model, prompt, 8, l3), 180);
    assertEquals(0, reader.exitCode(), reader::err);
    JsonNode want = JSON.readTree(recomputed.out());
    JsonNode w = JSON.readTree(writer.out());
    JsonNode r = JSON.readTree(reader.out());
    assertArrayEquals(ids(want), ids(w), "writer vs TP=1 without L3: " + writer.err());
    assertArrayEquals(ids(want), ids(r), "reader vs TP=1 without L3: " + reader.err());
    assertEquals(0, w.get("reused_storage_tokens").asInt(), writer.out());
    assertTrue(r.get("reused_storage_tokens").asInt() >= 128, reader.out());
    for (int rank = 0; rank < 2; rank++) {
      long gets = okGets(reader.err(), rank);
      assertTrue(gets > 0, "rank " + rank + " read its own objects: " + reader.err());
      assertTrue(okPuts(writer.err(), rank) > 0, "rank " + rank + " wrote: " + writer.err());
    }
    if (kv.equals("heads")) {
      assertEquals(okGets(reader.err(), 0), okGets(reader.err(), 1), "both owners read every row");
    } else {
      long read = okGets(reader.err(), 0) + okGets(reader.err(), 1);
      long written = okPuts(writer.err(), 0) + okPuts(writer.err(), 1);
      assertTrue(
          read <= written,
          "each page read once, by its owner, of the pages written once: read "
              + read
              + ", written "
              + written);
    }
  }

  /** The GET ok keys a rank's summary line reports. */
  private static long okGets(String err, int rank) {
    return summary(err, rank, "L3 GET ok keys ");
  }

  private static long okPuts(String err, int rank) {
    return summary(err, rank, "PUT ok keys ");
  }

  private static long summary(String err, int rank, String label) {
    for (String line : err.split("\n")) {
      int at = line.indexOf("rank " + rank + ": L3 GET");
      if (at >= 0) {
        String rest = line.substring(line.indexOf(label) + label.length());
        return Long.parseLong(rest.split("[ ,]")[0]);
      }
    }
    throw new AssertionError("no L3 line of rank " + rank + " in: " + err);
  }

  @ParameterizedTest(name = "{0} TP={1}")
  @org.junit.jupiter.params.provider.CsvSource({
    "llama, 2",
    "llama, 4",
    "qwen2, 2",
    "gemma3, 2",
    "gemma3, 4",
    "mamba, 2",
    "jamba, 2"
  })
  void shouldGenerateHuggingFacesGreedyIdsOnTheFixtures(String name, int tp) throws Exception {
    Path fixture = ModelFixtures.extract(name, workDir.resolve("fixtures"));
    int[] want = ModelFixtures.greedy(fixture, 0);
    List<String> args =
        List.of(
            "generate",
            "--model",
            fixture.toString(),
            "--tokens",
            ModelFixtures.tokenList(ModelFixtures.ids(fixture, 0)),
            "--temperature",
            "0",
            "--max-tokens",
            Integer.toString(want.length),
            "--ignore-eos",
            "--threads",
            "1",
            "--json",
            "--tp",
            Integer.toString(tp));
    JarProcess.Result r = JarProcess.run(workDir, jvm(), java.util.Map.of(), args, 180);
    assertEquals(0, r.exitCode(), r::err);
    assertArrayEquals(want, ids(JSON.readTree(r.out())), name + " TP=" + tp + ": " + r.err());
  }

  private static String read(Path file) {
    try {
      return Files.readString(file, StandardCharsets.UTF_8);
    } catch (IOException e) {
      return "(unreadable: " + e + ")";
    }
  }
}
