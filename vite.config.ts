import { defineConfig } from 'vite';

// The demo and its rank workers are ES modules; WGSL files are fetched at run time through
// `new URL('../../shaders/NAME.wgsl', import.meta.url)`, which Vite turns into assets.
// Two pages: the training demo (index.html) and the collective-layer test page
// (collectives.html, driven by e2e/collectives.spec.ts).
const page = (name: string) => decodeURIComponent(new URL(`./${name}`, import.meta.url).pathname);

// The shared data plane of worker ranks (docs/design.md#the-shared-data-plane-of-worker-ranks) needs SharedArrayBuffer,
// which a browser offers only to a cross-origin-isolated page: these two headers make the page one. A static host must
// send the same two; without them the demo runs on MessagePorts and says why.
const ISOLATION = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

export default defineConfig({
  worker: { format: 'es' },
  build: {
    target: 'es2022',
    outDir: 'dist',
    rolldownOptions: { input: { main: page('index.html'), collectives: page('collectives.html') } },
  },
  server: { port: 5173, headers: ISOLATION },
  preview: { port: 4173, headers: ISOLATION },
});
