// bf16 rounding of f32 values (bf16-mixed precision, emulated): y = x rounded to the nearest
// bfloat16 (8 exponent bits, 7 mantissa bits), ties to even, kept in f32 storage. The exponent
// range is f32's, so only mantissa bits are lost; ±inf stay, NaN stays NaN (its payload is
// forced quiet, as a hardware conversion would). No device feature is needed.
// One invocation per element; x and y may be different buffers of the same size.
//
// Bindings: 0 x f32 (read), 1 y f32 (read_write), 2 params.

struct Params {
  n: u32,
  row_groups: u32, // workgroups per row of the 2-D grid (grid.ts)
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn round_bf16(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.y * p.row_groups * 256u + gid.x;
  if (i >= p.n) { return; }
  let u = bitcast<u32>(x[i]);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    y[i] = bitcast<f32>(u | 0x00400000u); // NaN: quiet, never rounded into inf
    return;
  }
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry into the
  // exponent is the correct rounding up (to inf past bf16's largest finite value).
  let r = u + 0x7fffu + ((u >> 16u) & 1u);
  y[i] = bitcast<f32>(r & 0xffff0000u);
}
