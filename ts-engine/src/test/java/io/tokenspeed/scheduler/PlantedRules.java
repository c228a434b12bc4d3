package io.tokenspeed.scheduler;

/**
 * The storage transfer manager's safety rules that the whole-loop simulation's planted-bug tests
 * switch off (in the manager's package: the switch is package-private).
 */
public final class PlantedRules {
  private PlantedRules() {}

  /** A refused backup is offered again without the store's hold. */
  public static void noBackupBackoff(StorageTransferManager stm) {
    stm.disableForTest(StorageTransferManager.SafetyRule.BACKUP_BACKOFF);
  }

  /** A GET's early Device destinations are published for its failed rows too (never copied). */
  public static void earlyPublishesFailedRows(StorageTransferManager stm) {
    stm.disableForTest(StorageTransferManager.SafetyRule.EARLY_ROWS_MATCH_HOST);
  }

  /** A GET publishes its rows that failed (missing, short, invalid) as well. */
  public static void publishFailedRows(StorageTransferManager stm) {
    stm.disableForTest(StorageTransferManager.SafetyRule.FAILED_ROWS_UNPUBLISHED);
  }
}
