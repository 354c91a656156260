// The workgroup-memory tiles of flash_attention_tiled.wgsl and flash_attention_tiled_bwd.wgsl
// (the _sg variants stage nothing). Included after flash_attention_common: it needs the
// including kernel's BR and BC, which the TS side specialises per pipeline.
var<workgroup> atile: array<vec4<f32>, BC * HS4>;
var<workgroup> btile: array<vec4<f32>, BC * HS4>;

// Keys s0 … s0 + nk − 1 of K into atile and of V into btile, the block's BR invocations taking
// turns over consecutive vec4s so that loads from storage coalesce. The caller's barrier follows.
fn stage_kv(blk: Block, s0: u32, nk: u32, lid: u32) {
  for (var i = lid; i < nk * HS4; i += BR) {
    let r = (s0 + i / HS4) * blk.c3;
    let j = i % HS4;
    atile[i] = ld_qkv(blk.kb + r, j);
    btile[i] = ld_qkv(blk.vb + r, j);
  }
}
