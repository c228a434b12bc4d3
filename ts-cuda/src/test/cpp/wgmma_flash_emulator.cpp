// Host emulation of the Hopper flash kernel (flash_attention_wgmma_d64/d128 of kernels.cu), for
// checking a change to it on a machine without a GPU: the kernel's own source (its template, cut
// out of kernels.cu by wgmma-flash-emulator.sh into kernel_body.inc) run by 384 cooperative fibers
// a block, over host versions of the helpers it calls: wgmma (the 128-byte swizzle's K-major and
// MN-major layouts as CUTLASS's make_gmma_desc states them, the accumulator and register-operand
// fragments of the PTX ISA), cp.async, mbarriers (phases and parities), named barriers, shuffles.
// A wgmma runs at the wait that retires its group, after the other threads have had turns, so a
// register touched or a stage released before that wait shows in the results; shared memory
// starts 16 bytes past a 1024-byte boundary and every access is checked against the launch's
// dynamic shared memory (the size CudaCausalLm.wgmmaFlashSharedBytes gives). It checks outputs
// against float64 within FlashAttentionGpuTest's bound and a request's bits alone, batched and in
// random tiles, and fails on a deadlock (60 s) or a named barrier left with arrivals.
// What it cannot tell: whether the hardware reads the layouts as modelled here, the memory model's
// fences, ptxas's handling of the asynchronous registers, and speed.
#include <ucontext.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <vector>
#include <string>

using std::min;
typedef unsigned short bf16_t;
#define NEG_INF (-std::numeric_limits<float>::infinity())
#define FA_ROWS 128
#define __device__
#define __forceinline__ inline
#define __shared__
#define __align__(n)

static void fail(const char* what) {
  fprintf(stderr, "EMULATOR FAILURE: %s\n", what);
  exit(2);
}

// ------------------------------------------------------------------ fibers
struct Dim { unsigned x, y, z; };
struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  Dim tid;
  bool done;
};
static std::vector<Fiber*> fibers;
static Fiber* cur;
static ucontext_t sched;
static std::function<void()> body;
#define threadIdx (cur->tid)
static Dim blockIdx;
static auto waitStart = std::chrono::steady_clock::now();

static void yield_now() { swapcontext(&cur->ctx, &sched); }

static void spin(const char* what) {
  yield_now();
}

struct Queue;
static bool pending_mma();
static void trampoline() {
  body();
  if (pending_mma()) fail("a thread ended with wgmma's never waited for");
  cur->done = true;
  swapcontext(&cur->ctx, &sched);
}

// ------------------------------------------------------------------ shared memory
static const unsigned SMEM_BASE = 16;  // the window's first address: not 1024-aligned on purpose
unsigned char fw_shared[240 * 1024];
static unsigned smemLimit;  // the launch's dynamic shared memory

static unsigned char* smem(unsigned a, unsigned n) {
  if (a < SMEM_BASE || a + n > SMEM_BASE + smemLimit) {
    char m[200];
    snprintf(m, sizeof m, "shared access at %u (+%u) outside the launch's %u bytes", a, n, smemLimit);
    fail(m);
  }
  return fw_shared + (a - SMEM_BASE);
}

static unsigned shared_address(const void* p) {
  return SMEM_BASE + (unsigned)((const unsigned char*)p - fw_shared);
}

// ------------------------------------------------------------------ barriers
struct Bar { int count = 0; long gen = 0; int n = -1; };
static Bar blockBar, warpBar[12], wgBar[3], named[16];

static void bar_wait(Bar& b, int n, const char* what) {
  if (b.n != -1 && b.n != n && b.count != 0) fail("barrier used with two thread counts");
  b.n = n;
  long g = b.gen;
  if (++b.count == n) {
    b.count = 0;
    b.gen++;
    return;
  }
  while (b.gen == g) spin(what);
}

static void bar_arrive(Bar& b, int n) {
  if (b.n != -1 && b.n != n && b.count != 0) fail("barrier used with two thread counts");
  b.n = n;
  if (++b.count == n) {
    b.count = 0;
    b.gen++;
  }
}

static void __syncthreads() { bar_wait(blockBar, 384, "syncthreads"); }
static void __syncwarp() { bar_wait(warpBar[threadIdx.x / 32], 32, "syncwarp"); }

static unsigned long long warpSlot[12][32];
template <class T>
static T __shfl_sync(unsigned mask, T v, int src) {
  if (mask != 0xffffffffu) fail("partial shuffle");
  int w = threadIdx.x / 32, l = threadIdx.x % 32;
  unsigned long long raw = 0;
  memcpy(&raw, &v, sizeof v);
  warpSlot[w][l] = raw;
  bar_wait(warpBar[w], 32, "shfl");
  T r;
  raw = warpSlot[w][src & 31];
  memcpy(&r, &raw, sizeof r);
  bar_wait(warpBar[w], 32, "shfl");
  return r;
}
template <class T>
static T __shfl_xor_sync(unsigned mask, T v, int x) {
  return __shfl_sync(mask, v, (threadIdx.x % 32) ^ x);
}

static void __trap() { fail("__trap"); }

// ------------------------------------------------------------------ numbers
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

static bf16_t to_bf16(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return (bf16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16_t)(u >> 16);
}
static float from_bf16(bf16_t b) {
  unsigned u = (unsigned)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static unsigned pack_bf16x2(float lo, float hi) {
  return ((unsigned)to_bf16(hi) << 16) | to_bf16(lo);
}
static float fast_exp2(float x) {
  float y = exp2f(x);
  return std::fabs(y) < std::numeric_limits<float>::min() ? 0.f : y;
}

// ------------------------------------------------------------------ copies and mbarriers
// the 128-byte swizzle: 16-byte piece j of a 128-byte row r lands at piece j ^ (r % 8)
static unsigned swizzle(unsigned a) { return a ^ (((a >> 7) & 7) << 4); }
static void flash_copy16(unsigned dst, const void* src, int bytes) {
  if (dst % 16) fail("cp.async destination not 16-byte aligned");
  if ((uintptr_t)src % 16) fail("cp.async source not 16-byte aligned");
  if (bytes == 16) memcpy(smem(dst, 16), src, 16);
  else if (bytes == 0) memset(smem(dst, 16), 0, 16);
  else fail("cp.async of neither 0 nor 16 bytes");
}

// An mbarrier's phase completes when its expected arrivals have come and the bytes its arrivals
// announced (expect_tx) have all landed (complete_tx).
struct MBar { int expected = 0, pending = 0, phase = 0; long long tx = 0; bool init = false; };
static std::map<unsigned, MBar> mbars;

static MBar& mbar(unsigned a) {
  smem(a, 8);
  if (a % 8) fail("mbarrier not 8-byte aligned");
  return mbars[a];
}
static void fw_barrier_init(unsigned a, unsigned count) {
  MBar& b = mbar(a);
  b.expected = b.pending = (int)count;
  b.phase = 0;
  b.init = true;
}
static void fw_barrier_init_fence() {}
static void mbar_settle(MBar& b) {
  if (b.pending < 0) fail("more arrivals on an mbarrier than it expects");
  if (b.tx < 0) fail("more bytes landed on an mbarrier than announced");
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1;
    b.pending = b.expected;
  }
}
static void fw_barrier_arrive(unsigned a) {
  MBar& b = mbar(a);
  if (!b.init) fail("arrive on an uninitialized mbarrier");
  b.pending--;
  mbar_settle(b);
}
static void fw_barrier_expect(unsigned a, unsigned bytes) {
  MBar& b = mbar(a);
  if (!b.init) fail("expect_tx on an uninitialized mbarrier");
  b.tx += bytes;
  b.pending--;
  mbar_settle(b);
}

// A TMA descriptor as cuTensorMapEncodeTiled is given it (CudaCausalLm.poolTensorMaps): 2-byte
// elements, 4 dimensions innermost first, the 128-byte swizzle, zeros out of range.
struct FwTensorMap { const char* base; long long dims[4]; long long strides[3]; int box[4]; };

// One box lands at once (the worst case for a stage still being read: a wgmma reads its operands
// only at its wait), each 16-byte piece of a 128-byte row where the 128-byte swizzle puts it, and
// its bytes count on the barrier.
static void fw_tma_load4(unsigned to, const FwTensorMap* map, int c0, int c1, int c2, int c3,
                         unsigned bar) {
  if (to % 1024) fail("TMA destination not on the 128-byte swizzle's 1024-byte pattern");
  if (map->box[0] * 2 != 128 || map->box[2] != 1 || map->box[3] != 1)
    fail("TMA box not of 128-byte rows of one (head, block)");
  for (int r = 0; r < map->box[1]; r++)
    for (int j = 0; j < 8; j++) {
      long long e = c0 + 8LL * j, t = c1 + r;
      bool in = c0 >= 0 && e + 8 <= map->dims[0] && c1 >= 0 && t < map->dims[1] && c2 >= 0 &&
                c2 < map->dims[2] && c3 >= 0 && c3 < map->dims[3];
      unsigned char* dst = smem(swizzle(to + r * 128 + j * 16), 16);
      if (in)
        memcpy(dst, map->base + e * 2 + t * map->strides[0] + c2 * map->strides[1] +
                        c3 * map->strides[2], 16);
      else
        memset(dst, 0, 16);
    }
  MBar& b = mbar(bar);
  if (!b.init) fail("TMA copy onto an uninitialized mbarrier");
  b.tx -= (long long)map->box[0] * map->box[1] * 2;
  mbar_settle(b);
}
static void fw_barrier_arrive_on_copies(unsigned a) { fw_barrier_arrive(a); }
static void fw_barrier_wait(unsigned a, unsigned parity) {
  MBar& b = mbar(a);
  if (!b.init) fail("wait on an uninitialized mbarrier");
  while ((unsigned)b.phase == parity) spin("mbarrier");
}
static void fw_copies_wait() {}
template <int N> static void fw_registers_down() {}
template <int N> static void fw_registers_up() {}
static void fw_store_shared(unsigned a, unsigned lo, unsigned hi) {
  if (a % 8) fail("8-byte store not aligned");
  memcpy(smem(a, 4), &lo, 4);
  memcpy(smem(a + 4, 4), &hi, 4);
}
static void fw_named_sync(int id, int n) {
  if (id < 1 || id > 15) fail("named barrier id");
  bar_wait(named[id], n, "named");
}
static void fw_named_arrive(int id, int n) {
  if (id < 1 || id > 15) fail("named barrier id");
  bar_arrive(named[id], n);
}
static void fw_fence_proxy() {}
template <int N> static void fw_fence_registers(float*) {}
template <int N> static void fw_fence_registers(unsigned*) {}

// ------------------------------------------------------------------ wgmma
static unsigned long long fw_descriptor(unsigned address, unsigned lead, unsigned stride) {
  return (unsigned long long)((address & 0x3ffffu) >> 4) |
         ((unsigned long long)((lead >> 4) & 0x3fffu) << 16) |
         ((unsigned long long)((stride >> 4) & 0x3fffu) << 32) | (1ull << 62);
}
struct Desc { unsigned start, lbo, sbo; };
static Desc decode(unsigned long long d) {
  if ((d >> 62) != 1) fail("descriptor not of the 128-byte swizzle");
  if ((d >> 49) & 7) fail("descriptor base offset not 0");
  return {(unsigned)(d & 0x3fff) << 4, (unsigned)((d >> 16) & 0x3fff) << 4,
          (unsigned)((d >> 32) & 0x3fff) << 4};
}
static float read_bf16(unsigned a) {
  bf16_t b;
  memcpy(&b, smem(a, 2), 2);
  return from_bf16(b);
}
// K-major, 128-byte swizzle: ((8,m),(T,2)):((8T,SBO),(1,T)); row r (M or N), k < 16
static float kmajor(const Desc& d, int r, int k) {
  return read_bf16(swizzle(d.start + (r % 8) * 128 + (r / 8) * d.sbo + k * 2));
}
// MN-major, 128-byte swizzle: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)); k < 16, column n
static float mnmajor(const Desc& d, int k, int n) {
  return read_bf16(swizzle(d.start + (n % 64) * 2 + (n / 64) * d.lbo + (k % 8) * 128 + (k / 8) * d.sbo));
}

// wgmma's are queued at issue and run at the wait that retires their group, after the other
// threads have had a few turns: reading registers and shared memory as late as the hardware may,
// so that a register touched or a stage released before the wait shows in the results.
struct Op { int kind; int n; float* d; const unsigned* a; unsigned long long da, db; int scale; };
struct Queue { std::vector<std::vector<Op>> groups; std::vector<Op> open; };
static Queue queues[384];

static void ss_now(const Op& op) {
  Desc A = decode(op.da), B = decode(op.db);
  int wi = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  for (int j = 0; j < 16; j++)
    for (int i = 0; i < 2; i++)
      for (int e = 0; e < 2; e++) {
        int m = 16 * wi + g + 8 * i, n = 8 * j + 2 * tq + e;
        float acc = op.scale ? op.d[4 * j + 2 * i + e] : 0.f;
        double s = 0;
        for (int k = 0; k < 16; k++) s += (double)kmajor(A, m, k) * kmajor(B, n, k);
        op.d[4 * j + 2 * i + e] = acc + (float)s;
      }
}

static unsigned wgSlot[3][128][4];
static void rs_now(const Op& op) {
  Desc B = decode(op.db);
  int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  for (int r = 0; r < 4; r++) wgSlot[wg][t][r] = op.a[r];
  bar_wait(wgBar[wg], 128, "wgmma");
  int wi = t / 32, lane = t % 32, g = lane / 4, tq = lane % 4;
  auto A = [&](int m, int k) {
    int owner = 32 * (m / 16) + 4 * (m % 8) + (k % 8) / 2;
    int reg = ((m % 16) >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    unsigned bits = wgSlot[wg][owner][reg] >> (16 * (k % 2));
    return from_bf16((bf16_t)(bits & 0xffff));
  };
  for (int j = 0; j < op.n / 8; j++)
    for (int i = 0; i < 2; i++)
      for (int e = 0; e < 2; e++) {
        int m = 16 * wi + g + 8 * i, n = 8 * j + 2 * tq + e;
        double s = 0;
        for (int k = 0; k < 16; k++) s += (double)A(m, k) * mnmajor(B, k, n);
        op.d[4 * j + 2 * i + e] += (float)s;
      }
  bar_wait(wgBar[wg], 128, "wgmma");
}

template <int SCALE_D>
static void fw_mma_ss_n128(float* d, unsigned long long a, unsigned long long b) {
  queues[threadIdx.x].open.push_back({0, 128, d, nullptr, a, b, SCALE_D});
}
static void fw_mma_rs_n128(float* d, const unsigned* a, unsigned long long b) {
  queues[threadIdx.x].open.push_back({1, 128, d, a, 0, b, 1});
}
static void fw_mma_rs_n64(float* d, const unsigned* a, unsigned long long b) {
  queues[threadIdx.x].open.push_back({1, 64, d, a, 0, b, 1});
}
static void fw_mma_fence() {}
static void fw_mma_commit() {
  Queue& q = queues[threadIdx.x];
  q.groups.push_back(q.open);
  q.open.clear();
}
template <int N>
static void fw_mma_wait() {
  Queue& q = queues[threadIdx.x];
  if (!q.open.empty()) fail("wgmma's issued but not committed before a wait");
  if ((int)q.groups.size() > N) {
    for (int i = 0; i < 40; i++) yield_now();  // the others run meanwhile
  }
  while ((int)q.groups.size() > N) {
    for (const Op& op : q.groups.front()) {
      if (op.kind == 0) ss_now(op);
      else rs_now(op);
    }
    q.groups.erase(q.groups.begin());
  }
}

static bool pending_mma() {
  Queue& q = queues[threadIdx.x];
  return !q.open.empty() || !q.groups.empty();
}

#include "kernel_body.inc"

// ------------------------------------------------------------------ launching
template <int D, int STAGES, bool TMA>
static void launch(int numTiles, int K, unsigned sharedBytes, const float* q, const char* pool,
                   long long bytesPerBlock, long long kOffset, long long vOffset, int blockTokens,
                   const int* positions, const int* tokenRequest, const int* tables,
                   int tableStride, const int* tiles, int H, float scale, bf16_t* out,
                   const FwTensorMap* kMap, const FwTensorMap* vMap) {
  smemLimit = sharedBytes;
  for (unsigned by = 0; by < (unsigned)K; by++) {
    for (unsigned bx = 0; bx < (unsigned)numTiles; bx++) {
      blockIdx = {bx, by, 0};
      memset(fw_shared, 0xA5, sizeof fw_shared);  // garbage
      mbars.clear();
      blockBar = Bar();
      for (auto& b : warpBar) b = Bar();
      for (auto& b : wgBar) b = Bar();
      for (auto& b : named) b = Bar();
      body = [&]() {
        // the whole key range in one block (the split form, SPLIT = true, is not emulated)
        flash_attention_wgmma<D, STAGES, TMA, false>(q, pool, bytesPerBlock, kOffset, vOffset,
                                                     blockTokens, positions, tokenRequest, tables,
                                                     tableStride, tiles, numTiles, H, K, scale,
                                                     out, kMap, vMap, 0, 1, nullptr, nullptr,
                                                     nullptr);
      };
      static std::vector<Fiber> store(384);
      fibers.clear();
      for (int t = 0; t < 384; t++) {
        Fiber& f = store[t];
        f.stack.resize(256 * 1024);
        f.tid = {(unsigned)t, 0};
        f.done = false;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, trampoline, 0);
        fibers.push_back(&f);
      }
      auto started = std::chrono::steady_clock::now();
      long rounds = 0;
      while (true) {
        bool any = false;
        for (Fiber* f : fibers) {
          if (f->done) continue;
          any = true;
          cur = f;
          swapcontext(&sched, &f->ctx);
        }
        if (!any) break;
        if (++rounds % 100000 == 0 &&
            std::chrono::steady_clock::now() - started > std::chrono::seconds(60)) {
          int waiting = 0;
          for (Fiber* f : fibers) waiting += !f->done;
          fprintf(stderr, "block (%u, %u): %d threads still waiting after 60 s\n", bx, by, waiting);
          fail("deadlock");
        }
      }
      // named barriers and mbarriers left mid-phase
      for (int i = 1; i < 16; i++)
        if (named[i].count) {
          fprintf(stderr, "named barrier %d left with %d arrivals\n", i, named[i].count);
          fail("named barrier arrivals left over");
        }
    }
  }
}

// ------------------------------------------------------------------ the problem
struct Request { int start, n; std::vector<int> table; std::vector<float> q; };
struct Problem {
  int heads, kvHeads, d, blockTokens;
  long long bytesPerBlock, kOffset, vOffset;
  std::vector<bf16_t> pool;  // 16-byte aligned through the vector's allocation (checked)
  std::vector<Request> reqs;
  int group() const { return heads / kvHeads; }
  long long keyIndex(const std::vector<int>& table, int p, int h, int e, long long off) const {
    long long at = table[p / blockTokens] * bytesPerBlock + off +
                   (((long long)h * blockTokens + p % blockTokens) * d + e) * 2;
    return at / 2;
  }
};

static float uniform(std::mt19937_64& r, float size) {
  return (float)((double)(r() >> 11) / 9007199254740992.0 * 2 - 1) * size;
}

static Problem make(int heads, int kvHeads, int d, int blockTokens,
                    std::vector<std::pair<int, int>> startAndN, unsigned seed) {
  Problem p{heads, kvHeads, d, blockTokens};
  long long field = (long long)kvHeads * blockTokens * d * 2;
  p.bytesPerBlock = 2 * 2 * field;
  p.kOffset = 2 * field;
  p.vOffset = p.kOffset + field;
  int blocks = 1;
  for (auto& r : startAndN) blocks += (r.first + r.second + blockTokens - 1) / blockTokens;
  p.pool.assign(blocks * p.bytesPerBlock / 2, 0x7fc0);
  std::vector<int> freeBlocks;
  for (int b = 1; b < blocks; b++) freeBlocks.push_back(b);
  std::mt19937_64 rnd(seed);
  std::shuffle(freeBlocks.begin(), freeBlocks.end(), rnd);
  for (auto& r : startAndN) {
    Request q{r.first, r.second};
    int nb = (r.first + r.second + blockTokens - 1) / blockTokens;
    for (int i = 0; i < nb; i++) {
      q.table.push_back(freeBlocks.back());
      freeBlocks.pop_back();
    }
    for (int pos = 0; pos < r.first + r.second; pos++)
      for (int h = 0; h < kvHeads; h++)
        for (int e = 0; e < d; e++) {
          p.pool[p.keyIndex(q.table, pos, h, e, p.kOffset)] = to_bf16(uniform(rnd, 1));
          p.pool[p.keyIndex(q.table, pos, h, e, p.vOffset)] = to_bf16(uniform(rnd, 1));
        }
    q.q.resize((size_t)r.second * heads * d);
    for (int t = 0; t < r.second; t++)
      for (int h = 0; h < heads; h++) {
        float size = 0.5f + 3.5f * (float)((t * 7 + h * 3) % 5) / 4.f;
        for (int e = 0; e < d; e++) q.q[((size_t)t * heads + h) * d + e] = uniform(rnd, size);
      }
    p.reqs.push_back(q);
  }
  return p;
}

static std::vector<int> cut(const Problem& p, const std::vector<int>& which, std::mt19937_64* rnd) {
  int tileTokens = 128 / p.group();
  std::vector<int> t;
  int row = 0;
  for (int r : which) {
    int n = p.reqs[r].n;
    for (int i = 0; i < n;) {
      int size = rnd ? 1 + (int)((*rnd)() % tileTokens) : tileTokens;
      size = std::min(size, n - i);
      t.push_back(row + i);
      t.push_back(size);
      i += size;
    }
    row += n;
  }
  return t;
}

// CudaCausalLm.tmaTakes: blocks the TMA kernel copies by boxes of whole 1,024-byte patterns
static bool tmaTakes(int blockTokens) {
  return blockTokens > 0 && blockTokens % 8 == 0 && (128 % blockTokens == 0 || blockTokens % 128 == 0);
}

static std::vector<bf16_t> attend(const Problem& p, const std::vector<int>& which,
                                  const std::vector<int>& tiles, bool tma = false) {
  int tokens = 0, stride = 1;
  for (int r : which) {
    tokens += p.reqs[r].n;
    stride = std::max(stride, (int)p.reqs[r].table.size());
  }
  int width = p.heads * p.d;
  std::vector<float> q((size_t)tokens * width);
  std::vector<int> positions(tokens), tokenRequest(tokens), tables(which.size() * stride, 0);
  int row = 0;
  for (size_t i = 0; i < which.size(); i++) {
    const Request& r = p.reqs[which[i]];
    std::copy(r.q.begin(), r.q.end(), q.begin() + (size_t)row * width);
    std::copy(r.table.begin(), r.table.end(), tables.begin() + i * stride);
    for (int t = 0; t < r.n; t++) {
      positions[row + t] = r.start + t;
      tokenRequest[row + t] = (int)i;
    }
    row += r.n;
  }
  std::vector<bf16_t> out((size_t)(tokens + 1) * width, 0x7fc0);
  float scale = (float)(1.0 / std::sqrt((double)p.d));
  int numTiles = (int)tiles.size() / 2;
  if ((uintptr_t)p.pool.data() % 16) fail("pool not aligned");
  const char* pool = (const char*)p.pool.data();
  long long blocks = (long long)p.pool.size() * 2 / p.bytesPerBlock;
  FwTensorMap kMap{pool + p.kOffset,
                   {p.d, p.blockTokens, p.kvHeads, blocks},
                   {p.d * 2LL, (long long)p.blockTokens * p.d * 2, p.bytesPerBlock},
                   {64, std::min(p.blockTokens, 128), 1, 1}};
  FwTensorMap vMap = kMap;
  vMap.base = pool + p.vOffset;
  if (tma && !tmaTakes(p.blockTokens)) fail("the TMA kernel does not take these blocks");
  if (p.d == 128) {
    unsigned bytes = 1024 + 2 * 64 * 128 * 2 + 2 * 3 * 128 * 128 * 2 + 4 * 3 * 8;
    auto run = tma ? launch<128, 3, true> : launch<128, 3, false>;
    run(numTiles, p.kvHeads, bytes, q.data(), pool, p.bytesPerBlock, p.kOffset, p.vOffset,
        p.blockTokens, positions.data(), tokenRequest.data(), tables.data(), stride,
        tiles.data(), p.heads, scale, out.data(), tma ? &kMap : nullptr, tma ? &vMap : nullptr);
  } else {
    unsigned bytes = 1024 + 2 * 64 * 64 * 2 + 2 * 4 * 128 * 64 * 2 + 4 * 4 * 8;
    auto run = tma ? launch<64, 4, true> : launch<64, 4, false>;
    run(numTiles, p.kvHeads, bytes, q.data(), pool, p.bytesPerBlock, p.kOffset, p.vOffset,
        p.blockTokens, positions.data(), tokenRequest.data(), tables.data(), stride,
        tiles.data(), p.heads, scale, out.data(), tma ? &kMap : nullptr, tma ? &vMap : nullptr);
  }
  for (size_t i = (size_t)tokens * width; i < out.size(); i++)
    if (out[i] != 0x7fc0) fail("wrote past the last token");
  out.resize((size_t)tokens * width);
  return out;
}

// float64 reference of request r (alone); mag: mean |v| under the probabilities
static std::vector<double> reference(const Problem& p, const Request& r, std::vector<double>& mag) {
  int d = p.d, width = p.heads * d;
  std::vector<double> out((size_t)r.n * width);
  mag.assign(out.size(), 0);
  double scale = 1.0 / std::sqrt((double)d);
  for (int t = 0; t < r.n; t++)
    for (int h = 0; h < p.heads; h++) {
      int kv = h / p.group(), pos = r.start + t;
      std::vector<double> s(pos + 1);
      double mx = -INFINITY;
      for (int j = 0; j <= pos; j++) {
        double dot = 0;
        for (int e = 0; e < d; e++)
          dot += (double)from_bf16(to_bf16(r.q[((size_t)t * p.heads + h) * d + e])) *
                 from_bf16(p.pool[p.keyIndex(r.table, j, kv, e, p.kOffset)]);
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double l = 0;
      std::vector<double> o(d, 0), m(d, 0);
      for (int j = 0; j <= pos; j++) {
        double w = std::exp(s[j] - mx);
        l += w;
        for (int e = 0; e < d; e++) {
          double x = from_bf16(p.pool[p.keyIndex(r.table, j, kv, e, p.vOffset)]);
          o[e] += w * x;
          m[e] += w * std::fabs(x);
        }
      }
      for (int e = 0; e < d; e++) {
        out[((size_t)t * p.heads + h) * d + e] = o[e] / l;
        mag[((size_t)t * p.heads + h) * d + e] = m[e] / l;
      }
    }
  return out;
}

static int check(const char* label, int d, int heads, int kvHeads, int blockTokens,
                 std::vector<std::pair<int, int>> startAndN) {
  Problem p = make(heads, kvHeads, d, blockTokens, startAndN, 11 + d + heads);
  int width = heads * d;
  std::vector<bf16_t> alone;
  double worst = 0;
  long failures = 0;
  std::vector<int> all;
  for (size_t r = 0; r < p.reqs.size(); r++) {
    all.push_back((int)r);
    std::vector<int> one = {(int)r};
    std::vector<bf16_t> got = attend(p, one, cut(p, one, nullptr));
    std::vector<double> mag;
    std::vector<double> want = reference(p, p.reqs[r], mag);
    for (size_t i = 0; i < got.size(); i++) {
      int keys = p.reqs[r].start + (int)(i / width) + 1;
      double err = std::fabs(from_bf16(got[i]) - want[i]);
      double b = (0x1p-7 + keys * 0x1p-25) * mag[i] + 1e-6;
      if (!(err <= b)) {
        if (failures < 5)
          printf("  request %zu token %zu head %zu dim %zu: got %.6g want %.6g bound %.3g\n", r,
                 i / width, i % width / d, i % d, from_bf16(got[i]), want[i], b);
        failures++;
      }
      worst = std::max(worst, err / b);
    }
    alone.insert(alone.end(), got.begin(), got.end());
  }
  std::vector<bf16_t> batched = attend(p, all, cut(p, all, nullptr));
  std::mt19937_64 rnd(d + heads);
  std::vector<bf16_t> retiled = attend(p, all, cut(p, all, &rnd));
  long bd = 0, td = 0;
  for (size_t i = 0; i < alone.size(); i++) {
    bd += batched[i] != alone[i];
    td += retiled[i] != alone[i];
  }
  printf("%s (d %d, %d heads on %d, blocks of %d): worst error/bound %.3f, %ld past the bound; %ld"
         " differ batched, %ld retiled\n",
         label, d, heads, kvHeads, blockTokens, worst, failures, bd, td);
  // the TMA kernel: the cp.async kernel's bits, alone, batched and retiled
  long tmaDiffer = 0;
  if (tmaTakes(blockTokens)) {
    std::vector<bf16_t> tmaAlone;
    for (size_t r = 0; r < p.reqs.size(); r++) {
      std::vector<int> one = {(int)r};
      std::vector<bf16_t> got = attend(p, one, cut(p, one, nullptr), true);
      tmaAlone.insert(tmaAlone.end(), got.begin(), got.end());
    }
    std::vector<bf16_t> tmaBatched = attend(p, all, cut(p, all, nullptr), true);
    std::mt19937_64 rnd2(d + heads);
    std::vector<bf16_t> tmaRetiled = attend(p, all, cut(p, all, &rnd2), true);
    for (size_t i = 0; i < alone.size(); i++)
      tmaDiffer += (tmaAlone[i] != alone[i]) + (tmaBatched[i] != alone[i]) +
                   (tmaRetiled[i] != alone[i]);
    printf("  by TMA: %ld of %zu outputs differ in bits from cp.async's\n", tmaDiffer,
           3 * alone.size());
  }
  fflush(stdout);
  return failures + bd + td + tmaDiffer > 0;
}

int main(int argc, char** argv) {
  int bad = 0;
  bool quick = argc > 1;
  if (quick && std::string(argv[1]) == "hazard") {
    bad += check("1000 tokens from 0 (8 key tiles)", 128, 4, 1, 16, {{0, 1000}});
    bad += check("1000 tokens from 0, blocks of 256", 128, 4, 1, 256, {{0, 1000}});
    printf(bad ? "EMULATION: FAILURES\n" : "EMULATION: ALL PASSED\n");
    return bad ? 1 : 0;
  }
  for (int d : {128, 64}) {
    bad += check("one key", d, 4, 1, 16, {{0, 1}});
    bad += check("64 rows x 64 keys", d, 1, 1, 16, {{0, 64}});
    bad += check("128 rows, two consumers", d, 4, 1, 16, {{0, 32}});
    bad += check("two key tiles", d, 4, 1, 16, {{100, 32}});
    bad += check("group of 3", d, 3, 1, 12, {{0, 42}});
    if (!quick) {
      bad += check("mixed", d, 8, 2, 16, {{0, 1}, {0, 17}, {0, 300}, {300, 77}, {129, 250}, {700, 1}});
      bad += check("group 1, tiles of 128 tokens", d, 2, 2, 16, {{0, 400}, {50, 3}});
      bad += check("blocks of 8", d, 4, 2, 8, {{0, 5}, {0, 150}, {129, 70}});
      bad += check("blocks of 128", d, 4, 1, 128, {{0, 300}, {200, 9}});
    }
  }
  printf(bad ? "EMULATION: FAILURES\n" : "EMULATION: ALL PASSED\n");
  return bad ? 1 : 0;
}
