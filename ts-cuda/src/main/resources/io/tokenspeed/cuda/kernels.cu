// The CUDA backend's kernels, compiled at startup by NVRTC for the device's architecture.
//
// Conventions: activations are row-major [tokens][width]; the residual stream and every reduction
// are float32; bf16 values travel as their raw 16 bits (unsigned short), so this file needs no
// header. Every reduction runs in a fixed order that depends only on the row it reduces (never on
// how many rows share the launch): a token's result is the same whatever else is in its batch.
//
// Paged KV, as the engine lays it out (CacheLayout, float32):
//   block b of a group = | layers.0.k | layers.0.v | layers.1.k | ... |   (bytesPerBlock apart)
//   one field          = [kvHead][slot][headDim] floats, slot = position % blockTokens
//   tables[r * tableStride + position / blockTokens] = the block of request r (0: not stored)

typedef unsigned short bf16_t;

#define NEG_INF __int_as_float(0xff800000u)

__device__ __forceinline__ float bf16_to_float(bf16_t b) {
  return __uint_as_float(((unsigned int)b) << 16);
}

// Round to nearest even; NaN stays a (quiet) NaN.
__device__ __forceinline__ bf16_t float_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return (bf16_t)((u >> 16) | 0x0040u);
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16_t)(u >> 16);
}

// Sum of a block's values in a fixed tree order; blockDim.x is a power of two <= 1024.
__device__ float block_sum(float v, float* scratch) {
  int t = threadIdx.x;
  scratch[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) {
      scratch[t] += scratch[t + s];
    }
    __syncthreads();
  }
  float total = scratch[0];
  __syncthreads();
  return total;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// ---------------------------------------------------------------------------------- embedding

// x[t][i] = E[tokens[t]][i] · scale. Grid: tokens. Block: any.
extern "C" __global__ void embed_f32(
    const float* E, const int* tokens, float* x, int hidden, float scale) {
  const float* row = E + (long long)tokens[blockIdx.x] * hidden;
  float* out = x + (long long)blockIdx.x * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    out[i] = row[i] * scale;
  }
}

extern "C" __global__ void embed_bf16(
    const bf16_t* E, const int* tokens, float* x, int hidden, float scale) {
  const bf16_t* row = E + (long long)tokens[blockIdx.x] * hidden;
  float* out = x + (long long)blockIdx.x * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    out[i] = bf16_to_float(row[i]) * scale;
  }
}

// ---------------------------------------------------------------------------------- RMSNorm

// Sum of a block's values: each warp's by butterfly (every lane ends with the same bits: an
// addition does not care which operand comes first), then the warps' sums in warp order by every
// thread. scratch: blockDim.x / 32 floats; blockDim.x a multiple of 32. Two barriers, not one per
// level of a tree: a decode step's norms are one block each, and their time is latency.
__device__ float block_sum_by_warps(float v, float* scratch) {
  v = warp_sum(v);
  int warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) {
    scratch[threadIdx.x / 32] = v;
  }
  __syncthreads();
  float total = scratch[0];
  for (int i = 1; i < warps; i++) {
    total += scratch[i];
  }
  __syncthreads();
  return total;
}

// out[r] = x[rows ? rows[r] : r] · rsqrt(mean(x²) + eps) · w, to out_f32 or out_bf16 (the other
// null). Grid: output rows. Block: a multiple of 32; shared memory blockDim.x / 32 floats or more.
// A row of n % 4 == 0 values is read 16 bytes a load (thread i the values 4i .. 4i + 3, then
// 4(i + blockDim) ..), so a decode step's single row takes n / (4 · blockDim) loads a thread, all
// in flight together; the order of the additions depends on n only.
extern "C" __global__ void rmsnorm(
    const float* x, const int* rows, const float* w, float* out_f32, bf16_t* out_bf16, int n,
    float eps) {
  extern __shared__ float scratch[];
  int r = blockIdx.x;
  const float* in = x + (long long)(rows ? rows[r] : r) * n;
  bool quads = n % 4 == 0;
  float ss = 0.f;
  if (quads) {
    const float4* in4 = (const float4*)in;
#pragma unroll 4
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      float4 v = in4[i];
      ss += v.x * v.x;
      ss += v.y * v.y;
      ss += v.z * v.z;
      ss += v.w * v.w;
    }
  } else {
#pragma unroll 8
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      ss += in[i] * in[i];
    }
  }
  float total = block_sum_by_warps(ss, scratch);
  float inv = rsqrtf(total / (float)n + eps);
  if (quads) {
    const float4* in4 = (const float4*)in;
    const float4* w4 = (const float4*)w;
#pragma unroll 4
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      float4 v = in4[i];
      float4 g = w4[i];
      float4 y = make_float4(g.x * (v.x * inv), g.y * (v.y * inv), g.z * (v.z * inv),
                             g.w * (v.w * inv));
      if (out_bf16) {
        uint2 packed;
        packed.x = (unsigned int)float_to_bf16(y.x) | ((unsigned int)float_to_bf16(y.y) << 16);
        packed.y = (unsigned int)float_to_bf16(y.z) | ((unsigned int)float_to_bf16(y.w) << 16);
        ((uint2*)(out_bf16 + (long long)r * n))[i] = packed;
      } else {
        ((float4*)(out_f32 + (long long)r * n))[i] = y;
      }
    }
  } else {
#pragma unroll 8
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      float y = w[i] * (in[i] * inv);
      if (out_bf16) {
        out_bf16[(long long)r * n + i] = float_to_bf16(y);
      } else {
        out_f32[(long long)r * n + i] = y;
      }
    }
  }
}

// ---------------------------------------------------------------------------------- q, k, v

// After the fused projection qkv[t] = | q (H·d) | k (K·d) | v (K·d) |: adds the biases (bias may
// be null), applies the per-head QK-norm (qnorm/knorm may be null), rotates q and k by RoPE
// ("rotate half": the pair (i, i + d/2) by pos · invFreq[i]), writes q to q_out [t][H·d], and
// stores k and v at the token's block and slot of the pool (not when the table entry is 0), as
// float32, or as bf16 when kvBf16 (the pool of the tensor-core attention).
// Grid: (tokens, H + K). Block: a power of two >= d/2; shared memory blockDim.x floats.
extern "C" __global__ void qkv_rope_store(
    const float* qkv, const float* bias, const float* qnorm, const float* knorm, float eps,
    const float* invFreq, const int* positions, const int* tokenRequest, const int* tables,
    int tableStride, int H, int K, int d, float* q_out, char* pool, long long bytesPerBlock,
    long long kOffset, long long vOffset, int blockTokens, int kvBf16) {
  extern __shared__ float scratch[];
  int t = blockIdx.x;
  int head = blockIdx.y;
  int half = d / 2;
  int width = (H + 2 * K) * d;
  bool isQ = head < H;
  int col = head * d;  // q heads, then k heads
  const float* norm = isQ ? qnorm : knorm;
  int i = threadIdx.x;
  bool active = i < half;
  float a = 0.f, b = 0.f;
  if (active) {
    a = qkv[(long long)t * width + col + i];
    b = qkv[(long long)t * width + col + i + half];
    if (bias) {
      a += bias[col + i];
      b += bias[col + i + half];
    }
  }
  if (norm) {
    float total = block_sum(active ? a * a + b * b : 0.f, scratch);
    float inv = rsqrtf(total / (float)d + eps);
    if (active) {
      a = norm[i] * (a * inv);
      b = norm[i + half] * (b * inv);
    }
  }
  int p = positions[t];
  float ra = a, rb = b;
  if (invFreq && active) {
    float s, c;
    sincosf((float)p * invFreq[i], &s, &c);
    ra = a * c - b * s;
    rb = b * c + a * s;
  }
  if (isQ) {
    if (active) {
      float* q = q_out + (long long)t * H * d + head * d;
      q[i] = ra;
      q[i + half] = rb;
    }
    return;
  }
  int kvHead = head - H;
  int block = tables[(long long)tokenRequest[t] * tableStride + p / blockTokens];
  if (block == 0 || !active) {
    return;
  }
  int slot = p % blockTokens;
  long long field = ((long long)kvHead * blockTokens + slot) * d;
  int vcol = (H + K) * d + kvHead * d;
  float va = qkv[(long long)t * width + vcol + i];
  float vb = qkv[(long long)t * width + vcol + i + half];
  if (bias) {
    va += bias[vcol + i];
    vb += bias[vcol + i + half];
  }
  const char* base = pool + (long long)block * bytesPerBlock;
  if (kvBf16) {
    bf16_t* k = (bf16_t*)(base + kOffset) + field;
    bf16_t* v = (bf16_t*)(base + vOffset) + field;
    k[i] = float_to_bf16(ra);
    k[i + half] = float_to_bf16(rb);
    v[i] = float_to_bf16(va);
    v[i + half] = float_to_bf16(vb);
    return;
  }
  float* k = (float*)(base + kOffset) + field;
  float* v = (float*)(base + vOffset) + field;
  k[i] = ra;
  k[i + half] = rb;
  v[i] = va;
  v[i + half] = vb;
}

// ---------------------------------------------------------------------------------- attention

#define ATTN_WARPS 4
#define ATTN_MAX_D 256

// One warp's online-softmax step over the keys c0 .. c0+31 (those <= pos) of one query: lane j
// scores key c0 + j (its dot product in dimension order), the warp takes the chunk's maximum and
// sum by butterflies, rescales what it has, then every lane adds the chunk's values into its
// dimensions (lane + 32·e) in position order. `rows` gives each key's and value's row. Both
// attention kernels run exactly this, so they compute the same bits.
// With softcap > 0 each (already scaled) score becomes softcap · tanh(score / softcap) first.
template <class Rows>
__device__ __forceinline__ void attend_chunk(
    const float* qw, int c0, int pos, int d, int lane, const Rows& rows, float softcap, float& m,
    float& l, float* acc) {
  int j = c0 + lane;
  float s = NEG_INF;
  if (j <= pos) {
    const float* k = rows.key(lane);
    float dot = 0.f;
    for (int e = 0; e < d; e++) {
      dot += qw[e] * k[e];
    }
    s = softcap > 0.f ? softcap * tanhf(dot / softcap) : dot;
  }
  float mNew = fmaxf(m, warp_max(s));
  float p = j <= pos ? expf(s - mNew) : 0.f;
  float correction = expf(m - mNew);
  l = l * correction + warp_sum(p);
#pragma unroll
  for (int e = 0; e < ATTN_MAX_D / 32; e++) {
    acc[e] *= correction;
  }
  m = mNew;
  int n = min(32, pos - c0 + 1);
  for (int jj = 0; jj < n; jj++) {
    float pj = __shfl_sync(0xffffffffu, p, jj);
    const float* v = rows.value(jj);
#pragma unroll
    for (int e = 0; e < ATTN_MAX_D / 32; e++) {
      int dim = lane + 32 * e;
      if (dim < d) {
        acc[e] += pj * v[dim];
      }
    }
  }
}

// acc / l to row o of out_f32 or out_bf16, a lane's dimensions.
__device__ __forceinline__ void attend_store(
    const float* acc, float l, long long o, int d, int lane, float* out_f32, bf16_t* out_bf16) {
  float inv = 1.f / l;
#pragma unroll
  for (int e = 0; e < ATTN_MAX_D / 32; e++) {
    int dim = lane + 32 * e;
    if (dim < d) {
      float y = acc[e] * inv;
      if (out_bf16) {
        out_bf16[o + dim] = float_to_bf16(y);
      } else {
        out_f32[o + dim] = y;
      }
    }
  }
}

// Key and value rows read from the pool through the block table.
struct PoolRows {
  const char* pool;
  const int* table;
  long long bytesPerBlock, kOffset, vOffset;
  int blockTokens, kvHead, d, c0;
  __device__ const float* row(int key, long long offset) const {
    return (const float*)(pool + (long long)table[key / blockTokens] * bytesPerBlock + offset) +
           ((long long)kvHead * blockTokens + key % blockTokens) * d;
  }
  __device__ const float* key(int j) const { return row(c0 + j, kOffset); }
  __device__ const float* value(int j) const { return row(c0 + j, vOffset); }
};

// Key and value rows of a chunk staged in shared memory (keys padded by one float).
struct SharedRows {
  const float* ks;
  const float* vs;
  int d;
  __device__ const float* key(int j) const { return ks + j * (d + 1); }
  __device__ const float* value(int j) const { return vs + j * d; }
};

// Causal attention of each (token, query head) over its request's positions 0 .. pos (the last
// `window` positions when window > 0: rows of the table left of them are never read, so they may
// be holes), reading K and V through the block table; scores soft-capped when softcap > 0. One warp per
// (token, head); keys in chunks of 32, a lane per key for the scores, an online softmax per chunk,
// then every lane accumulates its dimensions over the chunk's keys in position order. The order
// of every sum depends only on the token's position, so the result does not depend on the batch.
// Output to out_f32 or out_bf16 ([t][H·d]). Grid: ceil(tokens · H / ATTN_WARPS). Block: 32 ·
// ATTN_WARPS; shared memory ATTN_WARPS · d floats.
extern "C" __global__ void paged_attention(
    const float* q, const char* pool, long long bytesPerBlock, long long kOffset,
    long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,
    const int* tables, int tableStride, int tokens, int H, int K, int d, float scale, int window,
    float softcap, float* out_f32, bf16_t* out_bf16) {
  extern __shared__ float qs[];
  int warp = threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  long long item = (long long)blockIdx.x * ATTN_WARPS + warp;
  if (item >= (long long)tokens * H) {
    return;
  }
  int t = (int)(item / H);
  int h = (int)(item % H);
  int kvHead = h / (H / K);
  float* qw = qs + warp * d;
  for (int e = lane; e < d; e += 32) {
    qw[e] = q[(long long)t * H * d + h * d + e] * scale;
  }
  __syncwarp();
  int pos = positions[t];
  int first = window > 0 ? max(0, pos - window + 1) : 0;
  const int* table = tables + (long long)tokenRequest[t] * tableStride;
  float m = NEG_INF;
  float l = 0.f;
  float acc[ATTN_MAX_D / 32];
#pragma unroll
  for (int e = 0; e < ATTN_MAX_D / 32; e++) {
    acc[e] = 0.f;
  }
  for (int c0 = first; c0 <= pos; c0 += 32) {
    PoolRows rows{pool, table, bytesPerBlock, kOffset, vOffset, blockTokens, kvHead, d, c0};
    attend_chunk(qw, c0, pos, d, lane, rows, softcap, m, l, acc);
  }
  attend_store(acc, l, (long long)t * H * d + h * d, d, lane, out_f32, out_bf16);
}


// The same attention, with the keys and values shared between the warps of a block: a block takes
// a tile of up to `tileTokens` consecutive tokens of one request (tiles[2·i] its first row,
// tiles[2·i+1] its count) and one KV head (blockIdx.y), a warp per (token, query head of that KV
// head), and each warp does exactly the arithmetic of paged_attention, in the same order, sliding
// windows and soft-capped scores included. A token's chunks of 32 keys start at its own first key
// (its window's first, else 0). The tile's tokens are consecutive, so their first keys lie within
// tileTokens - 1 of the first token's: per step j the block stages, once for all its warps, the
// keys from the first token's first key + 32·j on, 32 plus that spread of them, and each warp
// reads its chunk at its own offset in them (without a window every offset is 0 and a step 32
// keys). Keys left of the first token's window are never read (the table may hold holes there).
// Grid: (tiles, K). Block: 32 · tileTokens · (H / K). Shared memory: (warps · d + span · (d + 1) +
// span · d) floats, span = 32 + tileTokens - 1 with a window, else 32.
extern "C" __global__ void paged_attention_tiled(
    const float* q, const char* pool, long long bytesPerBlock, long long kOffset,
    long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,
    const int* tables, int tableStride, const int* tiles, int H, int K, int d, float scale,
    int window, float softcap, float* out_f32, bf16_t* out_bf16) {
  extern __shared__ float smem[];
  int group = H / K;
  int warps = blockDim.x / 32;
  int warp = threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  int span = window > 0 ? 32 + warps / group - 1 : 32;
  int kvHead = blockIdx.y;
  int row0 = tiles[2 * blockIdx.x];
  int count = tiles[2 * blockIdx.x + 1];
  int ti = warp / group;
  bool active = ti < count;
  int t = row0 + (active ? ti : 0);
  int h = kvHead * group + warp % group;
  float* qw = smem + warp * d;
  float* ks = smem + warps * d;
  float* vs = ks + span * (d + 1);
  if (active) {
    for (int e = lane; e < d; e += 32) {
      qw[e] = q[(long long)t * H * d + h * d + e] * scale;
    }
  }
  int pos = positions[t];
  int maxPos = positions[row0 + count - 1];
  int first = window > 0 ? max(0, pos - window + 1) : 0;
  int first0 = window > 0 ? max(0, positions[row0] - window + 1) : 0;
  int firstLast = window > 0 ? max(0, maxPos - window + 1) : 0;
  int offset = first - first0; // this warp's chunk within the staged keys
  // the last token has the most chunks: a token's keys, min(pos + 1, window), grow with pos
  int steps = (maxPos - firstLast) / 32 + 1;
  const int* table = tables + (long long)tokenRequest[row0] * tableStride;
  float m = NEG_INF;
  float l = 0.f;
  float acc[ATTN_MAX_D / 32];
#pragma unroll
  for (int e = 0; e < ATTN_MAX_D / 32; e++) {
    acc[e] = 0.f;
  }
  for (int step = 0; step < steps; step++) {
    int from = first0 + 32 * step;
    __syncthreads();
    int n = min(32 + firstLast - first0, maxPos - from + 1);
    for (int i = threadIdx.x; i < n * d; i += blockDim.x) {
      int j = i / d;
      int e = i % d;
      int key = from + j;
      const char* block = pool + (long long)table[key / blockTokens] * bytesPerBlock;
      long long at = ((long long)kvHead * blockTokens + key % blockTokens) * d + e;
      ks[j * (d + 1) + e] = ((const float*)(block + kOffset))[at];
      vs[j * d + e] = ((const float*)(block + vOffset))[at];
    }
    __syncthreads();
    int c0 = first + 32 * step;
    if (!active || c0 > pos) {
      continue;
    }
    SharedRows rows{ks + offset * (d + 1), vs + offset * d, d};
    attend_chunk(qw, c0, pos, d, lane, rows, softcap, m, l, acc);
  }
  if (active) {
    attend_store(acc, l, (long long)t * H * d + h * d, d, lane, out_f32, out_bf16);
  }
}

// ---------------------------------------------------------------------------------- tensor cores

// Attention on the tensor cores for bf16 models, one kernel for prefill and decode: the flash
// scheme (online softmax over tiles of FA_KEYS keys, no score matrix in memory) with bf16 inputs
// and float32 accumulation, through the warp-level mma.sync m16n8k16 instruction. A block takes
// one KV head (blockIdx.y) and a tile of consecutive tokens of one request (tiles[2·i] its first
// row, tiles[2·i+1] its count); its FA_ROWS rows are the (token, query head) pairs of that KV
// head, row r = token r / group, head r % group, so the keys and values it stages serve every
// query head of the group. Keys and values come from a bf16 pool (qkv_rope_store with kvBf16).
//
// Block: FA_WARPS = 4 warps (128 threads) for the FA_ROWS = 128 rows; a warp owns 32 rows (two
// 16-row tiles of the mma), so each K and V fragment it reads from shared memory by ldmatrix feeds
// two mma's. The accumulator o takes 128 registers at D = 128, so there the queries wait in shared
// memory (bf16) and are read again by ldmatrix each tile; at D = 64 the query fragments stay in
// registers for the whole key loop.
// Grid: (tiles, K), the longest tiles (a request's last) first. Tiles hold at most FA_ROWS / group
// tokens.
// Shared memory (dynamic): two stages, each the K and the V of FA_KEYS = 64 keys, then (queries
// in shared memory) the 128 query rows; every row padded by 8 bf16 (16 bytes) so that the 8 rows
// an ldmatrix reads fall in distinct banks. 2 · 2 · 64 · (D + 8) · 2 bytes of K and V (69,632 at
// D = 128, 36,864 at D = 64) plus 128 · (D + 8) · 2 of queries (34,816 at D = 128): 104,448 bytes
// for flash_attention_d128, two blocks per multiprocessor.
// Pipeline: the keys and values of tile kt + 1 go from the paged pool to the other stage by
// cp.async (16 bytes a copy, L1 bypassed, one commit group per tile) while the warps compute on
// tile kt; one __syncthreads per tile, after the wait, both makes tile kt visible and tells that
// every warp is done with the stage the next copies overwrite. (With a single buffer, K and V
// would be waited for apart so that q · k could start before V lands; with two, both have landed
// during the previous tile.) Keys past the block's last position are filled with zeros. Each warp
// looks up in the block table only the 16 keys it copies, one per lane, and hands their addresses
// round by shuffles.
// Arithmetic, per row, in this order: the keys in tiles of FA_KEYS starting at multiples of
// FA_KEYS from position 0 whatever the block; per tile, the scores s = q · k (mma over d in
// ascending 16-dimension steps; q rounded to bf16), the keys past the row's position set to -inf
// (only in the tiles that reach past the warp's first position), the row's max over the tile and
// its running max m, the rescale c = 2^((m_old − m)·scale·log2 e) of l and o, p = 2^(s·scale·log2
// e − m·scale·log2 e) (one fma, one ex2: the scale > 0 keeps the raw scores' order), l += p in key
// order, then o += bf16(p) · v (mma over the tile's keys in ascending 16-key steps). At the end l
// is summed over the quad of lanes that holds the row, in a fixed order, and out = bf16(o / l).
// Batch invariance: a row's result depends only on its query, its position and the keys: the key
// tiles start at multiples of FA_KEYS from 0 whatever the block, a tile past a row's position
// changes none of its bits (p exactly 0, c exactly 1), so a warp skips the tiles past its own last
// position, and skips the rescale of o when every c of the warp is exactly 1 (multiplying by 1
// changes no bits); every reduction (the mma's, the quad's max and sum) runs over the row's own
// values in a fixed order. So --deterministic uses it too.

#define FA_ROWS 128
#define FA_KEYS 64
#define FA_WARPS 4

// Two floats to bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ unsigned int pack_bf16x2(float lo, float hi) {
  unsigned int r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ unsigned int shared_address(const void* p) {
  unsigned int a;
  asm("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }" : "=r"(a) : "l"(p));
  return a;
}

// Four 8x8 bf16 matrices from shared memory; lane l names row l % 8 of matrix l / 8.
__device__ __forceinline__ void load_matrices(unsigned int* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// load_matrices at a shared-space address.
__device__ __forceinline__ void load_matrices_at(unsigned int* r, unsigned int address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The same, each matrix transposed.
__device__ __forceinline__ void load_matrices_transposed_at(unsigned int* r, unsigned int address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// 2^x by the special function unit (ex2.approx, subnormal results flushed to 0; -inf gives 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// c (16x8, float32) += a (16x16, bf16, row-major) · b (16x8, bf16, column-major).
__device__ __forceinline__ void mma_bf16(float* c, const unsigned int* a, unsigned int b0,
                                         unsigned int b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7},"
      " {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global → shared, asynchronously, bypassing L1; with srcBytes 0 the source is not read
// and the 16 bytes are zeros.
__device__ __forceinline__ void flash_copy16(unsigned int dst, const void* src, int srcBytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;"
               :
               : "r"(dst), "l"(src), "r"(srcBytes)
               : "memory");
}

__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N of this thread's committed groups of copies are still in flight; with
// N = 0, for every copy it issued (a barrier then makes them visible to the block).
template <int N>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;" : : "n"(N) : "memory");
}

// QSHARED: the queries wait in shared memory (else in registers).
template <int D, bool QSHARED>
__device__ __forceinline__ void flash_attention(
    const float* q, const char* pool, long long bytesPerBlock, long long kOffset,
    long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,
    const int* tables, int tableStride, const int* tiles, int numTiles, int H, int K, float scale,
    bf16_t* out) {
  constexpr int MT = 2;                        // 16-row tiles per warp
  constexpr int THREADS = 32 * FA_WARPS;
  constexpr int PITCH = D + 8;                 // bf16 per shared row
  constexpr int PIECES = D / 8;                // 16-byte pieces per key row
  constexpr int WARP_ROWS = 32 / PIECES;       // key rows a warp copies per pass
  constexpr int PASS_ROWS = THREADS / PIECES;  // key rows the block copies per pass
  constexpr int PASSES = FA_KEYS / PASS_ROWS;
  constexpr int LOOKUPS = WARP_ROWS * PASSES;  // keys a warp copies per tile
  constexpr int STAGE = FA_KEYS * PITCH * 2;   // bytes of K (or V) per stage
  static_assert(FA_ROWS == FA_WARPS * 16 * MT, "a warp owns MT row tiles");
  static_assert(LOOKUPS <= 32 && FA_KEYS % PASS_ROWS == 0, "one lookup per lane");
  extern __shared__ __align__(16) unsigned char flash_shared[];
  const unsigned int kShared = shared_address(flash_shared);  // [2][FA_KEYS][PITCH] bf16
  const unsigned int vShared = kShared + 2 * STAGE;            // the same
  const unsigned int qShared = vShared + 2 * STAGE;            // [FA_ROWS][PITCH] bf16

  int tile = numTiles - 1 - (int)blockIdx.x;  // the last tiles of a request are the longest
  int row0 = tiles[2 * tile];
  int count = tiles[2 * tile + 1];
  int kvHead = blockIdx.y;
  int group = H / K;
  int warp = threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  int g = lane / 4;
  int tq = lane % 4;
  int maxPos = positions[row0 + count - 1];
  const int* table = tables + (long long)tokenRequest[row0] * tableStride;
  // the warp's rows are tokens warp·32 / group .. (warp·32 + 31) / group of the tile
  int firstToken = warp * 32 / group;
  bool warpActive = firstToken < count;
  int warpMinPos = positions[row0 + min(firstToken, count - 1)];
  int warpMaxPos = positions[row0 + min((warp * 32 + 31) / group, count - 1)];
  int keyTiles = maxPos / FA_KEYS + 1;

  // this thread copies piece `piece` of the key rows warp·WARP_ROWS + sub + c·PASS_ROWS
  int piece = lane % PIECES;
  int sub = lane / PIECES;
  auto issue = [&](int kt, int stage) {
    // lane L < LOOKUPS finds where in the pool the key of pass L / WARP_ROWS, row L % WARP_ROWS
    // lies (-1: past the block's last position)
    long long at = -1;
    if (lane < LOOKUPS) {
      int key =
          kt * FA_KEYS + warp * WARP_ROWS + lane % WARP_ROWS + (lane / WARP_ROWS) * PASS_ROWS;
      if (key <= maxPos) {
        int b = key / blockTokens;
        at = (long long)table[b] * bytesPerBlock +
             ((long long)kvHead * blockTokens + (key - b * blockTokens)) * (D * 2);
      }
    }
#pragma unroll
    for (int c = 0; c < PASSES; c++) {
      long long from = __shfl_sync(0xffffffffu, at, c * WARP_ROWS + sub);
      int row = warp * WARP_ROWS + sub + c * PASS_ROWS;
      unsigned int to = stage * STAGE + (row * PITCH + piece * 8) * 2;
      const char* src = pool + (from < 0 ? 0 : from) + piece * 16;
      int bytes = from < 0 ? 0 : 16;
      flash_copy16(kShared + to, src + kOffset, bytes);
      flash_copy16(vShared + to, src + vOffset, bytes);
    }
    copy_async_commit();
  };
  issue(0, 0);  // the first tile's copies overlap the loads of the queries

  // the queries, rounded to bf16; rows past the tile's tokens are zeros (computed, not stored)
  unsigned int qf[QSHARED ? 1 : MT][QSHARED ? 1 : D / 16][4];
  if constexpr (QSHARED) {
#pragma unroll 4
    for (int idx = threadIdx.x; idx < FA_ROWS * D / 4; idx += THREADS) {
      int r = idx / (D / 4);
      int e = (idx % (D / 4)) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r / group < count) {
        v = *(const float4*)(q + (long long)(row0 + r / group) * H * D +
                             (kvHead * group + r % group) * D + e);
      }
      uint2 packed = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
      asm volatile("st.shared.v2.u32 [%0], {%1, %2};"
                   :
                   : "r"(qShared + (r * PITCH + e) * 2), "r"(packed.x), "r"(packed.y)
                   : "memory");
    }
  } else {
    // this thread's rows g and g + 8 of each row tile; dimensions 2·tq, 2·tq + 1 and +8 per 16
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
      for (int i = 0; i < 2; i++) {
        int r = warp * 32 + mt * 16 + g + 8 * i;
        bool active = r / group < count;
        const float* qrow = q + (long long)(row0 + (active ? r / group : 0)) * H * D +
                            (kvHead * group + r % group) * D;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
          for (int half = 0; half < 2; half++) {
            float2 v = make_float2(0.f, 0.f);
            if (active) {
              v = *(const float2*)(qrow + kk * 16 + half * 8 + 2 * tq);
            }
            qf[mt][kk][2 * half + i] = pack_bf16x2(v.x, v.y);
          }
        }
      }
    }
  }

  float o[MT][D / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
    }
    m[mt][0] = m[mt][1] = NEG_INF;
    l[mt][0] = l[mt][1] = 0.f;
  }
  float scaleLog2 = scale * 1.4426950408889634f;

  // this lane's ldmatrix rows and columns, in bytes from a 16x16 block's corner: for K (keys ×
  // dimensions) keys lane % 8 (+8 for lanes 16-31), dimensions +8 for lanes 8-15 and 24-31 (the
  // b fragments of two 8-key groups); for V (keys × dimensions, transposed) and for the queries
  // (rows × dimensions) rows lane % 8 (+8 for lanes 8-15 and 24-31), dimensions +8 for lanes
  // 16-31
  unsigned int kLane = ((lane % 8 + (lane / 16) * 8) * PITCH + ((lane / 8) % 2) * 8) * 2;
  unsigned int vLane = ((lane % 8 + ((lane / 8) % 2) * 8) * PITCH + (lane / 16) * 8) * 2;
  unsigned int qLane = qShared + warp * 32 * PITCH * 2 + vLane;

  for (int kt = 0; kt < keyTiles; kt++) {
    copy_async_wait<0>();
    __syncthreads();
    if (kt + 1 < keyTiles) {
      issue(kt + 1, (kt + 1) % 2);
    }
    if (!warpActive) {
      continue;
    }
    int k0 = kt * FA_KEYS;
    if (k0 > warpMaxPos) {
      continue;  // every row of the warp lies before this tile: it would change no bits
    }
    unsigned int kBase = kShared + (kt % 2) * STAGE + kLane;
    unsigned int vBase = vShared + (kt % 2) * STAGE + vLane;
    // scores: s[mt][n] is the 16x8 block of row tile mt and keys k0 + 8·n ..; each fragment
    // of keys read from shared memory serves both row tiles
    float s[MT][FA_KEYS / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
      for (int n = 0; n < FA_KEYS / 8; n++) {
        s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      unsigned int qs[MT][4];
      if constexpr (QSHARED) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          load_matrices_at(qs[mt], qLane + (mt * 16 * PITCH + kk * 16) * 2);
        }
      }
#pragma unroll
      for (int n = 0; n < FA_KEYS / 8; n += 2) {
        unsigned int b[4];
        load_matrices_at(b, kBase + (n * 8 * PITCH + kk * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          const unsigned int* qa;
          if constexpr (QSHARED) {
            qa = qs[mt];
          } else {
            qa = qf[mt][kk];
          }
          mma_bf16(s[mt][n], qa, b[0], b[1]);
          mma_bf16(s[mt][n + 1], qa, b[2], b[3]);
        }
      }
    }
    // online softmax in base 2 on the raw scores: the scale (> 0) keeps their order, and p =
    // 2^(s·scale·log2(e) − m·scale·log2(e)) is one fma and one ex2; keys past a row's position
    // only in the tiles that reach past the warp's first position
    bool masked = k0 + FA_KEYS - 1 > warpMinPos;
    bool rescale = false;
    float correction[MT][2];
    unsigned int a[MT][FA_KEYS / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      if (masked) {
        // the rows' positions, read here rather than held in registers the whole loop
#pragma unroll
        for (int i = 0; i < 2; i++) {
          int r = warp * 32 + mt * 16 + g + 8 * i;
          int pos = positions[row0 + min(r / group, count - 1)];
#pragma unroll
          for (int n = 0; n < FA_KEYS / 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
              if (k0 + n * 8 + 2 * tq + e > pos) {
                s[mt][n][2 * i + e] = NEG_INF;
              }
            }
          }
        }
      }
      float rowMax[2] = {NEG_INF, NEG_INF};
#pragma unroll
      for (int n = 0; n < FA_KEYS / 8; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          rowMax[e / 2] = fmaxf(rowMax[e / 2], s[mt][n][e]);
        }
      }
      float shift[2];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        rowMax[i] = fmaxf(rowMax[i], __shfl_xor_sync(0xffffffffu, rowMax[i], 1));
        rowMax[i] = fmaxf(rowMax[i], __shfl_xor_sync(0xffffffffu, rowMax[i], 2));
        float mNew = fmaxf(m[mt][i], rowMax[i]);
        correction[mt][i] = fast_exp2((m[mt][i] - mNew) * scaleLog2);
        rescale |= correction[mt][i] != 1.f;
        m[mt][i] = mNew;
        shift[i] = -mNew * scaleLog2;
        l[mt][i] *= correction[mt][i];
      }
#pragma unroll
      for (int n = 0; n < FA_KEYS / 8; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int i = e / 2;
          float p = fast_exp2(fmaf(s[mt][n][e], scaleLog2, shift[i]));
          s[mt][n][e] = p;
          l[mt][i] += p;
        }
      }
      // p's fragments: the score blocks 2·kk and 2·kk + 1 form the 16 keys of step kk
#pragma unroll
      for (int kk = 0; kk < FA_KEYS / 16; kk++) {
        a[mt][kk][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][kk][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][kk][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][kk][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
    }
    // once the running maxima settle, most tiles leave every row's max as it was
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
          o[mt][n][0] *= correction[mt][0];
          o[mt][n][1] *= correction[mt][0];
          o[mt][n][2] *= correction[mt][1];
          o[mt][n][3] *= correction[mt][1];
        }
      }
    }
    // o += p · v, 16 keys at a time; each fragment of values serves both row tiles
#pragma unroll
    for (int kk = 0; kk < FA_KEYS / 16; kk++) {
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        unsigned int b[4];
        load_matrices_transposed_at(b, vBase + (kk * 16 * PITCH + n * 8) * 2);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          mma_bf16(o[mt][n], a[mt][kk], b[0], b[1]);
          mma_bf16(o[mt][n + 1], a[mt][kk], b[2], b[3]);
        }
      }
    }
  }
  if (!warpActive) {
    return;
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float sum = l[mt][i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      int r = warp * 32 + mt * 16 + g + 8 * i;
      if (r / group >= count) {
        continue;
      }
      float inv = 1.f / sum;
      unsigned int* row = (unsigned int*)(out + (long long)(row0 + r / group) * H * D +
                                          (kvHead * group + r % group) * D);
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        row[(n * 8 + 2 * tq) / 2] =
            pack_bf16x2(o[mt][n][2 * i] * inv, o[mt][n][2 * i + 1] * inv);
      }
    }
  }
}

// The flash kernel of head size D: 128 threads; dynamic shared memory 2 · 2 · FA_KEYS · (D + 8) · 2
// bytes, plus FA_ROWS · (D + 8) · 2 with QSHARED. MIN_BLOCKS: blocks per multiprocessor the
// registers must allow.
#define FLASH_ATTENTION(D, QSHARED, NAME, MIN_BLOCKS)                                           \
  extern "C" __global__ void __launch_bounds__(32 * FA_WARPS, MIN_BLOCKS) NAME(                 \
      const float* q, const char* pool, long long bytesPerBlock, long long kOffset,             \
      long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,        \
      const int* tables, int tableStride, const int* tiles, int numTiles, int H, int K,         \
      float scale, bf16_t* out) {                                                               \
    flash_attention<D, QSHARED>(q, pool, bytesPerBlock, kOffset, vOffset, blockTokens,          \
                                positions, tokenRequest, tables, tableStride, tiles, numTiles,  \
                                H, K, scale, out);                                              \
  }

FLASH_ATTENTION(64, false, flash_attention_d64, 2)
FLASH_ATTENTION(128, true, flash_attention_d128, 2)

// ---------------------------------------------------------------------------------- tensor cores, Hopper

// The flash attention of the section above on Hopper's warpgroup tensor-core instruction
// (wgmma.mma_async, sm_90a only): flash_attention_wgmma_d64/d128 take exactly the parameters, the
// grid and the semantics of flash_attention_d64/d128 (a block per tile of up to FA_ROWS (token,
// query head) rows of one request and one KV head, rows r = token r / group, head r % group; bf16
// queries, keys, values and probabilities, float32 accumulation; out = bf16(o / l)), and give
// results independent of the batch in the same way, though not the mma.sync kernel's bits (their
// key tiles and the order of their sums differ).
//
// Block: FW_THREADS = 384, three warpgroups. Warpgroup 0 is the producer: it copies the keys and
// values of each tile of FW_KEYS = 128 positions from the paged pool into shared memory by
// cp.async (16 bytes a copy, each warp looking up in the block table the 32 keys it copies, one per
// lane), and each copy's completion is announced on an mbarrier (cp.async.mbarrier.arrive.noinc, so
// the producer never waits for its own copies). Warpgroups 1 and 2 are the consumers, each owning
// 64 of the block's 128 rows (the M of wgmma m64nNk16): warpgroup 1 + c rows 64c .. 64c + 63. A
// consumer whose rows are all past the tile's tokens (a tile of fewer than 64 / group + 1 tokens,
// decode) leaves at once. setmaxnreg gives the producer 40 registers and each consumer thread 232
// (the block starts at 168, __launch_bounds__(384, 1)).
// Shared memory (dynamic, from a 1024-byte boundary): the queries, [consumer][D / 64 panels][64
// rows][128 bytes]; then STAGES stages of K, [stage][D / 64 panels][128 keys][128 bytes]; the same
// for V; then the mbarriers, full and empty for K and for V per stage. Every 128-byte row holds 64
// consecutive dimensions of one query or key, its eight 16-byte pieces swizzled (piece j of row r
// at position j ^ (r % 8)): wgmma's 128-byte swizzle, in which q and k are read K-major (the
// dimensions are the sum's index) and v MN-major (the dimensions are the output's columns, so
// wgmma reads it transposed), the same bytes for K and V. Three stages at D = 128 (230,496 bytes),
// four at 64 (148,608): one block a multiprocessor.
// Pipeline: the producer waits for a stage's K to be released by both consumers before it copies
// the next tile's keys there, and the same for V; a consumer waits for a tile's K, issues
// s = q · kᵀ (wgmma from shared memory, D / 16 steps into 64 float32 a thread) and, in the same
// turn, o += p · v of the previous tile (p from registers, 8 steps over the 128 keys), then works
// out the softmax of the new scores while the tensor cores run the product with v: so a tile's
// softmax overlaps its warpgroup's own next products, and the two consumers take turns to issue
// (named barriers), so that one's softmax overlaps the other's products too. K is released as soon
// as its scores are in, V when its product is. Keys past the block's last position are copied as
// zeros. A consumer that has waited for a stage's copies fences the async proxy (fence.proxy.async)
// before its wgmma's read them; the queries, stored by ordinary stores, likewise before a barrier.
// A barrier wait of more than 10 s traps instead of hanging (see fw_barrier_wait).
// Arithmetic, per row, in this order: the keys in tiles of FW_KEYS starting at multiples of FW_KEYS
// from position 0 whatever the block; per tile, the scores s = q · k (wgmma over d in ascending
// 16-dimension steps; q rounded to bf16), the keys past the row's position set to -inf (in the
// tiles that reach past the warpgroup's first position), the row's max over the tile and its
// running max m, the rescale c = 2^((m_old − m)·scale·log2 e) of l, p = 2^(s·scale·log2 e −
// m·scale·log2 e), l += p in key order over the thread's columns; then o = c·o and o += bf16(p) · v
// (wgmma over the tile's keys in ascending 16-key steps). At the end l is summed over the quad of
// lanes that holds the row in a fixed order, and out = bf16(o / l). Batch invariance: as the
// mma.sync kernel's, since a row's key tiles start at 0 whatever its block, every sum runs over its
// own values in a fixed order, and a tile entirely past its position changes none of its bits
// (p exactly 0, c exactly 1): both consumers run every key tile of the block, up to the block's
// last position.

#define FW_KEYS 128
#define FW_THREADS 384
#define FW_PRODUCER_REGS 40
#define FW_CONSUMER_REGS 232

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A wgmma shared-memory matrix descriptor of the 128-byte swizzle: the start address, the leading
// and the stride byte offsets (16-byte units in bits 0-13, 16-29, 32-45), swizzle mode 1 in bits
// 62-63. K-major: the stride is that between groups of 8 rows (1024 bytes), the leading offset
// unused (1). MN-major: the leading offset is that between the 64-column panels, the stride that
// between groups of 8 rows of k.
__device__ __forceinline__ unsigned long long fw_descriptor(unsigned int address, unsigned int lead,
                                                            unsigned int stride) {
  return (unsigned long long)((address & 0x3ffffu) >> 4) |
         ((unsigned long long)((lead >> 4) & 0x3fffu) << 16) |
         ((unsigned long long)((stride >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

// Keeps the compiler from moving a register's reads or writes across this point (the wgmma's
// registers are written and read asynchronously, between its issue and its wait).
__device__ __forceinline__ void fw_fence_register(float& r) { asm volatile("" : "+f"(r)::"memory"); }

__device__ __forceinline__ void fw_fence_register(unsigned int& r) {
  asm volatile("" : "+r"(r)::"memory");
}

template <int N>
__device__ __forceinline__ void fw_fence_registers(float* r) {
#pragma unroll
  for (int i = 0; i < N; i++) {
    fw_fence_register(r[i]);
  }
}

template <int N>
__device__ __forceinline__ void fw_fence_registers(unsigned int* r) {
#pragma unroll
  for (int i = 0; i < N; i++) {
    fw_fence_register(r[i]);
  }
}

__device__ __forceinline__ void fw_mma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void fw_mma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Waits until at most N of the warpgroup's committed groups of wgmma's are still running.
template <int N>
__device__ __forceinline__ void fw_mma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Makes this thread's ordinary shared-memory accesses so far visible to the async proxy (wgmma).
__device__ __forceinline__ void fw_fence_proxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void fw_barrier_init(unsigned int bar, unsigned int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void fw_barrier_arrive(unsigned int bar) {
  asm volatile("{ .reg .b64 state; mbarrier.arrive.shared::cta.b64 state, [%0]; }" ::"r"(bar)
               : "memory");
}

// Waits for the completion of the phase of parity `parity` (the phase before the current one when
// the barrier is in the other parity). A wait of more than 10 s traps (the launch fails with an
// error) rather than hanging the process: no tile's copies or products take a thousandth of that,
// so only a broken protocol gets there.
__device__ __forceinline__ void fw_barrier_wait(unsigned int bar, unsigned int parity) {
  unsigned long long since = 0;
  while (true) {
    unsigned int done;
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, "
        "p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) {
      return;
    }
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (since == 0) {
      since = now;
    } else if (now - since > 10000000000ull) {
      __trap();
    }
  }
}

// Arrives on the barrier once all of this thread's cp.async copies so far have landed (the barrier
// counts this arrival among those it expects).
__device__ __forceinline__ void fw_barrier_arrive_on_copies(unsigned int bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// Orders the mbarrier initializations before their use by other threads (with a barrier after).
__device__ __forceinline__ void fw_barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Waits for every cp.async copy this thread issued.
__device__ __forceinline__ void fw_copies_wait() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// The warpgroup gives up registers down to N a thread, or asks for up to N (setmaxnreg).
template <int N>
__device__ __forceinline__ void fw_registers_down() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

template <int N>
__device__ __forceinline__ void fw_registers_up() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// 8 bytes to shared memory.
__device__ __forceinline__ void fw_store_shared(unsigned int address, unsigned int lo,
                                                unsigned int hi) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(address), "r"(lo), "r"(hi) : "memory");
}

__device__ __forceinline__ void fw_named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void fw_named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// A TMA descriptor (CUtensorMap, made by cuTensorMapEncodeTiled on the host), passed to a kernel
// by value as a __grid_constant__ argument: the copies read it where the launch put it.
struct __align__(64) FwTensorMap {
  unsigned long long bits[16];
};

// Arrives on the barrier (counted among its expected arrivals) and tells it to expect `bytes` more
// bytes of asynchronous copies in its current phase.
__device__ __forceinline__ void fw_barrier_expect(unsigned int bar, unsigned int bytes) {
  asm volatile(
      "{ .reg .b64 state; mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1; }" ::"r"(bar),
      "r"(bytes)
      : "memory");
}

// One box of the 4-dimensional tensor `map` at coordinates (c0, c1, c2, c3), innermost first,
// copied by the TMA unit to shared memory at `to` (in the descriptor's swizzle); its bytes count on
// the barrier when they have landed.
__device__ __forceinline__ void fw_tma_load4(unsigned int to, const FwTensorMap* map, int c0, int c1,
                                             int c2, int c3, unsigned int bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3, %4, %5}], [%6];" ::"r"(to),
      "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// d (m64 x n128, float32) = (scaleD ? d : 0) + a (m64 x k16, shared, K-major) · b (k16 x n128,
// shared, K-major), both bf16.
template <int SCALE_D>
__device__ __forceinline__ void fw_mma_ss_n128(float* d, unsigned long long a, unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "n"(SCALE_D));
}

// d (m64 x n128, float32) += a (m64 x k16, registers) · b (k16 x n128, shared, MN-major), both
// bf16.
__device__ __forceinline__ void fw_mma_rs_n128(float* d, const unsigned int* a, unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

// d (m64 x n64, float32) += a (m64 x k16, registers) · b (k16 x n64, shared, MN-major), both
// bf16.
__device__ __forceinline__ void fw_mma_rs_n64(float* d, const unsigned int* a, unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}


// D = 64 or 128, STAGES the stages of K and V; TMA: the producer copies K and V by TMA from the
// descriptors kMap and vMap instead of cp.async (see flash_attention_tma_d64/d128 below). See the
// comment above.
template <int D, int STAGES, bool TMA, bool SPLIT>
__device__ __forceinline__ void flash_attention_wgmma(
    const float* q, const char* pool, long long bytesPerBlock, long long kOffset,
    long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,
    const int* tables, int tableStride, const int* tiles, int numTiles, int H, int K, float scale,
    bf16_t* out, const FwTensorMap* kMap, const FwTensorMap* vMap, int splitKeys, int maxSplits,
    float* partM, float* partL, float* partAcc) {
  constexpr int PANELS = D / 64;            // 64-dimension panels of a row
  constexpr int PIECES = D / 8;             // 16-byte pieces of a key row
  constexpr int PASS_ROWS = 32 / PIECES;    // key rows a warp copies per pass
  constexpr int Q_PANEL = 64 * 128;         // bytes of one panel of a consumer's queries
  constexpr int Q_BYTES = PANELS * Q_PANEL; // bytes of a consumer's queries
  constexpr int PANEL = FW_KEYS * 128;      // bytes of one panel of a stage's keys
  constexpr int STAGE = PANELS * PANEL;     // bytes of K (or V) per stage
  constexpr int NS = FW_KEYS / 2;           // score registers a thread (m64 x n128)
  constexpr int NO = D / 2;                 // output registers a thread (m64 x nD)
  constexpr int NP = FW_KEYS / 4;           // probability registers a thread (bf16 pairs)
  static_assert(FA_ROWS == 128 && (D == 64 || D == 128), "two consumers of 64 rows");
  extern __shared__ __align__(16) unsigned char fw_shared[];
  const unsigned int qShared = (shared_address(fw_shared) + 1023u) & ~1023u;
  const unsigned int kShared = qShared + 2 * Q_BYTES;
  const unsigned int vShared = kShared + STAGES * STAGE;
  const unsigned int bars = vShared + STAGES * STAGE;  // fullK, fullV, emptyK, emptyV [stage]
  auto fullK = [&](int st) { return bars + 8 * st; };
  auto fullV = [&](int st) { return bars + 8 * (STAGES + st); };
  auto emptyK = [&](int st) { return bars + 8 * (2 * STAGES + st); };
  auto emptyV = [&](int st) { return bars + 8 * (3 * STAGES + st); };

  int tile = numTiles - 1 - (int)blockIdx.x;  // the last tiles of a request are the longest
  int row0 = tiles[2 * tile];
  int count = tiles[2 * tile + 1];
  int kvHead = blockIdx.y;
  int group = H / K;
  int maxPos = positions[row0 + count - 1];
  int keyTiles = maxPos / FW_KEYS + 1;
  // the key tiles this block reads: all of them, or with SPLIT those of split blockIdx.z (keys
  // z·splitKeys .. (z + 1)·splitKeys − 1); a split past the tile's last key has nothing to read
  int tBegin = 0;
  int tEnd = keyTiles;
  if constexpr (SPLIT) {
    tBegin = (int)blockIdx.z * (splitKeys / FW_KEYS);
    tEnd = min(keyTiles, tBegin + splitKeys / FW_KEYS);
    if (tBegin >= tEnd) {
      return;  // the whole block alike, before any barrier
    }
  }
  int nTiles = tEnd - tBegin;
  int consumers = 64 / group < count ? 2 : 1;  // the second's rows start at token 64 / group
  int warp = threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int st = 0; st < STAGES; st++) {
      fw_barrier_init(fullK(st), TMA ? 1 : 128);  // TMA: the one producer thread's expect_tx
      fw_barrier_init(fullV(st), TMA ? 1 : 128);
      fw_barrier_init(emptyK(st), 4 * consumers);
      fw_barrier_init(emptyV(st), 4 * consumers);
    }
    fw_barrier_init_fence();
  }
  __syncthreads();

  if (warp < 4) {
    // ------------------------------------------------------------------------------ producer
    fw_registers_down<FW_PRODUCER_REGS>();
    const int* table = tables + (long long)tokenRequest[row0] * tableStride;
    if constexpr (TMA) {
      // one thread issues every copy: per tile, the boxes (`box` positions of one block, 64
      // dimensions) that hold a key at or below the block's last position, K then V
      if (threadIdx.x != 0) {
        return;
      }
      const int box = min(blockTokens, FW_KEYS);
#pragma unroll 1
      for (int u = 0; u < nTiles; u++) {
        int t = tBegin + u;
        int st = u % STAGES;
        unsigned int parity = ((u / STAGES) & 1) ^ 1;
        int k0 = t * FW_KEYS;
        int boxes = (min(FW_KEYS, maxPos + 1 - k0) + box - 1) / box;
        unsigned int bytes = (unsigned int)(boxes * box * 128 * PANELS);
#pragma unroll 1
        for (int half = 0; half < 2; half++) {
          const FwTensorMap* map = half == 0 ? kMap : vMap;
          unsigned int full = half == 0 ? fullK(st) : fullV(st);
          unsigned int to = (half == 0 ? kShared : vShared) + st * STAGE;
          fw_barrier_wait(half == 0 ? emptyK(st) : emptyV(st), parity);
          fw_barrier_expect(full, bytes);
#pragma unroll 1
          for (int j = 0; j < boxes; j++) {
            int key = k0 + j * box;
            int b = key / blockTokens;
            int page = table[b];
#pragma unroll
            for (int panel = 0; panel < PANELS; panel++) {
              fw_tma_load4(to + panel * PANEL + j * box * 128, map, panel * 64,
                           key - b * blockTokens, kvHead, page, full);
            }
          }
        }
      }
      return;
    }
    // lane L looks up key 32·warp + L of each tile; in pass c it copies piece `piece` of key row
    // 32·warp + c·PASS_ROWS + sub, from the lookup of lane c·PASS_ROWS + sub
    int piece = lane % PIECES;
    int sub = lane / PIECES;
    const char* kFrom = pool + kOffset + piece * 16;
    const char* vFrom = pool + vOffset + piece * 16;
    unsigned int pieceAt = (piece / 8) * PANEL;
#pragma unroll 1
    for (int u = 0; u < nTiles; u++) {
      int t = tBegin + u;
      int st = u % STAGES;
      unsigned int parity = ((u / STAGES) & 1) ^ 1;  // the first use of a stage waits for none
      long long at = -1;                                 // -1: past the block's last position
      int key = t * FW_KEYS + warp * 32 + lane;
      if (key <= maxPos) {
        int b = key / blockTokens;
        at = (long long)table[b] * bytesPerBlock +
             ((long long)kvHead * blockTokens + (key - b * blockTokens)) * (D * 2);
      }
      unsigned int stageAt = st * STAGE + pieceAt;
      fw_barrier_wait(emptyK(st), parity);
#pragma unroll 4
      for (int c = 0; c < PIECES; c++) {
        long long from = __shfl_sync(0xffffffffu, at, c * PASS_ROWS + sub);
        int row = warp * 32 + c * PASS_ROWS + sub;
        unsigned int to = stageAt + row * 128 + (((piece % 8) ^ (row % 8)) << 4);
        flash_copy16(kShared + to, kFrom + (from < 0 ? 0 : from), from < 0 ? 0 : 16);
      }
      fw_barrier_arrive_on_copies(fullK(st));
      fw_barrier_wait(emptyV(st), parity);
#pragma unroll 4
      for (int c = 0; c < PIECES; c++) {
        long long from = __shfl_sync(0xffffffffu, at, c * PASS_ROWS + sub);
        int row = warp * 32 + c * PASS_ROWS + sub;
        unsigned int to = stageAt + row * 128 + (((piece % 8) ^ (row % 8)) << 4);
        flash_copy16(vShared + to, vFrom + (from < 0 ? 0 : from), from < 0 ? 0 : 16);
      }
      fw_barrier_arrive_on_copies(fullV(st));
    }
    fw_copies_wait();
  } else {
    // ------------------------------------------------------------------------------ consumers
    fw_registers_up<FW_CONSUMER_REGS>();
    int c = warp / 4 - 1;  // rows 64c .. 64c + 63
    if (c >= consumers) {
      return;  // every row past the tile's tokens
    }
    int tid = threadIdx.x - 128 * (c + 1);
    int wi = tid / 32;
    int g = lane / 4;
    int tq = lane % 4;
    bool turns = consumers == 2;
    int myTurn = 3 + c;     // named barriers 3 and 4: a consumer's turn to issue its products
    int otherTurn = 4 - c;  // (1 and 2: each consumer's queries stored)

    // the queries, rounded to bf16, swizzled; rows past the tile's tokens are zeros. All the
    // loads first, then the stores.
    const unsigned int qBase = qShared + c * Q_BYTES;
    constexpr int QLOADS = 64 * D / 4 / 128;
    float4 qv[QLOADS];
#pragma unroll
    for (int k = 0; k < QLOADS; k++) {
      int idx = tid + 128 * k;
      int row = 64 * c + idx / (D / 4);
      qv[k] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row / group < count) {
        qv[k] = *(const float4*)(q + (long long)(row0 + row / group) * H * D +
                                 (kvHead * group + row % group) * D + (idx % (D / 4)) * 4);
      }
    }
#pragma unroll
    for (int k = 0; k < QLOADS; k++) {
      int idx = tid + 128 * k;
      int r = idx / (D / 4);
      int e = (idx % (D / 4)) * 4;
      unsigned int to =
          qBase + (e / 64) * Q_PANEL + r * 128 + ((((e % 64) / 8) ^ (r % 8)) << 4) + (e % 8) * 2;
      fw_store_shared(to, pack_bf16x2(qv[k].x, qv[k].y), pack_bf16x2(qv[k].z, qv[k].w));
    }
    fw_fence_proxy();
    fw_named_sync(1 + c, 128);

    // this thread's rows (g and g + 8 of its warp's 16) and their positions
    int rows[2] = {64 * c + 16 * wi + g, 64 * c + 16 * wi + g + 8};
    int pos[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
      pos[i] = positions[row0 + min(rows[i] / group, count - 1)];
    }
    int firstPos = positions[row0 + min(64 * c / group, count - 1)];
    float scaleLog2 = scale * 1.4426950408889634f;
    const unsigned long long qDesc = fw_descriptor(qBase, 16, 1024);
    const unsigned long long kDesc = fw_descriptor(kShared, 16, 1024);
    const unsigned long long vDesc = fw_descriptor(vShared, PANEL, 1024);

    // s: the scores of a tile, then their probabilities (row i of the thread in s[4j + 2i + e],
    // key 8j + 2tq + e); p: the probabilities as bf16, the a fragments of p · v; o: the output
    // (o[4j + 2i + e] dimension 8j + 2tq + e)
    float s[NS];
    unsigned int p[NP];
    float o[NO];
#pragma unroll
    for (int i = 0; i < NO; i++) {
      o[i] = 0.f;
    }
    float m[2] = {NEG_INF, NEG_INF};
    float l[2] = {0.f, 0.f};
    float correction[2];

    // s = q · kᵀ over the keys of stage st, 16 dimensions a step
    auto scores = [&](int st) {
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        unsigned long long a = qDesc + (unsigned long long)(((kk / 4) * Q_PANEL + (kk % 4) * 32) >> 4);
        unsigned long long b =
            kDesc + (unsigned long long)((st * STAGE + (kk / 4) * PANEL + (kk % 4) * 32) >> 4);
        if (kk == 0) {
          fw_mma_ss_n128<0>(s, a, b);
        } else {
          fw_mma_ss_n128<1>(s, a, b);
        }
      }
    };
    // o += p · v over the keys of stage st, 16 keys a step
    auto values = [&](int st) {
#pragma unroll
      for (int kk = 0; kk < FW_KEYS / 16; kk++) {
        unsigned long long b = vDesc + (unsigned long long)((st * STAGE + kk * 16 * 128) >> 4);
        if constexpr (D == 128) {
          fw_mma_rs_n128(o, p + 4 * kk, b);
        } else {
          fw_mma_rs_n64(o, p + 4 * kk, b);
        }
      }
    };
    // the online softmax of the scores of the keys k0 .. k0 + FW_KEYS - 1, into s; l rescaled
    auto softmax = [&](int k0) {
      if (k0 + FW_KEYS - 1 > firstPos) {
#pragma unroll
        for (int j = 0; j < FW_KEYS / 8; j++) {
#pragma unroll
          for (int i = 0; i < 2; i++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
              if (k0 + 8 * j + 2 * tq + e > pos[i]) {
                s[4 * j + 2 * i + e] = NEG_INF;
              }
            }
          }
        }
      }
      float rowMax[2] = {NEG_INF, NEG_INF};
#pragma unroll
      for (int j = 0; j < FW_KEYS / 8; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          rowMax[e / 2] = fmaxf(rowMax[e / 2], s[4 * j + e]);
        }
      }
      float shift[2];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        rowMax[i] = fmaxf(rowMax[i], __shfl_xor_sync(0xffffffffu, rowMax[i], 1));
        rowMax[i] = fmaxf(rowMax[i], __shfl_xor_sync(0xffffffffu, rowMax[i], 2));
        float mNew = fmaxf(m[i], rowMax[i]);
        correction[i] = fast_exp2((m[i] - mNew) * scaleLog2);
        m[i] = mNew;
        shift[i] = -mNew * scaleLog2;
        l[i] *= correction[i];
      }
#pragma unroll
      for (int j = 0; j < FW_KEYS / 8; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int i = e / 2;
          float pe = fast_exp2(fmaf(s[4 * j + e], scaleLog2, shift[i]));
          s[4 * j + e] = pe;
          l[i] += pe;
        }
      }
    };
    // o rescaled by the correction of the last softmax
    auto rescale = [&]() {
#pragma unroll
      for (int i = 0; i < NO; i++) {
        o[i] *= correction[(i % 4) / 2];
      }
    };
    // p's fragments: the score blocks 2kk and 2kk + 1 are the 16 keys of step kk
    auto pack = [&]() {
#pragma unroll
      for (int kk = 0; kk < FW_KEYS / 16; kk++) {
        p[4 * kk + 0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
        p[4 * kk + 1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
        p[4 * kk + 2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
        p[4 * kk + 3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
      }
    };
    // this warp is done with a stage's K or V (its wgmma's have completed)
    auto release = [&](unsigned int bar) {
      __syncwarp();
      if (lane == 0) {
        fw_barrier_arrive(bar);
      }
    };

    // the first consumer issues first; a consumer hands the turn over after each issue but the
    // second's last (so that every named-barrier arrival is waited for)
    if (turns && c == 1) {
      fw_named_arrive(3, 256);
    }
    fw_barrier_wait(fullK(0), 0);
    if (!TMA) {
      fw_fence_proxy();  // cp.async wrote through the generic proxy; wgmma reads through the async
    }
    if (turns) {
      fw_named_sync(myTurn, 256);
    }
    fw_mma_fence();
    scores(0);
    fw_mma_commit();
    if (turns && !(c == 1 && nTiles == 1)) {
      fw_named_arrive(otherTurn, 256);
    }
    fw_mma_wait<0>();
    fw_fence_registers<NS>(s);
    release(emptyK(0));
    softmax(tBegin * FW_KEYS);
    pack();

#pragma unroll 1
    for (int u = 1; u < nTiles; u++) {
      int t = tBegin + u;
      int st = u % STAGES;
      int prev = (u - 1) % STAGES;
      fw_barrier_wait(fullK(st), (u / STAGES) & 1);
      fw_barrier_wait(fullV(prev), ((u - 1) / STAGES) & 1);
      if (!TMA) {
        fw_fence_proxy();
      }
      if (turns) {
        fw_named_sync(myTurn, 256);
      }
      fw_mma_fence();
      scores(st);
      fw_mma_commit();
      if constexpr (TMA) {
        // o's rescale for tile t - 1's maximum while the tensor cores compute s, not after the
        // product with v: the same multiplications in the same order, off the path between one
        // turn's products and the next
        if (u > 1) {
          rescale();
          fw_fence_registers<NO>(o);
          fw_mma_fence();
        }
      }
      values(prev);
      fw_mma_commit();
      if (turns && !(c == 1 && u == nTiles - 1)) {
        fw_named_arrive(otherTurn, 256);
      }
      fw_mma_wait<1>();  // the scores are in; the product with v may still run
      fw_fence_registers<NS>(s);
      release(emptyK(st));
      softmax(t * FW_KEYS);
      fw_mma_wait<0>();
      fw_fence_registers<NO>(o);
      fw_fence_registers<NP>(p);
      release(emptyV(prev));
      if constexpr (!TMA) {
        rescale();
      }
      pack();
    }
    int last = (nTiles - 1) % STAGES;
    fw_barrier_wait(fullV(last), ((nTiles - 1) / STAGES) & 1);
    if constexpr (TMA) {
      // The TMA copied whole boxes, so the last tile's positions past the block's last one hold
      // whatever the pool (or an earlier tile) left there, NaNs included; cp.async copied zeros.
      // Their scores are -inf and their p exactly 0, but 0 · NaN is NaN: zero those rows of V,
      // each consumer half of them, then fence and wait for both before either reads them.
      int valid = min(FW_KEYS, maxPos + 1 - (tEnd - 1) * FW_KEYS);  // a split's inner end: whole
      int pieces = (FW_KEYS - valid) * 8 * PANELS;  // 16-byte pieces past the last position
      unsigned int base = vShared + last * STAGE;
      for (int i = tid + 128 * c; i < pieces; i += 128 * consumers) {
        int panel = i / ((FW_KEYS - valid) * 8);
        int r = valid + (i / 8) % (FW_KEYS - valid);
        fw_store_shared(base + panel * PANEL + r * 128 + (i % 8) * 16, 0u, 0u);
        fw_store_shared(base + panel * PANEL + r * 128 + (i % 8) * 16 + 8, 0u, 0u);
      }
      fw_fence_proxy();
      if (turns) {
        fw_named_sync(5, 256);
      }
      if (nTiles > 1) {
        rescale();  // for the last tile's maximum (see the loop)
        fw_fence_registers<NO>(o);
      }
    } else {
      fw_fence_proxy();
    }
    fw_mma_fence();
    values(last);
    fw_mma_commit();
    fw_mma_wait<0>();
    fw_fence_registers<NO>(o);
    fw_fence_registers<NP>(p);

#pragma unroll
    for (int i = 0; i < 2; i++) {
      float sum = l[i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      int r = rows[i];
      if (r / group >= count) {
        continue;
      }
      if constexpr (SPLIT) {
        // a token of one split is written here, in full; one of several leaves this split's
        // partial (m in log2 units, l, the unnormalized o) for decode_attention_combine, and only
        // for the splits its own keys reach (the combine reads no other)
        int splits = (pos[i] + splitKeys) / splitKeys;
        if (splits > 1) {
          if ((int)blockIdx.z < splits) {
            long long at =
                ((long long)(row0 + r / group) * H + kvHead * group + r % group) * maxSplits +
                blockIdx.z;
            if (tq == 0) {
              partM[at] = m[i] * scaleLog2;
              partL[at] = sum;
            }
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
              *(float2*)&partAcc[at * D + 8 * j + 2 * tq] =
                  make_float2(o[4 * j + 2 * i], o[4 * j + 2 * i + 1]);
            }
          }
          continue;
        }
      }
      float inv = 1.f / sum;
      unsigned int* row = (unsigned int*)(out + (long long)(row0 + r / group) * H * D +
                                          (kvHead * group + r % group) * D);
#pragma unroll
      for (int j = 0; j < D / 8; j++) {
        row[(8 * j + 2 * tq) / 2] = pack_bf16x2(o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
      }
    }
  }
}

#else

// Not Hopper's sm_90a: the kernels exist (the module names them) but must not be launched.
struct __align__(64) FwTensorMap {
  unsigned long long bits[16];
};

template <int D, int STAGES, bool TMA, bool SPLIT>
__device__ __forceinline__ void flash_attention_wgmma(
    const float* q, const char* pool, long long bytesPerBlock, long long kOffset,
    long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,
    const int* tables, int tableStride, const int* tiles, int numTiles, int H, int K, float scale,
    bf16_t* out, const FwTensorMap* kMap, const FwTensorMap* vMap, int splitKeys, int maxSplits,
    float* partM, float* partL, float* partAcc) {
  __trap();
}

#endif

// The Hopper flash kernel of head size D: FW_THREADS threads, one block a multiprocessor; dynamic
// shared memory 1024 + 2 · 64 · D · 2 + 2 · STAGES · FW_KEYS · D · 2 + 32 · STAGES bytes.
#define FLASH_ATTENTION_WGMMA(D, STAGES, NAME)                                                  \
  extern "C" __global__ void __launch_bounds__(FW_THREADS, 1) NAME(                             \
      const float* q, const char* pool, long long bytesPerBlock, long long kOffset,             \
      long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,        \
      const int* tables, int tableStride, const int* tiles, int numTiles, int H, int K,         \
      float scale, bf16_t* out) {                                                               \
    flash_attention_wgmma<D, STAGES, false, false>(q, pool, bytesPerBlock, kOffset, vOffset,    \
                                                   blockTokens, positions, tokenRequest, tables, \
                                                   tableStride, tiles, numTiles, H, K, scale,    \
                                                   out, nullptr, nullptr, 0, 1, nullptr, nullptr,\
                                                   nullptr);                                     \
  }

FLASH_ATTENTION_WGMMA(64, 4, flash_attention_wgmma_d64)
FLASH_ATTENTION_WGMMA(128, 3, flash_attention_wgmma_d128)

// The same kernel with K and V copied by the TMA unit (cp.async.bulk.tensor) instead of cp.async:
// one producer thread issues, per key tile, a copy per (block of the pool, 64-dimension panel)
// into the same swizzled stages, counted on the stage's barrier as bytes (expect_tx); the
// consumers need no proxy fence before their wgmma's read them, and the producer's 128 threads of
// copies and table lookups per tile become one thread's few. kMap and vMap describe this layer's
// K and V in the pool as 4-dimensional tensors of bf16, innermost first: (D dimensions, blockTokens
// positions, K heads, blocks of the pool), strides (D · 2, blockTokens · D · 2, bytesPerBlock)
// bytes, boxes of (64, min(blockTokens, FW_KEYS), 1, 1), the 128-byte swizzle (CudaCausalLm makes
// them). blockTokens must be a multiple of 8 that divides FW_KEYS or that FW_KEYS divides, so that
// each box starts on the swizzle's 1,024-byte pattern. Results: the same bits as
// flash_attention_wgmma_dD (the same products and sums in the same order, and zeros where that
// kernel copies zeros: see the last tile's V).
#define FLASH_ATTENTION_TMA(D, STAGES, NAME)                                                    \
  extern "C" __global__ void __launch_bounds__(FW_THREADS, 1) NAME(                             \
      const float* q, const char* pool, long long bytesPerBlock, long long kOffset,             \
      long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,        \
      const int* tables, int tableStride, const int* tiles, int numTiles, int H, int K,         \
      float scale, bf16_t* out, const __grid_constant__ FwTensorMap kMap,                       \
      const __grid_constant__ FwTensorMap vMap) {                                               \
    flash_attention_wgmma<D, STAGES, true, false>(q, pool, bytesPerBlock, kOffset, vOffset,     \
                                                  blockTokens, positions, tokenRequest, tables,  \
                                                  tableStride, tiles, numTiles, H, K, scale,     \
                                                  out, &kMap, &vMap, 0, 1, nullptr, nullptr,     \
                                                  nullptr);                                      \
  }

FLASH_ATTENTION_TMA(64, 4, flash_attention_tma_d64)
FLASH_ATTENTION_TMA(128, 3, flash_attention_tma_d128)

// The two kernels above split over the keys (flash-decoding for prefill chunks): a third grid
// dimension of maxSplits splits of splitKeys keys each (a multiple of FW_KEYS), block (tile, KV
// head, z) reading only split z's key tiles. A token whose keys fit one split (position + 1 <=
// splitKeys) is written to out in full by split 0, as by the unsplit kernel; another leaves one
// partial per split its keys reach, in decode_attention_combine's layout (m [t][H][maxSplits], in
// log2 units, then l, then acc [t][H][maxSplits][D]), and the combine (splitKeys, cap = maxSplits)
// merges them into out. For a chunk of few tiles over a long context (a restored prefix's suffix),
// whose unsplit grid is a block per (tile, KV head) streaming every key, a handful of the
// multiprocessors. Not batch-invariant (the merge rounds differently): normal mode only.
#define FLASH_ATTENTION_SPLIT(D, STAGES, TMA, NAME)                                             \
  extern "C" __global__ void __launch_bounds__(FW_THREADS, 1) NAME(                             \
      const float* q, const char* pool, long long bytesPerBlock, long long kOffset,             \
      long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,        \
      const int* tables, int tableStride, const int* tiles, int numTiles, int H, int K,         \
      float scale, bf16_t* out, int splitKeys, int maxSplits, float* partM, float* partL,       \
      float* partAcc, const __grid_constant__ FwTensorMap kMap,                                 \
      const __grid_constant__ FwTensorMap vMap) {                                               \
    flash_attention_wgmma<D, STAGES, TMA, true>(q, pool, bytesPerBlock, kOffset, vOffset,       \
                                                blockTokens, positions, tokenRequest, tables,    \
                                                tableStride, tiles, numTiles, H, K, scale, out,  \
                                                &kMap, &vMap, splitKeys, maxSplits, partM,       \
                                                partL, partAcc);                                 \
  }

FLASH_ATTENTION_SPLIT(64, 4, false, flash_attention_wgmma_split_d64)
FLASH_ATTENTION_SPLIT(128, 3, false, flash_attention_wgmma_split_d128)
FLASH_ATTENTION_SPLIT(64, 4, true, flash_attention_tma_split_d64)
FLASH_ATTENTION_SPLIT(128, 3, true, flash_attention_tma_split_d128)

// ---------------------------------------------------------------------------------- split-KV decode

// Decode attention split over the keys (flash-decoding) for the bf16 pool of the tensor-core
// models. In decode a request has one token, so the flash kernel runs one block per (request, KV
// head): at batch 1 a long context streams its keys through a handful of multiprocessors. Here a
// token's keys 0 .. pos are cut into splits of consecutive positions; decode_attention_split_dD
// computes, per (token, KV head, split), the partial softmax of the split for every query head of
// the KV head (its maximum m, its sum l and its unnormalized output acc, float32) and
// decode_attention_combine merges a token's splits by their maxima. Scores are in base 2 as in the
// flash kernel: s = (q·k)·scale·log2(e) with q rounded to bf16 as the flash kernel's fragments
// are, p = 2^(s − m); the probabilities stay float32 (the flash kernel rounds them to bf16 for its
// mma), so the two paths agree to the rounding of p and of the output, not bit for bit: the split
// path serves non-deterministic models only.
//
// Splits: a token whose keys are 0 .. n−1 takes splits of split_size(n) positions, splitKeys or
// the least multiple of it that keeps the splits at most `cap` (CudaCausalLm.splitSize is the same
// rule; the grid's maxSplits, min(cap, ceil(longest context / splitKeys)), bounds every token's
// splits, which do not grow with the context), so a split is a whole number of splitKeys-position
// units and the last one is short. The partials of split s of (token t, query head h) sit at row (t·H + h)·maxSplits + s of
// partM, partL ([t][H][maxSplits]) and partAcc ([t][H][maxSplits][D]).

#define DS_WARPS 4
#define DS_HEADS 8
#define DS_VALUE_LOADS 8  // value rows a lane loads before adding the first

// Positions per split of a token whose keys are 0 .. n−1.
__device__ __forceinline__ int split_size(int n, int splitKeys, int cap) {
  int units = (n + splitKeys - 1) / splitKeys;
  return splitKeys * ((units + cap - 1) / cap);
}

// Eight bf16 (16 bytes, the first in the low half of r.x) to float32.
__device__ __forceinline__ void unpack_bf16x8(uint4 r, float* f) {
  f[0] = __uint_as_float(r.x << 16);
  f[1] = __uint_as_float(r.x & 0xffff0000u);
  f[2] = __uint_as_float(r.y << 16);
  f[3] = __uint_as_float(r.y & 0xffff0000u);
  f[4] = __uint_as_float(r.z << 16);
  f[5] = __uint_as_float(r.z & 0xffff0000u);
  f[6] = __uint_as_float(r.w << 16);
  f[7] = __uint_as_float(r.w & 0xffff0000u);
}

// Kernel 1: the partial attention of one split. A block takes one decode token, one KV head and up
// to DS_HEADS of its query heads (a slice of the group: groups above DS_HEADS take several
// blocks, each reading the keys again), and one split; blocks past the token's own splits exit.
// Its warps take the split's keys 32 at a time (warp w the chunks w, w + DS_WARPS, ...):
//   scores: lane j reads key c0 + j's row whole (16-byte loads), dots it with every query of the
//           slice (held in shared memory as float32, read as float4 broadcasts) in dimension order;
//   softmax: per head the chunk's maximum by butterfly, the warp's running m, the rescale of what
//           it has, p = 2^(s − m) into shared memory, and l as a per-lane sum;
//   values: 16-byte loads again, D/8 lanes a row, so a step reads 32·16 bytes of 32/(D/8) rows;
//           each lane adds p·v into its 8 dimensions for every head, keys in position order of its
//           rows.
// At the end the lanes holding the same dimensions and then the warps merge by their maxima, in
// a fixed order. A token with a single split writes its bf16 output directly (acc / l, the flash
// kernel's format); otherwise the block writes its partials for decode_attention_combine.
// Grid: (tokens · K · ceil(group / DS_HEADS), maxSplits). Block: 32 · DS_WARPS. Shared memory
// (static): queries DS_HEADS·D, probabilities DS_WARPS·DS_HEADS·32, the warps' outputs
// DS_WARPS·DS_HEADS·D floats, their m and l, and the chunk's row offsets.
template <int D>
__device__ __forceinline__ void decode_attention_split(
    const float* q, const char* pool, long long bytesPerBlock, long long kOffset,
    long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,
    const int* tables, int tableStride, int H, int K, int splitKeys, int cap, int maxSplits,
    float scale, float* partM, float* partL, float* partAcc, bf16_t* out) {
  constexpr int LPR = D / 8;     // lanes a value row takes, 8 dimensions (16 bytes) each
  constexpr int RPS = 32 / LPR;  // value rows a warp reads per step
  __shared__ __align__(16) float qs[DS_HEADS][D];
  __shared__ float ps[DS_WARPS][DS_HEADS][32];
  __shared__ __align__(16) float accs[DS_WARPS][DS_HEADS][D];
  __shared__ float ms[DS_WARPS][DS_HEADS];
  __shared__ float ls[DS_WARPS][DS_HEADS];
  __shared__ long long rows[DS_WARPS][32];  // byte offset of a chunk key's block and slot

  int group = H / K;
  int slices = (group + DS_HEADS - 1) / DS_HEADS;
  int slice = (int)(blockIdx.x % slices);
  int kvHead = (int)((blockIdx.x / slices) % K);
  int t = (int)(blockIdx.x / slices / K);
  int split = blockIdx.y;
  int n = positions[t] + 1;
  int per = split_size(n, splitKeys, cap);
  int splits = (n + per - 1) / per;
  if (split >= splits) {
    return;
  }
  int k0 = split * per;
  int k1 = min(k0 + per, n);
  int h0 = kvHead * group + slice * DS_HEADS;  // the slice's first query head
  int heads = min(DS_HEADS, group - slice * DS_HEADS);
  int warp = threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  const int* table = tables + (long long)tokenRequest[t] * tableStride;

  const float* qt = q + ((long long)t * H + h0) * D;
  for (int i = threadIdx.x; i < DS_HEADS * D; i += blockDim.x) {
    int h = i / D;
    qs[h][i % D] = h < heads ? bf16_to_float(float_to_bf16(qt[i])) : 0.f;
  }
  __syncthreads();

  float scaleLog2 = scale * 1.4426950408889634f;
  float m[DS_HEADS], l[DS_HEADS], acc[DS_HEADS][8];
#pragma unroll
  for (int h = 0; h < DS_HEADS; h++) {
    m[h] = NEG_INF;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      acc[h][i] = 0.f;
    }
  }
  int sub = lane / LPR;    // the row of a value step this lane reads
  int piece = lane % LPR;  // and its 16 bytes: dimensions 8·piece .. 8·piece + 7

  for (int c0 = k0 + warp * 32; c0 < k1; c0 += DS_WARPS * 32) {
    int key = c0 + lane;
    bool valid = key < k1;
    long long at = 0;
    if (valid) {
      at = (long long)table[key / blockTokens] * bytesPerBlock +
           ((long long)kvHead * blockTokens + key % blockTokens) * (D * 2);
    }
    rows[warp][lane] = at;
    float s[DS_HEADS];
#pragma unroll
    for (int h = 0; h < DS_HEADS; h++) {
      s[h] = 0.f;
    }
    if (valid) {
      const uint4* kr = (const uint4*)(pool + kOffset + at);
      uint4 raw[D / 8];
#pragma unroll
      for (int c = 0; c < D / 8; c++) {
        raw[c] = kr[c];
      }
#pragma unroll
      for (int c = 0; c < D / 8; c++) {
        float k[8];
        unpack_bf16x8(raw[c], k);
#pragma unroll
        for (int h = 0; h < DS_HEADS; h++) {
          if (h < heads) {
            float4 qa = *(const float4*)&qs[h][c * 8];
            float4 qb = *(const float4*)&qs[h][c * 8 + 4];
            float v = s[h];
            v = fmaf(qa.x, k[0], v);
            v = fmaf(qa.y, k[1], v);
            v = fmaf(qa.z, k[2], v);
            v = fmaf(qa.w, k[3], v);
            v = fmaf(qb.x, k[4], v);
            v = fmaf(qb.y, k[5], v);
            v = fmaf(qb.z, k[6], v);
            v = fmaf(qb.w, k[7], v);
            s[h] = v;
          }
        }
      }
    }
    // the chunk holds key c0 < k1 (lane 0), so every head's new maximum is finite; the first
    // rescale is 2^(−inf) = 0
#pragma unroll
    for (int h = 0; h < DS_HEADS; h++) {
      if (h < heads) {
        float sh = valid ? s[h] * scaleLog2 : NEG_INF;
        float mNew = fmaxf(m[h], warp_max(sh));
        float correction = fast_exp2(m[h] - mNew);
        float p = valid ? fast_exp2(sh - mNew) : 0.f;
        m[h] = mNew;
        l[h] = fmaf(l[h], correction, p);
        ps[warp][h][lane] = p;
#pragma unroll
        for (int i = 0; i < 8; i++) {
          acc[h][i] *= correction;
        }
      }
    }
    __syncwarp();
    int count = min(32, k1 - c0);
    // the value rows in batches of DS_VALUE_LOADS steps, every load of a batch in flight before
    // its first use (a decode step's time here is the latency of these loads); the rows are added
    // in the same order
    for (int b0 = 0; b0 < 32; b0 += DS_VALUE_LOADS * RPS) {
      uint4 raw[DS_VALUE_LOADS];
#pragma unroll
      for (int s = 0; s < DS_VALUE_LOADS; s++) {
        int j = b0 + s * RPS + sub;
        raw[s] = j < count ? ((const uint4*)(pool + vOffset + rows[warp][j]))[piece]
                           : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int s = 0; s < DS_VALUE_LOADS; s++) {
        int j = b0 + s * RPS + sub;
        if (j < count) {
          float v[8];
          unpack_bf16x8(raw[s], v);
#pragma unroll
          for (int h = 0; h < DS_HEADS; h++) {
            if (h < heads) {
              float p = ps[warp][h][j];
#pragma unroll
              for (int i = 0; i < 8; i++) {
                acc[h][i] = fmaf(p, v[i], acc[h][i]);
              }
            }
          }
        }
      }
    }
    __syncwarp();  // ps and rows are the next chunk's
  }

  // the warp's lanes of the same dimensions (lane, lane + LPR, ...), then its l
#pragma unroll
  for (int h = 0; h < DS_HEADS; h++) {
    if (h < heads) {
#pragma unroll
      for (int i = 0; i < 8; i++) {
#pragma unroll
        for (int o = LPR; o < 32; o <<= 1) {
          acc[h][i] += __shfl_xor_sync(0xffffffffu, acc[h][i], o);
        }
      }
      float sum = warp_sum(l[h]);
      if (lane < LPR) {
        *(float4*)&accs[warp][h][piece * 8] =
            make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        *(float4*)&accs[warp][h][piece * 8 + 4] =
            make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
      }
      if (lane == 0) {
        ms[warp][h] = m[h];
        ls[warp][h] = sum;
      }
    }
  }
  __syncthreads();
  // the warps, in warp order (a warp without keys has m = −inf, l = 0, acc = 0: weight 0)
  for (int i = threadIdx.x; i < heads * D; i += blockDim.x) {
    int h = i / D;
    int e = i % D;
    float mMax = NEG_INF;
#pragma unroll
    for (int w = 0; w < DS_WARPS; w++) {
      mMax = fmaxf(mMax, ms[w][h]);
    }
    float a = 0.f;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < DS_WARPS; w++) {
      float f = fast_exp2(ms[w][h] - mMax);
      a = fmaf(accs[w][h][e], f, a);
      sum = fmaf(ls[w][h], f, sum);
    }
    long long row = (long long)t * H + h0 + h;
    if (splits == 1) {
      out[row * D + e] = float_to_bf16(a * (1.f / sum));
    } else {
      long long at = row * maxSplits + split;
      partAcc[at * D + e] = a;
      if (e == 0) {
        partM[at] = mMax;
        partL[at] = sum;
      }
    }
  }
}

// MIN_BLOCKS: blocks per multiprocessor the registers must allow (2 at D = 128: its DS_VALUE_LOADS
// value rows in flight take about 190 registers; the split path serves small batches, few blocks)
#define DECODE_ATTENTION_SPLIT(D, NAME, MIN_BLOCKS)                                              \
  extern "C" __global__ void __launch_bounds__(32 * DS_WARPS, MIN_BLOCKS) NAME(                 \
      const float* q, const char* pool, long long bytesPerBlock, long long kOffset,             \
      long long vOffset, int blockTokens, const int* positions, const int* tokenRequest,        \
      const int* tables, int tableStride, int H, int K, int splitKeys, int cap, int maxSplits,  \
      float scale, float* partM, float* partL, float* partAcc, bf16_t* out) {                   \
    decode_attention_split<D>(q, pool, bytesPerBlock, kOffset, vOffset, blockTokens, positions, \
                              tokenRequest, tables, tableStride, H, K, splitKeys, cap,          \
                              maxSplits, scale, partM, partL, partAcc, out);                    \
  }

DECODE_ATTENTION_SPLIT(64, decode_attention_split_d64, 3)
DECODE_ATTENTION_SPLIT(128, decode_attention_split_d128, 2)

// Kernel 2: out[t][h·d + e] = Σ_s acc_s[e]·2^(m_s − M) / Σ_s l_s·2^(m_s − M), M = max_s m_s, over
// the token's own splits in split order, rounded to bf16; tokens with a single split were
// written by kernel 1 and are skipped. Grid: tokens · H. Block: d (a thread per dimension).
extern "C" __global__ void decode_attention_combine(
    const int* positions, int H, int d, int splitKeys, int cap, int maxSplits, const float* partM,
    const float* partL, const float* partAcc, bf16_t* out) {
  int t = blockIdx.x / H;
  int h = blockIdx.x % H;
  int e = threadIdx.x;
  int n = positions[t] + 1;
  int per = split_size(n, splitKeys, cap);
  int splits = (n + per - 1) / per;
  if (splits == 1 || e >= d) {
    return;
  }
  long long row = ((long long)t * H + h) * maxSplits;
  float mMax = NEG_INF;
  for (int s = 0; s < splits; s++) {
    mMax = fmaxf(mMax, partM[row + s]);
  }
  float a = 0.f;
  float sum = 0.f;
  for (int s = 0; s < splits; s++) {
    float f = fast_exp2(partM[row + s] - mMax);
    a = fmaf(partAcc[(row + s) * d + e], f, a);
    sum = fmaf(partL[row + s], f, sum);
  }
  out[((long long)t * H + h) * d + e] = float_to_bf16(a * (1.f / sum));
}

// ---------------------------------------------------------------------------------- MLP and misc

// out[t][i] = act(gu[t][i]) · gu[t][I + i] for the fused gate | up projection, act SiLU (silu_mul,
// the Llama family) or GELU's tanh approximation (gelu_tanh_mul, Gemma), each value in float32.
// Grid: (tokens, ceil(I / SILU_SPAN)): a row spreads over several blocks, so that a decode step's
// few rows do not leave a few blocks to stream the whole intermediate width. Block: SILU_SPAN / 4
// threads, each taking 4 consecutive values with 16-byte loads when I % 4 == 0 (else one value at a
// time).
#define SILU_SPAN 1024
#define ACT_SILU 0
#define ACT_GELU_TANH 1

// 0.5·g·(1 + tanh(sqrt(2/π)·(g + 0.044715·g³))) · u, the CPU model's float expression.
__device__ __forceinline__ float gelu_tanh_times(float g, float u) {
  float inner = 0.7978845608028654f * (g + 0.044715f * (g * g * g));
  return 0.5f * g * (1.f + tanhf(inner)) * u;
}

__device__ __forceinline__ float silu_times(float g, float u) {
  return g / (1.f + expf(-g)) * u;
}

template <int ACT>
__device__ __forceinline__ float act_times(float g, float u) {
  return ACT == ACT_SILU ? silu_times(g, u) : gelu_tanh_times(g, u);
}

template <int ACT>
__device__ __forceinline__ void gated_mul(const float* gu, int I, float* out_f32,
                                          bf16_t* out_bf16) {
  long long t = blockIdx.x;
  const float* g = gu + t * 2 * I;
  const float* u = g + I;
  int first = blockIdx.y * SILU_SPAN;
  if (I % 4 == 0) {
    int i = first + 4 * threadIdx.x;
    if (i < I) {
      float4 a = *(const float4*)(g + i);
      float4 b = *(const float4*)(u + i);
      float4 y = make_float4(act_times<ACT>(a.x, b.x), act_times<ACT>(a.y, b.y),
                             act_times<ACT>(a.z, b.z), act_times<ACT>(a.w, b.w));
      if (out_bf16) {
        uint2 packed;
        packed.x = (unsigned int)float_to_bf16(y.x) | ((unsigned int)float_to_bf16(y.y) << 16);
        packed.y = (unsigned int)float_to_bf16(y.z) | ((unsigned int)float_to_bf16(y.w) << 16);
        *(uint2*)(out_bf16 + t * I + i) = packed;
      } else {
        *(float4*)(out_f32 + t * I + i) = y;
      }
    }
    return;
  }
  int end = min(I, first + SILU_SPAN);
#pragma unroll 4
  for (int i = first + threadIdx.x; i < end; i += blockDim.x) {
    float y = act_times<ACT>(g[i], u[i]);
    if (out_bf16) {
      out_bf16[t * I + i] = float_to_bf16(y);
    } else {
      out_f32[t * I + i] = y;
    }
  }
}

extern "C" __global__ void silu_mul(const float* gu, int I, float* out_f32, bf16_t* out_bf16) {
  gated_mul<ACT_SILU>(gu, I, out_f32, out_bf16);
}

extern "C" __global__ void gelu_tanh_mul(const float* gu, int I, float* out_f32,
                                         bf16_t* out_bf16) {
  gated_mul<ACT_GELU_TANH>(gu, I, out_f32, out_bf16);
}

// The gated activation over a gate | up product written as bf16 (normal mode's cuBLAS products at
// more rows than gemv_bf16 takes, which round to bf16 in cuBLAS's epilogue, as PyTorch's bf16
// linear layers do): the same grid and block, 8-byte loads of 4 values when I % 4 == 0. Each value
// is computed in float32 from the two rounded inputs; the output is bf16 (a bf16 model's next
// product reads bf16).
// The bf16 in the low and the high half of a 32-bit word, as a float.
__device__ __forceinline__ float bf16_low(unsigned int w) { return bf16_to_float((bf16_t)(w & 0xffffu)); }

__device__ __forceinline__ float bf16_high(unsigned int w) { return bf16_to_float((bf16_t)(w >> 16)); }

template <int ACT>
__device__ __forceinline__ void gated_mul_bf16(const bf16_t* gu, int I, bf16_t* out) {
  long long t = blockIdx.x;
  const bf16_t* g = gu + t * 2 * I;
  const bf16_t* u = g + I;
  int first = blockIdx.y * SILU_SPAN;
  if (I % 4 == 0) {
    int i = first + 4 * threadIdx.x;
    if (i < I) {
      uint2 a = *(const uint2*)(g + i);
      uint2 b = *(const uint2*)(u + i);
      float y0 = act_times<ACT>(bf16_low(a.x), bf16_low(b.x));
      float y1 = act_times<ACT>(bf16_high(a.x), bf16_high(b.x));
      float y2 = act_times<ACT>(bf16_low(a.y), bf16_low(b.y));
      float y3 = act_times<ACT>(bf16_high(a.y), bf16_high(b.y));
      uint2 packed;
      packed.x = (unsigned int)float_to_bf16(y0) | ((unsigned int)float_to_bf16(y1) << 16);
      packed.y = (unsigned int)float_to_bf16(y2) | ((unsigned int)float_to_bf16(y3) << 16);
      *(uint2*)(out + t * I + i) = packed;
    }
    return;
  }
  int end = min(I, first + SILU_SPAN);
  for (int i = first + threadIdx.x; i < end; i += blockDim.x) {
    out[t * I + i] = float_to_bf16(act_times<ACT>(bf16_to_float(g[i]), bf16_to_float(u[i])));
  }
}

extern "C" __global__ void silu_mul_bf16(const bf16_t* gu, int I, bf16_t* out) {
  gated_mul_bf16<ACT_SILU>(gu, I, out);
}

extern "C" __global__ void gelu_tanh_mul_bf16(const bf16_t* gu, int I, bf16_t* out) {
  gated_mul_bf16<ACT_GELU_TANH>(gu, I, out);
}

// x[r] += rmsnorm(y[r]) · w: a sublayer's output normalized before the residual add (the
// "sandwich" blocks of Gemma, whose norms' 1 + w is folded into w at load). The sum of squares as
// rmsnorm's non-quad path, in an order that depends on n only. Grid: rows. Block: a multiple of 32;
// shared memory blockDim.x / 32 floats or more.
extern "C" __global__ void rmsnorm_add(const float* y, const float* w, float* x, int n, float eps) {
  extern __shared__ float scratch[];
  long long r = blockIdx.x;
  const float* in = y + r * n;
  float* out = x + r * n;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    ss += in[i] * in[i];
  }
  float total = block_sum_by_warps(ss, scratch);
  float inv = rsqrtf(total / (float)n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    out[i] += w[i] * (in[i] * inv);
  }
}

// y[i] = bf16(x[i]) for i < n: a float32 activation as the next bf16 product's input (the Mamba
// mixer's u, δ and y). Grid: ceil(n / blockDim.x).
extern "C" __global__ void to_bf16(const float* x, bf16_t* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = float_to_bf16(x[i]);
  }
}

// y[i] = cap · tanh(y[i] / cap) for i < n: logits soft-capped. Grid: ceil(n / blockDim.x).
extern "C" __global__ void softcap_logits(float* y, long long n, float cap) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = cap * tanhf(y[i] / cap);
  }
}

// y[r][i] += b[i]. Grid: rows.
extern "C" __global__ void add_bias(float* y, const float* b, int n) {
  float* row = y + (long long)blockIdx.x * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    row[i] += b[i];
  }
}

// x[r][i] += y[r][i]: a sublayer's output, summed over the tensor-parallel ranks, added to the
// residual stream. Grid: rows.
extern "C" __global__ void add_rows(float* x, const float* y, int n) {
  long long r = blockIdx.x;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    x[r * n + i] += y[r * n + i];
  }
}

// Copies n bytes from src to dst, 16 at a time where both are aligned (the gather and scatter of
// KV blocks: one launch moves many blocks). Grid: blocks to copy. Block: any.
extern "C" __global__ void copy_blocks(
    const long long* srcs, const long long* dsts, long long bytes) {
  const char* s = (const char*)srcs[blockIdx.x];
  char* d = (char*)dsts[blockIdx.x];
  if ((bytes & 15) == 0 && (((long long)s | (long long)d) & 15) == 0) {
    const int4* s4 = (const int4*)s;
    int4* d4 = (int4*)d;
    for (long long i = threadIdx.x; i < bytes / 16; i += blockDim.x) {
      d4[i] = s4[i];
    }
  } else {
    for (long long i = threadIdx.x; i < bytes; i += blockDim.x) {
      d[i] = s[i];
    }
  }
}

// ---------------------------------------------------------------------------------- deterministic GEMM

#define DT 16

__device__ __forceinline__ float load_f32(const void* p, long long i) {
  return ((const float*)p)[i];
}

__device__ __forceinline__ float load_bf16(const void* p, long long i) {
  return bf16_to_float(((const bf16_t*)p)[i]);
}

// y[r][o] = Σ_k x[r][k] · w[o][k] (+ y[r][o] when accumulate), one thread per output through
// 16 × 16 tiles in shared memory, k ascending: every output's sum runs in the same order whatever
// the number of rows, so a row's result never depends on the rows beside it (batch invariance).
// Grid: (ceil(out / 16), ceil(rows / 16)). Block: 256.
template <bool BF16>
__device__ void gemm_fixed_order(
    const void* x, const void* w, float* y, int rows, int in, int out, int accumulate) {
  __shared__ float xs[DT][DT + 1];
  __shared__ float ws[DT][DT + 1];
  int tx = threadIdx.x % DT;
  int ty = threadIdx.x / DT;
  int r = blockIdx.y * DT + ty;
  int o = blockIdx.x * DT + tx;
  int wo = blockIdx.x * DT + ty;
  float acc = 0.f;
  for (int k0 = 0; k0 < in; k0 += DT) {
    int k = k0 + tx;
    float xv = 0.f, wv = 0.f;
    if (r < rows && k < in) {
      xv = BF16 ? load_bf16(x, (long long)r * in + k) : load_f32(x, (long long)r * in + k);
    }
    if (wo < out && k < in) {
      wv = BF16 ? load_bf16(w, (long long)wo * in + k) : load_f32(w, (long long)wo * in + k);
    }
    xs[ty][tx] = xv;
    ws[ty][tx] = wv;
    __syncthreads();
    int n = min(DT, in - k0);
    for (int kk = 0; kk < n; kk++) {
      acc = fmaf(xs[ty][kk], ws[tx][kk], acc);
    }
    __syncthreads();
  }
  if (r < rows && o < out) {
    long long i = (long long)r * out + o;
    y[i] = accumulate ? y[i] + acc : acc;
  }
}

extern "C" __global__ void gemm_fixed_f32(
    const float* x, const float* w, float* y, int rows, int in, int out, int accumulate) {
  gemm_fixed_order<false>(x, w, y, rows, in, out, accumulate);
}

extern "C" __global__ void gemm_fixed_bf16(
    const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) {
  gemm_fixed_order<true>(x, w, y, rows, in, out, accumulate);
}

// The fixed-order product on the tensor cores for bf16: y[r][o] = Σ_k x[r][k] · w[o][k]
// (+ y[r][o] when accumulate), float32 accumulation. A block computes GT_ROWS rows × GT_OUTS
// outputs, four warps of 32 × 64; k advances 32 at a time (two mma.sync steps of 16) in ascending
// order, the next slice read into registers while the current one is multiplied. An output's sum
// is the same sequence of mma steps whatever the number of rows or where its row falls in a
// block: batch-invariant, without split-K or a shape-dependent choice. Needs in % 8 == 0.
// Grid: (ceil(out / GT_OUTS), ceil(rows / GT_ROWS)). Block: 128.
#define GT_ROWS 64
#define GT_OUTS 128
#define GT_K 32

extern "C" __global__ void __launch_bounds__(128) gemm_fixed_bf16_mma(
    const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) {
  __shared__ __align__(16) bf16_t xs[GT_ROWS][GT_K + 8];
  __shared__ __align__(16) bf16_t ws[GT_OUTS][GT_K + 8];
  int warp = threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  int g = lane / 4;
  int tq = lane % 4;
  int r0 = blockIdx.y * GT_ROWS;
  int o0 = blockIdx.x * GT_OUTS;
  int wr = (warp / 2) * 32;  // the warp's rows and outputs within the block
  int wo = (warp % 2) * 64;
  // per thread: 2 pieces of 8 bf16 of x's slice (64 × 32), 4 of w's (128 × 32)
  uint4 xr[2], wr4[4];
  auto fetch = [&](int k0) {
#pragma unroll
    for (int c = 0; c < 2; c++) {
      int idx = threadIdx.x + c * 128;
      int r = idx / 4;
      int k = k0 + (idx % 4) * 8;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (r0 + r < rows && k < in) {
        v = *(const uint4*)(x + (long long)(r0 + r) * in + k);
      }
      xr[c] = v;
    }
#pragma unroll
    for (int c = 0; c < 4; c++) {
      int idx = threadIdx.x + c * 128;
      int o = idx / 4;
      int k = k0 + (idx % 4) * 8;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (o0 + o < out && k < in) {
        v = *(const uint4*)(w + (long long)(o0 + o) * in + k);
      }
      wr4[c] = v;
    }
  };
  float acc[2][8][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
#pragma unroll
    for (int n = 0; n < 8; n++) {
      acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    }
  }
  fetch(0);
  for (int k0 = 0; k0 < in; k0 += GT_K) {
    __syncthreads();
#pragma unroll
    for (int c = 0; c < 2; c++) {
      int idx = threadIdx.x + c * 128;
      *(uint4*)&xs[idx / 4][(idx % 4) * 8] = xr[c];
    }
#pragma unroll
    for (int c = 0; c < 4; c++) {
      int idx = threadIdx.x + c * 128;
      *(uint4*)&ws[idx / 4][(idx % 4) * 8] = wr4[c];
    }
    __syncthreads();
    if (k0 + GT_K < in) {
      fetch(k0 + GT_K);
    }
#pragma unroll
    for (int kk = 0; kk < GT_K; kk += 16) {
      unsigned int a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; mt++) {
        // matrices: rows 0-7 / 8-15 × k 0-7, then × k 8-15: a0 a1 a2 a3 of the fragment
        load_matrices(a[mt], &xs[wr + mt * 16 + lane % 8 + ((lane / 8) % 2) * 8]
                                [kk + (lane / 16) * 8]);
      }
#pragma unroll
      for (int n = 0; n < 8; n += 2) {
        unsigned int b[4];
        // matrices: outputs n·8 .. +7 × k 0-7, k 8-15, then outputs (n+1)·8 ..
        load_matrices(b, &ws[wo + n * 8 + lane % 8 + (lane / 16) * 8][kk + ((lane / 8) % 2) * 8]);
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
          mma_bf16(acc[mt][n], a[mt], b[0], b[1]);
          mma_bf16(acc[mt][n + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      int r = r0 + wr + mt * 16 + g + 8 * i;
      if (r >= rows) {
        continue;
      }
#pragma unroll
      for (int n = 0; n < 8; n++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
          int o = o0 + wo + n * 8 + 2 * tq + j;
          if (o < out) {
            long long at = (long long)r * out + o;
            float v = acc[mt][n][2 * i + j];
            y[at] = accumulate ? y[at] + v : v;
          }
        }
      }
    }
  }
}

// The fixed-order bf16 product again, laid out to keep the tensor cores fed, with the same result
// as gemm_fixed_bf16_mma bit for bit: y[r][o] = Σ_k x[r][k] · w[o][k] (+ y[r][o] when
// accumulate), float32 accumulation, in % 8 == 0, x and w 16-byte aligned. One template,
// gemm_fixed_tiles, instantiated for three block tiles (GEMM_FIXED_V2 below): 128 × 128 outputs
// for prefill's thousands of rows, and 64 × 128 and 64 × 64, whose more numerous blocks fill the
// GPU when the rows are few. Gemm.java (FixedOrderTile) picks one by shape. (A 128 × 256 tile,
// 8 warps, was dropped: timed on an H100 and an H200 it was slower than 128 × 128 wherever the
// rule picked it; see FixedOrderTile.)
//
// Why the bits are v1's: an output's value is decided by the chain of mma.sync m16n8k16 steps
// that builds it, and nothing else touches its accumulator. In both kernels that chain is the
// same: one float32 accumulator, starting at +0, then the steps k = 0, 16, 32, ... in ascending
// order, 2 · ceil(in / 32) of them (v1's slices are 32 wide, so when in % 32 is 1 to 16 its last
// step multiplies only zeros; v2 takes that step too, and never a step past it). Within a step,
// slot j holds k + j (the same ldmatrix pattern), the pieces of 8 k at or past `in` are +0 in x
// and in w alike, the output's row sits at row r % 16 of the mma tile and its output at column
// o % 8, as in v1. Then y = acc, or y + acc as one float32 addition. Rows past `rows` and
// outputs past `out` are zeros in shared memory and are never written. None of this depends on
// the block tile, the warps' layout or the ring's depth: they decide which warp builds an
// output's chain and when its slices arrive, never the chain's steps (and tiles start at
// multiples of 16 rows and 8 outputs, so an output keeps its place in the mma tile). So every
// instantiation may be swapped for v1, or for another, for any launch, chosen by rows or shape,
// without changing a bit: a row's result still does not depend on the rows beside it (batch
// invariance). Splitting k would change the chain; no instantiation does.
//
// Layout. A block computes ROWS × OUTS outputs with WARPS_M × WARPS_N warps, each of
// MT · 16 rows × NT · 8 outputs; per step of 16 k a warp loads MT A and NT / 2 B fragment
// groups (ldmatrix.x4) for MT · NT mmas (a warp of 64 × 64: 8 loads for 32 mmas, the most reuse
// a warp's registers allow). k advances F2_K at a time through a STAGES-deep ring in dynamic
// shared memory filled by cp.async (16 bytes a copy, pieces past `rows`, `out` or `in`
// zero-filled), so the loads of slice t + STAGES - 1 are in flight while slice t is multiplied;
// one barrier per slice. A row of a slice is 64 bf16 = 8 pieces of 16 bytes, piece c stored at
// c ^ (row % 8): the 8 rows an ldmatrix reads, and the 8 pieces a quarter-warp copies, fall in
// distinct banks. Fragments of the next 16 k are loaded while the current ones are multiplied.
// Blocks are ordered in groups of F2_GROUP row tiles, row tiles fastest, so that the blocks
// running together share their x rows and w rows in L2.
// Grid: ceil(rows / ROWS) · ceil(out / OUTS), one dimension. Block: 32 · WARPS_M · WARPS_N.
// Dynamic shared memory: STAGES · (ROWS + OUTS) · F2_K · 2 bytes.
#define F2_K 64
#define F2_GROUP 16

// 16 bytes from global to shared memory, asynchronously; zeros instead when !valid.
__device__ __forceinline__ void copy16_async(unsigned int dst, const bf16_t* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :
               : "r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// A warp's fragments of the 16 k from kk · 16 of the slice at `stage` (a shared-space address):
// a[mt] rows mt · 16 .. + 15 of the warp, b[n] outputs n · 8 .. + 7. aAt / bAt: the lane's
// ldmatrix row in bytes from the stage (bAt past the stage's x rows, among its w rows); aSw / bSw:
// the lane's piece before the swizzle, xor the row's swizzle (see gemm_fixed_tiles).
template <int MT, int NT>
__device__ __forceinline__ void f2_fragments(unsigned int (&a)[MT][4], unsigned int (&b)[NT][2],
                                             unsigned int stage, unsigned int aAt,
                                             unsigned int aSw, unsigned int bAt, unsigned int bSw,
                                             int kk) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    // matrices: rows 0-7 / 8-15 × k 0-7, then × k 8-15: a0 a1 a2 a3 of the fragment
    load_matrices_at(a[mt], stage + aAt + mt * 16 * F2_K * 2 + (((2 * kk) ^ aSw) << 4));
  }
#pragma unroll
  for (int np = 0; np < NT / 2; np++) {
    // matrices: outputs 2np · 8 .. + 7 × k 0-7, × k 8-15, then outputs (2np + 1) · 8 ..
    unsigned int t[4];
    load_matrices_at(t, stage + bAt + np * 16 * F2_K * 2 + (((2 * kk) ^ bSw) << 4));
    b[2 * np][0] = t[0];
    b[2 * np][1] = t[1];
    b[2 * np + 1][0] = t[2];
    b[2 * np + 1][1] = t[3];
  }
}

// STEPS steps of 16 k of the slice at `stage`, ascending (4: a whole slice; 2: its first half,
// the last slice when in % 64 is 1 to 32).
template <int STEPS, int MT, int NT>
__device__ __forceinline__ void f2_multiply(float (&acc)[MT][NT][4], unsigned int stage,
                                            unsigned int aAt, unsigned int aSw, unsigned int bAt,
                                            unsigned int bSw) {
  unsigned int a[2][MT][4];
  unsigned int b[2][NT][2];
  f2_fragments<MT, NT>(a[0], b[0], stage, aAt, aSw, bAt, bSw, 0);
#pragma unroll
  for (int kk = 0; kk < STEPS; kk++) {
    if (kk + 1 < STEPS) {
      f2_fragments<MT, NT>(a[(kk + 1) % 2], b[(kk + 1) % 2], stage, aAt, aSw, bAt, bSw, kk + 1);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
      for (int n = 0; n < NT; n++) {
        mma_bf16(acc[mt][n], a[kk % 2][mt], b[kk % 2][n][0], b[kk % 2][n][1]);
      }
    }
  }
}

template <int ROWS, int OUTS, int WARPS_M, int WARPS_N, int STAGES>
__device__ __forceinline__ void gemm_fixed_tiles(
    const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) {
  constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  constexpr int MT = ROWS / WARPS_M / 16;  // a warp's tiles of 16 rows
  constexpr int NT = OUTS / WARPS_N / 8;   // and of 8 outputs
  constexpr int COPY_ROWS = THREADS / 8;   // the rows one round of the block's copies covers
  constexpr int X_BYTES = ROWS * F2_K * 2;
  constexpr int STAGE_BYTES = (ROWS + OUTS) * F2_K * 2;
  static_assert(ROWS % (16 * WARPS_M) == 0 && OUTS % (16 * WARPS_N) == 0,
                "a warp takes whole tiles of 16 rows and pairs of tiles of 8 outputs");
  static_assert(COPY_ROWS % 8 == 0 && ROWS % COPY_ROWS == 0 && OUTS % COPY_ROWS == 0,
                "a thread's copies keep its row % 8, hence its swizzle");
  static_assert(OUTS / COPY_ROWS <= 32 && STAGES >= 2, "one bit a round of copies; a ring");
  extern __shared__ __align__(128) bf16_t f2_ring[];
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  // the block's tile: groups of F2_GROUP row tiles (the last group may be smaller), row tiles
  // fastest within a group
  const int tilesM = (rows + ROWS - 1) / ROWS;
  const int tilesN = (out + OUTS - 1) / OUTS;
  const int perGroup = F2_GROUP * tilesN;
  const int group = blockIdx.x / perGroup;
  const int firstM = group * F2_GROUP;
  const int groupM = min(tilesM - firstM, F2_GROUP);
  const int local = blockIdx.x - group * perGroup;
  const int r0 = (firstM + local % groupM) * ROWS;
  const int o0 = (local / groupM) * OUTS;

  // copies: thread t moves piece t % 8 of rows t / 8 + COPY_ROWS · i of every slice
  const int piece = tid % 8;
  const int row = tid / 8;
  const long long rowStep = (long long)COPY_ROWS * in;
  const bf16_t* xFrom = x + (long long)(r0 + row) * in + piece * 8;
  const bf16_t* wFrom = w + (long long)(o0 + row) * in + piece * 8;
  unsigned int xRows = 0, wRows = 0;  // bit i: row row + COPY_ROWS · i is in range
#pragma unroll
  for (int i = 0; i < ROWS / COPY_ROWS; i++) {
    xRows |= (r0 + row + COPY_ROWS * i < rows ? 1u : 0u) << i;
  }
#pragma unroll
  for (int i = 0; i < OUTS / COPY_ROWS; i++) {
    wRows |= (o0 + row + COPY_ROWS * i < out ? 1u : 0u) << i;
  }
  const unsigned int ring = shared_address(f2_ring);
  const unsigned int copyTo = ring + row * F2_K * 2 + ((piece ^ (row % 8)) << 4);
  const int kTiles = (in + F2_K - 1) / F2_K;
  auto copySlice = [&](int t) {
    const int k0 = t * F2_K;
    const bool inK = k0 + piece * 8 < in;
    const unsigned int to = copyTo + (t % STAGES) * STAGE_BYTES;
#pragma unroll
    for (int i = 0; i < ROWS / COPY_ROWS; i++) {
      bool valid = inK && ((xRows >> i) & 1u);
      copy16_async(to + i * COPY_ROWS * F2_K * 2, valid ? xFrom + i * rowStep + k0 : x, valid);
    }
#pragma unroll
    for (int i = 0; i < OUTS / COPY_ROWS; i++) {
      bool valid = inK && ((wRows >> i) & 1u);
      copy16_async(to + X_BYTES + i * COPY_ROWS * F2_K * 2, valid ? wFrom + i * rowStep + k0 : w,
                   valid);
    }
  };

  // fragments: the warp's rows wm .. wm + MT · 16 - 1 and outputs wn .. wn + NT · 8 - 1 of the
  // block; the lane's ldmatrix row (its row % 8 is lane % 8, hence the swizzle lane % 8) and
  // piece within 16 k
  const int wm = (warp / WARPS_N) * (MT * 16);
  const int wn = (warp % WARPS_N) * (NT * 8);
  const unsigned int aAt = (wm + lane % 8 + ((lane / 8) % 2) * 8) * F2_K * 2;
  const unsigned int aSw = (lane / 16) ^ (lane % 8);
  const unsigned int bAt = X_BYTES + (wn + lane % 8 + (lane / 16) * 8) * F2_K * 2;
  const unsigned int bSw = ((lane / 8) % 2) ^ (lane % 8);

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int n = 0; n < NT; n++) {
      acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    }
  }

#pragma unroll
  for (int t = 0; t < STAGES - 1; t++) {
    if (t < kTiles) {
      copySlice(t);
    }
    copy_async_commit();  // empty groups too: the count of groups stays that of slices
  }
  for (int t = 0; t < kTiles; t++) {
    copy_async_wait<STAGES - 2>();  // slice t has landed (this thread's copies)
    __syncthreads();  // everyone's copies of slice t, and everyone done with slice t - 1
    if (t + STAGES - 1 < kTiles) {
      copySlice(t + STAGES - 1);  // into the stage of slice t - 1
    }
    copy_async_commit();
    const unsigned int stage = ring + (t % STAGES) * STAGE_BYTES;
    // v1's steps end at 32 · ceil(in / 32): the last slice takes 2 steps when in % 64 is 1 .. 32
    if (in - t * F2_K > 32) {
      f2_multiply<4>(acc, stage, aAt, aSw, bAt, bSw);
    } else {
      f2_multiply<2>(acc, stage, aAt, aSw, bAt, bSw);
    }
  }
  copy_async_wait<0>();

  const int g = lane / 4;
  const int tq = lane % 4;
  // pairs of outputs as one 8-byte access when every pair is 8-byte aligned
  const bool pairs = out % 2 == 0 && ((unsigned long long)y & 7ull) == 0;
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      int r = r0 + wm + mt * 16 + g + 8 * i;
      if (r >= rows) {
        continue;
      }
      float* yr = y + (long long)r * out;
#pragma unroll
      for (int n = 0; n < NT; n++) {
        int o = o0 + wn + n * 8 + 2 * tq;
        float v0 = acc[mt][n][2 * i];
        float v1 = acc[mt][n][2 * i + 1];
        if (pairs) {
          if (o < out) {  // then o + 1 < out too: out and o are even
            float2* p = (float2*)(yr + o);
            float2 s = make_float2(v0, v1);
            if (accumulate) {
              float2 old = *p;
              s.x = old.x + v0;
              s.y = old.y + v1;
            }
            *p = s;
          }
        } else {
          if (o < out) {
            yr[o] = accumulate ? yr[o] + v0 : v0;
          }
          if (o + 1 < out) {
            yr[o + 1] = accumulate ? yr[o + 1] + v1 : v1;
          }
        }
      }
    }
  }
}

// A kernel of gemm_fixed_tiles, with gemm_fixed_bf16_mma's parameters. MIN_BLOCKS: blocks per
// multiprocessor the registers must allow, as many as the shared memory allows (228 KiB a
// multiprocessor on sm_90, 1 KiB of it reserved per block). Gemm.java's FixedOrderTile repeats
// each line's tile, warps and stages; keep the two in step.
#define GEMM_FIXED_V2(NAME, ROWS, OUTS, WARPS_M, WARPS_N, STAGES, MIN_BLOCKS)                   \
  extern "C" __global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, MIN_BLOCKS) NAME(        \
      const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) {  \
    gemm_fixed_tiles<ROWS, OUTS, WARPS_M, WARPS_N, STAGES>(x, w, y, rows, in, out, accumulate); \
  }

// 4 warps of 64 × 64, 3 stages: 96 KiB, two blocks a multiprocessor (prefill's many rows)
GEMM_FIXED_V2(gemm_fixed_bf16_mma_v2_128x128, 128, 128, 2, 2, 3, 2)
// 4 warps of 32 × 64, 4 stages: 96 KiB, two blocks a multiprocessor
GEMM_FIXED_V2(gemm_fixed_bf16_mma_v2_64x128, 64, 128, 2, 2, 4, 2)
// 4 warps of 32 × 32, 4 stages: 64 KiB, three blocks a multiprocessor (a few rows)
GEMM_FIXED_V2(gemm_fixed_bf16_mma_v2_64x64, 64, 64, 2, 2, 4, 3)

// ---------------------------------------------------------------------------------- wgmma GEMM

// Deterministic mode's bf16 product on Hopper's warpgroup tensor-core instruction (wgmma, sm_90a
// only): y[r][o] = Σ_k x[r][k] · w[o][k] (+ y[r][o] when accumulate), float32 accumulation,
// in % 8 == 0, x and w 16-byte aligned, rows and outputs of any count: gemm_fixed_tiles's
// parameters and contract, at close to cuBLAS's speed for prefill's thousands of rows. One
// template, gemm_fixed_wgmma, instantiated for six block tiles (GEMM_FIXED_WGMMA below) from
// 128 × 256 outputs down to 64 × 32 (128 × 192 among them, a candidate the rule does not take
// until its time is measured); Gemm.java (FixedOrderWgmmaTile) picks one by shape when the
// switch tokenspeed.cuda.fixedgemm is wgmma, on compute capability 9.0 only.
//
// Batch invariance. An output's value is decided by the chain of wgmma m64nNk16 steps that
// builds it: one float32 accumulator in a register, starting at +0, then the steps k = 0, 16,
// 32, ... in ascending order, ceil(in / 16) of them and no other (the last slice of 64 k takes
// only its steps that reach below `in`; within the last step, the k at or past `in` are +0 in x
// and w alike, copied as zeros). Each step adds to the accumulator the products of the output's
// row of x and row of w over its 16 k, whatever N, the warpgroup or the row's place in the
// 64-row tile: the hardware's arithmetic per output does not depend on them (FixedGemmWgmmaGpuTest
// checks every tile against every other bit for bit). Then y = acc, or y + acc as one float32
// addition. Nothing else depends on the tile, the block's position, the rows of the launch or the
// ring's depth: they decide which warpgroup builds an output's chain and when its slices arrive,
// never the chain. So every tile may be swapped for another, for any launch, chosen by rows or
// shape, without changing a bit: a row's result does not depend on the rows beside it. Splitting
// k changes the chain: no tile does, and the parts of k below are chosen by the weight's shape
// alone, the same for every launch of a product. (These are not the bits of the mma.sync kernels above:
// a step of wgmma and two of mma.sync m16n8k16 need not round alike, so a run takes every
// product from one family, never a mix.)
//
// Layout. A block computes ROWS = 64 · WGS rows × OUTS outputs with WGS warpgroups (128 threads
// each, at warps 0 and 4); warpgroup g owns rows 64g .. 64g + 63 and all OUTS outputs, one wgmma
// m64n{OUTS}k16 per 16 k, both operands read from shared memory (K-major, as x and w lie) through
// matrix descriptors, the accumulators in registers (OUTS / 2 floats a thread). k advances FW_K =
// 64 at a time through a STAGES-deep ring in dynamic shared memory: a stage holds the slice's
// ROWS rows of x then its OUTS rows of w, each row 64 bf16 = 128 bytes = 8 pieces of 16 bytes,
// piece c of row r stored at c ^ (r % 8), every 8 rows 1,024 bytes apart: the hardware's 128-byte
// swizzle, whose pattern follows the address bits, hence stages at 1,024-byte boundaries (the
// ring is aligned up, 1 KiB of padding requested). Every thread copies (cp.async, 16 bytes a
// copy, L1 bypassed; rows past `rows` or `out` zero-filled on the ring's first pass and left
// alone after, pieces at or past `in` zero-filled). Per slice t: wait for this thread's copies of
// slice t, fence.proxy.async (cp.async writes through the generic proxy, wgmma reads through the
// async one), __syncthreads, start the copies of slice t + STAGES - 2, issue slice t's wgmma
// steps and commit them, then wait until only they are in flight: the tensor cores always hold
// the next slice's steps while the barrier and the copies go on, and the barrier of slice t + 1
// certifies that every warpgroup is done reading slice t - 1, whose stage slice t + STAGES - 2
// reuses. Blocks are ordered in groups of FW_GROUP row tiles, row tiles fastest, as
// gemm_fixed_tiles's. The epilogue writes y straight from the accumulators (the accumulator
// layout of m64nNk16: warp j of the warpgroup holds rows 16j .. 16j + 15, lane l rows l / 4 and
// l / 4 + 8, outputs 8i + 2 (l % 4) and the next), pairs of floats as one 8-byte access when
// aligned.
// Grid: ceil(rows / ROWS) · ceil(out / OUTS) in x; in y, the parts of k (1: the whole of k). Block:
// 128 · WGS. Dynamic shared memory: STAGES · (ROWS + OUTS) · FW_K · 2 + 1024 bytes.
//
// Parts of k (gridDim.y = P > 1; Gemm.java's tokenspeed.cuda.fixedsplit, the number of parts a
// function of the weight's shape alone): the slices of 64 k are cut into P runs of ceil(slices / P)
// (the last shorter), part p = blockIdx.y builds its outputs' chains over its run only, from +0,
// and writes them, never accumulating, to y + p · rows · out: y is then a float32 buffer of P
// products, which gemm_fixed_combine adds in part order into the output. An output is then
// (((part 0 + part 1) + ...) + part P - 1), or y + that: the same chain whatever the tile, the
// rows or the launch, so batch invariance holds as without parts, with other bits.
#define FW_K 64
#define FW_GROUP 16

// The value of a wgmma product's (and of gemm_fixed_combine's) `accumulate` that stores y as bf16
// instead of float32 (0 stores float32, 1 adds to it); Gemm.java's STORE_BF16.
#define FIXED_STORE_BF16 2

// Outputs o and o + 1 (those below out) of the row starting at element `row` of y: stored as
// float32, added to it (accumulate 1), or stored as bf16, each rounded once (FIXED_STORE_BF16: a
// rounding of the float32 sum, so the same bits whatever the rows beside it). `pairs`: out is
// even and y aligned for one access a pair, so o + 1 < out whenever o < out.
__device__ __forceinline__ void fw_store_pair(float* y, long long row, int o, int out, float v0,
                                              float v1, int accumulate, bool pairs) {
  if (accumulate == FIXED_STORE_BF16) {
    bf16_t* yr = (bf16_t*)y + row;
    if (pairs) {
      if (o < out) {
        *(unsigned int*)(yr + o) = pack_bf16x2(v0, v1);
      }
      return;
    }
    if (o < out) {
      yr[o] = float_to_bf16(v0);
    }
    if (o + 1 < out) {
      yr[o + 1] = float_to_bf16(v1);
    }
    return;
  }
  float* yr = y + row;
  if (pairs) {
    if (o < out) {
      float2* p = (float2*)(yr + o);
      float2 s = make_float2(v0, v1);
      if (accumulate) {
        float2 old = *p;
        s.x = old.x + v0;
        s.y = old.y + v1;
      }
      *p = s;
    }
    return;
  }
  if (o < out) {
    yr[o] = accumulate ? yr[o] + v0 : v0;
  }
  if (o + 1 < out) {
    yr[o + 1] = accumulate ? yr[o + 1] + v1 : v1;
  }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A shared-memory matrix descriptor of wgmma for a K-major operand in 128-byte swizzled rows
// (swizzle mode 1), rows of 8 a core-matrix group 1,024 bytes apart (the stride byte offset; the
// leading byte offset is unused by this layout and set to 16 bytes), starting at `address`, a
// 1,024-byte boundary plus the step's 32 bytes a 16 k. Fields in units of 16 bytes.
__device__ __forceinline__ unsigned long long fw_descriptor(unsigned int address) {
  return (unsigned long long)((address & 0x3ffffu) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}

// wgmma.fence: orders the warpgroup's register accesses before the wgmma that follow.
__device__ __forceinline__ void fw_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void fw_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Waits until at most PENDING of the warpgroup's committed groups of wgmma are in flight.
template <int PENDING>
__device__ __forceinline__ void fw_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}

// Keeps the compiler from moving accesses of the accumulators across the wgmma fences and waits
// (it cannot see that wgmma writes them asynchronously).
template <int R>
__device__ __forceinline__ void fw_hold(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++) {
    asm volatile("" : "+f"(d[i])::"memory");
  }
}

// One step: d (64 × N, float32, the warpgroup's accumulator fragment) += A (64 × 16 from the
// descriptor a) · B (N × 16 from b)ᵀ, bf16, both K-major; scale-d 1 (d is always added).
template <int N>
__device__ __forceinline__ void fw_mma(float (&d)[N / 2], unsigned long long a,
                                       unsigned long long b);

template <>
__device__ __forceinline__ void fw_mma<256>(float (&d)[128], unsigned long long a,
                                         unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
      "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
      "%123, %124, %125, %126, %127}, "
      "%128, %129, 1, 1, 1, 0, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b));
}

template <>
__device__ __forceinline__ void fw_mma<192>(float (&d)[96], unsigned long long a,
                                         unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
      "%92, %93, %94, %95}, "
      "%96, %97, 1, 1, 1, 0, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(a), "l"(b));
}

template <>
__device__ __forceinline__ void fw_mma<128>(float (&d)[64], unsigned long long a,
                                         unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, 1, 1, 1, 0, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a), "l"(b));
}

template <>
__device__ __forceinline__ void fw_mma<64>(float (&d)[32], unsigned long long a,
                                         unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, 1, 1, 1, 0, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b));
}

template <>
__device__ __forceinline__ void fw_mma<32>(float (&d)[16], unsigned long long a,
                                         unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, 1, 1, 1, 0, 0;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b));
}

// STEPS steps of 16 k from the slice whose descriptors are a and b, ascending: 4, a whole slice;
// fewer for the last slice when in % 64 is 1 to 48; then commits them as one group. The fence and
// the commit sit in the same branch as the steps, so that the assembler adds no fence of its own.
template <int N, int STEPS>
__device__ __forceinline__ void fw_steps(float (&d)[N / 2], unsigned long long a,
                                         unsigned long long b) {
  fw_fence();
#pragma unroll
  for (int s = 0; s < STEPS; s++) {
    fw_mma<N>(d, a + 2 * s, b + 2 * s);  // 32 bytes a step: 2 units of the address field
  }
  fw_commit();
}

template <int WGS, int OUTS, int STAGES>
__device__ __forceinline__ void gemm_fixed_wgmma(
    const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) {
  constexpr int ROWS = 64 * WGS;
  constexpr int THREADS = 128 * WGS;
  constexpr int COPY_ROWS = THREADS / 8;  // the rows one round of the block's copies covers
  constexpr int ROW_BYTES = FW_K * 2;
  constexpr int X_BYTES = ROWS * ROW_BYTES;
  constexpr int STAGE_BYTES = (ROWS + OUTS) * ROW_BYTES;
  constexpr int R = OUTS / 2;  // accumulators a thread
  // a wgmma N that fw_mma has: the powers of two and 192. Nothing below needs a power of two: the
  // output tiles are counted by division, the copies go in OUTS / COPY_ROWS rounds and the
  // epilogue in OUTS / 8 groups of 8 outputs, whole numbers for each of these N
  static_assert(OUTS == 32 || OUTS == 64 || OUTS == 128 || OUTS == 192 || OUTS == 256,
                "a wgmma's N that fw_mma has");
  static_assert(OUTS % COPY_ROWS == 0 && OUTS / COPY_ROWS <= 32, "whole rounds, a bit each");
  static_assert(COPY_ROWS % 8 == 0, "a thread's copies keep its row % 8, hence its swizzle");
  static_assert(STAGES >= 3, "slice t + STAGES - 2 is copied while slices t - 1 and t are read");
  extern __shared__ __align__(1024) unsigned char fw_ring[];
  const int tid = threadIdx.x;

  // the block's tile: groups of FW_GROUP row tiles (the last group may be smaller), row tiles
  // fastest within a group
  const int tilesM = (rows + ROWS - 1) / ROWS;
  const int tilesN = (out + OUTS - 1) / OUTS;
  const int perGroup = FW_GROUP * tilesN;
  const int group = blockIdx.x / perGroup;
  const int firstM = group * FW_GROUP;
  const int groupM = min(tilesM - firstM, FW_GROUP);
  const int local = blockIdx.x - group * perGroup;
  const int r0 = (firstM + local % groupM) * ROWS;
  const int o0 = (local / groupM) * OUTS;

  // the part of k: slices [tBegin, tEnd) of the ceil(in / FW_K), written to its own slice of y
  const int kTiles = (in + FW_K - 1) / FW_K;
  const int perPart = (kTiles + (int)gridDim.y - 1) / (int)gridDim.y;
  const int tBegin = (int)blockIdx.y * perPart;
  const int tEnd = min(kTiles, tBegin + perPart);
  y += (long long)blockIdx.y * rows * out;
  if (gridDim.y > 1) {
    accumulate = 0;
  }

  // copies: thread t moves piece t % 8 of rows t / 8 + COPY_ROWS · i of every slice
  const int piece = tid % 8;
  const int row = tid / 8;
  const long long rowStep = (long long)COPY_ROWS * in;
  const bf16_t* xFrom = x + (long long)(r0 + row) * in + piece * 8;
  const bf16_t* wFrom = w + (long long)(o0 + row) * in + piece * 8;
  unsigned int xRows = 0, wRows = 0;  // bit i: row row + COPY_ROWS · i is in range
#pragma unroll
  for (int i = 0; i < ROWS / COPY_ROWS; i++) {
    xRows |= (r0 + row + COPY_ROWS * i < rows ? 1u : 0u) << i;
  }
#pragma unroll
  for (int i = 0; i < OUTS / COPY_ROWS; i++) {
    wRows |= (o0 + row + COPY_ROWS * i < out ? 1u : 0u) << i;
  }
  const unsigned int ring = (shared_address(fw_ring) + 1023u) & ~1023u;
  const unsigned int copyTo = ring + row * ROW_BYTES + ((piece ^ (row % 8)) << 4);
  auto copySlice = [&](int t) {
    const int k0 = t * FW_K;
    const bool inK = k0 + piece * 8 < in;
    const bool firstPass = t - tBegin < STAGES;  // rows out of range: zeros once, then left alone
    const unsigned int to = copyTo + (t % STAGES) * STAGE_BYTES;
#pragma unroll
    for (int i = 0; i < ROWS / COPY_ROWS; i++) {
      const bool inRows = (xRows >> i) & 1u;
      if (inRows || firstPass) {
        const bool valid = inRows && inK;
        copy16_async(to + i * COPY_ROWS * ROW_BYTES, valid ? xFrom + i * rowStep + k0 : x, valid);
      }
    }
#pragma unroll
    for (int i = 0; i < OUTS / COPY_ROWS; i++) {
      const bool inRows = (wRows >> i) & 1u;
      if (inRows || firstPass) {
        const bool valid = inRows && inK;
        copy16_async(to + X_BYTES + i * COPY_ROWS * ROW_BYTES,
                     valid ? wFrom + i * rowStep + k0 : w, valid);
      }
    }
  };

  // the warpgroup's rows of x and the block's rows of w in the first stage
  const int wg = tid / 128;
  const unsigned long long aFirst = fw_descriptor(ring + wg * 64 * ROW_BYTES);
  const unsigned long long bFirst = fw_descriptor(ring + X_BYTES);

  float acc[R];
#pragma unroll
  for (int i = 0; i < R; i++) {
    acc[i] = 0.f;
  }

#pragma unroll
  for (int t = 0; t < STAGES - 2; t++) {
    if (tBegin + t < tEnd) {
      copySlice(tBegin + t);
    }
    copy_async_commit();  // empty groups too: the count of groups stays that of slices
  }
  for (int t = tBegin; t < tEnd; t++) {
    copy_async_wait<STAGES - 3>();  // slice t has landed (this thread's copies)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // visible to wgmma
    __syncthreads();  // everyone's copies of slice t; every warpgroup done with slice t - 1
    if (t + STAGES - 2 < tEnd) {
      copySlice(t + STAGES - 2);  // into the stage of slice t - 2
    }
    copy_async_commit();
    const unsigned long long at = (unsigned long long)(((t % STAGES) * STAGE_BYTES) >> 4);
    const int left = in - t * FW_K;  // k left from this slice on: steps of 16 up to ceil(in / 16)
    fw_hold(acc);
    if (left > 48) {
      fw_steps<OUTS, 4>(acc, aFirst + at, bFirst + at);
    } else if (left > 32) {
      fw_steps<OUTS, 3>(acc, aFirst + at, bFirst + at);
    } else if (left > 16) {
      fw_steps<OUTS, 2>(acc, aFirst + at, bFirst + at);
    } else {
      fw_steps<OUTS, 1>(acc, aFirst + at, bFirst + at);
    }
    fw_wait<1>();  // slice t - 1's steps are done: its stage may be refilled after the barrier
    fw_hold(acc);
  }
  fw_wait<0>();
  fw_hold(acc);
  copy_async_wait<0>();

  const int lane = tid % 32;
  const int rowOf = r0 + wg * 64 + ((tid / 32) % 4) * 16 + lane / 4;
  const int colOf = o0 + 2 * (lane % 4);
  // pairs of outputs as one access (8 bytes of float32, 4 of bf16) when every pair is aligned
  const bool bf16 = accumulate == FIXED_STORE_BF16;
  const bool pairs =
      out % 2 == 0 && ((unsigned long long)y & (bf16 ? 3ull : 7ull)) == 0;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int r = rowOf + 8 * h;
    if (r >= rows) {
      continue;
    }
#pragma unroll
    for (int i = 0; i < OUTS / 8; i++) {
      fw_store_pair(y, (long long)r * out, colOf + 8 * i, out, acc[4 * i + 2 * h],
                    acc[4 * i + 2 * h + 1], accumulate, pairs);
    }
  }
}

#else

// Not Hopper's sm_90a: no wgmma. Gemm.java never launches these kernels there; should one be
// launched anyway, it stops with an error rather than leave y unwritten.
template <int WGS, int OUTS, int STAGES>
__device__ __forceinline__ void gemm_fixed_wgmma(
    const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) {
  __trap();
}

#endif

// A kernel of gemm_fixed_wgmma, with gemm_fixed_bf16_mma's parameters: ROWS = 64 · WGS rows,
// OUTS outputs, STAGES slices of 64 k in the ring; MIN_BLOCKS blocks per multiprocessor, as many
// as its shared memory allows (228 KiB a multiprocessor on sm_90, 1 KiB of it reserved per block).
// Gemm.java's FixedOrderWgmmaTile repeats each line's numbers; keep the two in step.
#define GEMM_FIXED_WGMMA(NAME, WGS, OUTS, STAGES, MIN_BLOCKS)                                  \
  extern "C" __global__ void __launch_bounds__(128 * WGS, MIN_BLOCKS) NAME(                    \
      const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) { \
    gemm_fixed_wgmma<WGS, OUTS, STAGES>(x, w, y, rows, in, out, accumulate);                   \
  }

// 2 warpgroups of 64 × 256, 4 stages: 193 KiB, one block a multiprocessor (prefill)
GEMM_FIXED_WGMMA(gemm_fixed_wgmma_128x256, 2, 256, 4, 1)
// 2 warpgroups of 64 × 192, 4 stages: 161 KiB, one block a multiprocessor (two would leave each
// block room for fewer than the 3 stages the ring needs). A candidate between 128 × 256 and
// 128 × 128: a third more blocks than 128 × 256 where that tile's last wave runs part-empty (qkv
// at 1,024 rows: 192 blocks of 128 × 256 make 1.45 waves on 132 multiprocessors, 256 of
// 128 × 192 make 1.94). FixedOrderWgmmaTile keeps it out of the rule until its time is measured.
GEMM_FIXED_WGMMA(gemm_fixed_wgmma_128x192, 2, 192, 4, 1)
// 2 warpgroups of 64 × 128, 3 stages: 97 KiB, two blocks a multiprocessor
GEMM_FIXED_WGMMA(gemm_fixed_wgmma_128x128, 2, 128, 3, 2)
// 1 warpgroup of 64 × 128, 4 stages: 97 KiB, two blocks a multiprocessor
GEMM_FIXED_WGMMA(gemm_fixed_wgmma_64x128, 1, 128, 4, 2)
// 1 warpgroup of 64 × 64, 6 stages: 97 KiB, two blocks a multiprocessor (decode batches)
GEMM_FIXED_WGMMA(gemm_fixed_wgmma_64x64, 1, 64, 6, 2)
// 1 warpgroup of 64 × 32, 8 stages: 97 KiB, two blocks a multiprocessor (decode, few outputs)
GEMM_FIXED_WGMMA(gemm_fixed_wgmma_64x32, 1, 32, 8, 2)

// The products of the parts of k (gemm_fixed_wgmma with gridDim.y = parts) added into y, in part
// order: y[i] = s or y[i] + s, s = ((partials[i] + partials[n + i]) + ...) over the parts, n =
// rows · out. Any grid, a thread an output at a time.
extern "C" __global__ void gemm_fixed_combine(const float* partials, float* y, long long n,
                                              int parts, int accumulate) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    float s = partials[i];
    for (int p = 1; p < parts; p++) {
      s += partials[p * n + i];
    }
    if (accumulate == FIXED_STORE_BF16) {
      ((bf16_t*)y)[i] = float_to_bf16(s);
    } else {
      y[i] = accumulate ? y[i] + s : s;
    }
  }
}

// ---------------------------------------------------------------------------------- decode GEMV

// 16 bytes of a weight row, which a product reads once: through the read-only path without
// taking room in L1, which the activations (read again by every block) keep.
__device__ __forceinline__ uint4 load_once16(const bf16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes through the read-only path, kept in L1 for the next reader.
__device__ __forceinline__ uint4 load_reused16(const bf16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The product of a few rows (decode batches): y[r][o] = Σ_k x[r][k] · w[o][k] (+ y[r][o] when
// accumulate), x and w bf16, float32 accumulation; rows 1 .. GV_ROWS, in % 8 == 0, x and w
// 16-byte aligned. Its time is that of reading W once from memory, so the layout serves the
// loads. A block owns GV_OUTS consecutive outputs; its WARPS warps split k, warp v taking the
// slices of GV_STEPS · 32 k that start at (v + WARPS · i) · GV_STEPS · 32. In a slice, lane
// (g = lane / 4, q = lane % 4) reads, for each step of 32 k from k, the 8 elements k + 8q ..
// k + 8q + 7 of weight row o0 + g and of x row g with one 16-byte load each: all 2 · GV_STEPS
// loads are in flight before the first multiply. The multiply-adds are the tensor cores'
// (mma.sync m16n8k16, float32 accumulators; tensor throughput is far from the limit here): x is
// the A operand (its rows 8 .. 15 zero), w the B operand, and the thread's words of either,
// elements (k + 8q + 2j, k + 8q + 2j + 1) for j = 0 .. 3, fill the k slot pairs 2q and 2q + 8 of
// two mmas (j = 0, 1 the first, j = 2, 3 the second). A sum over k does not care which slot holds
// which k as long as x and w agree, so no shuffle or conversion is needed; one weight row per
// quad of lanes keeps every 32-byte sector whole. x rows from `rows` on and weight rows from
// `out` on read the last valid row again; their results are dropped.
// Order: per warp, each mma adds its 16 products to one of two accumulators (elements 0-3 and
// 4-7 of each 8), slices ascending; then the two accumulators are added, and the warps' sums
// added in warp order. The order depends on in, never on rows or on the other rows' values.
// Grid: ceil(out / GV_OUTS). Block: WARPS · 32. Shared memory: static, WARPS · 64 floats.
#define GV_ROWS 8
#define GV_OUTS 8
#define GV_STEPS 8

// The body, for WARPS warps splitting k (GEMV_BF16 below: gemv_bf16 with 8, gemv_bf16_w4 with 4,
// whose blocks are half the size, so that a product of few outputs, 4,096 of them, makes 512
// blocks that all fit on the GPU at once instead of two waves of 8-warp blocks; GemvGpuTest times
// both).
template <int WARPS>
__device__ __forceinline__ void gemv_bf16_body(
    const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) {
  __shared__ float part[WARPS][2][32];
  int warp = threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  int g = lane / 4;
  int q = lane % 4;
  int o0 = blockIdx.x * GV_OUTS;
  const bf16_t* wrow = w + (long long)min(o0 + g, out - 1) * in + 8 * q;
  const bf16_t* xrow = x + (long long)min(g, rows - 1) * in + 8 * q;
  float acc0[4] = {0.f, 0.f, 0.f, 0.f};
  float acc1[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k0 = warp * GV_STEPS * 32; k0 < in; k0 += WARPS * GV_STEPS * 32) {
    uint4 wv[GV_STEPS], xv[GV_STEPS];
#pragma unroll
    for (int s = 0; s < GV_STEPS; s++) {
      int k = k0 + s * 32;
      if (k + 8 * q < in) {
        wv[s] = load_once16(wrow + k);
        xv[s] = load_reused16(xrow + k);
      } else {
        wv[s] = make_uint4(0u, 0u, 0u, 0u);
        xv[s] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    __syncwarp();  // the lanes leave the tail's branches together: mma.sync needs all 32
#pragma unroll
    for (int s = 0; s < GV_STEPS; s++) {
      unsigned int a0[4] = {xv[s].x, 0u, xv[s].y, 0u};
      mma_bf16(acc0, a0, wv[s].x, wv[s].y);
      unsigned int a1[4] = {xv[s].z, 0u, xv[s].w, 0u};
      mma_bf16(acc1, a1, wv[s].z, wv[s].w);
    }
  }
  // acc[0], acc[1]: x row g, outputs o0 + 2q and o0 + 2q + 1 (acc[2], acc[3]: the zero rows)
  part[warp][0][lane] = acc0[0] + acc1[0];
  part[warp][1][lane] = acc0[1] + acc1[1];
  __syncthreads();
  // thread t: x row t / 8, output o0 + t % 8, held by lane t / 2 as its value t % 2
  int t = threadIdx.x;
  if (t < GV_ROWS * GV_OUTS) {
    int r = t / GV_OUTS;
    int o = o0 + t % GV_OUTS;
    if (r < rows && o < out) {
      float sum = part[0][t % 2][t / 2];
#pragma unroll
      for (int v = 1; v < WARPS; v++) {
        sum += part[v][t % 2][t / 2];
      }
      long long at = (long long)r * out + o;
      y[at] = accumulate ? y[at] + sum : sum;
    }
  }
}

#define GEMV_BF16(WARPS, NAME)                                                                   \
  extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME(                                 \
      const bf16_t* x, const bf16_t* w, float* y, int rows, int in, int out, int accumulate) {    \
    gemv_bf16_body<WARPS>(x, w, y, rows, in, out, accumulate);                                   \
  }
GEMV_BF16(8, gemv_bf16)
GEMV_BF16(4, gemv_bf16_w4)

// ---------------------------------------------------------------------------------------------
// Sampling on the device: one block of SAMPLE_THREADS threads per sampled row, the CPU sampler's
// arithmetic (Sampler) reproduced bit for bit. Its sums are of integer weights
//   wq = floor(exp(((double) x - max) / temperature) * scale)      scale = 2^(53 - ceil(log2 V))
// so they are exact and the same in any order: a parallel reduction gives the host's totals. Order
// questions ("the first candidate, in logit-descending order, whose running sum exceeds t") are
// answered by a radix descent over the 64-bit order keys (logit descending, then id ascending;
// unique, because the id is their low half): eight levels of 256 buckets, each level a pass over
// the row that counts (top-k) or sums the weights (top-p, the draw) of the candidates still in the
// chosen prefix. The logits never leave the device; one SampleOut per row comes down.

#define SAMPLE_THREADS 1024
#define MAX_TOP 20

struct SampleRow {   // written by the host, 48 bytes
  double temperature;  // 0: greedy
  double top_p;        // >= 1: off
  double min_p;        // 0: off
  double u;            // the row's uniform draw in [0, 1), from (seed, step)
  int top_k;           // 0: off
  int num_top;         // -1: no logprobs; else 0..MAX_TOP alternatives
  int logit_row;       // the row of the logits matrix
  int penalized_row;   // -1; else the row of the penalized copies that the token is drawn from
};                     // (the log probabilities stay those of the raw row)

struct SampleOut {   // read by the host, 192 bytes
  int token;
  int error;           // 0 ok; 1 a NaN or +Infinity at error_pos (its bits in error_bits); 2 every
                       // logit is -Infinity
  int error_pos;
  int error_bits;
  float logprob;       // the token's log probability (num_top >= 0)
  int n_top;
  int top_ids[MAX_TOP];
  float top_lps[MAX_TOP];
  int pad[2];
};

// The order key of Sampler.orderKey as an unsigned number with the same order as the signed key:
// ascending = logit descending, then id ascending.
__device__ __forceinline__ unsigned long long sample_key(float v, int id) {
  int bits = __float_as_int(v + 0.0f);
  int ascending = bits ^ ((bits >> 31) & 0x7fffffff);
  long long key = ((long long)(~ascending) << 32) | (unsigned int)id;
  return (unsigned long long)key ^ 0x8000000000000000ull;
}

struct SampleScratch {
  unsigned long long hist[256];
  unsigned long long red[SAMPLE_THREADS / 32];
  double dred[SAMPLE_THREADS / 32];
  int ired[SAMPLE_THREADS / 32];
  float fred[SAMPLE_THREADS / 32];
  int chosen;
  unsigned long long below;
  int count;
  unsigned long long top_keys[MAX_TOP];
};

__device__ unsigned long long block_sum_u64(unsigned long long v, SampleScratch* s) {
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  int w = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    s->red[w] = v;
  }
  __syncthreads();
  unsigned long long total = 0;
  for (int i = 0; i < (int)(blockDim.x >> 5); i++) {
    total += s->red[i];
  }
  __syncthreads();
  return total;
}

__device__ unsigned long long block_max_u64(unsigned long long v, SampleScratch* s) {
  for (int o = 16; o > 0; o >>= 1) {
    unsigned long long other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  int w = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    s->red[w] = v;
  }
  __syncthreads();
  unsigned long long best = 0;
  for (int i = 0; i < (int)(blockDim.x >> 5); i++) {
    best = s->red[i] > best ? s->red[i] : best;
  }
  __syncthreads();
  return best;
}

// A fixed-order double sum: each warp's lanes in a butterfly, then the warps in index order.
__device__ double block_sum_f64(double v, SampleScratch* s) {
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  int w = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    s->dred[w] = v;
  }
  __syncthreads();
  double total = 0;
  for (int i = 0; i < (int)(blockDim.x >> 5); i++) {
    total += s->dred[i];
  }
  __syncthreads();
  return total;
}

// What a radix descent selects: the smallest key K (of the elements its filter admits) with
//   COUNT: count(key <= K) >= need          (the need-th smallest)
//   MASS_GE: (double) sum(wq, key <= K) >= bound
//   MASS_GT: (double) sum(wq, key <= K) > bound
#define SEL_COUNT 0
#define SEL_MASS_GE 1
#define SEL_MASS_GT 2

// Which elements a descent sees.
struct SampleFilter {
  const float* x;
  int vocab;
  int all;                      // every element (the logprobs' top ones), else the candidates:
  float max;                    // finite, w >= min_p
  double temperature;
  double min_p;
  double scale;
  unsigned long long cut;       // and key <= cut (ULLONG_MAX: no cut)
};

__device__ __forceinline__ bool sample_element(
    const SampleFilter& f, int i, unsigned long long* key, unsigned long long* wq) {
  float v = f.x[i];
  *key = sample_key(v, i);
  if (f.all) {
    *wq = 0;
    return true;
  }
  if (v == NEG_INF) {
    return false;
  }
  double w = exp(((double)v - (double)f.max) / f.temperature);
  if (w < f.min_p || *key > f.cut) {
    return false;
  }
  *wq = (unsigned long long)floor(w * f.scale);
  return true;
}

// The radix descent; returns K (ULLONG_MAX when no key qualifies) and, in *mass_through (MASS
// modes), the weights of the admitted elements with key <= K.
__device__ unsigned long long sample_select(
    const SampleFilter& f, int mode, unsigned long long need, double bound,
    unsigned long long* mass_through, SampleScratch* s) {
  unsigned long long prefix = 0;
  unsigned long long below = 0;  // count or mass of the admitted elements before the prefix
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      s->hist[b] = 0;
    }
    __syncthreads();
    unsigned long long high = shift == 56 ? 0 : prefix >> (shift + 8);
    for (int i = threadIdx.x; i < f.vocab; i += blockDim.x) {
      unsigned long long key, wq;
      if (!sample_element(f, i, &key, &wq)) {
        continue;
      }
      if (shift != 56 && (key >> (shift + 8)) != high) {
        continue;
      }
      int digit = (int)((key >> shift) & 255);
      atomicAdd(&s->hist[digit], mode == SEL_COUNT ? 1ull : wq);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1;
      unsigned long long acc = below;
      for (int b = 0; b < 256; b++) {
        unsigned long long through = acc + s->hist[b];
        bool ok = mode == SEL_COUNT ? through >= need
            : mode == SEL_MASS_GE ? (double)through >= bound
                                  : (double)through > bound;
        if (ok && s->hist[b] != 0) {
          chosen = b;
          break;
        }
        acc = through;
      }
      s->chosen = chosen;
      s->below = acc;
    }
    __syncthreads();
    int chosen = s->chosen;
    below = s->below;
    __syncthreads();
    if (chosen < 0) {
      return ~0ull;
    }
    prefix |= (unsigned long long)chosen << shift;
  }
  // the last level's bucket holds one element: K itself
  if (mass_through != nullptr) {
    unsigned long long wq_k = 0;
    int id = (int)(prefix & 0xffffffffull);
    unsigned long long key;
    sample_element(f, id, &key, &wq_k);
    *mass_through = below + wq_k;
  }
  return prefix;
}

struct PenaltyRow {  // written by the host, 32 bytes
  int raw_row;         // the row of the logits matrix
  int out_row;         // the row of the penalized copies
  int first;           // its first (id, count) pair
  int count;           // its pairs: the distinct ids of its prompt and output, ascending
  float presence;
  float frequency;
  float repetition;
  int pad;
};

// The sampler's penalties (Penalties.apply), one block per penalized row: the raw row copied, then
// for each distinct id of the request's prompt and output
//   repetition != 1:            x = x > 0 ? x / repetition : x * repetition
//   output count c > 0 and (presence or frequency): x = x - (frequency * c + presence)
// each a separately rounded float operation, as the JVM computes it (no contraction into an FMA).
extern "C" __global__ void penalize_rows(
    const float* logits, float* penalized, int vocab, const PenaltyRow* rows, const int* ids,
    const int* counts) {
  const PenaltyRow r = rows[blockIdx.x];
  const float* src = logits + (long long)r.raw_row * vocab;
  float* dst = penalized + (long long)r.out_row * vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    dst[i] = src[i];
  }
  __syncthreads();
  for (int j = threadIdx.x; j < r.count; j += blockDim.x) {
    int id = ids[r.first + j];
    int c = counts[r.first + j];
    float x = dst[id];
    if (r.repetition != 1.0f) {
      x = x > 0.0f ? __fdiv_rn(x, r.repetition) : __fmul_rn(x, r.repetition);
    }
    if (c > 0 && (r.presence != 0.0f || r.frequency != 0.0f)) {
      float m = __fmul_rn(r.frequency, (float)c);
      float sum = __fadd_rn(m, r.presence);
      x = __fsub_rn(x, sum);
    }
    dst[id] = x;
  }
}

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_rows(
    const float* logits, const float* penalized, int vocab, const SampleRow* rows, SampleOut* outs,
    double scale) {
  __shared__ SampleScratch s;
  const SampleRow r = rows[blockIdx.x];
  SampleOut* out = outs + blockIdx.x;
  const float* raw = logits + (long long)r.logit_row * vocab;
  // the row the token is drawn from (and checked); the log probabilities read the raw row
  const float* x = r.penalized_row < 0 ? raw : penalized + (long long)r.penalized_row * vocab;
  int t = threadIdx.x;

  // 1. the check and the argmax: the first NaN or +Infinity fails the row; the argmax is the
  //    lowest id among the largest logits
  float best = NEG_INF;
  int best_id = 0x7fffffff;
  int err_pos = 0x7fffffff;
  for (int i = t; i < vocab; i += blockDim.x) {
    float v = x[i];
    if (v != v || v == __int_as_float(0x7f800000u)) {
      err_pos = min(err_pos, i);
    } else if (v > best) {
      best = v;
      best_id = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ob = __shfl_xor_sync(0xffffffffu, best, o);
    int oi = __shfl_xor_sync(0xffffffffu, best_id, o);
    if (ob > best || (ob == best && oi < best_id)) {
      best = ob;
      best_id = oi;
    }
    err_pos = min(err_pos, __shfl_xor_sync(0xffffffffu, err_pos, o));
  }
  int w = t >> 5;
  if ((t & 31) == 0) {
    s.fred[w] = best;
    s.ired[w] = best_id;
    s.red[w] = (unsigned long long)(unsigned int)err_pos;
  }
  __syncthreads();
  if (t == 0) {
    float b = NEG_INF;
    int bi = 0x7fffffff;
    int e = 0x7fffffff;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) {
      if (s.fred[i] > b || (s.fred[i] == b && s.ired[i] < bi)) {
        b = s.fred[i];
        bi = s.ired[i];
      }
      e = min(e, (int)s.red[i]);
    }
    s.fred[0] = b;
    s.ired[0] = bi;
    s.count = e;
  }
  __syncthreads();
  best = s.fred[0];
  best_id = s.ired[0];
  err_pos = s.count;
  __syncthreads();
  if (err_pos != 0x7fffffff || best_id == 0x7fffffff) {
    if (t == 0) {
      out->token = -1;
      out->error = err_pos != 0x7fffffff ? 1 : 2;
      out->error_pos = err_pos;
      out->error_bits = err_pos != 0x7fffffff ? __float_as_int(x[err_pos]) : 0;
      out->n_top = 0;
    }
    return;
  }

  // 2. the token
  int token = best_id;
  if (r.temperature != 0) {
    SampleFilter f;
    f.x = x;
    f.vocab = vocab;
    f.all = 0;
    f.max = best;
    f.temperature = r.temperature;
    f.min_p = r.min_p;
    f.scale = scale;
    f.cut = ~0ull;
    unsigned long long count = 0;
    unsigned long long mass = 0;
    for (int i = t; i < vocab; i += blockDim.x) {
      unsigned long long key, wq;
      if (sample_element(f, i, &key, &wq)) {
        count++;
        mass += wq;
      }
    }
    count = block_sum_u64(count, &s);
    mass = block_sum_u64(mass, &s);
    bool top_k_cuts = r.top_k > 0 && (unsigned long long)r.top_k < count;
    bool sorted = top_k_cuts || r.top_p < 1;
    if (!sorted) {
      // candidates in id order: the first whose running sum exceeds u * total, by a scan over
      // contiguous chunks of the row
      double target = r.u * (double)mass;
      int chunk = (vocab + blockDim.x - 1) / blockDim.x;
      int lo = min(vocab, t * chunk);
      int hi = min(vocab, lo + chunk);
      unsigned long long mine = 0;
      long long last_positive = -1;
      for (int i = lo; i < hi; i++) {
        unsigned long long key, wq;
        if (sample_element(f, i, &key, &wq)) {
          mine += wq;
          if (wq > 0) {
            last_positive = i;
          }
        }
      }
      // exclusive prefix of the chunks' sums, in thread order
      __shared__ unsigned long long chunk_sums[SAMPLE_THREADS];
      chunk_sums[t] = mine;
      __syncthreads();
      if (t == 0) {
        unsigned long long acc = 0;
        for (int i = 0; i < (int)blockDim.x; i++) {
          unsigned long long v = chunk_sums[i];
          chunk_sums[i] = acc;
          acc += v;
        }
      }
      __syncthreads();
      unsigned long long base = chunk_sums[t];
      s.count = 0x7fffffff;
      __syncthreads();
      if (mine > 0 && (double)(base + mine) > target && !((double)base > target)) {
        unsigned long long cum = base;
        for (int i = lo; i < hi; i++) {
          unsigned long long key, wq;
          if (sample_element(f, i, &key, &wq)) {
            cum += wq;
            if (target < (double)cum) {
              atomicMin(&s.count, i);
              break;
            }
          }
        }
      }
      // the last candidate with a positive weight, should the draw pass the end
      unsigned long long lp = block_max_u64((unsigned long long)(last_positive + 1), &s);
      token = s.count != 0x7fffffff ? s.count : (int)lp - 1;
      __syncthreads();
    } else {
      unsigned long long total = mass;
      if (top_k_cuts) {
        f.cut = sample_select(f, SEL_COUNT, (unsigned long long)r.top_k, 0, nullptr, &s);
        unsigned long long kept = 0;
        for (int i = t; i < vocab; i += blockDim.x) {
          unsigned long long key, wq;
          if (sample_element(f, i, &key, &wq)) {
            kept += wq;
          }
        }
        total = block_sum_u64(kept, &s);
      }
      if (r.top_p < 1) {
        double threshold = r.top_p * (double)total;
        unsigned long long through = 0;
        unsigned long long cut = sample_select(f, SEL_MASS_GE, 0, threshold, &through, &s);
        if (cut != ~0ull) {
          f.cut = cut;
          total = through;
        }
      }
      double target = r.u * (double)total;
      unsigned long long k = sample_select(f, SEL_MASS_GT, 0, target, nullptr, &s);
      if (k == ~0ull) {
        // the draw passed the end: the last kept candidate with a positive weight
        unsigned long long last = 0;
        for (int i = t; i < vocab; i += blockDim.x) {
          unsigned long long key, wq;
          if (sample_element(f, i, &key, &wq) && wq > 0) {
            last = key > last ? key : last;
          }
        }
        k = block_max_u64(last, &s);
      }
      token = (int)(k & 0xffffffffull);
    }
  }

  // 3. log probabilities: of the token and of the num_top most likely ids, under
  //    logZ = max + ln(sum exp(x - max)), in double
  int n = r.num_top;
  if (n >= 0 && x != raw) {
    // the raw row's maximum (the penalized row's is the check's)
    float m = NEG_INF;
    for (int i = t; i < vocab; i += blockDim.x) {
      m = fmaxf(m, raw[i]);
    }
    m = warp_max(m);
    if ((t & 31) == 0) {
      s.fred[t >> 5] = m;
    }
    __syncthreads();
    if (t == 0) {
      float b = NEG_INF;
      for (int i = 0; i < (int)(blockDim.x >> 5); i++) {
        b = fmaxf(b, s.fred[i]);
      }
      s.fred[0] = b;
    }
    __syncthreads();
    best = s.fred[0];
    __syncthreads();
    x = raw;
  }
  if (n >= 0) {
    double sum = 0;
    for (int i = t; i < vocab; i += blockDim.x) {
      sum += exp((double)x[i] - (double)best);
    }
    sum = block_sum_f64(sum, &s);
    double log_z = (double)best + log(sum);
    n = min(n, vocab);
    if (n > 0) {
      SampleFilter all;
      all.x = x;
      all.vocab = vocab;
      all.all = 1;
      all.max = best;
      all.temperature = 1;
      all.min_p = 0;
      all.scale = 0;
      all.cut = ~0ull;
      unsigned long long kn = sample_select(all, SEL_COUNT, (unsigned long long)n, 0, nullptr, &s);
      if (t == 0) {
        s.count = 0;
      }
      __syncthreads();
      for (int i = t; i < vocab; i += blockDim.x) {
        unsigned long long key = sample_key(x[i], i);
        if (key <= kn) {
          int at = atomicAdd(&s.count, 1);
          if (at < MAX_TOP) {
            s.top_keys[at] = key;
          }
        }
      }
      __syncthreads();
      if (t == 0) {
        for (int i = 1; i < n; i++) {
          unsigned long long k = s.top_keys[i];
          int j = i - 1;
          while (j >= 0 && s.top_keys[j] > k) {
            s.top_keys[j + 1] = s.top_keys[j];
            j--;
          }
          s.top_keys[j + 1] = k;
        }
        for (int i = 0; i < n; i++) {
          int id = (int)(s.top_keys[i] & 0xffffffffull);
          out->top_ids[i] = id;
          out->top_lps[i] = (float)fmin(0.0, (double)x[id] - log_z);
        }
      }
    }
    if (t == 0) {
      out->logprob = (float)fmin(0.0, (double)x[token] - log_z);
    }
  }
  if (t == 0) {
    out->token = token;
    out->error = 0;
    out->error_pos = 0;
    out->error_bits = 0;
    out->n_top = n < 0 ? 0 : n;
  }
}

// ---------------------------------------------------------------------------------- Mamba

// The recurrent half of a Mamba-1 mixer, float for float the CPU path's SelectiveScan:
//
//   one request, channel c, tokens at positions p = start .. end-1 (batch rows first .. ):
//     window  = conv state of the input slot (the k-1 inputs before start, oldest first; zeros when
//               start = 0 or the slot is 0)
//     u_p     = silu(bias[c] + Σ_j w[c][j]·window_j + w[c][k-1]·x_p)        (j ascending)
//     s_p[n]  = expf(A[c][n]·dt_p) · s_{p-1}[n] + (dt_p·B_p[n])·u_p          (n ascending)
//     y_p     = (Σ_n s_p[n]·C_p[n] + u_p·D[c]) · silu(z_p)
//
// The State pool (CacheLayout, float32): slot s of the layer's group at pool + s·bytes_per_slot;
// the layer's conv field at + conv_offset, [channel][k-1] (oldest input first), its ssm field at +
// ssm_offset, [channel][N]. The requests: first_row[r], num_tokens[r] (at least 1), start[r], and
// the state tables, tables[r·table_stride + i] = the slot of checkpoint row i, the state after
// token (i+1)·P - 1 (0: no checkpoint wanted; a request's entries past its own table are 0):
//   input    = start == 0 ? none (zeros) : row ⌈start/P⌉ - 1     (aligned, or the running state)
//   crossed boundaries (i+1)·P in (start, end]  → row i             (skipped where the entry is 0)
//   working  = row ⌈end/P⌉ - 1                                      ← the state after end - 1
// A channel's state is read whole before any of it is written, so the working slot may be the
// input slot (a decode step in place).
//
// Exactness: one thread computes a (request, channel) pair, in the CPU's order, every product and
// sum rounded on its own (__fmul_rn, __fadd_rn: never contracted into an FMA, as Java's floats), so
// a token's result depends on neither its batch nor the chunking of its prompt (a chunk resumes
// exactly the state the previous one stored). The exponentials are expf (not __expf), which may
// differ in the last ulp from the CPU's StrictMath.exp (the decay) and FastExp (silu): GPU results
// equal the CPU's within a tolerance, and the GPU's own results bit for bit.
//
// Bounds (CudaMamba checks them): k <= MAMBA_MAX_CONV (the window and the taps live in registers);
// mamba_scan_n16 takes N <= 16 (the state in registers), mamba_scan any N (the state kept in the
// working slot's global memory, updated in place token by token); at most 65,535 requests (grid y).
#define MAMBA_MAX_CONV 8

__device__ __forceinline__ float mamba_silu(float x) {
  return __fdiv_rn(x, __fadd_rn(1.f, expf(-x)));
}

// The slot of row ⌈position/P⌉ - 1 of a state table: a chunk's input slot at its start, its working
// slot at its end; 0 (no state) at position 0.
__device__ __forceinline__ int mamba_slot(const int* table, int position, int page) {
  return position == 0 ? 0 : table[(position - 1) / page];
}

__device__ __forceinline__ float* mamba_field(
    const unsigned char* pool, long long bytes_per_slot, long long offset, int slot, int c,
    int width) {
  return (float*)(pool + slot * bytes_per_slot + offset) + (long long)c * width;
}

// window[0 .. k-2] = channel c's conv state in slot (zeros for slot 0), the rest 0.
__device__ __forceinline__ void mamba_load_window(
    float* window, const unsigned char* pool, long long bytes_per_slot, long long conv_offset,
    int slot, int c, int k) {
  const float* src = mamba_field(pool, bytes_per_slot, conv_offset, slot, c, k - 1);
#pragma unroll
  for (int j = 0; j < MAMBA_MAX_CONV - 1; j++) {
    window[j] = slot != 0 && j < k - 1 ? src[j] : 0.f;
  }
}

__device__ __forceinline__ void mamba_store_window(
    const float* window, unsigned char* pool, long long bytes_per_slot, long long conv_offset,
    int slot, int c, int k) {
  float* dst = mamba_field(pool, bytes_per_slot, conv_offset, slot, c, k - 1);
#pragma unroll
  for (int j = 0; j < MAMBA_MAX_CONV - 1; j++) {
    if (j < k - 1) {
      dst[j] = window[j];
    }
  }
}

// Drops the oldest input of the window and appends the newest (every index a constant once
// unrolled: the window stays in registers).
__device__ __forceinline__ void mamba_shift(float* window, int k, float newest) {
#pragma unroll
  for (int j = 0; j < MAMBA_MAX_CONV - 1; j++) {
    if (j < k - 2) {
      window[j] = window[j + 1];
    } else if (j == k - 2) {
      window[j] = newest;
    }
  }
}

// u[t][c] = silu(conv(x)[t][c]) over each request's rows in order, x[t][c] = xz[t·xz_width + c],
// the window starting from the request's input slot; w the taps [di][k] (oldest input first),
// bias [di] or null. Reads the pool only. Grid: (⌈di / blockDim.x⌉, requests). Block: any
// (CudaMamba: 128); no shared memory.
extern "C" __global__ void mamba_conv(
    const int* first_row, const int* num_tokens, const int* start, const int* tables,
    int table_stride, int page, const unsigned char* pool, long long bytes_per_slot,
    long long conv_offset, int di, int k, const float* xz, int xz_width, const float* w,
    const float* bias, float* u) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y;
  if (c >= di) {
    return;
  }
  const int* table = tables + (long long)r * table_stride;
  float window[MAMBA_MAX_CONV];
  mamba_load_window(
      window, pool, bytes_per_slot, conv_offset, mamba_slot(table, start[r], page), c, k);
  const float* wc = w + (long long)c * k;
  float taps[MAMBA_MAX_CONV];
#pragma unroll
  for (int j = 0; j < MAMBA_MAX_CONV - 1; j++) {
    taps[j] = j < k - 1 ? wc[j] : 0.f;
  }
  float newest = wc[k - 1];
  float b = bias ? bias[c] : 0.f;
  long long first = first_row[r];
  for (long long t = first; t < first + num_tokens[r]; t++) {
    float x = xz[t * xz_width + c];
    float acc = b;
#pragma unroll
    for (int j = 0; j < MAMBA_MAX_CONV - 1; j++) {
      if (j < k - 1) {
        acc = __fadd_rn(acc, __fmul_rn(taps[j], window[j]));
      }
    }
    acc = __fadd_rn(acc, __fmul_rn(newest, x));
    u[t * di + c] = mamba_silu(acc);
    mamba_shift(window, k, x);
  }
}

// One state element of one token: s = exp(a·dt)·s + (dt·b)·u, then acc += s·cm.
__device__ __forceinline__ void mamba_step(
    float& s, float& acc, float a, float dt, float b, float u, float cm) {
  float decay = expf(__fmul_rn(a, dt));
  s = __fadd_rn(__fmul_rn(decay, s), __fmul_rn(__fmul_rn(dt, b), u));
  acc = __fadd_rn(acc, __fmul_rn(s, cm));
}

// The scan of one (request, channel) pair. REG_N > 0: the state in registers, N <= REG_N; 0: the
// state in the working slot (copied there from the input slot first), any N.
template <int REG_N>
__device__ __forceinline__ void mamba_scan_channel(
    const int* first_row, const int* num_tokens, const int* start, const int* tables,
    int table_stride, int page, unsigned char* pool, long long bytes_per_slot,
    long long conv_offset, long long ssm_offset, int di, int n, int k, const float* xz,
    int xz_width, int gate_offset, const float* u, const float* dt, const float* B,
    const float* C, int bc_stride, const float* A, const float* D, float* y) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y;
  int count = num_tokens[r];
  if (c >= di || count < 1) {
    return;
  }
  const int* table = tables + (long long)r * table_stride;
  int pos = start[r];
  int input = mamba_slot(table, pos, page);
  int working = mamba_slot(table, pos + count, page);
  float window[MAMBA_MAX_CONV];
  mamba_load_window(window, pool, bytes_per_slot, conv_offset, input, c, k);
  const float* in = mamba_field(pool, bytes_per_slot, ssm_offset, input, c, n);
  float* work = mamba_field(pool, bytes_per_slot, ssm_offset, working, c, n);
  const float* a = A + (long long)c * n;
  float s[REG_N > 0 ? REG_N : 1];
  float ar[REG_N > 0 ? REG_N : 1];
  if constexpr (REG_N > 0) {
#pragma unroll
    for (int j = 0; j < REG_N; j++) {
      s[j] = input != 0 && j < n ? in[j] : 0.f;
      ar[j] = j < n ? a[j] : 0.f;
    }
  } else if (working != input) {
    for (int j = 0; j < n; j++) {
      work[j] = input != 0 ? in[j] : 0.f;
    }
  }
  float d = D[c];
  long long first = first_row[r];
  for (long long t = first; t < first + count; t++, pos++) {
    mamba_shift(window, k, xz[t * xz_width + c]);
    float delta = dt[t * di + c];
    float ut = u[t * di + c];
    const float* bt = B + t * bc_stride;
    const float* ct = C + t * bc_stride;
    float acc = 0.f;
    if constexpr (REG_N > 0) {
#pragma unroll
      for (int j = 0; j < REG_N; j++) {
        if (j < n) {
          mamba_step(s[j], acc, ar[j], delta, bt[j], ut, ct[j]);
        }
      }
    } else {
      for (int j = 0; j < n; j++) {
        float v = work[j];
        mamba_step(v, acc, a[j], delta, bt[j], ut, ct[j]);
        work[j] = v;
      }
    }
    float gate = xz[t * xz_width + gate_offset + c];
    y[t * di + c] = __fmul_rn(__fadd_rn(acc, __fmul_rn(ut, d)), mamba_silu(gate));
    if ((pos + 1) % page == 0) {
      int row = (pos + 1) / page - 1;
      int slot = row < table_stride ? table[row] : 0;
      if (slot != 0 && slot != working) {
        mamba_store_window(window, pool, bytes_per_slot, conv_offset, slot, c, k);
        float* dst = mamba_field(pool, bytes_per_slot, ssm_offset, slot, c, n);
        if constexpr (REG_N > 0) {
#pragma unroll
          for (int j = 0; j < REG_N; j++) {
            if (j < n) {
              dst[j] = s[j];
            }
          }
        } else {
          for (int j = 0; j < n; j++) {
            dst[j] = work[j];
          }
        }
      }
    }
  }
  mamba_store_window(window, pool, bytes_per_slot, conv_offset, working, c, k);
  if constexpr (REG_N > 0) {
#pragma unroll
    for (int j = 0; j < REG_N; j++) {
      if (j < n) {
        work[j] = s[j];
      }
    }
  }
}

// y[t][c] for each request's rows, resuming from its input slot, storing the state at every
// crossed page boundary (row (pos+1)/P - 1 where nonzero) and into its working slot. xz holds x
// (column c) and the gate z (column gate_offset + c), rows xz_width apart; u and dt [T][di]; B
// and C rows bc_stride apart (N values each); A [di][N] (-exp(A_log)); D [di]; y [T][di].
// mamba_scan: any N (the state in the working slot's memory); mamba_scan_n16: N <= 16 (in
// registers); the same bits. Grid: (⌈di / blockDim.x⌉, requests). Block: any (CudaMamba: 128); no
// shared memory.
extern "C" __global__ void mamba_scan(
    const int* first_row, const int* num_tokens, const int* start, const int* tables,
    int table_stride, int page, unsigned char* pool, long long bytes_per_slot,
    long long conv_offset, long long ssm_offset, int di, int n, int k, const float* xz,
    int xz_width, int gate_offset, const float* u, const float* dt, const float* B,
    const float* C, int bc_stride, const float* A, const float* D, float* y) {
  mamba_scan_channel<0>(
      first_row, num_tokens, start, tables, table_stride, page, pool, bytes_per_slot, conv_offset,
      ssm_offset, di, n, k, xz, xz_width, gate_offset, u, dt, B, C, bc_stride, A, D, y);
}

extern "C" __global__ void mamba_scan_n16(
    const int* first_row, const int* num_tokens, const int* start, const int* tables,
    int table_stride, int page, unsigned char* pool, long long bytes_per_slot,
    long long conv_offset, long long ssm_offset, int di, int n, int k, const float* xz,
    int xz_width, int gate_offset, const float* u, const float* dt, const float* B,
    const float* C, int bc_stride, const float* A, const float* D, float* y) {
  mamba_scan_channel<16>(
      first_row, num_tokens, start, tables, table_stride, page, pool, bytes_per_slot, conv_offset,
      ssm_offset, di, n, k, xz, xz_width, gate_offset, u, dt, B, C, bc_stride, A, D, y);
}

// dt[t][c] = softplus(dt[t][c] + bias[c]) (bias may be null) over rows·di values, softplus(v) = v
// above 20, else log(1 + e^v) evaluated in double and rounded once, as the CPU's StrictMath form
// (log1pf(expf(v)) would round twice). Grid: ⌈rows·di / blockDim.x⌉. Block: any.
extern "C" __global__ void softplus_bias(float* dt, const float* bias, int rows, int di) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)rows * di) {
    return;
  }
  float v = dt[i];
  if (bias) {
    v = __fadd_rn(v, bias[i % di]);
  }
  dt[i] = v > 20.f ? v : (float)log1p(exp((double)v));
}

// The x projection's rows proj [T][R + 2N] split into contiguous delta [T][R], B [T][N] and
// C [T][N] (each then normalized on its own where the model asks). Grid: T. Block: any.
extern "C" __global__ void mamba_split_proj(
    const float* proj, int R, int N, float* delta, float* B, float* C) {
  long long t = blockIdx.x;
  int width = R + 2 * N;
  const float* row = proj + t * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float v = row[i];
    if (i < R) {
      delta[t * R + i] = v;
    } else if (i < R + N) {
      B[t * N + (i - R)] = v;
    } else {
      C[t * N + (i - R - N)] = v;
    }
  }
}
