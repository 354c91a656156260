// NEFTune embedding noise (Jain et al. arXiv 2310.05914): x[i] += scale · v, v ∈ (−1, 1)
// uniform, from a counter-based hash of (seed, first + i) — no RNG state, so any element's noise is
// known from the seed alone and the CPU twin (kernels/noise.ts noiseValue) matches bit for bit.
// A 2D grid of 256-wide workgroups covers n beyond 65535 workgroups: i = x + y·(groups.x·256).
//
// Bindings: 0 x (read_write), 1 params.

struct Params {
  n: u32,       // elements
  seed: u32,    // pre-hashed seed (hash32(seed) on the host)
  scale: f32,   // half-width of the uniform noise
  first: u32,   // noise index of element 0 (x is a slice of a larger tensor); the sum wraps mod 2³²
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

// lowbias32 (Chris Wellons' hash-prospector), as src/util/random.ts hash32.
fn hash32(v: u32) -> u32 {
  var h = v;
  h = h ^ (h >> 16u);
  h = h * 0x7feb352du;
  h = h ^ (h >> 15u);
  h = h * 0x846ca68bu;
  return h ^ (h >> 16u);
}

@compute @workgroup_size(256)
fn add_uniform(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = gid.x + gid.y * groups.x * 256u;
  if (i >= p.n) { return; }
  let h = hash32((p.seed ^ hash32(p.first + i)) + 0x9e3779b9u);
  // 23 bits, centred: (k + 0.5)/2²² − 1 is exact in f32, symmetric about 0, never ±1.
  let v = (f32(h >> 9u) + 0.5) * (1.0 / 4194304.0) - 1.0;
  x[i] = x[i] + p.scale * v;
}
