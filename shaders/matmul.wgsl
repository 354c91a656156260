// Register-tiled f32 matmul without workgroup memory:
//   C (M,N) = alpha · op(A) · op(B) + beta · C
// op(A) is (M,K): A stored (M,K), or (K,M) when TRANS_A; op(B) is (K,N): B stored (K,N), or
// (N,K) when TRANS_B. All row-major. The TS side (src/kernels/matmul.ts) specialises the
// constants below and keys pipelines on them.
//
// Each invocation owns a TM×TN = 64×16 block of C in registers (register blocking as in
// Volkov & Demmel 2008 and CUTLASS's thread tile, here with no shared-memory stage). Per step
// of 4 along K it loads 64 vec4 of op(A) (the same ones in every lane of a workgroup when
// wg_x = 8) and 16 vec4 of op(B), and does 64·16·4 FMAs.
// Why this shape: on CPU WebGPU (Mesa lavapipe, the target of this sandbox) every load, from
// storage or from workgroup memory alike, runs as a per-lane scalar loop, so staging tiles
// through shared memory only adds loads and barriers; what pays is the FMA-per-load ratio of
// a big register tile and lanes that read the same rows of A. Measured on lavapipe: 64×16
// beat 16×16…32×32 tiles and shared-memory variants, and 128×16 lost to spills; the cost is
// LLVM time, ~3 s per pipeline. On a discrete GPU this tile is correct but far from tuned
// (1024 accumulators per invocation spill there too). The TS side may cut the tile to fewer
// row quads (src/kernels/matmul_cpu.ts cutTile: SwiftShader compiles 64×16 far too slowly),
// so the row quads stay written out one per line below.
//
// The 4×4×4 micro-step is a mat4x4 product: a block's column t holds C[row t, 4 columns];
// with aq's column t = op(A)[row t, k..k+3] and bq's column kk = op(B)[k+kk, 4 columns],
// (bq · aq)[t] = Σ_kk aq[t][kk] · bq[kk], exactly the update of row t (spelled out as FMAs,
// which lavapipe runs ~15% faster than the mul + add it makes of a matrix product).
//
// Ragged sizes: rows and columns past M, N are clamped to valid addresses (their results are
// computed and dropped at the store) and elements past the end of K are zeroed by a select.
// Every load is an aligned vec4: the stored row lengths lda, ldb are multiples of 4. When an
// operand's row length is not, the TS side first copies it into a zero-padded pool tensor with
// `pad_cols`. (Lavapipe compiles shift-and-merge unaligned loads extremely slowly, and a pad
// pass costs O(size), nothing next to the matmul.)
//
// Output: `main` stores vec4 rows with row stride ldc. When N % 4 == 0 and K is not split,
// that is C itself: alpha·AB + beta·C (+ bias). Otherwise it stores raw sums to partials: rows
// padded to ldc = N rounded up to 4, split z (grid z covers K range [z·k_split, (z+1)·k_split))
// at element z·mn_pad; `reduce_splits` then writes C = alpha·Σ + beta·C (+ bias). That is
// split-K without float atomics.
//
// Bias epilogue (cuBLASLt's CUBLASLT_EPILOGUE_BIAS; llm.c's matmul_forward): when has_bias,
// bias[j] (N values) is added to every row of C in whichever pass writes C, so it is added
// exactly once however K is split, and a linear layer needs no separate bias pass over C.
// Without a bias the TS side binds any read-only buffer there and has_bias = 0 keeps it unread.
//
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 bias (read), 4 params.

struct Params {
  m: u32,
  n: u32,
  k: u32,
  k_split: u32,  // K elements per grid-z slice, a multiple of 4
  alpha: f32,
  beta: f32,
  splits: u32,   // reduce_splits: partials to sum
  ldc: u32,      // row stride of what `main` writes: N, or N rounded up to 4 for partials
  mn_pad: u32,   // element stride between partials: M · ldc
  lda: u32,      // A's stored row length (K, or M when TRANS_A), a multiple of 4
  ldb: u32,      // B's stored row length (N, or K when TRANS_B), a multiple of 4
  wg_x: u32,     // main: lanes of a workgroup along N (1, 2, 4 or 8); the rest go along M
  has_bias: u32, // 1: add bias (N values) to each row of C where C is written; main only with N % 4 == 0
}

@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> c: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> p: Params;

const TRANS_A: bool = false;
const TRANS_B: bool = false;
// Invocations per workgroup. Lavapipe runs a workgroup on one CPU thread as SIMD lanes of 8
// (AVX2). How they split between N and M is a uniform (wg_x), not a constant, so all shapes
// share one pipeline per layout: each costs seconds of LLVM time on lavapipe.
const LANES: u32 = 8u;
const WG_1D: u32 = 64u;  // reduce_splits and pad_cols

// The tile is written out below (16 row quads × 4 column quads); these name it for readers.
const TM: u32 = 64u;
const TN: u32 = 16u;

// Accumulators of 4 rows × 16 columns: four 4×4 blocks.
struct Quad {
  j0: mat4x4<f32>,
  j1: mat4x4<f32>,
  j2: mat4x4<f32>,
  j3: mat4x4<f32>,
}

// The invocation's 64×16 block of C. Named fields, not arrays indexed in loops: lavapipe
// does not unroll such loops and would keep the tile in memory with per-lane indexing.
struct Acc {
  g0: Quad, g1: Quad, g2: Quad, g3: Quad, g4: Quad, g5: Quad, g6: Quad, g7: Quad,
  g8: Quad, g9: Quad, g10: Quad, g11: Quad, g12: Quad, g13: Quad, g14: Quad, g15: Quad,
}

// op(A) rows r..r+3 over k..k+3 as columns: column t = op(A)[r+t, k..k+3], zero past k_end.
fn a_quad(r: u32, k: u32, k_end: u32) -> mat4x4<f32> {
  let kv = vec4<u32>(k, k + 1u, k + 2u, k + 3u);
  let live = kv < vec4<u32>(k_end);
  let zero = vec4<f32>(0.0);
  let l4 = p.lda / 4u;
  if (TRANS_A) {
    // A stored (K, lda): one vec4 holds 4 rows at one k; transpose to rows along k.
    let q = min(r, p.lda - 4u) / 4u;
    let kc = min(kv, vec4<u32>(p.k - 1u));
    return transpose(mat4x4<f32>(
      select(zero, a[kc.x * l4 + q], live.x),
      select(zero, a[kc.y * l4 + q], live.y),
      select(zero, a[kc.z * l4 + q], live.z),
      select(zero, a[kc.w * l4 + q], live.w),
    ));
  }
  // A stored (M, lda): one vec4 per row along k.
  let last = p.m - 1u;
  let q = k / 4u;
  return mat4x4<f32>(
    select(zero, a[min(r, last) * l4 + q], live),
    select(zero, a[min(r + 1u, last) * l4 + q], live),
    select(zero, a[min(r + 2u, last) * l4 + q], live),
    select(zero, a[min(r + 3u, last) * l4 + q], live),
  );
}

// op(B) over k..k+3, columns c..c+3: column kk = op(B)[k+kk, c..c+3], zero past k_end.
fn b_quad(c: u32, k: u32, k_end: u32) -> mat4x4<f32> {
  let kv = vec4<u32>(k, k + 1u, k + 2u, k + 3u);
  let live = kv < vec4<u32>(k_end);
  let zero = vec4<f32>(0.0);
  let l4 = p.ldb / 4u;
  if (TRANS_B) {
    // B stored (N, ldb): one vec4 holds one column over k..k+3; transpose to rows along n.
    let last = p.n - 1u;
    let q = k / 4u;
    return transpose(mat4x4<f32>(
      select(zero, b[min(c, last) * l4 + q], live),
      select(zero, b[min(c + 1u, last) * l4 + q], live),
      select(zero, b[min(c + 2u, last) * l4 + q], live),
      select(zero, b[min(c + 3u, last) * l4 + q], live),
    ));
  }
  // B stored (K, ldb): one vec4 per k along n.
  let q = min(c, p.ldb - 4u) / 4u;
  let kc = min(kv, vec4<u32>(p.k - 1u));
  return mat4x4<f32>(
    select(zero, b[kc.x * l4 + q], live.x),
    select(zero, b[kc.y * l4 + q], live.y),
    select(zero, b[kc.z * l4 + q], live.z),
    select(zero, b[kc.w * l4 + q], live.w),
  );
}

// acc + the 4×4×4 product bq · aq, written as FMAs: (bq · aq)[t] = Σ_kk aq[t][kk] · bq[kk].
fn block_fma(acc: mat4x4<f32>, aq: mat4x4<f32>, bq: mat4x4<f32>) -> mat4x4<f32> {
  return mat4x4<f32>(
    fma(bq[3], vec4<f32>(aq[0].w), fma(bq[2], vec4<f32>(aq[0].z), fma(bq[1], vec4<f32>(aq[0].y), fma(bq[0], vec4<f32>(aq[0].x), acc[0])))),
    fma(bq[3], vec4<f32>(aq[1].w), fma(bq[2], vec4<f32>(aq[1].z), fma(bq[1], vec4<f32>(aq[1].y), fma(bq[0], vec4<f32>(aq[1].x), acc[1])))),
    fma(bq[3], vec4<f32>(aq[2].w), fma(bq[2], vec4<f32>(aq[2].z), fma(bq[1], vec4<f32>(aq[2].y), fma(bq[0], vec4<f32>(aq[2].x), acc[2])))),
    fma(bq[3], vec4<f32>(aq[3].w), fma(bq[2], vec4<f32>(aq[3].z), fma(bq[1], vec4<f32>(aq[3].y), fma(bq[0], vec4<f32>(aq[3].x), acc[3])))),
  );
}

fn quad_fma(q: Quad, aq: mat4x4<f32>, b0: mat4x4<f32>, b1: mat4x4<f32>, b2: mat4x4<f32>, b3: mat4x4<f32>) -> Quad {
  return Quad(block_fma(q.j0, aq, b0), block_fma(q.j1, aq, b1), block_fma(q.j2, aq, b2), block_fma(q.j3, aq, b3));
}

// One step of 4 along K for the whole 64×16 tile.
fn k_step(acc: ptr<function, Acc>, r: u32, c: u32, k: u32, k_end: u32) {
  let b0 = b_quad(c, k, k_end);
  let b1 = b_quad(c + 4u, k, k_end);
  let b2 = b_quad(c + 8u, k, k_end);
  let b3 = b_quad(c + 12u, k, k_end);
  (*acc).g0 = quad_fma((*acc).g0, a_quad(r, k, k_end), b0, b1, b2, b3);
  (*acc).g1 = quad_fma((*acc).g1, a_quad(r + 4u, k, k_end), b0, b1, b2, b3);
  (*acc).g2 = quad_fma((*acc).g2, a_quad(r + 8u, k, k_end), b0, b1, b2, b3);
  (*acc).g3 = quad_fma((*acc).g3, a_quad(r + 12u, k, k_end), b0, b1, b2, b3);
  (*acc).g4 = quad_fma((*acc).g4, a_quad(r + 16u, k, k_end), b0, b1, b2, b3);
  (*acc).g5 = quad_fma((*acc).g5, a_quad(r + 20u, k, k_end), b0, b1, b2, b3);
  (*acc).g6 = quad_fma((*acc).g6, a_quad(r + 24u, k, k_end), b0, b1, b2, b3);
  (*acc).g7 = quad_fma((*acc).g7, a_quad(r + 28u, k, k_end), b0, b1, b2, b3);
  (*acc).g8 = quad_fma((*acc).g8, a_quad(r + 32u, k, k_end), b0, b1, b2, b3);
  (*acc).g9 = quad_fma((*acc).g9, a_quad(r + 36u, k, k_end), b0, b1, b2, b3);
  (*acc).g10 = quad_fma((*acc).g10, a_quad(r + 40u, k, k_end), b0, b1, b2, b3);
  (*acc).g11 = quad_fma((*acc).g11, a_quad(r + 44u, k, k_end), b0, b1, b2, b3);
  (*acc).g12 = quad_fma((*acc).g12, a_quad(r + 48u, k, k_end), b0, b1, b2, b3);
  (*acc).g13 = quad_fma((*acc).g13, a_quad(r + 52u, k, k_end), b0, b1, b2, b3);
  (*acc).g14 = quad_fma((*acc).g14, a_quad(r + 56u, k, k_end), b0, b1, b2, b3);
  (*acc).g15 = quad_fma((*acc).g15, a_quad(r + 60u, k, k_end), b0, b1, b2, b3);
}

// The bias of columns col..col+15 as 4 vec4 (column j = bias[col+4j .. col+4j+3]), zeros
// without a bias. Loaded once per invocation, not per stored row. Only called with N % 4 == 0
// when has_bias (the TS side sends ragged N through reduce_splits), so the clamp to the last
// vec4 just keeps the lanes past N, whose stores are dropped, in bounds.
fn bias_quad(col: u32) -> mat4x4<f32> {
  if (p.has_bias == 0u) {
    return mat4x4<f32>();
  }
  let last = p.n / 4u - 1u;
  let q = col / 4u;
  return mat4x4<f32>(bias[min(q, last)], bias[min(q + 1u, last)], bias[min(q + 2u, last)], bias[min(q + 3u, last)]);
}

// Stores 4 columns of one row, alpha·v + beta·C + bv, as one vec4 (`col` and ldc are
// multiples of 4; bv is the bias of those columns, or zeros). C's old value is dropped by a
// select when beta == 0, since a fresh pool buffer may hold NaNs. (Loading it anyway costs
// nothing measurable, and saves a second pipeline per layout: seconds of LLVM time each on
// lavapipe.)
fn store_row(base: u32, row: u32, col: u32, v: vec4<f32>, bv: vec4<f32>) {
  if (row < p.m && col < p.n) {
    let i = (base + row * p.ldc + col) >> 2u;
    c[i] = p.alpha * v + select(vec4<f32>(0.0), p.beta * c[i], p.beta != 0.0) + bv;
  }
}

fn store_block(base: u32, r: u32, col: u32, blk: mat4x4<f32>, bv: vec4<f32>) {
  store_row(base, r, col, blk[0], bv);
  store_row(base, r + 1u, col, blk[1], bv);
  store_row(base, r + 2u, col, blk[2], bv);
  store_row(base, r + 3u, col, blk[3], bv);
}

fn store_quad(base: u32, r: u32, col: u32, q: Quad, bq: mat4x4<f32>) {
  store_block(base, r, col, q.j0, bq[0]);
  store_block(base, r, col + 4u, q.j1, bq[1]);
  store_block(base, r, col + 8u, q.j2, bq[2]);
  store_block(base, r, col + 12u, q.j3, bq[3]);
}

@compute @workgroup_size(LANES)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let wg_y = LANES / p.wg_x;
  let r = (wid.y * wg_y + li / p.wg_x) * TM;
  let col = (wid.x * p.wg_x + li % p.wg_x) * TN;
  if (r >= p.m || col >= p.n) {
    return;
  }
  let k_begin = wid.z * p.k_split;
  let k_end = min(k_begin + p.k_split, p.k);
  var acc: Acc;
  for (var k = k_begin; k < k_end; k += 4u) {
    k_step(&acc, r, col, k, k_end);
  }
  // Stores run once per invocation, so they sit in a real loop (its bound is not a constant,
  // so it is not unrolled) over the row quads: 16 stores of code instead of 256. Unrolled,
  // they made up three quarters of lavapipe's compile time (ten times that with loads of C).
  let base = wid.z * p.mn_pad;
  let bq = bias_quad(col);
  let quads = min(TM / 4u, (p.m - r + 3u) / 4u);
  for (var g = 0u; g < quads; g++) {
    var q: Quad;
    switch g {
      case 0u: { q = acc.g0; }
      case 1u: { q = acc.g1; }
      case 2u: { q = acc.g2; }
      case 3u: { q = acc.g3; }
      case 4u: { q = acc.g4; }
      case 5u: { q = acc.g5; }
      case 6u: { q = acc.g6; }
      case 7u: { q = acc.g7; }
      case 8u: { q = acc.g8; }
      case 9u: { q = acc.g9; }
      case 10u: { q = acc.g10; }
      case 11u: { q = acc.g11; }
      case 12u: { q = acc.g12; }
      case 13u: { q = acc.g13; }
      case 14u: { q = acc.g14; }
      default: { q = acc.g15; }
    }
    store_quad(base, r + 4u * g, col, q, bq);
  }
}

//!include matmul_passes
