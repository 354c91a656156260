// Column sums of a row-major (n, c) matrix over chunks of rows, without atomics: one
// invocation owns each (chunk, column) output and loops over the chunk's rows (chunk_column
// in col_chunks.wgsl, the grid the norms' partial-sum passes use too).
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

//!include col_chunks

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

// Count of non-finite elements (±Inf, NaN) of src (n), added to nonfinite[0]: the check a run
// makes on its parameters and AdamW moments before it saves them. Each invocation strides over
// src by the grid's width (as adamw.wgsl's norm_partial) and adds its count with one atomic,
// only when it found something, so a healthy buffer costs no atomic traffic. Calls on several
// buffers accumulate into one counter, read back once.
// The test is on the bits (exponent all ones): compilers may assume x == x and fold the
// usual NaN test away.
// Bindings: 0 src (read), 3 nonfinite (read_write, atomic u32), 4 q.

struct CountParams {
  n: u32,
  _a: u32,
  _b: u32,
  _c: u32,
}

@group(0) @binding(3) var<storage, read_write> nonfinite: array<atomic<u32>>;
@group(0) @binding(4) var<uniform> q: CountParams;

@compute @workgroup_size(COL_WG)
fn count_nonfinite(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let stride = groups.x * COL_WG;
  var k = 0u;
  for (var i = gid.x; i < q.n; i += stride) {
    if ((bitcast<u32>(src[i]) & 0x7f800000u) == 0x7f800000u) {
      k += 1u;
    }
  }
  if (k > 0u) {
    atomicAdd(&nonfinite[0], k);
  }
}
