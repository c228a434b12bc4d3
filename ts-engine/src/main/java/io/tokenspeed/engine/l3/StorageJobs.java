package io.tokenspeed.engine.l3;

import io.tokenspeed.core.CacheKey;
import io.tokenspeed.core.CacheLayout;
import io.tokenspeed.core.Namespace;
import io.tokenspeed.core.ObjectKey;
import io.tokenspeed.core.Sharding;
import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.core.storage.StorageOp;
import io.tokenspeed.engine.memory.BlockGeometry;
import java.util.ArrayList;
import java.util.List;

/**
 * This rank's translation of the plan's storage commands into executor jobs: each cache key becomes
 * its object key under the deployment's namespace, and each Host block its byte range in the Host
 * allocation. The translation is fixed when the job is built: no worker reads the namespace or a
 * later plan.
 */
public final class StorageJobs {
  private final Namespace namespace;
  private final CacheLayout layout;
  private final BlockGeometry host;
  private final int attentionTpRank;

  /**
   * @param namespace the deployment's namespace
   * @param layout the cache layout the keys belong to
   * @param host the geometry of the Host allocation the executor addresses
   * @param attentionTpRank this rank (0 at TP = 1)
   */
  public StorageJobs(
      Namespace namespace, CacheLayout layout, BlockGeometry host, int attentionTpRank) {
    this.namespace = namespace;
    this.layout = layout;
    this.host = host;
    this.attentionTpRank = attentionTpRank;
  }

  /** The same translation under {@code other}. */
  public StorageJobs withNamespace(Namespace other) {
    return new StorageJobs(other, layout, host, attentionTpRank);
  }

  /** The cache layout the keys belong to. */
  public CacheLayout layout() {
    return layout;
  }

  /** The namespace every key is built under. */
  public Namespace namespace() {
    return namespace;
  }

  /** The object key of {@code key} as this rank stores it. */
  public String objectKey(CacheKey key) {
    return ObjectKey.forRank(namespace, key, layout.group(key.groupId()), attentionTpRank)
        .toString();
  }

  /** The job of a QUERY, GET or PUT; a Cancel is no job. */
  public StorageJob job(StorageOp op) {
    return switch (op) {
      case StorageOp.Query q -> {
        List<JobRow> rows = new ArrayList<>(q.keys().size());
        for (CacheKey k : q.keys()) {
          rows.add(JobRow.query(objectKey(k)));
        }
        yield new StorageJob(q.operationId(), StorageKind.QUERY, rows);
      }
      case StorageOp.Get g ->
          new StorageJob(g.operationId(), StorageKind.GET, rows(g.keys(), g.hostBlocks()));
      case StorageOp.Put p ->
          new StorageJob(p.operationId(), StorageKind.PUT, rows(p.keys(), p.hostBlocks()));
      case StorageOp.Cancel c ->
          throw new IllegalArgumentException(
              "cancel of operation " + c.operationId() + " is not a job");
    };
  }

  /**
   * A GET's or PUT's rows. In a page-cyclic group of D owners the plan's Host block is a virtual
   * block {@code v}: it belongs to owner {@code (v-1) mod D} (local page {@code (v-1) div D + 1} of
   * that owner; this engine's tiers keep every virtual block's range and address an owned page by
   * its virtual block, so an owner's pages are the ranges of the blocks it owns). This rank copies
   * only the rows it owns; a row another owner copies is carried as not owned (it reports success
   * and retirement, no bytes and no object failure), and the owners' reports are agreed into the
   * operation's facts.
   */
  private List<JobRow> rows(List<CacheKey> keys, List<Integer> blocks) {
    List<JobRow> rows = new ArrayList<>(keys.size());
    for (int i = 0; i < keys.size(); i++) {
      CacheKey k = keys.get(i);
      int g = k.groupId();
      int b = blocks.get(i);
      if (layout.group(g).sharding() instanceof Sharding.PageCyclic pc) {
        int d = pc.shardCount();
        if (pc.ownerOf(b) != attentionTpRank % d) {
          rows.add(JobRow.notOwned(objectKey(k)));
          continue;
        }
      }
      rows.add(
          JobRow.owned(objectKey(k), new HostRange(host.byteOffset(g, b), host.bytesPerBlock(g))));
    }
    return rows;
  }
}
