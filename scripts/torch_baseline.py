#!/usr/bin/env python3
"""PyTorch baseline for `npm run scale`: the same measurements on the same GPU.

    python3 scripts/torch_baseline.py --json torch.json [--quick] [--no-compile] [--batch 4]
    npm run scale -- --baseline torch.json --device h100-sxm

Measures, on CUDA (or the CPU with --quick when no GPU is present):
  * matmul M=N=K in f32 (TF32 off, so it is the same arithmetic as ours) and f16, GFLOP/s;
  * causal scaled_dot_product_attention forward+backward, (B, nh, T, hs) as the scale suite;
  * a training step of the GPT-2-124M shape the suite trains (nanoGPT's model: pre-LayerNorm
    blocks with biases, GELU (tanh), tied head, AdamW), in f32 and autocast f16 (with a
    GradScaler), eager and torch.compile: tokens/s, ms/step and peak allocated bytes.
Shapes and step count follow src/bench/scale.ts; keys match src/bench/baseline.ts's schema.
The JSON is rewritten after every part, so a run stopped early keeps what it measured.
"""
import argparse
import datetime
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(fn, dev, reps, warmup=2):
    """Median ms of fn() over reps calls after warmup calls, synchronised around each."""
    for _ in range(warmup):
        fn()
    if dev == 'cuda':
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if dev == 'cuda':
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


class Block(nn.Module):
    def __init__(s, c, nh):
        super().__init__()
        s.nh = nh
        s.ln_1, s.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        s.c_attn, s.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        s.c_fc, s.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(s, x):
        b, t, c = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(c, dim=2)  # (B, T, C) each
        q, k, v = (z.view(b, t, s.nh, c // s.nh).transpose(1, 2) for z in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + s.c_proj(y)
        return x + s.mlp_proj(F.gelu(s.c_fc(s.ln_2(x)), approximate='tanh'))


class GPT(nn.Module):
    def __init__(s, n_layer, n_head, n_embd, block, vocab):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block, n_embd)
        s.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        s.ln_f = nn.LayerNorm(n_embd)

    def forward(s, idx, targets):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))  # (B, T, C)
        for blk in s.h:
            x = blk(x)
        logits = s.ln_f(x) @ s.wte.weight.T  # (B, T, V), tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def bench_train(shape, dtype, mode, dev, steps, warmup):
    torch.manual_seed(0)
    model = GPT(shape['nLayer'], shape['nHead'], shape['nEmbd'], shape['blockSize'], shape['vocabSize']).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    fwd = torch.compile(model) if mode == 'compile' else model
    scaler = torch.amp.GradScaler(dev, enabled=dtype == 'f16')
    b, t = shape['batchSize'], shape['blockSize']
    x = torch.randint(0, shape['vocabSize'], (b, t), device=dev)
    y = torch.randint(0, shape['vocabSize'], (b, t), device=dev)

    def step():
        with torch.autocast(dev, dtype=torch.float16, enabled=dtype == 'f16'):
            loss = fwd(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    if dev == 'cuda':
        torch.cuda.reset_peak_memory_stats()
    ms = timed(step, dev, steps, warmup)
    peak = torch.cuda.max_memory_allocated() if dev == 'cuda' else 0
    params = sum(p.numel() for p in model.parameters())
    del model, opt, fwd
    if dev == 'cuda':
        torch.cuda.empty_cache()
    return {'name': shape['name'], 'dtype': dtype, 'mode': mode, 'params': params, 'msPerStep': ms,
            'tokensPerSec': b * t * 1e3 / ms, 'peakBytes': int(peak)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--json', required=True, help='output file')
    ap.add_argument('--quick', action='store_true', help="the scale suite's --quick shapes")
    ap.add_argument('--no-compile', action='store_true', help='skip torch.compile runs')
    ap.add_argument('--batch', type=int, default=None, help='sequences per training step (default 4; quick 2)')
    a = ap.parse_args()
    dev = 'cuda' if torch.cuda.is_available() else 'cpu'
    if dev == 'cpu' and not a.quick:
        raise SystemExit('torch_baseline: no CUDA device; the full suite is for a GPU (use --quick on a CPU)')
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 means f32, as in our kernels
    torch.backends.cudnn.allow_tf32 = False
    if a.quick:
        sizes, ts, hss, nh = [64, 128], [64, 128], [32], 2
        shape = dict(name='gpt-quick', nLayer=2, nHead=2, nEmbd=64, blockSize=64, vocabSize=256, batchSize=a.batch or 2)
        steps, warm = 2, 1
    else:
        sizes, ts, hss, nh = [256, 512, 1024, 2048, 4096, 8192], [1024, 2048, 4096, 8192, 16384], [64, 128], 12
        shape = dict(name='gpt2-124m', nLayer=12, nHead=12, nEmbd=768, blockSize=1024, vocabSize=50257,
                     batchSize=a.batch or 4)
        steps, warm = 10, 3
    name = torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'
    out = {'device': name, 'torch': torch.__version__, 'date': datetime.datetime.now().isoformat(),
           'tf32': False, 'matmul': [], 'attention': [], 'train': []}

    def save():
        with open(a.json, 'w') as f:
            json.dump(out, f, indent=2)

    dtypes = {'f32': torch.float32, 'f16': torch.float16} if dev == 'cuda' else {'f32': torch.float32}
    for n in sizes:
        for dn, dt in dtypes.items():
            x, w = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
            ms = timed(lambda: x @ w, dev, 10)
            out['matmul'].append({'n': n, 'dtype': dn, 'ms': ms, 'gflops': 2 * n ** 3 / (ms * 1e6)})
    save()
    for hs in hss:
        for t in ts:
            for dn, dt in dtypes.items():
                q, k, v = (torch.randn(1, nh, t, hs, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
                dy = torch.randn(1, nh, t, hs, device=dev, dtype=dt)

                def fb():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dy)

                ms = timed(fb, dev, 5)
                out['attention'].append({'t': t, 'hs': hs, 'nh': nh, 'b': 1, 'dtype': dn, 'ms': ms})
                del q, k, v, dy
    save()
    modes = ['eager'] if a.no_compile else ['eager', 'compile']
    for mode in modes:
        for dn in dtypes:
            r = bench_train(shape, dn, mode, dev, steps, warm)
            print(f"train {dn} {mode}: {r['tokensPerSec']:.0f} tokens/s, {r['msPerStep']:.1f} ms/step,"
                  f" peak {r['peakBytes'] / 2**20:.0f} MiB, {r['params'] / 1e6:.1f}M params", flush=True)
            out['train'].append(r)
            save()
    for m in out['matmul']:
        print(f"matmul {m['dtype']} {m['n']}: {m['gflops']:.0f} GFLOP/s")
    for r in out['attention']:
        flops = 3.5 * 2 * r['b'] * r['nh'] * r['t'] ** 2 * r['hs']
        print(f"attn {r['dtype']} T={r['t']} hs={r['hs']}: {r['ms']:.2f} ms, {flops / r['ms'] / 1e9:.1f} TFLOP/s")
    save()


if __name__ == '__main__':
    main()
