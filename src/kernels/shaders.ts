/**
 * WGSL specialisation for the kernels; the sources themselves are loaded with the device
 * (src/gpu/shaders.ts).
 */

/**
 * Specialises WGSL by rewriting module-scope constants: for each key, the line
 * `const KEY: T = …;` (or `const KEY = …;`) gets the new value. Pipelines are cached per result.
 * @throws Error when a constant is missing from the source, so a renamed constant cannot be
 *   silently ignored.
 */
export function specialise(code: string, consts: Record<string, number | string>): string {
  let out = code;
  for (const [key, value] of Object.entries(consts)) {
    const re = new RegExp(`^(\\s*const\\s+${key}\\s*(?::\\s*\\w+)?\\s*=\\s*)[^;]+;`, 'm');
    if (!re.test(out)) throw new Error(`specialise: constant '${key}' not found in shader`);
    out = out.replace(re, `$1${value};`);
  }
  return out;
}
