package io.tokenspeed.cuda.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.tokenspeed.model.ForwardBatch;
import io.tokenspeed.model.ForwardRequest;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The host side of the Mamba kernels: the request arrays a batch becomes (read as the kernels read
 * them, they must name the slots the CPU path's SelectiveScan names), their upload layout, and the
 * checks and argument lists of the launches. The kernels themselves run on the host in
 * src/test/cpp/mamba-emulator.sh.
 */
class CudaMambaTest {

  @Test
  void shouldNameTheSlotsTheCpuPathNamesForRandomBatches() {
    Random rnd = new Random(20260101);
    for (int round = 0; round < 500; round++) {
      int page = 1 + rnd.nextInt(16);
      int groups = 1 + rnd.nextInt(3);
      int group = rnd.nextInt(groups);
      int n = 1 + rnd.nextInt(6);
      List<ForwardRequest> reqs = new ArrayList<>();
      for (int r = 0; r < n; r++) {
        int start =
            switch (rnd.nextInt(3)) {
              case 0 -> 0;
              case 1 -> page * rnd.nextInt(5);
              default -> page * rnd.nextInt(5) + rnd.nextInt(page);
            };
        int count = rnd.nextBoolean() ? 1 : 1 + rnd.nextInt(4 * page + 3);
        int[][] tables = new int[groups][];
        for (int g = 0; g < groups; g++) {
          // at least the working row, sometimes a few rows more; 0 among them
          int rows = Math.ceilDiv(start + count, page) + rnd.nextInt(3);
          tables[g] = new int[rows];
          for (int i = 0; i < rows; i++) {
            tables[g][i] = rnd.nextInt(5) == 0 ? 0 : 1 + rnd.nextInt(1000);
          }
        }
        reqs.add(new ForwardRequest(new int[count], start, tables, rnd.nextBoolean()));
      }
      ForwardBatch batch = new ForwardBatch(reqs);
      CudaMamba.Requests got = CudaMamba.requests(batch, group, page);
      String at = "round " + round + " page=" + page + " group=" + group;

      assertEquals(n, got.count(), at);
      int row = 0;
      int stride = 1;
      for (int r = 0; r < n; r++) {
        ForwardRequest req = reqs.get(r);
        assertEquals(row, got.firstRow()[r], at);
        assertEquals(req.numTokens(), got.numTokens()[r], at);
        assertEquals(req.startPosition(), got.startPosition()[r], at);
        row += req.numTokens();
        stride = Math.max(stride, Math.ceilDiv(req.startPosition() + req.numTokens(), page));
      }
      assertEquals(stride, got.tableStride(), at);
      assertEquals(n * stride, got.tables().length, at);

      for (int r = 0; r < n; r++) {
        ForwardRequest req = reqs.get(r);
        int[] table = req.blockTables()[group];
        int start = req.startPosition();
        int end = start + req.numTokens();
        // SelectiveScan.Requests: input = start == 0 ? 0 : table[⌈start/P⌉ - 1], working =
        // table[⌈end/P⌉ - 1]; the kernels: tables[r·stride + (position - 1) / P]
        int input = start == 0 ? 0 : table[Math.ceilDiv(start, page) - 1];
        assertEquals(input, start == 0 ? 0 : kernelEntry(got, r, (start - 1) / page), at);
        assertEquals(table[Math.ceilDiv(end, page) - 1], kernelEntry(got, r, (end - 1) / page), at);
        // each crossed boundary: row < table.length ? table[row] : 0 on the CPU, the kernels
        // row < stride ? tables[...] : 0
        for (int pos = start; pos < end; pos++) {
          if ((pos + 1) % page == 0) {
            int crossed = (pos + 1) / page - 1;
            int cpu = crossed < table.length ? table[crossed] : 0;
            int gpu = crossed < got.tableStride() ? kernelEntry(got, r, crossed) : 0;
            assertEquals(cpu, gpu, at + " request " + r + " boundary " + (pos + 1));
          }
        }
        // every row the stride keeps is the table's, or 0 past its end
        for (int i = 0; i < stride; i++) {
          assertEquals(i < table.length ? table[i] : 0, kernelEntry(got, r, i), at);
        }
      }
    }
  }

  private static int kernelEntry(CudaMamba.Requests reqs, int r, int row) {
    return reqs.tables()[r * reqs.tableStride() + row];
  }

  @Test
  void shouldPackTheArraysInTheOrderTheDeviceAddressesName() {
    int[][] t0 = {{7, 8, 9}, {0, 3}};
    int[][] t1 = {{1}, {4, 5, 6}};
    ForwardBatch batch =
        new ForwardBatch(
            List.of(
                new ForwardRequest(new int[] {1, 2, 3}, 4, t0, false),
                new ForwardRequest(new int[] {9}, 9, t1, false)));
    // page 4: request 0 covers positions 4..6 (rows 0, 1), request 1 position 9 (rows 0..2)
    CudaMamba.Requests got = CudaMamba.requests(batch, 1, 4);
    assertEquals(
        new CudaMamba.Requests(
            new int[] {0, 3}, new int[] {3, 1}, new int[] {4, 9}, new int[] {0, 3, 0, 4, 5, 6}, 3),
        got);
    assertArrayEquals(new int[] {0, 3, 3, 1, 4, 9, 0, 3, 0, 4, 5, 6}, got.packed());

    CudaMamba.DeviceRequests dev = CudaMamba.DeviceRequests.packed(4096, 2, 3);
    assertEquals(new CudaMamba.DeviceRequests(2, 4096, 4104, 4112, 4120, 3), dev);
  }

  @Test
  void shouldRefuseTablesThatDoNotReachTheWorkingRow() {
    ForwardBatch batch =
        ForwardBatch.of(new ForwardRequest(new int[] {1, 2}, 7, new int[][] {{1, 2}}, false));
    var bad = assertThrows(IllegalArgumentException.class, () -> CudaMamba.requests(batch, 0, 4));
    assertEquals(
        "request 0 group 0 state table has rows=2 but tokens up to position 9 need 3",
        bad.getMessage());
    bad = assertThrows(IllegalArgumentException.class, () -> CudaMamba.requests(batch, 1, 4));
    assertEquals("request 0 has block tables of groups=1, no group 1", bad.getMessage());
    bad = assertThrows(IllegalArgumentException.class, () -> CudaMamba.requests(batch, 0, 0));
    assertEquals("page_tokens=0 must be positive", bad.getMessage());
  }

  @Test
  void shouldCheckTheLayerStateAgainstTheKernelsBounds() {
    // di = 3, k = 4, N = 16: conv 3·3·4 = 36 bytes at 0, ssm 3·16·4 = 192 bytes at 36
    CudaMamba.LayerState ok = new CudaMamba.LayerState(1 << 20, 228, 0, 36, 3, 16, 4, 8);
    assertEquals(1, CudaMamba.channelBlocks(ok));
    assertEquals(
        "conv_kernel=9 outside [1, 8]",
        assertThrows(
                IllegalArgumentException.class,
                () -> new CudaMamba.LayerState(0, 4096, 0, 256, 3, 16, 9, 8))
            .getMessage());
    assertEquals(
        "state_size=0 must be positive",
        assertThrows(
                IllegalArgumentException.class,
                () -> new CudaMamba.LayerState(0, 4096, 0, 256, 3, 0, 4, 8))
            .getMessage());
    assertEquals(
        "ssm_offset=37 with 192 bytes must be a multiple of 4 inside bytes_per_slot=4096",
        assertThrows(
                IllegalArgumentException.class,
                () -> new CudaMamba.LayerState(0, 4096, 0, 37, 3, 16, 4, 8))
            .getMessage());
    assertEquals(
        "ssm_offset=40 with 192 bytes must be a multiple of 4 inside bytes_per_slot=228",
        assertThrows(
                IllegalArgumentException.class,
                () -> new CudaMamba.LayerState(0, 228, 0, 40, 3, 16, 4, 8))
            .getMessage());
    assertEquals(
        "bytes_per_slot=230 must be a positive multiple of 4",
        assertThrows(
                IllegalArgumentException.class,
                () -> new CudaMamba.LayerState(0, 230, 0, 36, 3, 16, 4, 8))
            .getMessage());
    assertEquals(
        "requests=65536 outside [1, 65535] (the grid's y dimension)",
        assertThrows(
                IllegalArgumentException.class, () -> CudaMamba.DeviceRequests.packed(0, 65_536, 1))
            .getMessage());
  }

  @Test
  void shouldHoldTheBoundsOfKernelsCu() throws IOException {
    String source;
    try (InputStream in = CudaMamba.class.getResourceAsStream("/io/tokenspeed/cuda/kernels.cu")) {
      assertNotNull(in, "kernels.cu");
      source = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    String conv = "#define MAMBA_MAX_CONV " + CudaMamba.MAX_CONV_KERNEL + "\n";
    assertTrue(source.contains(conv), conv);
    String scan = "mamba_scan_channel<" + CudaMamba.REGISTER_STATE + ">(";
    assertTrue(source.contains(scan), scan);
    for (String kernel :
        List.of(
            "mamba_conv(",
            "mamba_scan(",
            "mamba_scan_n16(",
            "softplus_bias(",
            "mamba_split_proj(")) {
      assertTrue(source.contains("extern \"C\" __global__ void " + kernel), kernel);
    }
  }

  @Test
  void shouldPickTheRegisterScanUpToSixteenStates() {
    assertEquals("mamba_scan_n16", CudaMamba.scanKernel(1));
    assertEquals("mamba_scan_n16", CudaMamba.scanKernel(16));
    assertEquals("mamba_scan", CudaMamba.scanKernel(17));
    assertEquals("mamba_scan", CudaMamba.scanKernel(256));
  }

  @Test
  void shouldPassTheArgumentsInTheKernelsParameterOrder() {
    CudaMamba.LayerState st = new CudaMamba.LayerState(1000, 4096, 16, 512, 40, 8, 4, 16);
    CudaMamba.DeviceRequests reqs = CudaMamba.DeviceRequests.packed(8000, 2, 5);
    Object[] conv = CudaMamba.convArgs(st, reqs, 100L, 80, 200L, 0L, 300L);
    assertEquals(
        Arrays.asList(
            8000L, 8008L, 8016L, 8024L, 5, 16, 1000L, 4096L, 16L, 40, 4, 100L, 80, 200L, 0L, 300L),
        Arrays.asList(conv));
    Object[] scan =
        CudaMamba.scanArgs(st, reqs, 100L, 80, 40, 300L, 400L, 500L, 600L, 8, 700L, 800L, 900L);
    assertEquals(
        Arrays.asList(
            8000L, 8008L, 8016L, 8024L, 5, 16, 1000L, 4096L, 16L, 512L, 40, 8, 4, 100L, 80, 40,
            300L, 400L, 500L, 600L, 8, 700L, 800L, 900L),
        Arrays.asList(scan));

    assertEquals(
        "gate_offset=41 with inner_size=40 does not fit xz_width=80",
        assertThrows(
                IllegalArgumentException.class,
                () ->
                    CudaMamba.scanArgs(
                        st, reqs, 100L, 80, 41, 300L, 400L, 500L, 600L, 8, 700L, 800L, 900L))
            .getMessage());
    assertEquals(
        "bc_stride=7 is less than state_size=8",
        assertThrows(
                IllegalArgumentException.class,
                () ->
                    CudaMamba.scanArgs(
                        st, reqs, 100L, 80, 40, 300L, 400L, 500L, 600L, 7, 700L, 800L, 900L))
            .getMessage());
    assertEquals(
        "xz_width=39 is narrower than inner_size=40",
        assertThrows(
                IllegalArgumentException.class,
                () -> CudaMamba.convArgs(st, reqs, 100L, 39, 200L, 0L, 300L))
            .getMessage());
    assertEquals(3, CudaMamba.elementBlocks(3, 256));
    assertEquals(4, CudaMamba.elementBlocks(3, 257));
  }
}
