// Block-wise int4 quantisation (Streaming DiLoCo's 4-bit outer gradients, arXiv 2501.18512; the
// int8 kernel, compress_int8.wgsl, with 15 levels): x is cut into blocks of BLOCK elements (the
// last may be partial); each block gets one f32 scale s = absmax / 7 and each element
// q = round(x · 7 / absmax), ties to even, in [−7, 7] (an all-zero block has s = 0 and q = 0).
// q is stored as a two's-complement nibble, eight per u32 word (element 8w + j in nibble j);
// BLOCK is a power of two ≥ 32, so blocks never split a word. Dequantisation is y = q · s.
// Non-finite inputs give unspecified q and s.
// quantize: one workgroup per block (a max-reduction in workgroup memory, then one word per
// invocation). dequantize: one invocation per element.
//
// Bindings: 0 x f32 (read), 1 q u32, 2 scale f32 (read_write; dequantize only reads them),
// 3 y f32 (read_write), 4 params.

const BLOCK: u32 = 256u;
const WG: u32 = 256u;

struct Params {
  n: u32,
  row_groups: u32, // workgroups per row of the 2-D grid
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn quantize(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let b = wid.y * p.row_groups + wid.x; // uniform: the early return keeps barriers uniform
  let start = b * BLOCK;
  if (start >= p.n) { return; }
  let end = min(start + BLOCK, p.n);
  var m = 0.0;
  for (var i = start + lid; i < end; i += WG) {
    m = max(m, abs(x[i]));
  }
  red[lid] = m;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    workgroupBarrier();
  }
  let amax = red[0];
  if (lid == 0u) { scale[b] = amax / 7.0; }
  // Multiplying by 7 / absmax instead of dividing by the scale: the same quotient up to
  // rounding, and |q| ≤ 7 whatever the rounding of the scale.
  let inv = select(0.0, 7.0 / amax, amax > 0.0);
  for (var w = start / 8u + lid; w < (end + 7u) / 8u; w += WG) {
    var word = 0u;
    for (var j = 0u; j < 8u; j++) {
      let i = 8u * w + j;
      if (i < end) {
        let v = clamp(i32(round(x[i] * inv)), -7, 7);
        word |= (bitcast<u32>(v) & 0xfu) << (4u * j);
      }
    }
    q[w] = word;
  }
}

@compute @workgroup_size(WG)
fn dequantize(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.y * p.row_groups * WG + gid.x;
  if (i >= p.n) { return; }
  // Shift the nibble to the top, then an arithmetic shift back sign-extends it.
  let v = bitcast<i32>(q[i >> 3u] << (28u - 4u * (i & 7u))) >> 28u;
  y[i] = f32(v) * scale[i / BLOCK];
}
