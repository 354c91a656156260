// 1-bit sign compression as in 1-bit Adam's compressed allreduce (Tang et al., arXiv
// 2102.02888; DeepSpeed's compressed_allreduce): bit i is 1 where x_i ≥ 0 (so 0 sends +1, as
// DeepSpeed's sign().add_(1).bool() does) and 0 where x_i < 0, 32 per u32 word (element
// 32w + j in bit j, the last word's spare bits zero), with one f32 scale per tensor,
// s = ‖x‖₂ / √n, the scale that keeps the decompressed vector's norm. y_i = ±s.
// ‖x‖₂ comes from kernels/adamw.ts gradNorm (norm[0]). pack_sign: one invocation per word;
// unpack_sign: one per element.
//
// Bindings: 0 x f32 (read), 1 norm f32 (read), 2 bits u32, 3 scale f32 (read_write; unpack
// only reads them), 4 y f32 (read_write), 5 params.

struct Params {
  n: u32,
  row_groups: u32, // workgroups per row of the 2-D grid
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> norm: array<f32>;
@group(0) @binding(2) var<storage, read_write> bits: array<u32>;
@group(0) @binding(3) var<storage, read_write> scale: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size(256)
fn pack_sign(@builtin(global_invocation_id) gid: vec3<u32>) {
  let w = gid.y * p.row_groups * 256u + gid.x;
  if (w == 0u) { scale[0] = norm[0] / sqrt(f32(p.n)); }
  let i0 = 32u * w;
  if (i0 >= p.n) { return; }
  let end = min(i0 + 32u, p.n);
  var word = 0u;
  for (var i = i0; i < end; i++) {
    word |= select(0u, 1u, x[i] >= 0.0) << (i - i0);
  }
  bits[w] = word;
}

@compute @workgroup_size(256)
fn unpack_sign(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.y * p.row_groups * 256u + gid.x;
  if (i >= p.n) { return; }
  let s = scale[0];
  y[i] = select(-s, s, ((bits[i >> 5u] >> (i & 31u)) & 1u) == 1u);
}
