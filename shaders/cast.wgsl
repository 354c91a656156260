// Casts between f32 and f16 storage (mixed precision: f16 copies of f32 master values for the
// matmuls, f32 results back). Round to nearest even, as WGSL's f16() conversion does;
// values past f16's range become ±inf, which the loss scaler of a mixed-precision run detects.
// Needs the device feature shader-f16. One invocation per element; n may be odd (the f16
// binding is rounded up to 4 bytes and the extra half is never written).
//
// Bindings: to_f16: 0 src f32 (read), 1 dst f16 (read_write); to_f32: 2 src f16, 3 dst f32; 4 params.
enable f16;

struct Params {
  n: u32,
  row_groups: u32, // workgroups per row of the 2-D grid (grid.ts)
}

@group(0) @binding(0) var<storage, read> x32: array<f32>;
@group(0) @binding(1) var<storage, read_write> y16: array<f16>;
@group(0) @binding(2) var<storage, read> x16: array<f16>;
@group(0) @binding(3) var<storage, read_write> y32: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(256)
fn to_f16(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.y * p.row_groups * 256u + gid.x;
  if (i < p.n) { y16[i] = f16(x32[i]); }
}

@compute @workgroup_size(256)
fn to_f32(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.y * p.row_groups * 256u + gid.x;
  if (i < p.n) { y32[i] = f32(x16[i]); }
}
