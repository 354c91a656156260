// Column sums of a row-major (n, c) matrix over chunks of rows, without atomics: one
// invocation owns each (chunk, column) output and loops over the chunk's rows, column
// fastest so neighbouring invocations read neighbouring floats.
//   out[k·c + col] (+)= Σ_{r in [k·chunk, min(n, (k+1)·chunk))} src[r·c + col]
// With chunk ≥ n this is a plain column sum into out (c); with accumulate = 1 it adds.
// The TS side chains two passes (chunk partials, then their sum) for long columns.
//
// Bindings: 0 src (read), 1 out (read_write), 2 params.

struct Params {
  n: u32,           // rows of src
  c: u32,           // columns
  chunk: u32,       // rows per chunk
  accumulate: u32,  // 1: out += sum, 0: out = sum
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn colsum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = gid.x + gid.y * groups.x * 256u;
  let c = p.c;
  let chunks = (p.n + p.chunk - 1u) / p.chunk;
  if (i >= chunks * c) { return; }
  let k = i / c;
  let col = i % c;
  let r1 = min(p.n, (k + 1u) * p.chunk);
  var s = 0.0;
  for (var r = k * p.chunk; r < r1; r++) {
    s += src[r * c + col];
  }
  if (p.accumulate != 0u) {
    s += out[i];
  }
  out[i] = s;
}
