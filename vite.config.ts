import { defineConfig } from 'vite';

// The demo and its rank workers are ES modules; WGSL files are fetched at run time through
// `new URL('../../shaders/NAME.wgsl', import.meta.url)`, which Vite turns into assets.
export default defineConfig({
  worker: { format: 'es' },
  build: { target: 'es2022', outDir: 'dist' },
  server: { port: 5173 },
  preview: { port: 4173 },
});
