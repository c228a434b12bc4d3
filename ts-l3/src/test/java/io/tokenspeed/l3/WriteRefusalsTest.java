package io.tokenspeed.l3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.core.storage.HostRange;
import io.tokenspeed.core.storage.JobRow;
import io.tokenspeed.core.storage.StorageJob;
import io.tokenspeed.core.storage.StorageKind;
import io.tokenspeed.l3.spi.RowResult;
import io.tokenspeed.l3.spi.StoreConfigurationException;
import io.tokenspeed.l3.spi.StoreResult;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The executor's record of a store that refuses writes ({@link WriteRefusals}): logged once when
 * the store starts refusing and once when it takes writes again, never per key; shown by {@link
 * L3Metrics#writesRefused()} with the store's reason; never an outage.
 */
class WriteRefusalsTest {

  private static final String OOM = "OOM command not allowed when used memory > 'maxmemory'.";

  private final Arena arena = Arena.ofConfined();
  private final MemorySegment host = arena.allocate(1 << 16);
  private final ManualClock clock = new ManualClock();
  private final ScriptedStore store = new ScriptedStore();
  private final List<LogRecord> logged = Collections.synchronizedList(new ArrayList<>());
  private final Logger logger = Logger.getLogger(L3Executor.class.getName());
  private final Handler capture =
      new Handler() {
        @Override
        public void publish(LogRecord r) {
          logged.add(r);
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
      };
  private L3Executor ex;
  private long nextId = 1;

  @BeforeEach
  void listen() throws Exception {
    logger.addHandler(capture);
    // cooldown 0: after an outage the next submission is the probe, so every job runs
    ex =
        L3Executor.startStepped(
            store, new L3ExecutorConfig(1, 1, 1, 8, 8, 8, 64, 0, 60_000), host, clock);
  }

  @AfterEach
  void tearDown() {
    logger.removeHandler(capture);
    ex.close();
    arena.close();
  }

  /** Submits a PUT of {@code keys} rows and runs its store call; returns what was submitted. */
  private SubmitResult put(int keys) {
    List<JobRow> rows = new ArrayList<>();
    for (int i = 0; i < keys; i++) {
      rows.add(JobRow.owned("ns_" + nextId + "_" + i, new HostRange(i * 64L, 64)));
    }
    SubmitResult r = ex.submit(new StorageJob(nextId++, StorageKind.PUT, rows));
    Runnable call = ex.takeWork(StorageKind.PUT);
    if (call != null) {
      call.run();
    }
    ex.poll();
    return r;
  }

  private List<String> lines(Level level, String text) {
    List<String> out = new ArrayList<>();
    synchronized (logged) {
      for (LogRecord r : logged) {
        String m = java.text.MessageFormat.format(r.getMessage(), r.getParameters());
        if (r.getLevel() == level && m.contains(text)) {
          out.add(m);
        }
      }
    }
    return out;
  }

  @Test
  void shouldLogOnceAndShowTheStateWhenTheStoreRefusesEveryPut() {
    store.script(
        (op, keys, segs) -> {
          List<RowResult> rows = new ArrayList<>();
          for (int i = 0; i < keys.size(); i++) {
            rows.add(RowResult.Rejected.noSpace(OOM));
          }
          return StoreResult.of(rows);
        });
    for (int i = 0; i < 200; i++) {
      assertEquals(SubmitResult.QUEUED, put(1 + i % 4), "a full store is no outage: job " + i);
      clock.advanceMs(10);
    }
    List<String> entered = lines(Level.WARNING, "refuses writes");
    assertEquals(1, entered.size(), "one line for 500 refused keys: " + entered);
    assertTrue(entered.getFirst().contains(OOM), "with the store's reason: " + entered);
    assertTrue(entered.getFirst().contains("scripted"), "naming the store: " + entered);
    L3Metrics m = ex.metrics();
    assertTrue(m.writesRefused());
    assertEquals(OOM, m.writesRefusedReason());
    assertEquals(500, m.refusedPutKeys());
    assertEquals("HEALTHY", m.healthState(), "health is untouched");
    assertEquals(0, m.healthEpoch());

    store.script(null); // room again
    put(2);
    List<String> left = lines(Level.INFO, "takes writes again");
    assertEquals(1, left.size(), left::toString);
    assertTrue(left.getFirst().contains("500 PUT keys"), left::toString);
    assertFalse(ex.metrics().writesRefused());
    assertEquals("", ex.metrics().writesRefusedReason());
    put(3);
    assertEquals(1, lines(Level.INFO, "takes writes again").size(), "only on the change");
  }

  static LongStream seeds() {
    return LongStream.rangeClosed(1, 16).map(i -> 0x5EF05EL * i);
  }

  /**
   * Random sequences of PUT answers (refusals, writes, existing objects, mixed rows, outages,
   * exceptions, configuration failures) against a reference model: one line per change of state,
   * none otherwise, and the gauge and counter agree with the model after every call.
   */
  @ParameterizedTest(name = "seed={0}")
  @MethodSource("seeds")
  void shouldLogExactlyTheStateChangesWhateverTheStoreAnswers(long seed) {
    Random rnd = new Random(seed);
    boolean refusing = false;
    String reason = "";
    long refused = 0;
    int entries = 0;
    int exits = 0;
    for (int call = 0; call < 300; call++) {
      int kind = rnd.nextInt(7);
      int keys = 1 + rnd.nextInt(4);
      String why = "full #" + call;
      int[] refusedHere = {0};
      int[] writtenHere = {0};
      store.script(
          (op, ks, segs) -> {
            List<RowResult> rows = new ArrayList<>();
            for (int i = 0; i < ks.size(); i++) {
              RowResult row =
                  switch (kind) {
                    case 0 -> RowResult.Rejected.noSpace(why);
                    case 1 -> new RowResult.Ok(64, false);
                    case 2 -> new RowResult.Ok(64, true);
                    case 3 ->
                        rnd.nextBoolean()
                            ? RowResult.Rejected.noSpace(why)
                            : new RowResult.Ok(64, rnd.nextBoolean());
                    case 4 -> new RowResult.Rejected(-901, true); // an RPC timeout: an outage
                    case 5 -> throw new IOException("connection reset");
                    default -> throw new StoreConfigurationException("NOPERM", null);
                  };
              if (row instanceof RowResult.Rejected r && !r.outage()) {
                refusedHere[0]++;
              } else if (row instanceof RowResult.Ok ok && !ok.alreadyExisted()) {
                writtenHere[0]++;
              }
              rows.add(row);
            }
            return StoreResult.of(rows);
          });
      SubmitResult submitted = put(keys);
      assertTrue(submitted.accepted(), "cooldown 0: every job runs, seed " + seed);
      refused += refusedHere[0];
      if (refusedHere[0] > 0 && !refusing) {
        refusing = true;
        reason = why;
        entries++;
      } else if (refusedHere[0] == 0 && writtenHere[0] > 0 && refusing) {
        refusing = false;
        reason = "";
        exits++;
      }
      L3Metrics m = ex.metrics();
      String at = "seed=" + seed + " call=" + call + " kind=" + kind;
      assertEquals(refusing, m.writesRefused(), at);
      assertEquals(refused, m.refusedPutKeys(), at);
      assertEquals(reason, m.writesRefusedReason(), at);
      assertEquals(entries, lines(Level.WARNING, "refuses writes").size(), at);
      assertEquals(exits, lines(Level.INFO, "takes writes again").size(), at);
      clock.advanceMs(rnd.nextInt(50));
    }
    assertTrue(entries >= 3 && exits >= 3, "entries=" + entries + " exits=" + exits);
  }
}
