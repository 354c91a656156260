// Column sums of a row-major (n, c) matrix over chunks of rows, without atomics: one
// invocation owns each (chunk, column) output and loops over the chunk's rows (chunk_column
// in row_reduce.wgsl, the grid the norms' partial-sum passes use too).
//   out[k·c + col] (+)= Σ_{r in [k·chunk, min(n, (k+1)·chunk))} src[r·c + col]
// With chunk ≥ n this is a plain column sum into out (c); with accumulate = 1 it adds. The TS
// side chains two passes (chunk partials, then their sum) for long columns, and adds the
// norms' dw/db partials into their gradients with the second.
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

//!include row_reduce

@compute @workgroup_size(COL_WG)
fn colsum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let c = p.c;
  let cc = chunk_column(gid, groups, p.n, c, p.chunk);
  if (!cc.live) { return; }
  var s = 0.0;
  for (var r = cc.r0; r < cc.r1; r++) {
    s += src[r * c + cc.col];
  }
  if (p.accumulate != 0u) {
    s += out[cc.i];
  }
  out[cc.i] = s;
}
