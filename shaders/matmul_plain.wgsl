// The plain 16×16 shared-memory tiled matmul: C (M,N) = A (M,K) · B (K,N), all row-major.
// One invocation per output element; each workgroup stages a 16×16 tile of A and of B
// in workgroup memory per step of K. This is the textbook kernel (e.g. the CUDA
// programming guide's "shared memory" matmul) and serves only as the benchmark baseline
// that the shipped kernel (matmul.wgsl) is measured against.
//
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 params.

struct Params {
  m: u32,
  n: u32,
  k: u32,
  _pad: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const TILE: u32 = 16u;

var<workgroup> ta: array<array<f32, 16>, 16>;
var<workgroup> tb: array<array<f32, 16>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let row = wid.y * TILE + lid.y;
  let col = wid.x * TILE + lid.x;
  var acc = 0.0;
  let steps = (p.k + TILE - 1u) / TILE;
  for (var t = 0u; t < steps; t++) {
    // Out-of-range elements are staged as zeros so ragged M, N, K need no special case.
    let ka = t * TILE + lid.x;
    var va = 0.0;
    if (row < p.m && ka < p.k) { va = a[row * p.k + ka]; }
    ta[lid.y][lid.x] = va;
    let kb = t * TILE + lid.y;
    var vb = 0.0;
    if (kb < p.k && col < p.n) { vb = b[kb * p.n + col]; }
    tb[lid.y][lid.x] = vb;
    workgroupBarrier();
    for (var i = 0u; i < TILE; i++) {
      acc += ta[lid.y][i] * tb[i][lid.x];
    }
    workgroupBarrier();
  }
  if (row < p.m && col < p.n) {
    c[row * p.n + col] = acc;
  }
}
