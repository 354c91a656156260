import { defineConfig } from 'vite';

// The demo and its rank workers are ES modules; WGSL files are fetched at run time through
// `new URL('../../shaders/NAME.wgsl', import.meta.url)`, which Vite turns into assets.
// Two pages: the training demo (index.html) and the collective-layer test page
// (collectives.html, driven by e2e/collectives.spec.ts).
const page = (name: string) => decodeURIComponent(new URL(`./${name}`, import.meta.url).pathname);

export default defineConfig({
  worker: { format: 'es' },
  build: {
    target: 'es2022',
    outDir: 'dist',
    rolldownOptions: { input: { main: page('index.html'), collectives: page('collectives.html') } },
  },
  server: { port: 5173 },
  preview: { port: 4173 },
});
