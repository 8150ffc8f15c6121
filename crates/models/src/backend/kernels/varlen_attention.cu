// Attention over packed sequences (no padding): flash-attention 2's semantics with cumulative lengths.
//
// Compiled at run time with NVRTC (backend/varlen.rs), so it adds nothing to the build. No header is
// included: fp16 and bf16 values travel as their 16-bit patterns and are converted here, so the source
// compiles with any NVRTC (scripts/nvrtc_check.py compiles it on machines without a GPU).
//
// Layout (as the candle backend's `attention` op):
//   qkv   [tokens, (heads + 2·kv_heads) · hd]: every query head, then every key head, then every value head
//   out   [tokens, heads · hd]
//   cu    [batch + 1]: sequence s is rows cu[s] .. cu[s+1]
//   tiles [2 · n_tiles]: (sequence, first query) of each block's WARPS queries, all in one sequence
//   rel   [heads · (2·span − 1)], read only when span > 0: a bias by offset j − i added after the scale
//         (MPNet's buckets, JinaBERT's ALiBi)
// Grid (n_tiles, heads); block WARPS·32 threads; each warp owns one query. Keys are staged in shared memory
// `kc` (≤ 32) at a time as f32, one lane scoring each key; the softmax is the online one (running max and sum),
// accumulated in f32. Dynamic shared memory: (kc·(hd+1) + kc·hd + WARPS·hd + WARPS·32) floats.

#define WARPS 8
#define MAX_PER_LANE 8  // head dims up to 256
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ unsigned short f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float bf16_to_f32(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }

// Round to nearest, ties to even, as torch and candle narrow f32 to bf16; a NaN stays a NaN.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

struct F32 {
  typedef float T;
  static __device__ __forceinline__ float load(float x) { return x; }
  static __device__ __forceinline__ float store(float x) { return x; }
};

struct F16 {
  typedef unsigned short T;
  static __device__ __forceinline__ float load(unsigned short x) { return f16_to_f32(x); }
  static __device__ __forceinline__ unsigned short store(float x) { return f32_to_f16(x); }
};

struct BF16 {
  typedef unsigned short T;
  static __device__ __forceinline__ float load(unsigned short x) { return bf16_to_f32(x); }
  static __device__ __forceinline__ unsigned short store(float x) { return f32_to_bf16(x); }
};

template <typename D>
__device__ void varlen_attention(const typename D::T* __restrict__ qkv, typename D::T* __restrict__ out,
                                 const unsigned int* __restrict__ cu, const unsigned int* __restrict__ tiles,
                                 const float* __restrict__ rel, int span, int heads, int kv_heads, int hd,
                                 float scale, int causal, int window, int kc) {
  extern __shared__ float smem[];
  const int head = blockIdx.y;
  const int seq = (int)tiles[2 * blockIdx.x];
  const int q0 = (int)tiles[2 * blockIdx.x + 1];
  const int start = (int)cu[seq];
  const int n = (int)cu[seq + 1] - start;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = head / (heads / kv_heads);
  const long width = (long)(heads + 2 * kv_heads) * hd;
  const long k_col = (long)(heads + kv_head) * hd;
  const long v_col = (long)(heads + kv_heads + kv_head) * hd;
  const int k_stride = hd + 1;  // odd: the lanes reading one column each hit their own bank

  float* ks = smem;                  // [kc][hd + 1]
  float* vs = ks + kc * k_stride;    // [kc][hd]
  float* qs = vs + kc * hd;          // [WARPS][hd], scaled
  float* ps = qs + WARPS * hd;       // [WARPS][32]: the chunk's probabilities

  // This warp's query and the keys it sees (AttentionSpec::visible).
  const int qi = q0 + warp;
  const bool active = qi < n;
  int lo = 0, hi = n;
  if (active) {
    hi = causal ? qi + 1 : n;
    if (window >= 0) {
      lo = max(0, qi - window);
      hi = min(hi, qi + window + 1);
    }
  }
  // The keys any query of the tile sees.
  const int last = min(q0 + WARPS, n) - 1;
  const int tile_lo = window >= 0 ? max(0, q0 - window) : 0;
  int tile_hi = causal ? last + 1 : n;
  if (window >= 0) tile_hi = min(tile_hi, last + window + 1);

  if (active) {
    for (int d = lane; d < hd; d += 32) qs[warp * hd + d] = D::load(qkv[(start + qi) * width + head * hd + d]) * scale;
  }
  float acc[MAX_PER_LANE];
#pragma unroll
  for (int i = 0; i < MAX_PER_LANE; ++i) acc[i] = 0.f;
  float m = neg_inf(), l = 0.f;

  for (int j0 = tile_lo; j0 < tile_hi; j0 += kc) {
    const int count = min(kc, tile_hi - j0);
    __syncthreads();  // every warp is done with the previous chunk (and the queries are staged)
    for (int e = threadIdx.x; e < count * hd; e += blockDim.x) {
      const int r = e / hd, d = e % hd;
      const long row = (long)(start + j0 + r) * width;
      ks[r * k_stride + d] = D::load(qkv[row + k_col + d]);
      vs[r * hd + d] = D::load(qkv[row + v_col + d]);
    }
    __syncthreads();
    if (!active) continue;
    const int j = j0 + lane;
    float s = neg_inf();
    if (lane < count && j >= lo && j < hi) {
      const float* q = qs + warp * hd;
      const float* k = ks + lane * k_stride;
      float dot = 0.f;
      for (int d = 0; d < hd; ++d) dot += q[d] * k[d];
      s = dot;
      if (span > 0) s += rel[head * (2 * span - 1) + j - qi + span - 1];
    }
    float chunk_max = s;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) chunk_max = fmaxf(chunk_max, __shfl_xor_sync(FULL_MASK, chunk_max, o));
    if (chunk_max == neg_inf()) continue;  // no key of this chunk is visible to this query
    const float m_new = fmaxf(m, chunk_max);
    const float correction = expf(m - m_new);  // 0 on the first visible chunk (m = −∞)
    const float p = s == neg_inf() ? 0.f : expf(s - m_new);
    float p_sum = p;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) p_sum += __shfl_xor_sync(FULL_MASK, p_sum, o);
    l = l * correction + p_sum;
    m = m_new;
    ps[warp * 32 + lane] = p;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < MAX_PER_LANE; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) {
        float a = acc[i] * correction;
        for (int r = 0; r < count; ++r) a += ps[warp * 32 + r] * vs[r * hd + d];
        acc[i] = a;
      }
    }
    __syncwarp();  // the probabilities are read before the next chunk overwrites them
  }

  if (active) {
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const long row = (long)(start + qi) * heads * hd + head * hd;
#pragma unroll
    for (int i = 0; i < MAX_PER_LANE; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) out[row + d] = D::store(acc[i] * inv);
    }
  }
}

#define ENTRY(name, D)                                                                                          \
  extern "C" __global__ void name(const D::T* __restrict__ qkv, D::T* __restrict__ out,                        \
                                  const unsigned int* __restrict__ cu, const unsigned int* __restrict__ tiles, \
                                  const float* __restrict__ rel, int span, int heads, int kv_heads, int hd,    \
                                  float scale, int causal, int window, int kc) {                               \
    varlen_attention<D>(qkv, out, cu, tiles, rel, span, heads, kv_heads, hd, scale, causal, window, kc);       \
  }

ENTRY(varlen_attention_f32, F32)
ENTRY(varlen_attention_f16, F16)
ENTRY(varlen_attention_bf16, BF16)
