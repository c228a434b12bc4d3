package io.tokenspeed.engine;

import io.tokenspeed.pd.PdSecret;
import io.tokenspeed.pd.PdSettings;
import java.net.InetSocketAddress;
import java.util.Objects;

/**
 * An engine's part in disaggregated serving (docs/pd.md): its role and, for the prefill and decode
 * roles, the secret every process of the deployment shares and the KV transfer's settings; a decode
 * engine also listens for prefill engines on {@code listen} (port 0: any free port, see {@link
 * Engine#pdEndpoint}).
 *
 * @param role the engine's role
 * @param secret the PD secret (null only for {@link EngineRole#FUSED})
 * @param settings the KV transfer's timings and limits (null only for fused)
 * @param listen where a decode engine accepts KV connections (null unless decode)
 */
public record PdOptions(
    EngineRole role, PdSecret secret, PdSettings settings, InetSocketAddress listen) {

  /** A fused engine: no KV transfer. */
  public static final PdOptions FUSED = new PdOptions(EngineRole.FUSED, null, null, null);

  public PdOptions {
    Objects.requireNonNull(role, "role");
    if (role == EngineRole.FUSED) {
      if (secret != null || settings != null || listen != null) {
        throw new IllegalArgumentException("a fused engine takes no PD secret, settings or port");
      }
    } else {
      Objects.requireNonNull(secret, "the " + role.wireName() + " role needs the PD secret");
      Objects.requireNonNull(settings, "settings");
      if ((role == EngineRole.DECODE) != (listen != null)) {
        throw new IllegalArgumentException(
            role == EngineRole.DECODE
                ? "a decode engine needs the address it accepts KV connections on"
                : "a prefill engine dials decode engines and listens on no KV port");
      }
    }
  }

  /** A prefill engine's options. */
  public static PdOptions prefill(PdSecret secret, PdSettings settings) {
    return new PdOptions(EngineRole.PREFILL, secret, settings, null);
  }

  /** A decode engine's options, accepting KV connections on {@code listen}. */
  public static PdOptions decode(PdSecret secret, PdSettings settings, InetSocketAddress listen) {
    return new PdOptions(EngineRole.DECODE, secret, settings, listen);
  }
}
