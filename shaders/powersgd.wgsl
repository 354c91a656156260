// PowerSGD's orthogonalisation (Vogels et al., arXiv 1905.13727, Algorithm 1): the columns of
// P (rows × rank, row-major) made orthonormal by modified Gram–Schmidt with one
// reorthogonalisation, one column per dispatch of one workgroup, in order: column `col` loses
// its projections on the columns before it (already orthonormal), one at a time on the updated
// column, twice, then is divided by its norm. A column of norm 0 stays 0 (no division by
// zero), and so does its column of Q = Mᵀ·P̂.
// Each invocation owns the rows lid, lid + WG, …, so only the dot products cross
// invocations (a tree in workgroup memory). Per dispatch an invocation runs about
// (2·col + 1)·(2·⌈rows / WG⌉ + 8) loop steps, which the TS side keeps under lavapipe's cap.
//
// Bindings: 0 p f32 (read_write), 1 params.

const WG: u32 = 256u;

struct Params {
  rows: u32,
  rank: u32,
  col: u32,
  _a: u32,
}

@group(0) @binding(0) var<storage, read_write> pm: array<f32>;
@group(0) @binding(1) var<uniform> prm: Params;

var<workgroup> red: array<f32, WG>;

// Σ_r P[r, a]·P[r, b] over all rows, the same value in every invocation.
fn col_dot(a: u32, b: u32, lid: u32) -> f32 {
  var s = 0.0;
  for (var r = lid; r < prm.rows; r += WG) {
    s = fma(pm[r * prm.rank + a], pm[r * prm.rank + b], s);
  }
  red[lid] = s;
  workgroupBarrier();
  for (var w = WG / 2u; w > 0u; w >>= 1u) {
    if (lid < w) { red[lid] += red[lid + w]; }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier(); // everyone has read red[0] before the next call overwrites it
  return total;
}

@compute @workgroup_size(WG)
fn orthogonalise(@builtin(local_invocation_index) lid: u32) {
  let j = prm.col;
  // Two passes ("twice is enough", Giraud et al. 2005): when P's column is nearly in the span of
  // the previous ones (M of rank < r), one pass leaves rounding noise that still leans on them,
  // and normalising it would break orthogonality; the second pass removes that lean.
  for (var sweep = 0u; sweep < 2u; sweep++) {
    for (var i = 0u; i < j; i++) {
      let d = col_dot(i, j, lid);
      for (var r = lid; r < prm.rows; r += WG) {
        pm[r * prm.rank + j] -= d * pm[r * prm.rank + i];
      }
    }
  }
  let norm = sqrt(col_dot(j, j, lid));
  let inv = select(0.0, 1.0 / norm, norm > 0.0);
  for (var r = lid; r < prm.rows; r += WG) {
    pm[r * prm.rank + j] *= inv;
  }
}
