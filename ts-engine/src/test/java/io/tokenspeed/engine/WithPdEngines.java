package io.tokenspeed.engine;

import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import java.net.InetAddress;
import java.net.InetSocketAddress;

/**
 * Prefill and decode engines over the untied model of {@link WithContextLlama}, joined by the real
 * KV transfer over loopback TCP, each with the transfer settings its test class gives.
 */
abstract class WithPdEngines extends WithContextLlama {
  protected static final PdSecret SECRET = PdSecret.generate();

  /** The KV transfer's settings of this class's engines. */
  protected abstract PdSettings pdSettings();

  protected Engine start(PdOptions pd, Checked checks) {
    return Engine.start(
        EngineSettings.of(model, EngineTest.small(256)).observer(checks).pd(pd).conclude());
  }

  protected Engine prefill(Checked checks) {
    return start(PdOptions.prefill(SECRET, pdSettings()), checks);
  }

  protected Engine decode(Checked checks) {
    return start(
        PdOptions.decode(
            SECRET, pdSettings(), new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)),
        checks);
  }
}
