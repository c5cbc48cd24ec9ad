"""A training step on 1..N torch threads, on an idle machine and with cores kept busy; prints JSON.

Why: `train.threads` unset leaves torch on every core. A site that shares its machine with other
work then runs more threads than there are free cores, and torch's threads wait for each other at
every parallel region, each wait as long as the scheduler keeps a descheduled thread off a core.

One step = the tiny preset's report model (its base untrained: the arithmetic of a step does not
depend on the weights), a batch of 16 rows, forward, backward and one AdamW step over every
weight. "Busy" cores run a plain Python loop each, started and ended by this script (by PID).
Reported: the median seconds per step of each (busy cores, threads) cell, after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

import torch


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def _step_times(threads: int, steps: int, warmup: int) -> list[float]:
    from secure_fed.config import RunConfig
    from secure_fed.model.build import build_model

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = RunConfig()
    vocab, rows, tokens = 600, 16, cfg.data.max_report_tokens + 2
    model = build_model(cfg.model, vocab, 0, 1, 2, cfg.data.synth.image_size)
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    size = cfg.data.synth.image_size
    images = torch.randn(rows, 2, size, size)
    ids = torch.randint(3, vocab, (rows, tokens))
    profiles = torch.zeros(rows, cfg.model.gmm_components)
    times = []
    for i in range(warmup + steps):
        t = time.perf_counter()
        loss = model(images, ids, profiles).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return times


def measure(busy: int, threads: int, steps: int, warmup: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    spinners = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
    for proc in spinners:
        proc.start()
    try:
        times = _step_times(threads, steps, warmup)
    finally:
        stop.set()
        for proc in spinners:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
    return {"busy_cores": busy, "threads": threads, "median_s": statistics.median(times), "min_s": min(times)}


def main() -> None:
    cores = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--threads", default=f"1,{cores}", help="comma-separated torch thread counts")
    ap.add_argument("--busy", default="0,1", help="comma-separated numbers of busy cores")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    cells = [
        measure(int(b), int(t), args.steps, args.warmup)
        for b in args.busy.split(",")
        for t in args.threads.split(",")
    ]
    print(json.dumps({"cores": cores, "steps": args.steps, "cells": cells}, indent=1))


if __name__ == "__main__":
    main()
