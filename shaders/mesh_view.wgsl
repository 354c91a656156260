// The mesh view's two render pipelines (src/app/mesh_view.ts): instanced shaded cubes, one
// per rank, and instanced line segments, one per link, whose brightness shows recent traffic.

struct Frame {
  view_proj: mat4x4<f32>,
  light: vec4<f32>, // xyz: direction towards the light
};

struct Cube {
  centre: vec4<f32>, // xyz, w = half size
  colour: vec4<f32>, // rgb, a = highlight 0…1
};

struct Link {
  a: vec4<f32>,
  b: vec4<f32>,
  colour: vec4<f32>, // rgb, a = activity 0…1
};

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> cubes: array<Cube>;
@group(0) @binding(2) var<storage, read> links: array<Link>;

struct CubeOut {
  @builtin(position) pos: vec4<f32>,
  @location(0) colour: vec3<f32>,
  @location(1) normal: vec3<f32>,
  @location(2) highlight: f32,
};

// 6 faces × 2 triangles; face f has normal ±axis (f / 2) and sign from f % 2. Drawn without
// culling, so the winding of each face does not matter.
@vertex
fn cube_vs(@builtin(vertex_index) vi: u32, @builtin(instance_index) ii: u32) -> CubeOut {
  let face = vi / 6u;
  let corner = array<vec2<f32>, 6>(vec2(-1., -1.), vec2(1., -1.), vec2(1., 1.), vec2(-1., -1.), vec2(1., 1.), vec2(-1., 1.))[vi % 6u];
  let axis = face / 2u;
  let s = select(-1.0, 1.0, face % 2u == 0u);
  var p: vec3<f32>;
  var n: vec3<f32>;
  if (axis == 0u) { p = vec3(s, corner.x * s, corner.y); n = vec3(s, 0., 0.); }
  else if (axis == 1u) { p = vec3(corner.y, s, corner.x * s); n = vec3(0., s, 0.); }
  else { p = vec3(corner.x * s, corner.y, s); n = vec3(0., 0., s); }
  let c = cubes[ii];
  var out: CubeOut;
  out.pos = frame.view_proj * vec4(c.centre.xyz + p * c.centre.w, 1.0);
  out.colour = c.colour.rgb;
  out.normal = n;
  out.highlight = c.colour.a;
  return out;
}

@fragment
fn cube_fs(in: CubeOut) -> @location(0) vec4<f32> {
  let diffuse = max(dot(normalize(in.normal), normalize(frame.light.xyz)), 0.0);
  let lit = in.colour * (0.35 + 0.65 * diffuse);
  return vec4(mix(lit, vec3(1.0, 1.0, 0.85), 0.45 * in.highlight), 1.0);
}

struct LinkOut {
  @builtin(position) pos: vec4<f32>,
  @location(0) colour: vec4<f32>,
};

@vertex
fn link_vs(@builtin(vertex_index) vi: u32, @builtin(instance_index) ii: u32) -> LinkOut {
  let l = links[ii];
  var out: LinkOut;
  out.pos = frame.view_proj * vec4(select(l.b.xyz, l.a.xyz, vi == 0u), 1.0);
  // Idle links stay faintly visible; traffic brightens them towards white.
  out.colour = vec4(mix(l.colour.rgb * 0.45, vec3(1.0, 0.95, 0.6), l.colour.a), 1.0);
  return out;
}

@fragment
fn link_fs(in: LinkOut) -> @location(0) vec4<f32> {
  return in.colour;
}
