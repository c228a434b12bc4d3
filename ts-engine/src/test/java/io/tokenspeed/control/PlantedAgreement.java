package io.tokenspeed.control;

/**
 * The owner agreement's rule that the whole-loop simulation's planted-bug tests switch off (in the
 * agreement's package: the switch is package-private).
 */
public final class PlantedAgreement {
  private PlantedAgreement() {}

  /** An operation counts as retired when any owner retired it, instead of all of them. */
  public static void retiredByAnyRank(RelayExchange exchange) {
    exchange.agreement().plantRetiredByAnyRank();
  }
}
