// bf16 wire format: f32 values already rounded to bfloat16 (round_bf16.wgsl, so their low 16
// bits are zero) keep only their upper 16 bits, two per u32 word (element 2w in the low half,
// 2w + 1 in the high half), so the payload really is 2 bytes an element; unpacking is exact.
// An odd n leaves the last word's high half zero. One invocation per word (pack) or element.
//
// Bindings: 0 x f32 (read), 1 packed u32 (read_write; unpack only reads it), 2 y f32, 3 params.

struct Params {
  n: u32,
  row_groups: u32, // workgroups per row of the 2-D grid (grid.ts)
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> packed: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn pack_bf16(@builtin(global_invocation_id) gid: vec3<u32>) {
  let w = gid.y * p.row_groups * 256u + gid.x;
  let i = 2u * w;
  if (i >= p.n) { return; }
  var word = bitcast<u32>(x[i]) >> 16u;
  if (i + 1u < p.n) {
    word |= bitcast<u32>(x[i + 1u]) & 0xffff0000u;
  }
  packed[w] = word;
}

@compute @workgroup_size(256)
fn unpack_bf16(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.y * p.row_groups * 256u + gid.x;
  if (i >= p.n) { return; }
  let word = packed[i >> 1u];
  y[i] = bitcast<f32>(select(word << 16u, word & 0xffff0000u, (i & 1u) == 1u));
}
