"""Side by side at LLM sizes: eager, torch.compile, torch.compile max-autotune and kernelscout's kernels.

    python -m agent.search.peers                                   # every default row, the committed kernels
    python -m agent.search.peers --ops softmax,cross_entropy --jobs 8
    python -m agent.search.peers --rows "layernorm:M=16,N=4194304" --kernels DIR --out results/

Needs only torch and Triton (run it from a checkout on a GPU host): the problems are the plain PyTorch files
in evaluation/problems, and the kernels are rendered Python files (agent/search/peers/kernels/<op>.py, or
<dir>/<op>/<variant>.py for several variants; `python -m agent.search.peers.render` writes them from knob files).

For each row (an op at one shape, bf16 by default) it builds the reference, checks every kernel against the
reference computed in fp32 from the same inputs (bf16 tolerance, every element), and times every provider
in one process the same way: a CUDA graph of one call replayed per sample, the L2 flushed before each
sample, input sets rotated, CUDA events around the replay, samples taken in interleaved rounds. It prints
p50 latency, GB/s and % of the copy ceiling (a 1 GiB device copy measured in the same process), and each
kernel's ratio to eager, torch.compile and max-autotune. Without a GPU it checks correctness only (through
Triton's interpreter at the shapes given) and says that nothing was timed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[3]
PROBLEMS = ROOT / "evaluation" / "problems"
KERNELS = Path(__file__).resolve().parent / "kernels"

# The rows of issue 12: each op at its largest declared case, a 16384x8192-class case, and (norms and
# softmaxes) a few very long rows; cross-entropy at a 128k vocabulary; the matmul at 8192^3, 4096^3 and
# 1024x8192x8192 (issue 24's tensor-core line: TFLOP/s beside cuBLAS's torch.matmul, in the same process).
_NORMS = ("layernorm", "rmsnorm", "add_rmsnorm")
_SOFTMAXES = ("softmax", "log_softmax")
DEFAULT_ROWS: tuple[tuple[str, dict[str, int]], ...] = (
    *[(op, p) for op in _NORMS for p in ({"M": 8192, "N": 8192}, {"M": 16384, "N": 8192}, {"M": 16, "N": 4194304})],
    *[
        (op, p)
        for op in _SOFTMAXES
        for p in ({"M": 4096, "N": 32000}, {"M": 16384, "N": 8192}, {"M": 16, "N": 4194304})
    ],
    ("cross_entropy", {"M": 8192, "V": 128256}),
    ("cross_entropy", {"M": 16384, "V": 32000}),
    *[(op, p) for op in ("swiglu", "geglu") for p in ({"M": 16384, "N": 14336}, {"M": 16384, "N": 8192})],
    ("matmul_epilogue", {"M": 8192, "K": 8192, "N": 8192}),
    ("matmul_epilogue", {"M": 4096, "K": 4096, "N": 4096}),
    ("matmul_epilogue", {"M": 1024, "K": 8192, "N": 8192}),
    ("matmul_epilogue", {"M": 8192, "K": 4096, "N": 14336}),
    # causal attention (the flash template) against SDPA's own flash kernel in eager and compile
    ("attention", {"B": 4, "H": 16, "L": 2048, "D": 64}),
    ("attention", {"B": 2, "H": 16, "L": 4096, "D": 128}),
)
PROVIDERS = ("eager", "torch_compile", "max_autotune", "kernel")
TOLERANCE = {"bfloat16": (1.6e-2, 1.6e-2), "float16": (2e-3, 2e-3), "float32": (1e-4, 1e-4)}


# ---------------------------------------------------------------- rows and kernels


def row_id(op: str, params: dict[str, int]) -> str:
    return f"{op}:" + ",".join(f"{k}={v}" for k, v in params.items())


def parse_row(spec: str) -> tuple[str, dict[str, int]]:
    """'layernorm:M=16,N=4194304' -> ('layernorm', {'M': 16, 'N': 4194304})."""
    op, _, rest = spec.partition(":")
    if not op or not rest:
        raise ValueError(f"row {spec!r}: expected OP:NAME=INT,NAME=INT")
    params = {}
    for part in rest.split(","):
        name, eq, value = part.partition("=")
        if not eq or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"row {spec!r}: {part!r} is not NAME=INT")
        params[name.strip()] = int(value)
    return op, params


def kernel_files(kernels_dir: Path, op: str) -> dict[str, Path]:
    """The kernels to time for an op: <dir>/<op>.py as 'best', and every <dir>/<op>/<variant>.py."""
    found = {}
    single = kernels_dir / f"{op}.py"
    if single.is_file():
        found["best"] = single
    folder = kernels_dir / op
    if folder.is_dir():
        for path in sorted(folder.glob("*.py")):
            found[path.stem] = path
    return found


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit reads the source through inspect
    spec.loader.exec_module(module)
    return module


def load_problem(op: str, params: dict[str, int]):
    """The problem module with its size constants bound (a private copy per row)."""
    module = load_module(PROBLEMS / f"{op}.py", f"_peers_ref_{op}_{abs(hash(row_id(op, params)))}")
    for key, value in params.items():
        if not hasattr(module, key):
            raise ValueError(f"{op} has no size constant {key}")
        setattr(module, key, value)
    return module


# ---------------------------------------------------------------- building and checking


@dataclass
class Built:
    model: Any  # the reference Model, in the row's dtype
    input_sets: list[list[Any]]
    bytes_moved: int
    flops: Optional[int]


def build(problem, dtype, device: str, n_sets: int) -> Built:
    import torch

    with torch.device(device):
        torch.manual_seed(0)
        model = problem.Model(*problem.get_init_inputs())
        sets = []
        for i in range(n_sets):
            torch.manual_seed(1 + i)
            sets.append([x.to(dtype) if x.is_floating_point() else x for x in problem.get_inputs()])
    model = model.to(device=device, dtype=dtype).eval()
    params = {k: v for k, v in vars(problem).items() if k.isupper() and type(v) is int}  # the size constants
    itemsize = torch.empty((), dtype=dtype).element_size()
    flops = problem.flops(params) if hasattr(problem, "flops") else None
    return Built(model, sets, int(problem.bytes_moved(params, itemsize)), flops)


def make_kernel(path: Path, model, tag: str):
    """The kernel's ModelNew with the reference's weights (strict), on the reference's device and dtype."""
    import torch

    module = load_module(path, f"_peers_kernel_{tag}_{abs(hash(str(path)))}")
    init = getattr(model, "_peers_init", None)
    new = module.ModelNew(*init) if init is not None else module.ModelNew()
    new.load_state_dict(model.state_dict(), strict=True)
    p = next(iter(model.parameters()), None)
    if p is not None:
        new = new.to(device=p.device, dtype=p.dtype)
    return new.eval() if isinstance(new, torch.nn.Module) else new


def check(fn: Callable, model, inputs: list, dtype_name: str) -> tuple[bool, str]:
    """Every element within atol + rtol*|ref| of the reference computed in fp32 from the same inputs."""
    import torch

    atol, rtol = TOLERANCE[dtype_name]
    with torch.no_grad():
        ref_model = _fp32_copy(model)
        want = ref_model(*[x.float() if x.is_floating_point() else x for x in inputs])
        got = fn(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    if len(got) != len(want):
        return False, f"{len(got)} outputs, the reference has {len(want)}"
    worst = 0.0
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return False, f"shape {tuple(g.shape)}, reference {tuple(w.shape)}"
        err = (g.float() - w).abs()
        bad = ~(err <= atol + rtol * w.abs())  # NaN counts as bad
        if bool(bad.any()):
            return False, f"{int(bad.sum())} elements outside the tolerance, max abs error {float(err.max()):.3g}"
        worst = max(worst, float(err.norm() / w.norm().clamp_min(1e-30)))
    return True, f"ok (norm-wise relative error {worst:.2e})"


def _fp32_copy(model):
    import copy

    return copy.deepcopy(model).float()


# ---------------------------------------------------------------- timing (the evaluator's method, standalone)


class Timer:
    """CUDA-graph replay per sample, L2 flushed before each, input sets rotated, CUDA events around it."""

    def __init__(self, budget_s: float, min_samples: int = 15, max_samples: int = 120):
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or (64 << 20))
        self.flush = torch.empty(max(3 * l2, 64 << 20), dtype=torch.uint8, device="cuda")
        self.budget_s, self.min_samples, self.max_samples = budget_s, min_samples, max_samples

    def prepare(self, fn: Callable, input_sets: list[list[Any]]):
        """Warm up, then capture one graph per input set (else time the eager call and say so)."""
        import torch

        with torch.no_grad():
            for inputs in input_sets:
                fn(*inputs)
            torch.cuda.synchronize()
            graphs = []
            try:
                for inputs in input_sets:
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        fn(*inputs)
                    graphs.append(graph)
                torch.cuda.synchronize()
            except Exception as exc:  # not capturable: eager timing, which also counts host launch overhead
                torch.cuda.synchronize()
                print(f"    (no CUDA graph: {type(exc).__name__}: {str(exc)[:120]}; timing eager calls)")
                return lambda i: fn(*input_sets[i % len(input_sets)]), "cuda_events"
        return lambda i: graphs[i % len(graphs)].replay(), "cuda_graph"

    def sample(self, run: Callable[[int], None], n: int) -> list[float]:
        import torch

        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            self.flush.zero_()
            starts[i].record()
            run(i)
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def rounds(self, runs: dict[str, Callable[[int], None]], n_rounds: int = 3) -> dict[str, list[float]]:
        """Samples of every provider, interleaved in rounds so drift (clocks, heat) hits all alike."""
        est = {name: sorted(self.sample(run, 3))[1] for name, run in runs.items()}
        per_round = {}
        for name, ms in est.items():
            n = int(self.budget_s * 1e3 / max(ms + 0.05, 1e-3))
            per_round[name] = max(self.min_samples, min(self.max_samples, n)) // n_rounds + 1
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(n_rounds):
            for name, run in runs.items():
                samples[name] += self.sample(run, per_round[name])
        return samples


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def copy_ceiling_gbps() -> float:
    """(read + written bytes) / time of a 1 GiB device copy, eager, median of 10 (evaluation/ceiling.py's way)."""
    import torch

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / (quantile(times, 0.5) * 1e-3) / 1e9


# ---------------------------------------------------------------- one row


@dataclass
class Measurement:
    row: str
    provider: str  # eager | torch_compile | max_autotune | cublas_matmul | kernel:<variant>
    status: str  # "timed" | "failed" | "skipped" | "checked" (correct, not timed: no GPU)
    note: str = ""
    p20_ms: Optional[float] = None
    p50_ms: Optional[float] = None
    p80_ms: Optional[float] = None
    n_samples: int = 0
    method: str = ""
    gbps: Optional[float] = None
    pct_of_copy: Optional[float] = None
    tflops: Optional[float] = None
    ratios: dict[str, float] = field(default_factory=dict)  # baseline -> baseline p50 / this p50
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # (b.p20/this.p80, b.p80/this.p20)


def _compile(model, mode: Optional[str]):
    import torch

    return torch.compile(model, mode=mode, dynamic=False) if mode else torch.compile(model, dynamic=False)


def run_row(
    op: str, params: dict[str, int], args, ceiling: Optional[float], timer: Optional[Timer], autotune_ok: Optional[bool]
) -> list[Measurement]:
    import torch

    rid = row_id(op, params)
    device = "cuda" if timer is not None else "cpu"
    dtype = getattr(torch, args.dtype)
    problem = load_problem(op, params)
    built = build(problem, dtype, device, n_sets=args.input_sets if timer else 1)
    built.model._peers_init = problem.get_init_inputs()
    out: list[Measurement] = []
    fns: dict[str, Callable] = {}
    if "eager" in args.providers:
        fns["eager"] = built.model
    if op == "matmul_epilogue" and timer is not None and "eager" in args.providers:
        w = built.model.weight
        fns["cublas_matmul"] = lambda x: x @ w.T  # the matmul alone: what the epilogue's fusion is up against
    if timer is not None and "torch_compile" in args.providers:
        fns["torch_compile"] = _compile(built.model, None)
    if timer is not None and "max_autotune" in args.providers and rid in args.autotune_rows:
        if autotune_ok is False:
            out.append(
                Measurement(
                    rid,
                    "max_autotune",
                    "skipped",
                    f"not compiled within {args.autotune_cap_s:.0f} s (or the run's budget)",
                )
            )
        else:
            fns["max_autotune"] = _compile(built.model, "max-autotune-no-cudagraphs")
    if "kernel" in args.providers:
        for variant, path in kernel_files(args.kernels, op).items():
            name = f"kernel:{variant}"
            try:
                new = make_kernel(path, built.model, variant)
                ok, note = check(new, built.model, built.input_sets[0], args.dtype)
            except Exception as exc:  # a kernel that does not build or run is reported, not fatal
                ok, note = False, f"{type(exc).__name__}: {str(exc)[:200]}"
            if ok:
                fns[name] = new
                if timer is None:
                    out.append(Measurement(rid, name, "checked", note))
            else:
                out.append(Measurement(rid, name, "failed", note))
    if timer is None:
        return out
    runs, methods = {}, {}
    for name, fn in fns.items():
        t0 = time.time()
        try:
            runs[name], methods[name] = timer.prepare(fn, built.input_sets)
        except Exception as exc:
            out.append(Measurement(rid, name, "failed", f"{type(exc).__name__}: {str(exc)[:200]}"))
            continue
        if name in ("torch_compile", "max_autotune") and time.time() - t0 > 5:
            print(f"    {name} compiled in {time.time() - t0:.0f} s")
    samples = timer.rounds(runs)
    stats = {name: (quantile(s, 0.2), quantile(s, 0.5), quantile(s, 0.8), len(s)) for name, s in samples.items()}
    for name, (p20, p50, p80, n) in stats.items():
        m = Measurement(rid, name, "timed", p20_ms=p20, p50_ms=p50, p80_ms=p80, n_samples=n, method=methods[name])
        m.gbps = built.bytes_moved / (p50 * 1e-3) / 1e9
        m.pct_of_copy = 100 * m.gbps / ceiling if ceiling else None
        if built.flops:
            m.tflops = built.flops / (p50 * 1e-3) / 1e12
        for base in ("eager", "torch_compile", "max_autotune", "cublas_matmul"):
            if base in stats and base != name:
                b20, b50, b80, _ = stats[base]
                m.ratios[base] = b50 / p50
                m.intervals[base] = (b20 / p80, b80 / p20)
        out.append(m)
    del runs, fns
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return out


# ---------------------------------------------------------------- warming caches in parallel


def warm_row(op: str, params: dict[str, int], args) -> None:
    """Compile every kernel and torch.compile (default mode) once for a row, filling the on-disk Triton and
    Inductor caches, so the timing process compiles nothing. Runs in a child process (--warm-only)."""
    import torch

    problem = load_problem(op, params)
    built = build(problem, getattr(torch, args.dtype), "cuda", n_sets=1)
    built.model._peers_init = problem.get_init_inputs()
    with torch.no_grad():
        if "kernel" in args.providers:
            for variant, path in kernel_files(args.kernels, op).items():
                try:
                    make_kernel(path, built.model, variant)(*built.input_sets[0])
                except Exception as exc:
                    print(f"warm {row_id(op, params)} kernel:{variant}: {type(exc).__name__}: {str(exc)[:160]}")
        if "torch_compile" in args.providers:
            _compile(built.model, None)(*built.input_sets[0])
        if args.warm_autotune:
            _compile(built.model, "max-autotune-no-cudagraphs")(*built.input_sets[0])
    torch.cuda.synchronize()


def _child(args, spec: str, *, autotune: bool, timeout: Optional[float]) -> tuple[bool, str]:
    cmd = [
        sys.executable,
        "-m",
        "agent.search.peers",
        "--warm-only",
        "--rows",
        spec,
        "--dtype",
        args.dtype,
        "--kernels",
        str(args.kernels),
        "--providers",
        ",".join(args.providers),
    ]
    env = dict(os.environ)
    if autotune:
        cmd.append("--warm-autotune")
    else:  # many children at once: no compile-worker pool in each (max-autotune, alone, keeps its pool)
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    return done.returncode == 0, (done.stdout + done.stderr)[-400:]


def warm_all(rows, args) -> dict[str, bool]:
    """Parallel warm-up of kernels and torch.compile; then max-autotune one row at a time under the cap
    (alone on the GPU, so its autotuning is not skewed by the other compiles). Returns whether each row's
    max-autotune compiled within the cap."""
    specs = [row_id(op, p) for op, p in rows]
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        warm = pool.map(lambda s: _child(args, s, autotune=False, timeout=args.warm_cap_s), specs)
        for spec, (ok, tail) in zip(specs, warm):
            if not ok:
                print(f"  warm-up of {spec} failed: {tail.strip()[-300:]}")
    print(f"  warmed {len(specs)} rows in {time.time() - t0:.0f} s with {args.jobs} processes")
    autotune_ok = {}
    if "max_autotune" in args.providers:
        spent = 0.0
        for spec in [s for s in args.autotune_rows if s in specs]:
            if spent >= args.autotune_budget_s:
                autotune_ok[spec] = False
                print(f"  max-autotune {spec}: not attempted, the run's max-autotune budget is spent")
                continue
            t1 = time.time()
            ok, tail = _child(args, spec, autotune=True, timeout=args.autotune_cap_s)
            spent += time.time() - t1
            autotune_ok[spec] = ok
            print(
                f"  max-autotune {spec}: {'compiled' if ok else 'NOT compiled: ' + tail.strip()[-160:]} "
                f"in {time.time() - t1:.0f} s"
            )
    return autotune_ok


# ---------------------------------------------------------------- environment and report


def environment() -> dict[str, Any]:
    import torch
    import triton

    env = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "device": "cpu (triton interpreter)",
        "driver": None,
    }
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env["sms"] = props.multi_processor_count
        env["l2_bytes"] = int(getattr(props, "L2_cache_size", 0) or 0)
        try:
            env["driver"] = (
                subprocess.run(
                    ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=20,
                )
                .stdout.strip()
                .splitlines()[0]
            )
        except (OSError, IndexError, subprocess.SubprocessError):
            env["driver"] = None
    return env


def _fmt(v: Optional[float], spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(measurements: list[Measurement], header: bool = True) -> None:
    head = (
        f"{'row':34} {'provider':26} {'p50 ms':>9} {'GB/s':>7} {'% copy':>7} {'TFLOP/s':>8} "
        f"{'x eager':>8} {'x compile':>9} {'x max-at':>8}"
    )
    if header:
        print(head)
        print("-" * len(head))
    for m in measurements:
        if m.status != "timed":
            print(f"{m.row:34} {m.provider:26} {m.status}: {m.note}")
            continue
        tfl = _fmt(m.tflops, ".0f") if m.row.startswith(("matmul", "attention")) else "-"
        print(
            f"{m.row:34} {m.provider:26} {m.p50_ms:9.4f} {m.gbps:7.0f} {_fmt(m.pct_of_copy, '7.1f')} {tfl:>8} "
            f"{_fmt(m.ratios.get('eager'), '8.2f')} {_fmt(m.ratios.get('torch_compile'), '9.2f')} "
            f"{_fmt(m.ratios.get('max_autotune'), '8.2f')}"
        )


def best_per_row(measurements: list[Measurement]) -> list[str]:
    """One line per row: the baselines' p50s and the fastest correct kernel variant against them."""
    rows: dict[str, dict[str, Measurement]] = {}
    for m in measurements:
        rows.setdefault(m.row, {})[m.provider] = m
    head = (
        f"{'row':34} {'eager ms':>9} {'compile':>9} {'max-at':>9} {'best kernel':22} {'p50 ms':>9} "
        f"{'% copy':>7} {'x eager':>8} {'x comp':>7} {'x max-at':>8}"
    )
    lines = [head, "-" * len(head)]
    for row, by in rows.items():
        timed = {p: m for p, m in by.items() if m.status == "timed"}
        kernels = [m for p, m in timed.items() if p.startswith("kernel:")]
        base = {p: (timed[p].p50_ms if p in timed else None) for p in ("eager", "torch_compile", "max_autotune")}
        if not kernels:
            failed = [f"{p}: {m.note}" for p, m in by.items() if m.status == "failed"]
            lines.append(f"{row:34} no kernel timed; " + "; ".join(failed)[:200])
            continue
        k = min(kernels, key=lambda m: m.p50_ms)
        lines.append(
            f"{row:34} {_fmt(base['eager'], '9.4f')} {_fmt(base['torch_compile'], '9.4f')} "
            f"{_fmt(base['max_autotune'], '9.4f')} {k.provider[7:]:22} {k.p50_ms:9.4f} "
            f"{_fmt(k.pct_of_copy, '7.1f')} {_fmt(k.ratios.get('eager'), '8.2f')} "
            f"{_fmt(k.ratios.get('torch_compile'), '7.2f')} {_fmt(k.ratios.get('max_autotune'), '8.2f')}"
        )
    return lines


def summarize(measurements: list[Measurement]) -> list[str]:
    """Per op and kernel variant (one kernel deployed for all the op's rows): geomean and worst row of
    x torch.compile, and the worst % of copy."""
    lines = []
    by: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        if m.status == "timed" and m.provider.startswith("kernel:"):
            by.setdefault((m.row.split(":")[0], m.provider), []).append(m)
    for (op, provider), ms in sorted(by.items()):
        comp = [m.ratios["torch_compile"] for m in ms if "torch_compile" in m.ratios]
        pct = [m.pct_of_copy for m in ms if m.pct_of_copy is not None]
        geo = math.exp(sum(map(math.log, comp)) / len(comp)) if comp else None
        lines.append(
            f"{op:16} {provider[7:]:22} rows {len(ms)}  x compile geomean {_fmt(geo, '.2f')} "
            f"worst {_fmt(min(comp) if comp else None, '.2f')}  worst % copy "
            f"{_fmt(min(pct) if pct else None, '.1f')}"
        )
    return lines


def write_outputs(out_dir: Path, env: dict, ceiling: Optional[float], measurements: list[Measurement]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "peers.json").write_text(
        json.dumps(
            {"environment": env, "copy_ceiling_gbps": ceiling, "measurements": [asdict(m) for m in measurements]},
            indent=1,
        )
    )
    with open(out_dir / "peers.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "row",
                "provider",
                "status",
                "p20_ms",
                "p50_ms",
                "p80_ms",
                "n_samples",
                "method",
                "gbps",
                "pct_of_copy",
                "tflops",
                "x_eager",
                "x_torch_compile",
                "x_max_autotune",
                "device",
                "driver",
                "torch",
                "triton",
                "note",
            ]
        )
        for m in measurements:
            w.writerow(
                [
                    m.row,
                    m.provider,
                    m.status,
                    m.p20_ms,
                    m.p50_ms,
                    m.p80_ms,
                    m.n_samples,
                    m.method,
                    m.gbps,
                    m.pct_of_copy,
                    m.tflops,
                    m.ratios.get("eager"),
                    m.ratios.get("torch_compile"),
                    m.ratios.get("max_autotune"),
                    env.get("device"),
                    env.get("driver"),
                    env.get("torch"),
                    env.get("triton"),
                    m.note,
                ]
            )


# ---------------------------------------------------------------- main


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m agent.search.peers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="", help="comma-separated ops (default: every op in the default rows)")
    ap.add_argument("--rows", action="append", default=[], help="OP:NAME=INT,... (repeatable; replaces the defaults)")
    ap.add_argument("--kernels", type=Path, default=KERNELS, help="folder of <op>.py and/or <op>/<variant>.py")
    ap.add_argument("--providers", default=",".join(PROVIDERS), help=f"subset of {','.join(PROVIDERS)}")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(TOLERANCE))
    ap.add_argument("--budget-s", type=float, default=0.3, help="timing budget per provider and row")
    ap.add_argument("--input-sets", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=0, help="warm caches in this many processes first (0: no)")
    ap.add_argument("--warm-cap-s", type=float, default=300.0, help="cap on one row's parallel warm-up")
    ap.add_argument("--autotune-cap-s", type=float, default=300.0, help="max-autotune compile cap per row")
    ap.add_argument(
        "--autotune-rows",
        action="append",
        default=[],
        help="rows that time max-autotune, in priority order (repeatable; default: every row)",
    )
    ap.add_argument(
        "--autotune-budget-s",
        type=float,
        default=3600.0,
        help="total max-autotune warm-up time; rows past it are not attempted",
    )
    ap.add_argument("--out", type=Path, default=None, help="write peers.json and peers.csv here (after every row)")
    ap.add_argument("--full-table", action="store_true", help="repeat every measurement in one table at the end")
    ap.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--warm-autotune", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.providers = tuple(p for p in args.providers.split(",") if p)
    unknown = set(args.providers) - set(PROVIDERS)
    if unknown:
        ap.error(f"unknown provider(s): {', '.join(sorted(unknown))}")
    return args


def select_rows(args) -> list[tuple[str, dict[str, int]]]:
    rows = [parse_row(s) for s in args.rows] if args.rows else list(DEFAULT_ROWS)
    # every row by default; else the named ones (normalized through the parser), in the order given
    args.autotune_rows = [row_id(*parse_row(s)) for s in args.autotune_rows] or [row_id(op, p) for op, p in rows]
    if args.ops:  # only these ops, in the order given
        ops = [o for o in args.ops.split(",") if o]
        rows = sorted(((op, p) for op, p in rows if op in ops), key=lambda r: ops.index(r[0]))
    for op, _ in rows:
        if not (PROBLEMS / f"{op}.py").is_file():
            raise SystemExit(f"unknown op {op!r}: no evaluation/problems/{op}.py")
    # a kernels folder with nothing for an op would time only the baselines and look like a run
    missing = sorted({op for op, _ in rows if "kernel" in args.providers and not kernel_files(args.kernels, op)})
    if missing:
        raise SystemExit(
            f"no kernel for {', '.join(missing)} in {args.kernels} (wanted {args.kernels}/<op>.py or "
            f"{args.kernels}/<op>/*.py); render a sweep with: python -m agent.search.peers.render --knobs "
            f"SWEEP.json --out {args.kernels}"
        )
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    rows = select_rows(args)
    import torch

    if args.warm_only:
        for op, params in rows:
            warm_row(op, params, args)
        return 0
    torch.set_grad_enabled(False)  # inference only: no autograd graph in any provider's timing
    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
    env = environment()
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    autotune_ok: dict[str, bool] = {}
    if gpu and args.jobs > 0:
        autotune_ok = warm_all(rows, args)
    ceiling = copy_ceiling_gbps() if gpu else None
    if ceiling:
        print(f"copy ceiling: {ceiling:.0f} GB/s (1 GiB device copy, read + write, median of 10)")
    timer = Timer(args.budget_s) if gpu else None
    measurements: list[Measurement] = []
    for op, params in rows:
        t0 = time.time()
        print(f"== {row_id(op, params)} ({args.dtype})", flush=True)
        try:
            got = run_row(op, params, args, ceiling, timer, autotune_ok.get(row_id(op, params)))
        except torch.cuda.OutOfMemoryError as exc:
            got = [Measurement(row_id(op, params), "row", "failed", f"out of memory: {str(exc)[:120]}")]
            torch.cuda.empty_cache()
        measurements += got
        print_table(got, header=False)
        print(f"   {time.time() - t0:.0f} s", flush=True)
        if args.out:  # after every row: a run cut off at its time limit still leaves what it measured
            write_outputs(args.out, env, ceiling, measurements)
    if not gpu:
        print("not timed: no GPU here (correctness checked through Triton's interpreter only)")
    print()
    print(
        "device {device}, driver {driver}, torch {torch}, triton {triton}, CUDA {cuda}".format(**env)
        + (f", copy ceiling {ceiling:.0f} GB/s" if ceiling else "")
    )
    if args.full_table:
        print_table(measurements)
    if gpu:
        for line in summarize(measurements) + [""] + best_per_row(measurements):
            print(line)
    else:
        print_table(measurements)
    return 0


if __name__ == "__main__":
    sys.exit(main())
