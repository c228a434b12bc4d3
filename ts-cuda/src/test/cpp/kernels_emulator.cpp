// Host emulation of the kernels of kernels.cu that the Gemma 3, Jamba and tensor-parallel paths of
// the GPU model use, for checking them on a machine without a GPU: paged_attention (its sliding
// window and soft-capped scores), qkv_rope_store (with and without RoPE, QK-norms and bias),
// rmsnorm_add, silu_mul / gelu_tanh_mul and their bf16 forms, softcap_logits, to_bf16, add_rows.
// Their own source (cut out of kernels.cu with every helper they name by kernels-emulator.sh, into
// kernels_body.inc) runs over a small shim: every thread of a block is a fiber; a shuffle or
// __syncwarp is a rendezvous of the 32 lanes of a warp (every lane writes, then every lane reads;
// lanes at different warp operations, a partial warp or a mask other than the full one fail), and
// __syncthreads one of every thread of the block; a block whose threads all wait fails as a
// deadlock. Blocks and the threads of a block run in a random order; dynamic shared memory starts
// as NaNs with a canary past the launch's size; block 0 of a KV pool is inaccessible, so a read
// of a hole of a block table (or a write there) fails at once.
//
// References and bounds (eps = 2^-24, float32's unit roundoff; gam(k) = k·eps / (1 - k·eps)):
//   float64 references evaluate each kernel's defining formula exactly from its float inputs, and
//     the bounds are worst cases of the float32 arithmetic as a GPU may run it: expf, tanhf,
//     sincosf and rsqrtf within 2 ulp (CUDA's documented maxima, so 4·eps relative), division
//     and square root correctly rounded (NVRTC's defaults), and any multiply-add contracted or not
//     (a fused one only drops a rounding). The host's libm is within those too.
//   float32 references repeat the kernel's float operations in its order (its reduction trees
//     included) with the same device functions as the shim gives, so on the host they must give
//     the same bits; they check indexing, vector paths, stores and reductions exactly. silu's is
//     the expression silu_mul had before the GELU kernels shared its code.
//   paged_attention: a token's output alone and in batches of other requests' tokens (another
//     physical layout of the pool, other table rows and strides, tokens shuffled) must be the same
//     bits, and its bf16 output the f32 output rounded. Its largest error over the largest |value|
//     of the output row is reported, not bounded: no fixed fraction of it is a bound when scores
//     reach ±50 (their float32 rounding alone moves weights by some 1e-5 relative).
// Seeds from the arguments (default 1 to 5). Prints one summary line (EMU_VERBOSE=1: also where
// each bound came closest); exits 1 on any failure, 2 on an emulation failure (a fault, a
// deadlock). Fibers switch by a few lines of x86-64 assembly; elsewhere (or built with
// -DEMU_UCONTEXT) by ucontext, some four times slower.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
#if !defined(__x86_64__) || defined(EMU_UCONTEXT)
#include <ucontext.h>
#endif

// ------------------------------------------------------------------ the shim: CUDA's words
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __restrict__
#define __launch_bounds__(...)

struct Dim3 {
  unsigned x, y, z;
};
struct EmuFiber;
static EmuFiber* emu_cur;  // the thread running now
static Dim3 blockIdx, blockDim, gridDim;
#define threadIdx (emu_cur->tid)

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned int x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
static inline float __uint_as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return u;
}
static inline int __float_as_int(float f) {
  int i;
  memcpy(&i, &f, 4);
  return i;
}
// device math on the host: libm's expf, tanhf, sincosf, fmaxf (and glibc's own __expf, its expf
// under another name); rsqrtf as 1/sqrtf
static inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }

static const char* emu_where = "";  // the launch running, for failure messages

static void emu_fail(const char* what) {
  fprintf(stderr, "EMULATOR FAILURE: %s (in %s)\n", what, emu_where);
  exit(2);
}

// ------------------------------------------------------------------ fibers
static const unsigned EMU_MAX_THREADS = 1024;
static const size_t EMU_STACK = 256 * 1024;

struct EmuFiber {
  Dim3 tid;
  bool done;
  const unsigned* waitOn;  // the generation of the barrier it waits at, or null
  unsigned waitGen;
  const char* waitWhat;
  unsigned char* stack;  // lowest address of the usable stack (a guard page below it)
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
  void* sp;
#else
  ucontext_t ctx;
#endif
};
static EmuFiber emu_fibers[EMU_MAX_THREADS];
static void (*emu_fn)(void*);
static void* emu_arg;
static bool emu_progress;  // a thread arrived at a barrier, passed one or ended during this pass

struct EmuRegion {
  const char* what;
  uintptr_t lo, hi;
};
static std::vector<EmuRegion> emu_regions;  // inaccessible ranges and what touching them means

static void emu_fiber_main();

#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
// switch(save, to): pushes the callee-saved registers, stores the stack pointer at *save, takes
// `to` as the stack pointer and pops that context's registers and return address
extern "C" void emu_switch(void** save, void* to);
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch, @function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch, .-emu_switch\n");
static void* emu_sched_sp;

static void emu_fiber_reset(EmuFiber& f) {
  uintptr_t top = ((uintptr_t)(f.stack + EMU_STACK)) & ~(uintptr_t)15;
  void** sp = (void**)top;
  *--sp = nullptr;                   // emu_fiber_main's return address: it never returns
  *--sp = (void*)&emu_fiber_main;    // where the first switch "returns" to
  for (int i = 0; i < 6; i++) {
    *--sp = nullptr;  // rbp, rbx, r12 .. r15
  }
  f.sp = sp;
}
static void emu_enter(EmuFiber& f) { emu_switch(&emu_sched_sp, f.sp); }
static void emu_yield() { emu_switch(&emu_cur->sp, emu_sched_sp); }
#else
static ucontext_t emu_sched_ctx;
static void emu_fiber_reset(EmuFiber& f) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = EMU_STACK;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, emu_fiber_main, 0);
}
static void emu_enter(EmuFiber& f) { swapcontext(&emu_sched_ctx, &f.ctx); }
static void emu_yield() { swapcontext(&emu_cur->ctx, &emu_sched_ctx); }
#endif

static void emu_fiber_main() {
  emu_fn(emu_arg);
  emu_cur->done = true;
  emu_progress = true;
  emu_yield();
  emu_fail("a finished thread was resumed");
}

static void emu_stacks(unsigned threads) {
  static unsigned made = 0;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (; made < threads; made++) {
    void* p = mmap(nullptr, EMU_STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED || mprotect(p, page, PROT_NONE) != 0) emu_fail("no memory for stacks");
    emu_regions.push_back({"a thread's stack overflowed", (uintptr_t)p, (uintptr_t)p + page});
    emu_fibers[made].stack = (unsigned char*)p + page;
  }
}

// Waits (yielding to the other threads) until *gen is no longer g.
static void emu_wait(const unsigned* gen, unsigned g, const char* what) {
  emu_cur->waitOn = gen;
  emu_cur->waitGen = g;
  emu_cur->waitWhat = what;
  while (*gen == g) emu_yield();
  emu_cur->waitOn = nullptr;
  emu_progress = true;
}

// ------------------------------------------------------------------ warps and barriers
struct EmuWarp {
  unsigned count, gen;
  const void* site;  // where the lanes that arrived so far called from, and what
  int kind;
  unsigned long long slot[2][32];  // by the generation's parity: a lane may read its value only
                                   // after every lane wrote, and the next rendezvous cannot
                                   // complete (nor overwrite) before every lane read
};
static EmuWarp emu_warps[EMU_MAX_THREADS / 32];
static struct {
  unsigned count, gen;
} emu_bar;
static long long emu_shuffles, emu_barriers;

enum { EMU_SHFL = 1, EMU_SHFL_XOR, EMU_SYNCWARP };

static unsigned long long emu_warp_op(int kind, const void* site, unsigned mask,
                                      unsigned long long mine, int src) {
  if (mask != 0xffffffffu) emu_fail("a warp operation with a mask other than the full warp");
  unsigned t = emu_cur->tid.x, w = t / 32, lane = t % 32;
  if ((w + 1) * 32 > blockDim.x) emu_fail("a warp operation in a warp of fewer than 32 threads");
  EmuWarp& s = emu_warps[w];
  if (s.count == 0) {
    s.site = site;
    s.kind = kind;
  } else if (s.site != site || s.kind != kind) {
    emu_fail("the lanes of a warp at different warp operations (divergence)");
  }
  unsigned g = s.gen;
  s.slot[g & 1][lane] = mine;
  emu_progress = true;
  if (++s.count == 32) {
    s.count = 0;
    s.gen++;
    if (kind != EMU_SYNCWARP) emu_shuffles++;
  } else {
    emu_wait(&s.gen, g, kind == EMU_SYNCWARP ? "__syncwarp" : "a shuffle");
  }
  return s.slot[g & 1][src & 31];
}

template <class T>
__attribute__((noinline)) static T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  static_assert(sizeof(T) <= 8, "shuffled value too wide");
  if (width != 32) emu_fail("a shuffle of width other than 32");
  unsigned long long raw = 0;
  memcpy(&raw, &v, sizeof v);
  raw = emu_warp_op(EMU_SHFL, __builtin_return_address(0), mask, raw, src);
  T r;
  memcpy(&r, &raw, sizeof r);
  return r;
}

template <class T>
__attribute__((noinline)) static T __shfl_xor_sync(unsigned mask, T v, int laneMask,
                                                   int width = 32) {
  if (width != 32) emu_fail("a shuffle of width other than 32");
  unsigned long long raw = 0;
  memcpy(&raw, &v, sizeof v);
  raw = emu_warp_op(EMU_SHFL_XOR, __builtin_return_address(0), mask, raw,
                    (int)(emu_cur->tid.x % 32) ^ laneMask);
  T r;
  memcpy(&r, &raw, sizeof r);
  return r;
}

__attribute__((noinline)) static void __syncwarp(unsigned mask = 0xffffffffu) {
  emu_warp_op(EMU_SYNCWARP, __builtin_return_address(0), mask, 0, 0);
}

static void __syncthreads() {
  unsigned g = emu_bar.gen;
  emu_progress = true;
  if (++emu_bar.count == blockDim.x) {
    emu_bar.count = 0;
    emu_bar.gen++;
    emu_barriers++;
  } else {
    emu_wait(&emu_bar.gen, g, "__syncthreads");
  }
}

// ------------------------------------------------------------------ dynamic shared memory
// Each `extern __shared__ T name[]` of the kernels (listed by kernels-emulator.sh) is an array of
// this size; a launch gets the first `shared` bytes filled with NaNs, the rest is a canary.
// (96 KiB: paged_attention_tiled at head size 256 takes up to 94 KiB, which the backend allows
// the launch past the 48 KiB default)
static const size_t EMU_SHARED_BYTES = 96 * 1024;
static const unsigned EMU_SHARED_FILL = 0x7fa5a5a5u, EMU_CANARY = 0x7fc0ffeeu;
static std::vector<unsigned*> emu_shared_regions;
struct EmuSharedRegion {
  explicit EmuSharedRegion(void* p) { emu_shared_regions.push_back((unsigned*)p); }
};
#define EMU_DYNAMIC_SHARED(T, name)                             \
  alignas(16) T name[EMU_SHARED_BYTES / sizeof(T)];             \
  static EmuSharedRegion emu_shared_##name((void*)name);
#include "kernels_shared.inc"

// ------------------------------------------------------------------ the kernels
#include "kernels_body.inc"

// ------------------------------------------------------------------ launching
static std::mt19937_64 rng;

template <class F>
static void emu_call(void* f) {
  (*(F*)f)();
}

// Every block of the grid (in a random order), each as `threads` fibers (in a random order).
template <class F>
static void launch(const char* where, Dim3 grid, unsigned threads, size_t shared, F&& kernel) {
  emu_where = where;
  if (threads == 0 || threads > EMU_MAX_THREADS) emu_fail("block size");
  if (shared > EMU_SHARED_BYTES) emu_fail("dynamic shared memory beyond the emulator's");
  emu_stacks(threads);
  gridDim = grid;
  blockDim = {threads, 1, 1};
  using G = typename std::remove_reference<F>::type;
  emu_fn = &emu_call<G>;
  emu_arg = (void*)&kernel;
  std::vector<Dim3> blocks;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) blocks.push_back({x, y, z});
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<unsigned> order(threads);
  for (unsigned t = 0; t < threads; t++) order[t] = t;
  for (const Dim3& b : blocks) {
    blockIdx = b;
    for (unsigned* r : emu_shared_regions) {
      size_t words = EMU_SHARED_BYTES / 4, used = (shared + 3) / 4;
      for (size_t i = 0; i < words; i++) r[i] = i < used ? EMU_SHARED_FILL : EMU_CANARY;
    }
    std::shuffle(order.begin(), order.end(), rng);
    for (unsigned t = 0; t < threads; t++) {
      EmuFiber& f = emu_fibers[t];
      f.tid = {t, 0, 0};
      f.done = false;
      f.waitOn = nullptr;
      emu_fiber_reset(f);
    }
    for (unsigned w = 0; w < (threads + 31) / 32; w++) emu_warps[w] = EmuWarp();
    emu_bar.count = 0;
    while (true) {
      bool any = false;
      emu_progress = false;
      for (unsigned t : order) {
        EmuFiber& f = emu_fibers[t];
        if (f.done) continue;
        any = true;
        if (f.waitOn && *f.waitOn == f.waitGen) continue;  // would only yield again
        emu_cur = &f;
        emu_enter(f);
      }
      if (!any) break;
      if (!emu_progress) {
        for (unsigned t = 0; t < threads; t++) {
          const EmuFiber& f = emu_fibers[t];
          if (!f.done) {
            fprintf(stderr, "block (%u, %u, %u): thread %u waits at %s\n", b.x, b.y, b.z, t,
                    f.waitWhat);
            break;
          }
        }
        emu_fail("deadlock: a barrier or warp operation that some thread never reaches");
      }
    }
    if (emu_bar.count) emu_fail("a block ended with arrivals at __syncthreads");
    for (unsigned* r : emu_shared_regions)
      for (size_t i = (shared + 3) / 4; i < EMU_SHARED_BYTES / 4; i++)
        if (r[i] != EMU_CANARY) emu_fail("a write past the launch's dynamic shared memory");
  }
}

static void emu_on_fault(int, siginfo_t* info, void*) {
  uintptr_t a = (uintptr_t)info->si_addr;
  const char* what = "outside every buffer, or a misaligned vector access";
  for (const EmuRegion& r : emu_regions)
    if (a >= r.lo && a < r.hi) what = r.what;
  char m[512];
  int n = snprintf(m, sizeof m, "EMULATOR FAILURE: memory fault at %p: %s (in %s)\n",
                   info->si_addr, what, emu_where);
  if (write(2, m, n) < 0) _exit(3);
  _exit(2);
}

static void emu_install_fault_handler() {
  static std::vector<char> alt(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = emu_on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

// A KV pool of `blocks` blocks of `bpb` bytes (a multiple of the page): block 0 inaccessible (the
// tables' holes), and an inaccessible page past the end.
struct Pool {
  unsigned char* base = nullptr;
  size_t mapped = 0;
  long long bpb = 0;
  int blocks = 0;
};
static Pool pool_alloc(long long bpb, int blocks) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (bpb % (long long)page) emu_fail("pool blocks not of whole pages");
  Pool p;
  p.bpb = bpb;
  p.blocks = blocks;
  p.mapped = (size_t)bpb * blocks + page;
  void* m = mmap(nullptr, p.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) emu_fail("no memory for a pool");
  p.base = (unsigned char*)m;
  if (mprotect(p.base, bpb, PROT_NONE) || mprotect(p.base + (size_t)bpb * blocks, page, PROT_NONE))
    emu_fail("mprotect");
  emu_regions.push_back({"block 0 of the pool (a hole of a block table) was touched",
                         (uintptr_t)p.base, (uintptr_t)p.base + bpb});
  emu_regions.push_back({"past the end of the pool", (uintptr_t)p.base + (size_t)bpb * blocks,
                         (uintptr_t)p.base + p.mapped});
  return p;
}
static void pool_free(Pool& p) {
  uintptr_t lo = (uintptr_t)p.base, hi = lo + p.mapped;
  emu_regions.erase(std::remove_if(emu_regions.begin(), emu_regions.end(),
                                   [&](const EmuRegion& r) { return r.lo >= lo && r.hi <= hi; }),
                    emu_regions.end());
  munmap(p.base, p.mapped);
  p.base = nullptr;
}

// ------------------------------------------------------------------ helpers of the checks
static const double EPS = std::ldexp(1.0, -24);
static double gam(double k) { return k * EPS / (1 - k * EPS); }

static int below(int n) { return (int)(rng() % (unsigned long long)n); }
static double unit() { return (double)(rng() >> 11) * std::ldexp(1.0, -53); }
static float uniform(double lo, double hi) { return (float)(lo + (hi - lo) * unit()); }
static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float from_bf16(uint16_t b) { return from_bits((uint32_t)b << 16); }

// bf16 by round to nearest even, computed independently of the kernels' bit trick: the double
// value rounded at bf16's 8 significant bits by nearbyint (ties to even), ±inf past the largest
// bf16 plus half an ulp; a NaN keeps its sign and top bits, made quiet.
static uint16_t ref_bf16(float f) {
  uint32_t u = bits(f);
  if (std::isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  if (std::isinf(f) || f == 0) return (uint16_t)(u >> 16);
  double x = f;
  int e;
  std::frexp(x, &e);                       // |x| in [2^(e-1), 2^e)
  int q = std::max(e - 1, -126) - 7;       // bf16's ulp at that binade (subnormals: 2^-133)
  double r = std::nearbyint(std::ldexp(x, -q));
  r = std::ldexp(r, q);
  if (std::fabs(r) > 3.3895313892515355e38) r = std::copysign(INFINITY, x);
  return (uint16_t)(bits((float)r) >> 16);
}

struct Stat {
  long long checked = 0, failures = 0;
  double worst = 0;  // largest error / bound
  std::string worstAt;
  void add(bool ok, double ratio) {
    checked++;
    if (!ok) failures++;
    if (ratio > worst || std::isnan(ratio)) worst = std::isnan(ratio) ? INFINITY : ratio;
  }
};
static long long totalFailures = 0;

static void report(const std::string& where, const char* what, long long i, double got,
                   double want, double bound) {
  if (++totalFailures <= 12)
    fprintf(stderr, "FAIL %s: %s[%lld] got %.9g want %.9g (error %.3g, bound %.3g)\n",
            where.c_str(), what, i, got, want, std::fabs(got - want), bound);
}
static void report_bits(const std::string& where, const char* what, long long i, uint32_t got,
                        uint32_t want) {
  if (++totalFailures <= 12)
    fprintf(stderr, "FAIL %s: %s[%lld] bits 0x%08x, want 0x%08x\n", where.c_str(), what, i, got,
            want);
}
// |got - want| <= bound (a NaN anywhere fails)
static void within(Stat& s, const std::string& where, const char* what, long long i, double got,
                   double want, double bound) {
  double err = std::fabs(got - want);
  bool ok = err <= bound;
  double before = s.worst;
  s.add(ok, bound > 0 ? err / bound : (err == 0 ? 0 : INFINITY));
  if (s.worst > before && getenv("EMU_VERBOSE")) {
    char m[200];
    snprintf(m, sizeof m, " %s[%lld] got %.9g want %.9g bound %.3g", what, i, got, want, bound);
    s.worstAt = where + m;
  }
  if (!ok) report(where, what, i, got, want, bound);
}
static void same(Stat& s, const std::string& where, const char* what, long long i, uint32_t got,
                 uint32_t want) {
  s.add(got == want, 0);
  if (got != want) report_bits(where, what, i, got, want);
}

static const float NAN_FILL = from_bits(0x7fc0dead);  // memory no kernel may read

// ------------------------------------------------------------------ paged_attention
// A case: requests whose last nq positions are queried, their keys and values in a pool through
// a block table whose rows left of what any of its queries sees are holes (0).
struct AttnReq {
  int start, nq, end;  // queries at positions start .. end - 1
  int firstRow;        // the first table row any query reads; rows before it are holes
  std::vector<int> logical;  // table row -> logical block (0: a hole), ceil(end / bt) rows
  std::vector<float> k, v;   // [end][K][d]
  std::vector<float> q;      // [nq][H][d]
};
struct AttnCase {
  int d, H, K, bt, window;
  float softcap, scale;
  long long field, kOff, vOff, bpb;
  int nLogical;
  std::vector<AttnReq> reqs;
};
struct AttnTotals {
  Stat bound, invariance, bf16, tiled;
  long long cases = 0, tokenHeads = 0, keys = 0, holes = 0, launches = 0, tiles = 0;
  double worstRowRel = 0;  // largest error / largest |value| of its output row
  int seenD[4] = {}, seenG[3] = {}, seenBt[3] = {}, seenW[8] = {}, seenCap[3] = {};
} attn;

static const int ATTN_D[4] = {16, 64, 128, 256}, ATTN_G[3] = {1, 2, 4}, ATTN_BT[3] = {1, 4, 16};
// windows: none, within a chunk of 32 keys, over several chunks, past every context
static const int ATTN_W[8] = {0, 1, 5, 16, 24, 40, 77, 100000};
static const float ATTN_CAP[3] = {0.f, 30.f, 50.f};

static int first_key(const AttnCase& c, int pos) {
  return c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
}

static AttnCase attn_make(int i) {
  AttnCase c;
  c.d = ATTN_D[i % 4];
  int g = ATTN_G[(i / 4) % 3];
  c.bt = ATTN_BT[(i / 12) % 3];
  c.window = ATTN_W[i % 8];
  c.softcap = ATTN_CAP[(i / 2) % 3];
  attn.seenD[i % 4]++;
  attn.seenG[(i / 4) % 3]++;
  attn.seenBt[(i / 12) % 3]++;
  attn.seenW[i % 8]++;
  attn.seenCap[(i / 2) % 3]++;
  c.K = 1 + below(c.d == 256 ? 2 : 3);
  c.H = c.K * g;
  c.scale = (float)(1.0 / std::sqrt((double)c.d));
  c.field = (long long)c.K * c.bt * c.d * 4;
  c.kOff = 4LL * below(64) + (below(2) ? c.field * (1 + below(3)) : 0);  // other layers first
  c.vOff = c.kOff + c.field + 4LL * below(16);
  c.bpb = (c.vOff + c.field + 4LL * below(64) + 4095) / 4096 * 4096;
  int nreq = 1 + below(4);
  c.nLogical = 0;
  for (int r = 0; r < nreq; r++) {
    AttnReq q;
    int kind = below(3);
    q.end = kind == 0 ? 1 + below(40) : kind == 1 ? 40 + below(110) : 150 + below(200);
    q.nq = below(2) ? 1 : 1 + below(std::min(q.end, 5));
    q.start = q.end - q.nq;
    int f0 = first_key(c, q.start);
    q.firstRow = f0 / c.bt;
    int rows = (q.end + c.bt - 1) / c.bt;
    q.logical.assign(rows, 0);
    for (int b = q.firstRow; b < rows; b++) q.logical[b] = ++c.nLogical;
    attn.holes += q.firstRow;
    q.k.assign((size_t)q.end * c.K * c.d, NAN_FILL);
    q.v.assign(q.k.size(), NAN_FILL);
    for (int pos = q.firstRow * c.bt; pos < q.end; pos++)
      for (int e = 0; e < c.K * c.d; e++) {
        q.k[(size_t)pos * c.K * c.d + e] = uniform(-1, 1);
        q.v[(size_t)pos * c.K * c.d + e] = uniform(-1, 1);
      }
    // per (token, head) an amplitude: scores' spread from about 0.1 (flat) to about 50 (one key
    // dominates; soft-capping bites)
    static const double amp[4] = {0.3, 3, 30, 150};
    q.q.resize((size_t)q.nq * c.H * c.d);
    for (int t = 0; t < q.nq; t++)
      for (int h = 0; h < c.H; h++) {
        double a = amp[below(4)];
        for (int e = 0; e < c.d; e++) q.q[((size_t)t * c.H + h) * c.d + e] = uniform(-a, a);
      }
    c.reqs.push_back(q);
  }
  return c;
}

// The pool with logical block b at physical block phys[b]; every byte not a stored key or value
// a NaN.
static Pool attn_pool(const AttnCase& c, const std::vector<int>& phys) {
  Pool p = pool_alloc(c.bpb, c.nLogical + 1);
  float* all = (float*)(p.base + c.bpb);
  for (size_t i = 0; i < (size_t)c.bpb / 4 * c.nLogical; i++) all[i] = NAN_FILL;
  for (const AttnReq& q : c.reqs)
    for (int pos = q.firstRow * c.bt; pos < q.end; pos++) {
      unsigned char* block = p.base + (size_t)phys[q.logical[pos / c.bt]] * c.bpb;
      for (int kv = 0; kv < c.K; kv++) {
        size_t at = ((size_t)kv * c.bt + pos % c.bt) * c.d;
        memcpy((float*)(block + c.kOff) + at, &q.k[((size_t)pos * c.K + kv) * c.d], 4 * c.d);
        memcpy((float*)(block + c.vOff) + at, &q.v[((size_t)pos * c.K + kv) * c.d], 4 * c.d);
      }
    }
  return p;
}

static std::vector<int> permutation(int n) {  // 1..n shuffled, at index 1..n; [0] = 0
  std::vector<int> p(n + 1);
  for (int i = 0; i <= n; i++) p[i] = i;
  std::shuffle(p.begin() + 1, p.end(), rng);
  return p;
}

// A launch's inputs for the tokens `toks` (request, query index), in that order: their queries
// (a row of NaNs past the last), positions and table rows, the requests' tables in the rows
// `rowOf` gives (request -> row, -1: none), `stride` wide.
struct AttnInputs {
  std::vector<float> q;
  std::vector<int> positions, tokenRequest, tables;
};
static AttnInputs attn_inputs(const AttnCase& c, const std::vector<int>& phys,
                              const std::vector<std::pair<int, int>>& toks,
                              const std::vector<int>& rowOf, int rows, int stride) {
  int T = (int)toks.size(), w = c.H * c.d;
  AttnInputs in{std::vector<float>((size_t)(T + 1) * w, NAN_FILL), std::vector<int>(T),
                std::vector<int>(T), std::vector<int>((size_t)rows * stride, 0)};
  for (int r = 0; r < (int)c.reqs.size(); r++) {
    if (rowOf[r] < 0) continue;
    const AttnReq& a = c.reqs[r];
    for (size_t b = 0; b < a.logical.size(); b++)
      in.tables[(size_t)rowOf[r] * stride + b] = a.logical[b] ? phys[a.logical[b]] : 0;
  }
  for (int t = 0; t < T; t++) {
    const AttnReq& a = c.reqs[toks[t].first];
    memcpy(&in.q[(size_t)t * w], &a.q[(size_t)toks[t].second * w], 4 * w);
    in.positions[t] = a.start + toks[t].second;
    in.tokenRequest[t] = rowOf[toks[t].first];
  }
  return in;
}

// One launch over the tokens `toks` (request, query index), in that order; the requests' table
// rows in the order `rowOf` gives (request -> row), `stride` wide. Output [tokens][H][d] as
// floats (or bf16 bits in the low half when bf16).
static std::vector<uint32_t> attn_run(const AttnCase& c, const Pool& pool,
                                      const std::vector<int>& phys,
                                      const std::vector<std::pair<int, int>>& toks,
                                      const std::vector<int>& rowOf, int rows, int stride,
                                      bool bf16, const std::string& where) {
  int T = (int)toks.size(), w = c.H * c.d;
  AttnInputs in = attn_inputs(c, phys, toks, rowOf, rows, stride);
  const uint32_t sentinel = 0x7fbadbad;
  std::vector<float> outF((size_t)(T + 1) * w, from_bits(sentinel));
  std::vector<uint16_t> outB((size_t)(T + 1) * w, 0x7fbb);
  long long items = (long long)T * c.H;
  unsigned grid = (unsigned)((items + ATTN_WARPS - 1) / ATTN_WARPS);
  launch(where.c_str(), {grid, 1, 1}, 32 * ATTN_WARPS, ATTN_WARPS * c.d * 4, [&] {
    paged_attention(in.q.data(), (const char*)pool.base, c.bpb, c.kOff, c.vOff, c.bt,
                    in.positions.data(), in.tokenRequest.data(), in.tables.data(), stride, T, c.H,
                    c.K, c.d, c.scale, c.window, c.softcap, bf16 ? nullptr : outF.data(),
                    bf16 ? outB.data() : nullptr);
  });
  attn.launches++;
  std::vector<uint32_t> out((size_t)T * w);
  for (size_t i = 0; i < out.size(); i++) {
    out[i] = bf16 ? outB[i] : bits(outF[i]);
    if (!bf16 && bits(outF[i]) == sentinel) {
      report_bits(where, "output never written", (long long)i, sentinel, 0);
    }
  }
  for (size_t i = out.size(); i < outF.size(); i++)
    if (bits(outF[i]) != sentinel || outB[i] != 0x7fbb)
      report_bits(where, "written past the last token", (long long)i, bits(outF[i]), sentinel);
  return out;
}

// The same tokens through paged_attention_tiled: each request's queried tokens in tiles of up to
// `tileTokens` consecutive ones (a tile never spans two requests), the tiles in a random order of
// the grid's x. Output as attn_run's, in `toks` order (each request's tokens ascending).
static std::vector<uint32_t> attn_run_tiled(const AttnCase& c, const Pool& pool,
                                            const std::vector<int>& phys,
                                            const std::vector<std::pair<int, int>>& toks,
                                            const std::vector<int>& rowOf, int rows, int stride,
                                            int tileTokens, const std::string& where) {
  int T = (int)toks.size(), w = c.H * c.d, g = c.H / c.K;
  AttnInputs in = attn_inputs(c, phys, toks, rowOf, rows, stride);
  std::vector<int> tiles;
  for (int t = 0; t < T; t++) {
    bool starts = t == 0 || toks[t].first != toks[t - 1].first ||
                  t - tiles[tiles.size() - 2] == tileTokens;
    if (starts) {
      tiles.push_back(t);
      tiles.push_back(0);
    }
    tiles.back()++;
  }
  // the tiles in a random order (the backend puts the longest first; the bits must not care)
  int numTiles = (int)tiles.size() / 2;
  std::vector<int> order(numTiles);
  for (int i = 0; i < numTiles; i++) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int> shuffled(tiles.size());
  for (int i = 0; i < numTiles; i++) {
    shuffled[2 * i] = tiles[2 * order[i]];
    shuffled[2 * i + 1] = tiles[2 * order[i] + 1];
  }
  const uint32_t sentinel = 0x7fbadbad;
  std::vector<float> outF((size_t)(T + 1) * w, from_bits(sentinel));
  int warps = tileTokens * g, span = c.window > 0 ? 32 + tileTokens - 1 : 32;
  size_t shared = (size_t)(warps * c.d + span * (c.d + 1) + span * c.d) * 4;
  launch(where.c_str(), {(unsigned)numTiles, (unsigned)c.K, 1}, 32 * warps, shared, [&] {
    paged_attention_tiled(in.q.data(), (const char*)pool.base, c.bpb, c.kOff, c.vOff, c.bt,
                          in.positions.data(), in.tokenRequest.data(), in.tables.data(), stride,
                          shuffled.data(), c.H, c.K, c.d, c.scale, c.window, c.softcap,
                          outF.data(), nullptr);
  });
  attn.launches++;
  attn.tiles += numTiles;
  std::vector<uint32_t> out((size_t)T * w);
  for (size_t i = 0; i < out.size(); i++) {
    out[i] = bits(outF[i]);
    if (out[i] == sentinel) report_bits(where, "output never written", (long long)i, sentinel, 0);
  }
  for (size_t i = out.size(); i < outF.size(); i++)
    if (bits(outF[i]) != sentinel)
      report_bits(where, "written past the last token", (long long)i, bits(outF[i]), sentinel);
  return out;
}

// The float64 reference of query t of request r, head h, with its bound per dimension:
//   score s_j = Σ_e qw_e·k_je with qw = fl(q·scale), the kernel's float query (soft-capped:
//   c·tanh(s_j / c)), then softmax over the keys first .. pos and o = Σ_j w_j·v_j.
// Bound: the kernel's result is N/L·(1+θ)², N = Z·Σ w_j v_j (1+φ_j), L = Z·Σ w_j (1+ψ_j), so
//   |ô - o| <= [Σ_j w_j (|φ_j| |v_j| + |ψ_j| |o|)] / (1 - max|ψ|) · (1 + gam(2)) + gam(2)·|o|.
// With δ_j = gam(d)·Σ_e |qw_e k_je| (the dot in float32, fused or not; soft-capping adds
// 6·eps·|s_j|, tanh passing the dot's error through at a slope <= 1, plus its own 4·eps, the
// division's and the product's), the exponent's arguments s_j - m rounded (its own and the later
// chunks' corrections: 2·eps·(M - s_j) in all) and each expf within 4·eps (its own and one per
// later chunk, C_j):
//   |φ_j| <= e^(δ_j + 2eps (M - s_j + 2δmax)) (1 + 4eps)^(1 + C_j) (1 + gam(n + C + 1)) - 1
//   (the numerator: a product and up to n additions per key, a correction per chunk), and |ψ_j|
//   the same with gam(5 + 2C) (a butterfly of 5 levels, then a product and an addition per chunk).
// Weights that underflow to 0 in float32 (below e^-87) count with an absolute 1e-30.
static void attn_reference(const AttnCase& c, const AttnReq& a, int t, int h, double* o,
                           double* bound) {
  int d = c.d, pos = a.start + t, first = first_key(c, pos), n = pos - first + 1;
  int kv = h / (c.H / c.K), chunks = (n + 31) / 32;
  std::vector<double> s(n), delta(n);
  std::vector<float> qw(d);
  for (int e = 0; e < d; e++) qw[e] = a.q[((size_t)t * c.H + h) * d + e] * c.scale;
  double M = -INFINITY, dmax = 0;
  for (int j = 0; j < n; j++) {
    const float* k = &a.k[((size_t)(first + j) * c.K + kv) * d];
    double dot = 0, mag = 0;
    for (int e = 0; e < d; e++) {
      dot += (double)qw[e] * k[e];
      mag += std::fabs((double)qw[e] * k[e]);
    }
    delta[j] = gam(d) * mag;
    if (c.softcap > 0) {
      dot = c.softcap * std::tanh(dot / c.softcap);
      delta[j] += 6.01 * EPS * std::fabs(dot);
    }
    s[j] = dot;
    M = std::max(M, dot);
    dmax = std::max(dmax, delta[j]);
  }
  std::vector<double> w(n), phi(n), psi(n);
  double L = 0, psiMax = 0;
  for (int j = 0; j < n; j++) {
    w[j] = std::exp(s[j] - M);
    L += w[j];
  }
  for (int j = 0; j < n; j++) {
    w[j] /= L;
    int later = chunks - 1 - j / 32;
    double e = std::exp(delta[j] + 2 * EPS * (M - s[j] + 2 * dmax)) *
               std::pow(1 + 4 * EPS, 1 + later);
    phi[j] = e * (1 + gam(n + chunks + 1)) - 1;
    psi[j] = e * (1 + gam(5 + 2 * chunks)) - 1;
    psiMax = std::max(psiMax, psi[j]);
  }
  for (int i = 0; i < d; i++) {
    double sum = 0;
    for (int j = 0; j < n; j++) sum += w[j] * a.v[((size_t)(first + j) * c.K + kv) * d + i];
    o[i] = sum;
    double b = 0;
    for (int j = 0; j < n; j++)
      b += w[j] * (phi[j] * std::fabs(a.v[((size_t)(first + j) * c.K + kv) * d + i]) +
                   psi[j] * std::fabs(sum));
    bound[i] = b / (1 - psiMax) * (1 + gam(2)) + gam(2) * std::fabs(sum) + 1e-30;
  }
}

static void attn_case(int seed, int i) {
  AttnCase c = attn_make(i);
  char label[160];
  snprintf(label, sizeof label,
           "paged_attention seed %d case %d (d %d, %d heads on %d, blocks of %d, window %d, "
           "softcap %g)",
           seed, i, c.d, c.H, c.K, c.bt, c.window, c.softcap);
  std::string where = label;
  int R = (int)c.reqs.size(), w = c.H * c.d;
  attn.cases++;
  // alone: each token its own launch, its request's row the only one, pool A
  std::vector<int> physA = permutation(c.nLogical), physB = permutation(c.nLogical);
  Pool poolA = attn_pool(c, physA);
  std::vector<std::pair<int, int>> all;
  std::vector<std::vector<uint32_t>> alone(R);
  for (int r = 0; r < R; r++) {
    const AttnReq& a = c.reqs[r];
    std::vector<int> rowOf(R, -1);
    rowOf[r] = 0;
    for (int t = 0; t < a.nq; t++) {
      all.push_back({r, t});
      std::vector<uint32_t> got =
          attn_run(c, poolA, physA, {{r, t}}, rowOf, 1, (int)a.logical.size() + below(3), false,
                   where + " alone");
      alone[r].insert(alone[r].end(), got.begin(), got.end());
      std::vector<double> o(c.d), bound(c.d);
      for (int h = 0; h < c.H; h++) {
        attn_reference(c, a, t, h, o.data(), bound.data());
        double rowMax = 0, rowErr = 0;
        for (int e = 0; e < c.d; e++) {
          double g = from_bits(got[(size_t)h * c.d + e]);
          within(attn.bound, where + " request " + std::to_string(r) + " query " +
                                 std::to_string(t) + " head " + std::to_string(h),
                 "out", e, g, o[e], bound[e]);
          rowMax = std::max(rowMax, std::fabs(o[e]));
          rowErr = std::max(rowErr, std::fabs(g - o[e]));
        }
        if (rowMax > 0 && rowErr / rowMax > attn.worstRowRel) {
          attn.worstRowRel = rowErr / rowMax;
          if (getenv("EMU_VERBOSE"))
            printf("row err/max %.3g at %s request %d query %d head %d (err %.3g, max %.3g)\n",
                   rowErr / rowMax, label, r, t, h, rowErr, rowMax);
        }
        attn.tokenHeads++;
        attn.keys += a.start + t - first_key(c, a.start + t) + 1;
      }
    }
  }
  pool_free(poolA);
  // batched: every token in a random order, the rows in a random order and wider, pool B
  Pool poolB = attn_pool(c, physB);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int> rowOf(R);
  int rows = R + below(2), stride = 0;
  std::vector<int> rowPerm(rows);
  for (int k = 0; k < rows; k++) rowPerm[k] = k;
  std::shuffle(rowPerm.begin(), rowPerm.end(), rng);
  for (int r = 0; r < R; r++) {
    rowOf[r] = rowPerm[r];
    stride = std::max(stride, (int)c.reqs[r].logical.size());
  }
  stride += below(3);
  std::vector<uint32_t> batched =
      attn_run(c, poolB, physB, all, rowOf, rows, stride, false, where + " batched");
  std::vector<uint32_t> batchedBf16 =
      attn_run(c, poolB, physB, all, rowOf, rows, stride, true, where + " batched bf16");
  // tiled: each request's tokens in order, in tiles of up to the backend's tile size
  std::vector<std::pair<int, int>> inOrder;
  for (int r = 0; r < R; r++)
    for (int t = 0; t < c.reqs[r].nq; t++) inOrder.push_back({r, t});
  int g = c.H / c.K, tileTokens = 1 + below(std::max(1, std::min(8, 16 / g)));
  std::vector<uint32_t> tiled = attn_run_tiled(c, poolB, physB, inOrder, rowOf, rows, stride,
                                               tileTokens, where + " tiled");
  for (size_t k = 0; k < inOrder.size(); k++) {
    int r = inOrder[k].first, t = inOrder[k].second;
    for (int e = 0; e < w; e++)
      same(attn.tiled, where + " tiled (" + std::to_string(tileTokens) + " a tile) vs alone, request " +
                           std::to_string(r) + " query " + std::to_string(t),
           "out", e, tiled[k * w + e], alone[r][(size_t)t * w + e]);
  }
  pool_free(poolB);
  for (size_t k = 0; k < all.size(); k++) {
    int r = all[k].first, t = all[k].second;
    for (int e = 0; e < w; e++) {
      uint32_t b = batched[k * w + e], one = alone[r][(size_t)t * w + e];
      same(attn.invariance, where + " batched vs alone, request " + std::to_string(r) +
                                " query " + std::to_string(t),
           "out", e, b, one);
      same(attn.bf16, where + " bf16 output vs f32 output", "out", (long long)(k * w + e),
           batchedBf16[k * w + e], ref_bf16(from_bits(b)));
    }
  }
}

// ------------------------------------------------------------------ qkv_rope_store
struct QkvTotals {
  Stat exact, bound;
  long long cases = 0, launches = 0, stores = 0, skipped = 0;
  int seenD[4] = {}, seenRope[3] = {}, seenNorm = 0, seenBias = 0, seenBf16 = 0, seenG[3] = {};
} qkv;

// invFreq[i] = base^(-2i/d) / factor: a local (10,000) and a scaled global (10^6 / 8) table
static std::vector<float> inv_freq(int d, double base, double factor) {
  std::vector<float> f(d / 2);
  for (int i = 0; i < d / 2; i++) f[i] = (float)(std::pow(base, -2.0 * i / d) / factor);
  return f;
}

// block_sum's tree over `threads` values (the first `n` given, the rest 0), in float32
static float tree_sum(const std::vector<float>& v, unsigned threads) {
  std::vector<float> s(threads, 0.f);
  for (size_t i = 0; i < v.size(); i++) s[i] = v[i];
  for (unsigned h = threads / 2; h > 0; h >>= 1)
    for (unsigned t = 0; t < h; t++) s[t] += s[t + h];
  return s[0];
}

static void qkv_case(int seed, int i) {
  static const int D[4] = {16, 64, 128, 256};
  int d = D[i % 4], half = d / 2, g = ATTN_G[(i / 4) % 3];
  int rope = (i / 2) % 3;  // none, local table, global table
  bool norms = i % 5 < 3, hasBias = below(2), kvBf16 = below(2);
  bool qn = norms && below(4) != 0, kn = norms && below(4) != 0;
  int K = 1 + below(3), H = K * g, bt = ATTN_BT[below(3)];
  unsigned formula = 1;
  while (formula * 2 <= (unsigned)std::max(32, half - 1) * 2) formula *= 2;
  unsigned threads = below(3) == 0 ? (unsigned)half : below(2) ? formula : 2 * formula;
  qkv.cases++;
  qkv.seenD[i % 4]++;
  qkv.seenG[(i / 4) % 3]++;
  qkv.seenRope[rope]++;
  qkv.seenNorm += qn || kn;
  qkv.seenBias += hasBias;
  qkv.seenBf16 += kvBf16;
  char label[200];
  snprintf(label, sizeof label,
           "qkv_rope_store seed %d case %d (d %d, %d heads on %d, rope %d, qnorm %d, knorm %d, "
           "bias %d, bf16 %d, %u threads, blocks of %d)",
           seed, i, d, H, K, rope, qn, kn, (int)hasBias, (int)kvBf16, threads, bt);
  std::string where = label;
  std::vector<float> freq = rope == 1 ? inv_freq(d, 1e4, 1) : inv_freq(d, 1e6, 8);
  const float* invFreq = rope ? freq.data() : nullptr;
  int width = (H + 2 * K) * d;
  // requests: consecutive positions from a random start; tables with some entries 0
  int R = 1 + below(3), T = 0;
  std::vector<int> positions, tokenRequest;
  std::vector<std::vector<int>> tableRows(R);
  int nBlocks = 0;
  for (int r = 0; r < R; r++) {
    int n = 1 + below(6), start = below(3) ? below(300) : below(4000);
    int rows = (start + n + bt - 1) / bt;
    tableRows[r].assign(rows + below(2), 0);
    for (int b = start / bt; b < rows; b++) tableRows[r][b] = below(5) ? ++nBlocks : 0;
    for (int k = 0; k < n; k++) {
      positions.push_back(start + k);
      tokenRequest.push_back(r);
      T++;
    }
  }
  std::vector<int> phys = permutation(nBlocks);
  int stride = 0;
  for (auto& row : tableRows) stride = std::max(stride, (int)row.size());
  std::vector<int> tables((size_t)R * stride, 0);
  for (int r = 0; r < R; r++)
    for (size_t b = 0; b < tableRows[r].size(); b++)
      tables[(size_t)r * stride + b] = phys[tableRows[r][b]];
  // data: each head's values at its own magnitude
  std::vector<float> x((size_t)T * width), bias, qnorm, knorm;
  for (int t = 0; t < T; t++)
    for (int hd = 0; hd < H + 2 * K; hd++) {
      double a = std::ldexp(1.0, below(16) - 6);
      for (int e = 0; e < d; e++) x[(size_t)t * width + hd * d + e] = uniform(-a, a);
    }
  if (hasBias) {
    bias.resize(width);
    for (auto& b : bias) b = uniform(-0.5, 0.5);
  }
  if (qn) {
    qnorm.resize(d);
    for (auto& v : qnorm) v = uniform(-2, 2);
  }
  if (kn) {
    knorm.resize(d);
    for (auto& v : knorm) v = uniform(-2, 2);
  }
  float eps = 1e-6f;
  int elt = kvBf16 ? 2 : 4;
  long long field = (long long)K * bt * d * elt;
  long long kOff = (long long)elt * below(32) + (below(2) ? field * (1 + below(2)) : 0);
  long long vOff = kOff + field + (long long)elt * below(8);
  long long bpb = (vOff + field + 4095) / 4096 * 4096;
  Pool pool = pool_alloc(bpb, nBlocks + 1);
  unsigned char* blocksStart = pool.base + bpb;
  size_t poolBytes = (size_t)bpb * nBlocks;
  for (size_t k = 0; k < poolBytes; k++) blocksStart[k] = (unsigned char)rng();
  std::vector<unsigned char> expected(blocksStart, blocksStart + poolBytes);
  std::vector<float> qOut((size_t)T * H * d + d, NAN_FILL);
  launch(where.c_str(), {(unsigned)T, (unsigned)(H + K), 1}, threads, threads * 4, [&] {
    qkv_rope_store(x.data(), hasBias ? bias.data() : nullptr, qn ? qnorm.data() : nullptr,
                   kn ? knorm.data() : nullptr, eps, invFreq, positions.data(),
                   tokenRequest.data(), tables.data(), stride, H, K, d, qOut.data(),
                   (char*)pool.base, bpb, kOff, vOff, bt, kvBf16 ? 1 : 0);
  });
  qkv.launches++;
  // the references, head by head
  for (int t = 0; t < T; t++) {
    int p = positions[t];
    for (int head = 0; head < H + K; head++) {
      bool isQ = head < H;
      int col = head * d;
      const std::vector<float>& norm = isQ ? qnorm : knorm;
      // float32: the kernel's operations in its order
      std::vector<float> a(half), b(half), sq(half), ra(half), rb(half);
      for (int k = 0; k < half; k++) {
        a[k] = x[(size_t)t * width + col + k];
        b[k] = x[(size_t)t * width + col + k + half];
        if (hasBias) {
          a[k] += bias[col + k];
          b[k] += bias[col + k + half];
        }
        sq[k] = a[k] * a[k] + b[k] * b[k];
      }
      if (!norm.empty()) {
        float inv = rsqrtf(tree_sum(sq, threads) / (float)d + eps);
        for (int k = 0; k < half; k++) {
          a[k] = norm[k] * (a[k] * inv);
          b[k] = norm[k + half] * (b[k] * inv);
        }
      }
      for (int k = 0; k < half; k++) {
        ra[k] = a[k];
        rb[k] = b[k];
        if (invFreq) {
          float s, c;
          sincosf((float)p * invFreq[k], &s, &c);
          ra[k] = a[k] * c - b[k] * s;
          rb[k] = b[k] * c + a[k] * s;
        }
      }
      // float64: the formula, exactly from the float inputs and the kernel's float angle
      std::vector<double> a0(half), b0(half);
      double ss = 0;
      for (int k = 0; k < half; k++) {
        a0[k] = (double)x[(size_t)t * width + col + k] + (hasBias ? bias[col + k] : 0.f);
        b0[k] = (double)x[(size_t)t * width + col + k + half] +
                (hasBias ? bias[col + k + half] : 0.f);
        ss += a0[k] * a0[k] + b0[k] * b0[k];
      }
      // relative error of the normalized pair: the bias's addition, then (with the norm) the
      // sum of squares in a tree of log2(threads) levels over leaves of 3 roundings and the
      // inputs' 2, the division and eps's addition, halved by the square root, rsqrtf's 2 ulp,
      // and the two products
      double relN = EPS;
      if (!norm.empty()) {
        int levels = 0;
        while ((1u << levels) < threads) levels++;
        relN = 0.5 * gam(levels + 7) + 7 * EPS;
        double inv = 1 / std::sqrt(ss / d + (double)eps);
        for (int k = 0; k < half; k++) {
          a0[k] = norm[k] * a0[k] * inv;
          b0[k] = norm[k + half] * b0[k] * inv;
        }
      }
      std::vector<double> wantA(half), wantB(half), boundA(half), boundB(half);
      for (int k = 0; k < half; k++) {
        if (invFreq) {
          double th = (float)p * invFreq[k], c = std::cos(th), s = std::sin(th);
          wantA[k] = a0[k] * c - b0[k] * s;
          wantB[k] = b0[k] * c + a0[k] * s;
          // sincosf within 4·eps relative, two products and a difference
          double m = std::fabs(a0[k] * c) + std::fabs(b0[k] * s);
          boundA[k] = ((relN + 6 * EPS) * m + EPS * std::fabs(wantA[k])) * 1.01;
          m = std::fabs(b0[k] * c) + std::fabs(a0[k] * s);
          boundB[k] = ((relN + 6 * EPS) * m + EPS * std::fabs(wantB[k])) * 1.01;
        } else {
          wantA[k] = a0[k];
          wantB[k] = b0[k];
          boundA[k] = relN * std::fabs(a0[k]) * 1.01;
          boundB[k] = relN * std::fabs(b0[k]) * 1.01;
        }
      }
      std::string at = where + " token " + std::to_string(t) + " head " + std::to_string(head);
      if (isQ) {
        float* q = &qOut[(size_t)t * H * d + head * d];
        for (int k = 0; k < half; k++) {
          same(qkv.exact, at, "q", k, bits(q[k]), bits(ra[k]));
          same(qkv.exact, at, "q", k + half, bits(q[k + half]), bits(rb[k]));
          within(qkv.bound, at, "q (float64)", k, q[k], wantA[k], boundA[k]);
          within(qkv.bound, at, "q (float64)", k + half, q[k + half], wantB[k], boundB[k]);
        }
        continue;
      }
      int kvHead = head - H;
      int block = tables[(size_t)tokenRequest[t] * stride + p / bt];
      if (block == 0) {
        qkv.skipped++;
        continue;
      }
      qkv.stores++;
      int vcol = (H + K) * d + kvHead * d;
      size_t base = (size_t)(block - 1) * bpb;
      size_t fieldAt = (((size_t)kvHead * bt + p % bt) * d) * elt;
      for (int k = 0; k < d; k++) {
        float kv = k < half ? ra[k] : rb[k - half];
        float vv = x[(size_t)t * width + vcol + k];
        if (hasBias) vv += bias[vcol + k];
        double want = k < half ? wantA[k] : wantB[k - half];
        double bound = k < half ? boundA[k] : boundB[k - half];
        unsigned char* kDst = &expected[base + kOff + fieldAt + (size_t)k * elt];
        unsigned char* vDst = &expected[base + vOff + fieldAt + (size_t)k * elt];
        const unsigned char* kGot = blocksStart + base + kOff + fieldAt + (size_t)k * elt;
        double got;
        if (kvBf16) {
          uint16_t kb = ref_bf16(kv), vb = ref_bf16(vv);
          memcpy(kDst, &kb, 2);
          memcpy(vDst, &vb, 2);
          uint16_t gb;
          memcpy(&gb, kGot, 2);
          got = from_bf16(gb);
          bound += std::ldexp(std::fabs(got), -8);  // bf16's rounding: half an ulp <= 2^-8·|x|
        } else {
          memcpy(kDst, &kv, 4);
          memcpy(vDst, &vv, 4);
          float gf;
          memcpy(&gf, kGot, 4);
          got = gf;
        }
        within(qkv.bound, at, "k (float64)", k, got, want, bound);
      }
    }
  }
  // the whole pool: the stores above and nothing else
  for (size_t k = 0; k < poolBytes; k++)
    if (blocksStart[k] != expected[k]) {
      same(qkv.exact, where, "pool byte", (long long)k, blocksStart[k], expected[k]);
    }
  qkv.exact.checked += (long long)poolBytes;
  for (size_t k = (size_t)T * H * d; k < qOut.size(); k++)
    if (bits(qOut[k]) != bits(NAN_FILL)) same(qkv.exact, where, "past q_out", (long long)k, 1, 0);
  pool_free(pool);
}

// ------------------------------------------------------------------ rmsnorm_add
struct Totals {
  Stat exact, bound;
  long long cases = 0, values = 0;
};
static Totals normAdd, gated, capped, bf16Round, addRows;
static int gatedSeen[2][2][2] = {};  // [bf16 input][I % 4 == 0][gelu]

static void rmsnorm_add_case(int seed, int i) {
  static const int N[9] = {1, 7, 32, 100, 640, 1152, 2560, 3001, 4096};
  static const unsigned B[5] = {32, 64, 128, 256, 1024};
  int n = N[i % 9];
  unsigned threads = B[(i / 9 + i) % 5];
  int rows = 1 + below(4);
  size_t shared = below(2) ? threads / 32 * 4 : threads * 4;
  float eps = below(2) ? 1e-6f : 1e-5f;
  normAdd.cases++;
  std::vector<float> y((size_t)rows * n), w(n), x((size_t)(rows + 1) * n);
  for (int r = 0; r < rows; r++) {
    double a = std::ldexp(1.0, below(24) - 12);
    for (int k = 0; k < n; k++) y[(size_t)r * n + k] = uniform(-a, a);
  }
  for (auto& v : w) v = uniform(-1, 3);
  for (auto& v : x) v = uniform(-8, 8);
  std::vector<float> y0 = y, w0 = w, x0 = x;
  char label[120];
  snprintf(label, sizeof label, "rmsnorm_add seed %d case %d (n %d, %u threads, %d rows)", seed, i,
           n, threads, rows);
  std::string where = label;
  launch(label, {(unsigned)rows, 1, 1}, threads, shared,
         [&] { rmsnorm_add(y.data(), w.data(), x.data(), n, eps); });
  int warps = threads / 32;
  int perThread = (n + threads - 1) / threads;
  for (int r = 0; r < rows; r++) {
    const float* in = &y0[(size_t)r * n];
    // float32: per thread in index order, butterflies within warps, the warps in order
    std::vector<float> part(threads, 0.f);
    for (int k = 0; k < n; k++) part[k % threads] += in[k] * in[k];
    for (unsigned o = 16; o > 0; o >>= 1) {
      std::vector<float> next(threads);
      for (unsigned l = 0; l < threads; l++) next[l] = part[l] + part[l ^ o];
      part = next;
    }
    float total = part[0];
    for (int k = 1; k < warps; k++) total += part[32 * k];
    float inv = rsqrtf(total / (float)n + eps);
    // float64; bound: the sum of squares' relative error (a product and up to perThread
    // additions per thread, 5 butterfly levels, warps - 1 additions) with the division and
    // eps's addition, halved by the square root, rsqrtf's 2 ulp, two products, the addition
    double ss = 0;
    for (int k = 0; k < n; k++) ss += (double)in[k] * in[k];
    double inv64 = 1 / std::sqrt(ss / n + (double)eps);
    double relInv = 0.5 * gam(perThread + 5 + warps + 2) + 4 * EPS;
    for (int k = 0; k < n; k++) {
      size_t at = (size_t)r * n + k;
      float want32 = x0[at] + w0[k] * (in[k] * inv);
      same(normAdd.exact, where, "x", (long long)at, bits(x[at]), bits(want32));
      double term = (double)w0[k] * in[k] * inv64, want = x0[at] + term;
      double bound = ((relInv + 2 * EPS) * std::fabs(term) + EPS * std::fabs(want)) * 1.01;
      within(normAdd.bound, where, "x (float64)", (long long)at, x[at], want, bound);
      normAdd.values++;
    }
  }
  for (size_t k = (size_t)rows * n; k < x.size(); k++)
    same(normAdd.exact, where, "x past the rows", (long long)k, bits(x[k]), bits(x0[k]));
  for (size_t k = 0; k < y.size(); k++)
    same(normAdd.exact, where, "y (input)", (long long)k, bits(y[k]), bits(y0[k]));
}

// ------------------------------------------------------------------ gated activations
// float32 references: silu_mul's expression before it shared gated_mul, and the CPU model's GELU
static float silu_mul_before(float g, float u) { return g / (1.f + expf(-g)) * u; }
static float gelu_mul_cpu(float g, float u) {
  float inner = 0.7978845608028654f * (g + 0.044715f * (g * g * g));
  return 0.5f * g * (1.f + tanhf(inner)) * u;
}

// float64 values and bounds, the constants as the kernel's floats:
//   silu: g·u / (1 + e^-g); expf's 4·eps, the addition (no cancellation: both positive), the
//     division and the product: 7·eps relative; results that underflow: 2^-120·(|u| + 1).
//   GELU: z = β(g + κg³) has g and κg³ of one sign, so 5 roundings relative; tanh passes a
//     relative error of z at most as a relative one (x·sech²x <= tanh x), tanhf its 4·eps, then
//     1 + t (an absolute eps·2, cancelling near t = -1: the bound is relative to |0.5·g·u|, not
//     to the result), and two products: 16·eps·|0.5·g·u|.
static void gated_reference(bool gelu, float g, float u, double* want, double* bound) {
  double G = g, U = u;
  if (!gelu) {
    *want = G * U / (1 + std::exp(-G));
    *bound = 8 * EPS * std::fabs(*want) + std::ldexp(std::fabs(U) + 1, -120);
    return;
  }
  double beta = 0.7978845608028654f, kappa = 0.044715f;
  double z = beta * (G + kappa * G * G * G);
  *want = 0.5 * G * (1 + std::tanh(z)) * U;
  *bound = 16 * EPS * std::fabs(0.5 * G * U) + std::ldexp(1.0, -140);
}

static float gate_value() {
  switch (below(12)) {
    case 0: return uniform(-120, 120);  // expf's overflow and underflow
    case 1: return uniform(-1e-3, 1e-3);
    case 2: return 0.f;
    default: return uniform(-9, 9);
  }
}

static void gated_case(int seed, int i) {
  static const int I[12] = {1, 3, 4, 6, 8, 100, 1020, 1024, 1030, 2048, 2051, 4100};
  int inter = I[i % 12];
  bool gelu = (i / 12) % 2, bf16In = (i / 24) % 2, bf16Out = bf16In || below(2);
  int T = 1 + below(3);
  gated.cases++;
  gatedSeen[bf16In][inter % 4 == 0][gelu]++;
  char label[160];
  snprintf(label, sizeof label, "%s%s seed %d case %d (I %d, %d rows, %s output)",
           gelu ? "gelu_tanh_mul" : "silu_mul", bf16In ? "_bf16" : "", seed, i, inter, T,
           bf16Out ? "bf16" : "f32");
  std::string where = label;
  size_t n = (size_t)T * 2 * inter;
  std::vector<float> gu(n);
  std::vector<uint16_t> guB(n);
  for (int t = 0; t < T; t++)
    for (int k = 0; k < inter; k++) {
      gu[(size_t)t * 2 * inter + k] = gate_value();
      gu[(size_t)t * 2 * inter + inter + k] = uniform(-4, 4);
    }
  if (bf16In)
    for (size_t k = 0; k < n; k++) {
      guB[k] = ref_bf16(gu[k]);
      gu[k] = from_bf16(guB[k]);  // the values the kernel reads
    }
  std::vector<float> gu0 = gu;
  size_t outN = (size_t)T * inter;
  std::vector<float> outF(outN + 8, NAN_FILL);
  std::vector<uint16_t> outB(outN + 8, 0x7fbb);
  Dim3 grid = {(unsigned)T, (unsigned)((inter + SILU_SPAN - 1) / SILU_SPAN), 1};
  if (((uintptr_t)gu.data() | (uintptr_t)guB.data() | (uintptr_t)outF.data() |
       (uintptr_t)outB.data()) % 16)
    emu_fail("buffers not 16-byte aligned");
  launch(label, grid, SILU_SPAN / 4, 0, [&] {
    if (bf16In) {
      (gelu ? gelu_tanh_mul_bf16 : silu_mul_bf16)(guB.data(), inter, outB.data());
    } else {
      (gelu ? gelu_tanh_mul : silu_mul)(gu.data(), inter, bf16Out ? nullptr : outF.data(),
                                        bf16Out ? outB.data() : nullptr);
    }
  });
  for (int t = 0; t < T; t++)
    for (int k = 0; k < inter; k++) {
      float g = gu0[(size_t)t * 2 * inter + k], u = gu0[(size_t)t * 2 * inter + inter + k];
      float want32 = gelu ? gelu_mul_cpu(g, u) : silu_mul_before(g, u);
      size_t at = (size_t)t * inter + k;
      double got = bf16Out ? from_bf16(outB[at]) : outF[at], want, bound;
      if (bf16Out) {
        same(gated.exact, where, "out", (long long)at, outB[at], ref_bf16(want32));
      } else {
        same(gated.exact, where, "out", (long long)at, bits(outF[at]), bits(want32));
      }
      gated_reference(gelu, g, u, &want, &bound);
      if (bf16Out) bound += std::ldexp(std::fabs(got), -8);
      within(gated.bound, where, "out (float64)", (long long)at, got, want, bound * 1.01);
      gated.values++;
    }
  for (size_t k = outN; k < outN + 8; k++)
    if (bits(outF[k]) != bits(NAN_FILL) || outB[k] != 0x7fbb)
      same(gated.exact, where, "past the output", (long long)k, 1, 0);
  for (size_t k = 0; k < n && !bf16In; k++)
    same(gated.exact, where, "gu (input)", (long long)k, bits(gu[k]), bits(gu0[k]));
}

// ------------------------------------------------------------------ the elementwise rest
static void softcap_case(int seed, int i) {
  long long n = 1 + below(i % 2 ? 5000 : 300);
  float cap = i % 3 == 0 ? 30.f : i % 3 == 1 ? 50.f : 15.f;
  capped.cases++;
  std::vector<float> y(n + 8, NAN_FILL);
  for (long long k = 0; k < n; k++)
    y[k] = below(10) == 0 ? uniform(-1e5, 1e5) : below(10) == 0 ? uniform(-1e-3, 1e-3)
                                                                : uniform(-200, 200);
  std::vector<float> y0 = y;
  char label[100];
  snprintf(label, sizeof label, "softcap_logits seed %d case %d (n %lld, cap %g)", seed, i, n, cap);
  launch(label, {(unsigned)((n + 255) / 256), 1, 1}, 256, 0,
         [&] { softcap_logits(y.data(), n, cap); });
  // float64: cap·tanh(y / cap); bound 6·eps relative: the division's eps passed through tanh at
  // most as a relative error, tanhf's 4·eps, the product's
  for (long long k = 0; k < n; k++) {
    same(capped.exact, label, "y", k, bits(y[k]), bits(cap * tanhf(y0[k] / cap)));
    double want = cap * std::tanh((double)y0[k] / cap);
    within(capped.bound, label, "y (float64)", k, y[k], want,
           6.01 * EPS * std::fabs(want) + std::ldexp(1.0, -149));
    capped.values++;
  }
  for (long long k = n; k < n + 8; k++)
    same(capped.exact, label, "past n", k, bits(y[k]), bits(y0[k]));
}

static float special_value() {
  static const uint32_t specials[] = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
      0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, 0x00000001, 0x80000001, 0x00007fff,
      0x00008000, 0x00018000, 0x00800000, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x3f817fff};
  switch (below(4)) {
    case 0: return from_bits(specials[below(sizeof specials / 4)]);
    case 1: return from_bits((uint32_t)rng());  // any bits
    case 2: return from_bits((bits(uniform(-4, 4)) & 0xffff0000u) | (below(2) ? 0x8000 : 0x7fff));
    default: return uniform(-1e3, 1e3);
  }
}

static void to_bf16_case(int seed, int i) {
  long long n = 1 + below(i % 2 ? 3000 : 200);
  bf16Round.cases++;
  std::vector<float> x(n);
  for (auto& v : x) v = special_value();
  std::vector<uint16_t> y(n + 8, 0x7fbb);
  char label[100];
  snprintf(label, sizeof label, "to_bf16 seed %d case %d (n %lld)", seed, i, n);
  unsigned threads = below(2) ? 256 : 128;
  launch(label, {(unsigned)((n + threads - 1) / threads), 1, 1}, threads, 0,
         [&] { to_bf16(x.data(), y.data(), n); });
  for (long long k = 0; k < n; k++) {
    same(bf16Round.exact, label, "y", k, y[k], ref_bf16(x[k]));
    bf16Round.values++;
  }
  for (long long k = n; k < n + 8; k++) same(bf16Round.exact, label, "past n", k, y[k], 0x7fbb);
}

static void add_rows_case(int seed, int i) {
  static const int N[6] = {1, 5, 256, 300, 1152, 2560};
  int n = N[i % 6], rows = 1 + below(4);
  addRows.cases++;
  std::vector<float> x((size_t)(rows + 1) * n), y((size_t)(rows + 1) * n);
  for (auto& v : x) v = uniform(-100, 100);
  for (auto& v : y) v = below(8) ? uniform(-100, 100) : special_value();
  std::vector<float> x0 = x, y0 = y;
  char label[100];
  snprintf(label, sizeof label, "add_rows seed %d case %d (n %d, %d rows)", seed, i, n, rows);
  launch(label, {(unsigned)rows, 1, 1}, 256, 0, [&] { add_rows(x.data(), y.data(), n); });
  // one IEEE addition: exact
  for (size_t k = 0; k < x.size(); k++) {
    float want = k < (size_t)rows * n ? x0[k] + y0[k] : x0[k];
    uint32_t g = bits(x[k]), w = bits(want);
    if (std::isnan(want) && std::isnan(x[k])) g = w;  // NaN payloads are the hardware's
    same(addRows.exact, label, "x", (long long)k, g, w);
    addRows.values++;
  }
}

// ------------------------------------------------------------------ main
static bool all_seen(const int* seen, int n) {
  for (int i = 0; i < n; i++)
    if (!seen[i]) return false;
  return true;
}

int main(int argc, char** argv) {
  emu_install_fault_handler();
  std::vector<int> seeds;
  for (int i = 1; i < argc; i++) seeds.push_back(atoi(argv[i]));
  if (seeds.empty()) seeds = {1, 2, 3, 4, 5};
  auto started = std::chrono::steady_clock::now();
  for (int seed : seeds) {
    rng.seed(0x5eed0000ULL + (unsigned long long)seed);
    for (int i = 0; i < 36; i++) attn_case(seed, i);
    for (int i = 0; i < 36; i++) qkv_case(seed, i);
    for (int i = 0; i < 45; i++) rmsnorm_add_case(seed, i);
    for (int i = 0; i < 48; i++) gated_case(seed, i);
    for (int i = 0; i < 12; i++) softcap_case(seed, i);
    for (int i = 0; i < 12; i++) to_bf16_case(seed, i);
    for (int i = 0; i < 12; i++) add_rows_case(seed, i);
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  bool covered = all_seen(attn.seenD, 4) && all_seen(attn.seenG, 3) && all_seen(attn.seenBt, 3) &&
                 all_seen(attn.seenW, 8) && all_seen(attn.seenCap, 3) && attn.holes > 0 &&
                 all_seen(qkv.seenD, 4) && all_seen(qkv.seenRope, 3) && all_seen(qkv.seenG, 3) &&
                 qkv.seenNorm && qkv.seenBias && qkv.seenBf16 && qkv.skipped && qkv.stores &&
                 all_seen(&gatedSeen[0][0][0], 8);
  long long failures = totalFailures;
  printf("kernels emulator (seeds");
  for (int s : seeds) printf(" %d", s);
  long long exact = attn.invariance.checked + attn.bf16.checked + attn.tiled.checked +
                   qkv.exact.checked +
                    normAdd.exact.checked + gated.exact.checked + capped.exact.checked +
                    bf16Round.exact.checked + addRows.exact.checked;
  printf("): paged_attention %lld cases, %lld token-heads over %lld keys (%lld table holes), "
         "error/bound <= %.3f, error/row max <= %.2g, %lld differ alone and batched, %lld bf16 "
         "not the f32 rounded, %lld tiles of paged_attention_tiled with %lld differing | "
         "qkv_rope_store %lld cases, %lld k/v stores (%lld skipped), error/bound <= %.3f | "
         "rmsnorm_add %lld cases, error/bound <= %.3f | silu/gelu_tanh_mul(_bf16) %lld cases, "
         "error/bound <= %.3f | softcap_logits error/bound <= %.3f | to_bf16, add_rows exact | "
         "%lld values bit for bit | %lld shuffles, %lld __syncthreads | %lld failures%s, "
         "%.1f s: %s\n",
         attn.cases, attn.tokenHeads, attn.keys, attn.holes, attn.bound.worst, attn.worstRowRel,
         attn.invariance.failures, attn.bf16.failures, attn.tiles, attn.tiled.failures, qkv.cases, qkv.stores, qkv.skipped,
         qkv.bound.worst, normAdd.cases, normAdd.bound.worst,
         gated.cases, gated.bound.worst, capped.bound.worst, exact, emu_shuffles, emu_barriers,
         failures, covered ? "" : ", NOT COVERED: some kind of case never ran", seconds,
         failures == 0 && covered ? "ALL PASSED" : "FAILURES");
  if (getenv("EMU_VERBOSE")) {
    for (const Stat* st : {&attn.bound, &qkv.bound, &normAdd.bound, &gated.bound, &capped.bound})
      printf("worst %.3g at %s\n", st->worst, st->worstAt.c_str());
  }
  return failures == 0 && covered ? 0 : 1;
}
