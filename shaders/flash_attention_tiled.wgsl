// FlashAttention-2 forward, shared-memory tiled variant for GPUs (Dao 2023, arXiv 2307.08691,
// Algorithm 1): one workgroup per (b, h, block of BR query rows), one invocation per query row
// with its q row and output accumulator in private arrays; the workgroup stages K and V tiles of
// BC rows in workgroup memory, so every key/value load from storage feeds BR rows. The TS side
// picks BC from maxComputeWorkgroupStorageSize (2·BC·HS4 vec4s) and specialises BR, BC, HS.
// The backward is in flash_attention_tiled_bwd.wgsl; layouts, bindings (same as the
// barrier-free `fwd`) and helpers in flash_attention_common.wgsl.
//
// Causal: a block never loads the key tiles past its last query row (the blocks above the
// diagonal are skipped); inside the diagonal tile each row masks keys s > t with NEG.
// Streamed keys lo … hi−1 per dispatch (CPU adapters split T into several dispatches to stay
// under lavapipe's 65 535 loop iterations per invocation); the running O, m and ℓ carry over in
// y, lse and lsum exactly as in the barrier-free `fwd`.
//
// Loops over a row's channels and a tile's keys have constant trip counts (HS4, BC; a guard
// skips keys past the tile), unlike the barrier-free kernels': a GPU compiler then unrolls them
// and keeps q, o and the scores in registers, where an index it cannot resolve puts a private
// array in local memory (docs/design.md#webgpu-limits-that-shape-the-kernels). These kernels only run on GPUs, or
// forced in tests.
//
// Every loop bound and every barrier depends only on the workgroup id and the uniform, so
// control flow around the barriers is workgroup-uniform; rows past T compute on a clamped copy
// of row T−1 and are not stored.
//!include flash_attention_common
//!include flash_attention_tiles

const BR: u32 = 64u;
const BC: u32 = 32u;

@compute @workgroup_size(BR)
fn fwd_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let g = group_index(wid, groups);
  // Whole workgroups past the end return together, so the barriers below stay uniform.
  if (g >= tiled_groups(BR)) { return; }
  let blk = tiled_block(g, BR);
  let t = blk.first + lid;
  let tc = min(t, p.t - 1u);
  let lrow = blk.bh * p.t + tc;

  var q = ld_qkv_row(blk.qb + tc * blk.c3, p.scale);
  let r0 = fwd_row_start(blk.ob + tc * p.c, lrow);
  var o = r0.o;
  var m = r0.m;
  var l = r0.l;
  // Keys this row sees: s < lim; keys the block needs: s < end (uniform).
  let lim = key_lim(tc);
  let end = key_end(blk.first, BR);
  var sc: array<f32, BC>;
  // The first tile of the first chunk holds key 0, which every row sees: m is finite after it.
  for (var s0 = p.lo; s0 < end; s0 += BC) {
    let nk = min(BC, end - s0);
    stage_kv(blk, s0, nk, lid);
    workgroupBarrier();
    var mx = NEG;
    // Constant trip counts (BC keys, HS4 channels) with a guard rather than `k < nk`: the loops
    // unroll and sc, q and o stay in registers instead of local memory
    // (docs/design.md#webgpu-limits-that-shape-the-kernels).
    for (var k = 0u; k < BC; k++) {
      var s = NEG;
      if (k < nk) {
        var acc = vec4<f32>(0.0);
        for (var j = 0u; j < HS4; j++) {
          acc = fma(q[j], atile[k * HS4 + j], acc);
        }
        s = select(NEG, (acc.x + acc.y) + (acc.z + acc.w), s0 + k < lim);
      }
      sc[k] = s;
      mx = max(mx, s);
    }
    let mn = max(m, mx);
    let alpha = exp(m - mn);
    l *= alpha;
    for (var j = 0u; j < HS4; j++) {
      o[j] *= alpha;
    }
    for (var k = 0u; k < BC; k++) {
      if (k < nk) {
        let pk = exp(sc[k] - mn);
        l += pk;
        for (var j = 0u; j < HS4; j++) {
          o[j] = fma(vec4<f32>(pk), btile[k * HS4 + j], o[j]);
        }
      }
    }
    m = mn;
    // The next tile overwrites atile/btile only after every row is done with this one.
    workgroupBarrier();
  }
  if (t >= p.t) { return; }
  fwd_row_store(blk.ob + t * p.c, lrow, o, m, l);
}
