package io.tokenspeed.engine;

import io.tokenspeed.core.control.RankStatus;
import io.tokenspeed.l3.L3Metrics;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.TreeMap;

/**
 * A follower's L3 executor figures ({@link L3Metrics}) as they ride its report to the leader
 * ({@link RankStatus}): every counter and gauge, the health state, the rejections by reason (at
 * most {@value #MAX_REJECTIONS}), the latest configuration failure's message cut to {@value
 * #MAX_TEXT_BYTES} bytes and the store's reason for refusing writes cut to {@value
 * #MAX_REASON_BYTES}, so that an encoding never exceeds {@link RankStatus#MAX_BYTES} (at most 1,022
 * bytes). The leader exports them labelled by the follower's rank; they never feed a decision.
 */
final class ExecutorFigures {
  private static final int VERSION = 2;
  static final int MAX_REJECTIONS = 8;
  static final int MAX_NAME_BYTES = 32;
  static final int MAX_TEXT_BYTES = 192;
  static final int MAX_REASON_BYTES = 120;

  private ExecutorFigures() {}

  /** {@code m} as a rank status (at most {@link RankStatus#MAX_BYTES} bytes). */
  static RankStatus encode(L3Metrics m) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(1024);
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeByte(VERSION);
      for (L3Metrics.Kind k : new L3Metrics.Kind[] {m.query(), m.get(), m.put()}) {
        out.writeLong(k.jobs());
        out.writeLong(k.keys());
        out.writeLong(k.okKeys());
        out.writeLong(k.payloadBytes());
        out.writeLong(k.queueNanos());
        out.writeLong(k.backendNanos());
        out.writeInt(k.queuedJobs());
        out.writeLong(k.queuedBytes());
        out.writeInt(k.runningJobs());
        out.writeLong(k.runningBytes());
        out.writeInt(k.completedJobs());
        out.writeLong(k.completedBytes());
      }
      text(out, m.healthState(), MAX_NAME_BYTES);
      out.writeLong(m.healthEpoch());
      out.writeLong(m.outages());
      out.writeLong(m.unprovenRetirements());
      out.writeBoolean(m.quarantined());
      out.writeLong(m.backendCalls());
      out.writeLong(m.putsNewlyWritten());
      out.writeLong(m.putsAlreadyExisted());
      Map<String, Long> rejections = new TreeMap<>(m.rejections());
      int n = Math.min(MAX_REJECTIONS, rejections.size());
      out.writeByte(n);
      for (var e : rejections.entrySet()) {
        if (n-- == 0) {
          break;
        }
        text(out, e.getKey(), MAX_NAME_BYTES);
        out.writeLong(e.getValue());
      }
      out.writeLong(m.workerFaults());
      out.writeLong(m.configurationFailures());
      text(out, m.lastConfigurationFailure(), MAX_TEXT_BYTES);
      out.writeLong(m.queuedRejectedByOutage());
      out.writeBoolean(m.writesRefused());
      out.writeLong(m.refusedPutKeys());
      text(out, m.writesRefusedReason(), MAX_REASON_BYTES);
    } catch (IOException e) {
      throw new UncheckedIOException(e); // a byte array does not fail
    }
    return new RankStatus(bytes.toByteArray());
  }

  /**
   * The figures {@code status} carries.
   *
   * @throws IllegalArgumentException when it is not an encoding of this version
   */
  static L3Metrics decode(RankStatus status) {
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(status.bytes()))) {
      int version = in.readUnsignedByte();
      if (version != VERSION) {
        throw new IllegalArgumentException(
            "executor figures of version " + version + ", this build reads " + VERSION);
      }
      L3Metrics.Kind[] kinds = new L3Metrics.Kind[3];
      for (int i = 0; i < 3; i++) {
        kinds[i] =
            new L3Metrics.Kind(
                in.readLong(),
                in.readLong(),
                in.readLong(),
                in.readLong(),
                in.readLong(),
                in.readLong(),
                in.readInt(),
                in.readLong(),
                in.readInt(),
                in.readLong(),
                in.readInt(),
                in.readLong());
      }
      String health = in.readUTF();
      long epoch = in.readLong();
      long outages = in.readLong();
      long unproven = in.readLong();
      boolean quarantined = in.readBoolean();
      long calls = in.readLong();
      long written = in.readLong();
      long existed = in.readLong();
      Map<String, Long> rejections = new TreeMap<>();
      for (int n = in.readUnsignedByte(); n > 0; n--) {
        rejections.put(in.readUTF(), in.readLong());
      }
      long faults = in.readLong();
      long configurationFailures = in.readLong();
      String lastFailure = in.readUTF();
      long rejectedByOutage = in.readLong();
      boolean writesRefused = in.readBoolean();
      long refusedPutKeys = in.readLong();
      String refusedReason = in.readUTF();
      if (in.available() != 0) {
        throw new IllegalArgumentException(
            "executor figures end with " + in.available() + " bytes more");
      }
      return new L3Metrics(
          kinds[0],
          kinds[1],
          kinds[2],
          health,
          epoch,
          outages,
          unproven,
          quarantined,
          calls,
          written,
          existed,
          rejections,
          faults,
          configurationFailures,
          lastFailure,
          rejectedByOutage,
          writesRefused,
          refusedPutKeys,
          refusedReason);
    } catch (IOException e) {
      throw new IllegalArgumentException("executor figures are cut short: " + e, e);
    }
  }

  /**
   * {@code s} as modified UTF-8 ({@link DataOutputStream#writeUTF}), cut to at most {@code max}
   * encoded bytes, never inside a surrogate pair.
   */
  private static void text(DataOutputStream out, String s, int max) throws IOException {
    String v = s == null ? "" : s;
    int bytes = 0;
    int end = 0;
    while (end < v.length()) {
      char c = v.charAt(end);
      int width = c != 0 && c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
      boolean pair = Character.isHighSurrogate(c) && end + 1 < v.length();
      int step = pair ? 2 : 1;
      int stepBytes = pair ? 6 : width;
      if (bytes + stepBytes > max) {
        break;
      }
      bytes += stepBytes;
      end += step;
    }
    out.writeUTF(v.substring(0, end));
  }
}
