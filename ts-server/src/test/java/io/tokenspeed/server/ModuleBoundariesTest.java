package io.tokenspeed.server;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import javax.xml.XMLConstants;
import javax.xml.parsers.DocumentBuilder;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.w3c.dom.Element;
import org.w3c.dom.Node;

/**
 * Keeps the module dependencies of architecture §2 pointing downward. Every module's pom.xml is
 * read, each module's transitive closure of io.tokenspeed module dependencies is computed, and any
 * reachable module a rule forbids is a violation, reported with the path that reaches it.
 *
 * <p>Test-scoped dependencies are exempt (a module's tests may use ts-testkit); every other scope
 * counts, and so does a dependency that only arrives transitively. The test-only modules ({@link
 * #TEST_ONLY}) are the other way round: no module may reach them outside test scope, except the
 * modules on no product path ({@link #OFF_PRODUCT_PATH}).
 *
 * <p>Inside ts-engine the arrows point downward too: {@code Engine} is the façade that wires the
 * owners together, and no class it wires refers back to it ({@link #FACADE}); the sources are read
 * with comments and string literals left out, so a sentence may still name it.
 */
class ModuleBoundariesTest {

  /** The forbidden edges of architecture §2, as data. */
  static final List<Rule> RULES =
      List.of(
          Rule.mayOnlyReach("ts-core"),
          Rule.mayOnlyReach("ts-cache", "ts-core"),
          Rule.mayOnlyReach("ts-l3", "ts-core"),
          Rule.mayOnlyReach("ts-model", "ts-core"),
          Rule.mayOnlyReach("ts-cuda", "ts-core", "ts-model"),
          Rule.mayOnlyReach("ts-l3-redis", "ts-core", "ts-l3"),
          Rule.mayOnlyReach("ts-testkit", "ts-core"),
          Rule.mayOnlyReach("ts-pd", "ts-core", "ts-control"),
          Rule.mustNotReach(
              "ts-scheduler", "ts-l3", "ts-control", "ts-l3-redis", "ts-engine", "ts-server"),
          Rule.mustNotReach("ts-engine", "ts-server", "ts-bench"),
          Rule.mustNotReach(
              "ts-control",
              "ts-scheduler",
              "ts-cache",
              "ts-l3",
              "ts-l3-redis",
              "ts-engine",
              "ts-server"));

  /** Modules that others may use in test scope only: no module reaches them otherwise. */
  static final Set<String> TEST_ONLY = Set.of("ts-testkit");

  /**
   * Modules that nothing ships and no module depends on (the benchmarks): they may reach the
   * test-only modules in any scope. A module that reached one of them would reach the test-only
   * modules through it and is reported like any other.
   */
  static final Set<String> OFF_PRODUCT_PATH = Set.of("ts-bench");

  private static final String GROUP_ID = "io.tokenspeed";

  /** The engine's package, below which only the façade may refer to {@code Engine}. */
  static final String ENGINE_PACKAGE_DIR = "ts-engine/src/main/java/io/tokenspeed/engine";

  /** The source files of {@link #ENGINE_PACKAGE_DIR} that may refer to {@code Engine}. */
  static final Set<String> FACADE = Set.of("Engine.java");

  private static final Pattern ENGINE_NAME = Pattern.compile("\\bEngine\\b");

  /** Block and line comments, and string, text-block and character literals. */
  private static final Pattern NOT_CODE =
      Pattern.compile(
          "/\\*(?s:.*?)\\*/|//[^\\n]*|\"\"\"(?s:.*?)\"\"\"|\"(?:\\\\.|[^\"\\\\])*\"|'(?:\\\\.|[^'\\\\])*'");

  /**
   * A module's allowed reach: either an allow-list ({@code only}) or a deny-list.
   *
   * @param module the artifactId the rule constrains
   * @param only true: {@code modules} is all it may reach; false: what it must not reach
   */
  record Rule(String module, boolean only, Set<String> modules) {
    static Rule mayOnlyReach(String module, String... allowed) {
      return new Rule(module, true, Set.of(allowed));
    }

    static Rule mustNotReach(String module, String... forbidden) {
      return new Rule(module, false, Set.of(forbidden));
    }

    boolean forbids(String target) {
      return only != modules.contains(target);
    }
  }

  /** {@code module} reaches {@code target}, which a rule forbids, along {@code path}. */
  record Violation(String module, String target, List<String> path) {
    @Override
    public String toString() {
      return module + " -> " + target + " via " + String.join(" > ", path);
    }
  }

  /** Reads the reactor at {@code root}: artifactId to its non-test io.tokenspeed dependencies. */
  static Map<String, List<String>> readReactor(Path root) throws Exception {
    Map<String, List<String>> graph = new TreeMap<>();
    readModules(root, graph);
    return graph;
  }

  private static void readModules(Path dir, Map<String, List<String>> graph) throws Exception {
    Element project = parse(dir.resolve("pom.xml"));
    for (Element modules : children(project, "modules")) {
      for (Element module : children(modules, "module")) {
        Path moduleDir = dir.resolve(module.getTextContent().trim()).normalize();
        Element pom = parse(moduleDir.resolve("pom.xml"));
        String artifactId = text(pom, "artifactId");
        List<String> deps = new ArrayList<>();
        for (Element dependencies : children(pom, "dependencies")) {
          for (Element dep : children(dependencies, "dependency")) {
            String groupId = text(dep, "groupId");
            boolean ours = GROUP_ID.equals(groupId) || "${project.groupId}".equals(groupId);
            if (ours && !"test".equals(text(dep, "scope"))) {
              deps.add(text(dep, "artifactId"));
            }
          }
        }
        graph.put(artifactId, deps);
        readModules(moduleDir, graph);
      }
    }
  }

  /** Checks every rule against the transitive closure of its module. */
  static List<Violation> check(Map<String, List<String>> graph, List<Rule> rules) {
    List<Violation> out = new ArrayList<>();
    for (Rule rule : rules) {
      if (!graph.containsKey(rule.module())) {
        continue;
      }
      for (Map.Entry<String, List<String>> reached : closure(graph, rule.module()).entrySet()) {
        if (rule.forbids(reached.getKey())) {
          out.add(new Violation(rule.module(), reached.getKey(), reached.getValue()));
        }
      }
    }
    return out;
  }

  /** Every module, apart from {@code offProductPath}, that reaches a test-only module. */
  static List<Violation> checkTestOnly(
      Map<String, List<String>> graph, Set<String> testOnly, Set<String> offProductPath) {
    List<Violation> out = new ArrayList<>();
    for (String module : graph.keySet()) {
      if (offProductPath.contains(module)) {
        continue;
      }
      for (Map.Entry<String, List<String>> reached : closure(graph, module).entrySet()) {
        if (testOnly.contains(reached.getKey())) {
          out.add(new Violation(module, reached.getKey(), reached.getValue()));
        }
      }
    }
    return out;
  }

  /** Every module reachable from {@code start}, with a shortest path to it (breadth first). */
  static Map<String, List<String>> closure(Map<String, List<String>> graph, String start) {
    Map<String, List<String>> paths = new LinkedHashMap<>();
    Deque<String> queue = new ArrayDeque<>(List.of(start));
    paths.put(start, List.of(start));
    while (!queue.isEmpty()) {
      String at = queue.removeFirst();
      for (String next : graph.getOrDefault(at, List.of())) {
        if (!paths.containsKey(next)) {
          List<String> path = new ArrayList<>(paths.get(at));
          path.add(next);
          paths.put(next, List.copyOf(path));
          queue.addLast(next);
        }
      }
    }
    paths.remove(start);
    return paths;
  }

  /**
   * The source files under {@code packageDir} (subpackages included), apart from {@code facade},
   * whose code refers to {@code Engine}: paths relative to {@code packageDir}, sorted.
   */
  static List<String> engineReferences(Path packageDir, Set<String> facade) throws IOException {
    List<String> out = new ArrayList<>();
    try (Stream<Path> files = Files.walk(packageDir)) {
      for (Path file : files.filter(f -> f.toString().endsWith(".java")).sorted().toList()) {
        String relative = packageDir.relativize(file).toString().replace('\\', '/');
        if (facade.contains(relative)) {
          continue;
        }
        String code = NOT_CODE.matcher(Files.readString(file)).replaceAll(" ");
        if (ENGINE_NAME.matcher(code).find()) {
          out.add(relative);
        }
      }
    }
    return out;
  }

  private static Element parse(Path pom) throws Exception {
    DocumentBuilderFactory f = DocumentBuilderFactory.newInstance();
    f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
    f.setFeature(XMLConstants.FEATURE_SECURE_PROCESSING, true);
    DocumentBuilder b = f.newDocumentBuilder();
    return b.parse(pom.toFile()).getDocumentElement();
  }

  /**
   * Direct child elements named {@code name} (never nested ones: dependencyManagement, plugins).
   */
  private static List<Element> children(Element parent, String name) {
    List<Element> out = new ArrayList<>();
    for (Node n = parent.getFirstChild(); n != null; n = n.getNextSibling()) {
      if (n instanceof Element e && name.equals(e.getTagName())) {
        out.add(e);
      }
    }
    return out;
  }

  private static String text(Element parent, String name) {
    List<Element> found = children(parent, name);
    return found.isEmpty() ? null : found.getFirst().getTextContent().trim();
  }

  @Test
  void shouldFindNoForbiddenEdgeWhenReadingTheReactor() throws Exception {
    Map<String, List<String>> graph = readReactor(ReactorRoot.find());
    assertTrue(graph.keySet().containsAll(List.of("ts-core", "ts-server")), graph::toString);
    assertEquals(List.of(), check(graph, RULES));
    assertEquals(List.of(), checkTestOnly(graph, TEST_ONLY, OFF_PRODUCT_PATH));
  }

  @Test
  void shouldFindNoClassBelowTheEngineFacadeReferringToIt() throws Exception {
    Path engine = ReactorRoot.find().resolve(ENGINE_PACKAGE_DIR);
    assertTrue(Files.isRegularFile(engine.resolve("Engine.java")), engine::toString);
    assertEquals(List.of(), engineReferences(engine, FACADE));
  }

  @Test
  void shouldReportExactlyTheClassesWhoseCodeRefersToEngineWhenSourcesArePlanted(@TempDir Path dir)
      throws Exception {
    Files.createDirectories(dir.resolve("l3"));
    Files.writeString(dir.resolve("Engine.java"), "final class Engine { Engine self; }");
    Files.writeString(dir.resolve("Round.java"), "final class Round { private Engine engine; }");
    Files.writeString(
        dir.resolve("l3/Tier.java"),
        "final class Tier { void f(io.tokenspeed.engine.Engine e) {} }");
    Files.writeString(
        dir.resolve("Quiet.java"),
        """
        /** Handed to the {@link Engine}'s round. */
        final class Quiet {
          EngineConfig config; // not the Engine
          String s = "Engine";
          char c = 'E';
          EngineView view;
        }
        """);
    assertEquals(
        List.of("Round.java", "l3/Tier.java"), engineReferences(dir, Set.of("Engine.java")));
  }

  @Test
  void shouldReportExactlyTheForbiddenEdgesWhenSyntheticPomsBreakTheRules(@TempDir Path root)
      throws Exception {
    Files.writeString(
        root.resolve("pom.xml"),
        pom(
            "tokenspeed-parent",
            """
            <modules><module>ts-core</module><module>ts-cache</module><module>ts-l3</module>
              <module>ts-scheduler</module><module>ts-metrics</module><module>ts-control</module>
              <module>ts-testkit</module><module>ts-engine</module><module>ts-bench</module>
              <module>ts-tool</module></modules>
            <dependencyManagement><dependencies>
              <dependency><groupId>io.tokenspeed</groupId><artifactId>ts-server</artifactId></dependency>
            </dependencies></dependencyManagement>
            """));
    module(root, "ts-core", "");
    module(root, "ts-cache", dep("ts-core") + dep("ts-testkit", "test"));
    module(root, "ts-l3", dep("ts-core") + dep("ts-cache"));
    module(root, "ts-scheduler", dep("ts-core"));
    module(root, "ts-metrics", dep("ts-scheduler"));
    module(
        root,
        "ts-control",
        dep("ts-core")
            + "<dependency><groupId>${project.groupId}</groupId>"
            + "<artifactId>ts-metrics</artifactId></dependency>");
    module(root, "ts-testkit", dep("ts-scheduler") + dep("ts-l3") + dep("ts-control"));
    module(root, "ts-engine", dep("ts-testkit"));
    module(root, "ts-bench", dep("ts-testkit") + dep("ts-l3"));
    module(root, "ts-tool", dep("ts-bench"));

    Map<String, List<String>> graph = readReactor(root);
    List<String> violations = check(graph, RULES).stream().map(Violation::toString).toList();

    assertEquals(
        List.of(
            "ts-l3 -> ts-cache via ts-l3 > ts-cache",
            "ts-testkit -> ts-scheduler via ts-testkit > ts-scheduler",
            "ts-testkit -> ts-l3 via ts-testkit > ts-l3",
            "ts-testkit -> ts-control via ts-testkit > ts-control",
            "ts-testkit -> ts-cache via ts-testkit > ts-l3 > ts-cache",
            "ts-testkit -> ts-metrics via ts-testkit > ts-control > ts-metrics",
            "ts-control -> ts-scheduler via ts-control > ts-metrics > ts-scheduler"),
        violations);
    // ts-cache uses ts-testkit in test scope only and ts-bench is on no product path, which is
    // allowed; ts-engine does not, and ts-tool reaches ts-testkit through ts-bench
    assertEquals(
        List.of(
            "ts-engine -> ts-testkit via ts-engine > ts-testkit",
            "ts-tool -> ts-testkit via ts-tool > ts-bench > ts-testkit"),
        checkTestOnly(graph, TEST_ONLY, OFF_PRODUCT_PATH).stream()
            .map(Violation::toString)
            .toList());
  }

  private static void module(Path root, String artifactId, String dependencies) throws IOException {
    Path dir = Files.createDirectories(root.resolve(artifactId));
    Files.writeString(
        dir.resolve("pom.xml"),
        pom(
            artifactId,
            "<dependencies>"
                + dependencies
                + "</dependencies>"
                + "<build><plugins><plugin><artifactId>p</artifactId><dependencies>"
                + dep("ts-server")
                + "</dependencies></plugin></plugins></build>"));
  }

  private static String dep(String artifactId) {
    return "<dependency><groupId>io.tokenspeed</groupId><artifactId>"
        + artifactId
        + "</artifactId></dependency>";
  }

  private static String dep(String artifactId, String scope) {
    return dep(artifactId).replace("</dependency>", "<scope>" + scope + "</scope></dependency>");
  }

  private static String pom(String artifactId, String body) {
    return """
        <?xml version="1.0" encoding="UTF-8"?>
        <project xmlns="http://maven.apache.org/POM/4.0.0">
          <modelVersion>4.0.0</modelVersion>
          <groupId>io.tokenspeed</groupId>
          <artifactId>%s</artifactId>
          %s
        </project>
        """
        .formatted(artifactId, body);
  }
}
