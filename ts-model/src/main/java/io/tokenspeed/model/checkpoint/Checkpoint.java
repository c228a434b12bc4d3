package io.tokenspeed.model.checkpoint;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A Hugging Face model folder, opened: {@code config.json} parsed, the weight files memory-mapped.
 *
 * <pre>
 *   folder/
 *     config.json                         required
 *     model.safetensors                   one file, or
 *     model.safetensors.index.json        {"weight_map": {"tensor name": "shard file", ...}}
 *     model-00001-of-0000N.safetensors    the shards the index names
 * </pre>
 *
 * <p>When an index exists it wins over a single file. Every tensor the index lists must be in the
 * shard it names, and every tensor a shard holds must be listed for that shard; a shard name must
 * be a plain file name inside the folder. All files are mapped into one shared {@link Arena} that
 * {@link #close()} releases: tensors (and anything computed from their segments) must not be used
 * after that.
 *
 * <p>The {@link #fingerprint() fingerprint} is the SHA-256 of the weight files' bytes, concatenated
 * in file-name order: the checkpoint revision of the deployment identity. It is computed once, on
 * first use, from the mappings.
 */
public final class Checkpoint implements AutoCloseable {

  /** File name of the model configuration. */
  public static final String CONFIG_FILE = "config.json";

  /** File name of a single-file checkpoint. */
  public static final String SINGLE_FILE = "model.safetensors";

  /** File name of a sharded checkpoint's index. */
  public static final String INDEX_FILE = "model.safetensors.index.json";

  private final Path folder;
  private final Arena arena;
  private final Map<String, Object> config;
  private final List<SafetensorsFile> files;
  private final Map<String, Tensor> tensors;
  private String fingerprint;

  private Checkpoint(
      Path folder,
      Arena arena,
      Map<String, Object> config,
      List<SafetensorsFile> files,
      Map<String, Tensor> tensors) {
    this.folder = folder;
    this.arena = arena;
    this.config = config;
    this.files = files;
    this.tensors = tensors;
  }

  /**
   * Opens {@code folder}: reads {@code config.json} and maps the weight files.
   *
   * @throws CheckpointException naming the file (and tensor) at fault
   */
  public static Checkpoint open(Path folder) {
    Map<String, Object> config = readJsonObject(folder.resolve(CONFIG_FILE));
    Arena arena = Arena.ofShared();
    try {
      List<SafetensorsFile> files = new ArrayList<>();
      Map<String, Tensor> tensors = new TreeMap<>();
      Path index = folder.resolve(INDEX_FILE);
      if (Files.exists(index)) {
        openSharded(folder, index, arena, files, tensors);
      } else {
        Path single = folder.resolve(SINGLE_FILE);
        if (!Files.exists(single)) {
          throw new CheckpointException(
              folder + ": no weights: neither " + SINGLE_FILE + " nor " + INDEX_FILE + " exists");
        }
        SafetensorsFile f = SafetensorsFile.open(single, arena);
        files.add(f);
        tensors.putAll(f.tensors());
      }
      return new Checkpoint(
          folder,
          arena,
          Collections.unmodifiableMap(config),
          List.copyOf(files),
          Collections.unmodifiableMap(tensors));
    } catch (RuntimeException e) {
      arena.close();
      throw e;
    }
  }

  private static void openSharded(
      Path folder,
      Path index,
      Arena arena,
      List<SafetensorsFile> files,
      Map<String, Tensor> tensors) {
    Map<String, Object> indexJson = readJsonObject(index);
    if (!(indexJson.get("weight_map") instanceof Map<?, ?> weightMap) || weightMap.isEmpty()) {
      throw new CheckpointException(index + ": weight_map is missing, empty or not an object");
    }
    Map<String, List<String>> byShard = new TreeMap<>();
    for (Map.Entry<?, ?> e : weightMap.entrySet()) {
      String tensor = (String) e.getKey();
      if (!(e.getValue() instanceof String shard)) {
        throw new CheckpointException(
            index + ": tensor " + tensor + ": weight_map value must be a file name");
      }
      Path p = Path.of(shard);
      if (p.isAbsolute() || p.getNameCount() != 1 || shard.equals("..") || shard.equals(".")) {
        throw new CheckpointException(
            index + ": tensor " + tensor + ": shard=" + shard + " must be a plain file name");
      }
      byShard.computeIfAbsent(shard, k -> new ArrayList<>()).add(tensor);
    }
    for (Map.Entry<String, List<String>> e : byShard.entrySet()) {
      Path shardPath = folder.resolve(e.getKey());
      if (!Files.exists(shardPath)) {
        throw new CheckpointException(
            index + ": tensor " + e.getValue().get(0) + ": shard " + shardPath + " does not exist");
      }
      SafetensorsFile f = SafetensorsFile.open(shardPath, arena);
      files.add(f);
      for (String tensor : e.getValue()) {
        Tensor t = f.tensors().get(tensor);
        if (t == null) {
          throw new CheckpointException(
              shardPath + ": tensor " + tensor + " is listed in " + INDEX_FILE + " but missing");
        }
        tensors.put(tensor, t);
      }
      for (String present : f.tensors().keySet()) {
        if (!e.getKey().equals(weightMap.get(present))) {
          throw new CheckpointException(
              shardPath
                  + ": tensor "
                  + present
                  + " is unexpected: "
                  + INDEX_FILE
                  + " maps it to "
                  + weightMap.get(present));
        }
      }
    }
  }

  /** Reads a strict JSON object from {@code file}, with errors naming the file. */
  public static Map<String, Object> readJsonObject(Path file) {
    String text;
    try {
      text = Files.readString(file, StandardCharsets.UTF_8);
    } catch (NoSuchFileException e) {
      throw new CheckpointException(file + ": file is missing", e);
    } catch (IOException e) {
      throw new CheckpointException(file + ": cannot read: " + e.getMessage(), e);
    }
    try {
      return new LinkedHashMap<>(Json.parseObject(text));
    } catch (IllegalArgumentException e) {
      throw new CheckpointException(file + ": " + e.getMessage(), e);
    }
  }

  public Path folder() {
    return folder;
  }

  /** {@code config.json}, parsed. */
  public Map<String, Object> config() {
    return config;
  }

  /** The mapped weight files, in file-name order. */
  public List<SafetensorsFile> files() {
    return files;
  }

  /** Every tensor of every weight file, by name. */
  public Map<String, Tensor> tensors() {
    return tensors;
  }

  /** SHA-256 (lowercase hex) of the weight files' bytes in file-name order. */
  public synchronized String fingerprint() {
    if (fingerprint == null) {
      MessageDigest md;
      try {
        md = MessageDigest.getInstance("SHA-256");
      } catch (NoSuchAlgorithmException e) {
        throw new IllegalStateException(e);
      }
      List<SafetensorsFile> sorted = new ArrayList<>(files);
      sorted.sort(
          (a, b) -> a.path().getFileName().toString().compareTo(b.path().getFileName().toString()));
      for (SafetensorsFile f : sorted) {
        MemorySegment m = f.mapping();
        long chunk = 1L << 24;
        for (long off = 0; off < m.byteSize(); off += chunk) {
          md.update(m.asSlice(off, Math.min(chunk, m.byteSize() - off)).asByteBuffer());
        }
      }
      fingerprint = HexFormat.of().formatHex(md.digest());
    }
    return fingerprint;
  }

  /** Unmaps every file. Tensors of this checkpoint must not be touched afterwards. */
  @Override
  public void close() {
    arena.close();
  }
}
