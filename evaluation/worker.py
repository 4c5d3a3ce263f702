"""The process a candidate runs in: `python -m evaluation.worker`, started by the harness in a scratch
directory, with a stripped environment and a wall-clock limit (evaluation/isolation.py).

Modes (from request.json): `correctness` runs every case x trial and writes the outputs for the parent
to compare; `timing` measures the candidate and the baselines on a GPU; `remeasure` measures several
candidates interleaved with the eager baseline. Whatever the candidate does to this process (raise,
exit, kill itself, corrupt memory), the parent learns it from the exit status or from status.json.
Checks here (launches, PyTorch compute, aliasing, patched harness) are installed before the candidate
is imported, and inputs are compared with copies taken before each forward; wrong answers are judged
by the parent, against its own reference.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from evaluation import protocol


COMPILED = "__torch_compile__"  # the torch.compile baseline's runner in a re-measure


class Stop(Exception):
    """Ends the worker with a verdict other than "ok"."""

    def __init__(self, status: str, stage: str, error_class: str, message: str):
        super().__init__(message)
        self.fields = {"status": status, "stage": stage, "error_class": error_class, "message": message}


def one_line(exc: BaseException, limit: int = 600) -> str:
    """Multi-line messages (Triton's CompilationError puts the reason last) joined into one line."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}"[:limit]


def progress(case: dict, what: str) -> None:
    print(f"[kscout-worker] {case['case_id']} {what}", file=sys.stderr, flush=True)


def matmul_precision(problem_module) -> None:
    """fp32 matmuls in the baselines at the precision the problem's tolerance admits (IEEE by default)."""
    import torch

    value = getattr(problem_module, "FLOAT32_MATMUL_PRECISION", "highest")
    torch.set_float32_matmul_precision(value if value in ("highest", "high") else "highest")


def import_candidate(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build(model_cls, problem_module, init_seed: int, state: dict, device: str, dtype_name: str):
    """Build a model after the reference's seed and init inputs; load the reference's weights when the
    state dicts agree in keys and shapes, so parameter init order cannot matter; cast to the case."""
    import torch

    from evaluation.problem import init_inputs

    torch.manual_seed(init_seed)
    init = init_inputs(problem_module)
    torch.manual_seed(init_seed)
    model = model_cls(*init)
    loaded = False
    if isinstance(model, torch.nn.Module):
        own = model.state_dict()
        if own.keys() == state.keys() and all(own[k].shape == state[k].shape for k in own):
            model.load_state_dict(state)
            loaded = True
        model = model.to(device=device).to(dtype=getattr(torch, dtype_name)).eval()
    return model, loaded


class Worker:
    def __init__(self, scratch: Path):
        import torch

        self.scratch = scratch
        request_path = scratch / protocol.REQUEST
        self.request = json.loads(request_path.read_text())
        request_path.unlink()
        self.nonce = self.request["nonce"]
        self.device = self.request["device"]
        self.states: dict[str, dict] = {}
        for case in self.request["cases"]:
            name = case["state"]
            if name not in self.states:
                self.states[name] = torch.load(scratch / name, weights_only=True)
                (scratch / name).unlink()

    def report(self, fields: dict[str, Any]) -> None:
        protocol.write_json_atomic(self.scratch / protocol.STATUS, {"nonce": self.nonce, **fields})

    def problem(self, case: dict):
        from evaluation.problem import exec_problem

        return exec_problem(self.request["problem_path"], case["params"])

    def check(self, snapshot, stage: str) -> None:
        changed = snapshot.changed()
        if changed:
            raise Stop("rejected", stage, "PatchedHarness", "the candidate replaced " + ", ".join(changed[:6]))

    # -- correctness ----------------------------------------------------------------------------
    def correctness(self) -> dict[str, Any]:
        import torch

        from evaluation.guards import ComputeWatch, HarnessSnapshot, LaunchCounter, mutated
        from evaluation.inputs import make_inputs

        counter = LaunchCounter()
        counter.install()
        with ComputeWatch():  # exercise the mode once, so lazy imports it triggers precede the snapshot
            torch.empty(1)
        snapshot = HarnessSnapshot()
        try:
            module = import_candidate(self.scratch / protocol.CANDIDATE, "candidate")
        except Exception as exc:
            raise Stop("compile_error", "compile", type(exc).__name__, "importing the candidate: " + one_line(exc))
        self.check(snapshot, "compile")
        model_cls = getattr(module, "ModelNew", None)
        if model_cls is None:
            raise Stop("compile_error", "compile", "MissingModelNew", "the candidate defines no ModelNew")
        launches, loaded = 0, {}
        for case in self.request["cases"]:
            pm = self.problem(case)
            try:
                model, loaded[case["case_id"]] = build(
                    model_cls, pm, self.request["init_seed"], self.states[case["state"]], self.device, case["dtype"]
                )
            except Exception as exc:
                raise Stop("compile_error", "compile", type(exc).__name__,
                           f"building ModelNew for {case['case_id']}: {one_line(exc)}")
            for trial, seed in enumerate(case["seeds"]):
                where = f"{case['case_id']} trial {trial}"
                try:
                    inputs = make_inputs(pm, case["dtype"], seed, trial, self.device)
                    pristine = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
                except Exception as exc:  # out of device memory, as a rule: say so, do not just die
                    raise Stop("crashed", "correctness", type(exc).__name__, f"drawing inputs for {where}: {one_line(exc)}")
                out = self._checked_call(model, inputs, counter, snapshot, where)
                changed = mutated(inputs, pristine)
                if changed:
                    raise Stop("rejected", "correctness", "MutatedInput", f"forward modified input(s) {changed} on {where}")
                launches += counter.count
                protocol.save_atomic(self.scratch / protocol.result_name(case["index"], trial),
                                     {"nonce": self.nonce, "outputs": protocol.package(out)})
                del out, inputs, pristine
            del model
            if self.device == "cuda":  # eight workers share one GPU: give each case's blocks back
                torch.cuda.empty_cache()
        return {"status": "ok", "launches": launches, "kernels": list(counter.kernels.values()), "weights_loaded": loaded}

    def _checked_call(self, model, inputs: list[Any], counter, snapshot, where: str):
        """One forward on poisoned memory, watched; a Stop for anything but honest Triton work."""
        import torch

        from evaluation.guards import ComputeWatch, shares_memory
        from evaluation.inputs import poison_memory

        poison_memory(self.device, inputs)
        print(f"[kscout-worker] {where}", file=sys.stderr, flush=True)
        counter.count = 0
        watch = ComputeWatch()
        try:
            with torch.no_grad(), watch:
                out = model(*inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()  # an illegal memory access surfaces here
        except Exception as exc:
            compile_error = counter.is_compile_error(exc)
            if compile_error is not None:
                raise Stop("compile_error", "compile", type(compile_error).__name__, one_line(compile_error))
            raise Stop("crashed", "correctness", type(exc).__name__, f"forward raised on {where}: {one_line(exc)}")
        self.check(snapshot, "correctness")
        if counter.count == 0:
            raise Stop("rejected", "correctness", "NoTritonLaunch", f"forward launched no Triton kernel on {where}")
        if watch.flagged:
            ops = ", ".join(f"{op} x{n}" for op, n in watch.flagged.most_common(6))
            raise Stop("rejected", "correctness", "TorchCompute", f"PyTorch computed in forward on {where}: {ops}")
        tensors = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
        if any(t.device.type != self.device for t in tensors):
            raise Stop("incorrect", "correctness", "WrongDevice", f"an output is not on {self.device} on {where}")
        if shares_memory(tensors, inputs):
            raise Stop("rejected", "correctness", "OutputAliasesInput", f"an output shares memory with an input on {where}")
        return out

    # -- timing ---------------------------------------------------------------------------------
    def _reference(self, pm, case: dict):
        import torch

        from evaluation.problem import init_inputs

        torch.manual_seed(self.request["init_seed"])
        init = init_inputs(pm)
        torch.manual_seed(self.request["init_seed"])
        ref = pm.Model(*init)
        ref.load_state_dict(self.states[case["state"]])
        return ref.to(device=self.device).to(dtype=getattr(torch, case["dtype"])).eval()

    def _input_sets(self, pm, case: dict) -> list[list[Any]]:
        from evaluation.inputs import make_inputs

        return [make_inputs(pm, case["dtype"], seed, 0, self.device) for seed in case["seeds"]]

    def _timed_case_setup(self, case: dict, what: str) -> tuple[Any, list[list[Any]]]:
        """The problem bound to the case, its fp32 matmul precision set, and the rotated input sets:
        the same for a timing and a re-measure, so the two can never time a case differently."""
        pm = self.problem(case)
        progress(case, what)
        matmul_precision(pm)
        return pm, self._input_sets(pm, case)

    def _import_candidates(self, snapshot) -> tuple[dict[str, Any], dict[str, str]]:
        """Every candidate file of the request, imported under its own module name; errors per name."""
        modules, errors = {}, {}
        for entry in self.request["candidates"]:
            try:
                modules[entry["name"]] = import_candidate(self.scratch / entry["file"], f"candidate_{entry['index']}")
            except Exception as exc:
                errors[entry["name"]] = "importing the candidate again: " + one_line(exc)
        self.check(snapshot, "timing")
        return modules, errors

    def timing(self) -> dict[str, Any]:
        """Each candidate, then each requested baseline, on the same input sets, case by case.

        Several candidates share one process (and one baseline measurement per case) only after each
        passed correctness alone; a candidate that raises here is recorded against its name and the
        others go on. The parent re-times candidates one per process if this process dies.
        """
        import torch

        from evaluation.guards import HarnessSnapshot
        from evaluation.timing import Bench

        import torch._dynamo  # noqa: F401  (torch.compile's import rebinds torch.manual_seed: before the snapshot)

        snapshot = HarnessSnapshot()
        modules, errors = self._import_candidates(snapshot)
        classes = {name: "ImportError" for name in errors}
        bench = Bench(**self.request.get("bench", {}))
        wanted = self.request.get("baselines", ["eager", "torch_compile"])
        cases = []
        for case in self.request["cases"]:
            pm, sets = self._timed_case_setup(case, "timing")
            measured: dict[str, Any] = {}
            with torch.no_grad():
                for name, module in modules.items():
                    if name in errors:
                        continue
                    try:
                        model, _ = build(module.ModelNew, pm, self.request["init_seed"], self.states[case["state"]],
                                         self.device, case["dtype"])
                        measured[name] = bench.measure(model, sets).model_dump()
                    except Exception as exc:
                        errors[name] = f"timing {case['case_id']}: {one_line(exc)}"
                        classes[name] = type(exc).__name__
                    self.check(snapshot, "timing")  # before the baselines: compiling them may rebind torch
                    model = None
                ref = self._reference(pm, case)
                outs = ref(*sets[0])  # the byte count comes from the reference, not from a candidate
                outs = outs if isinstance(outs, (tuple, list)) else [outs]
                baselines = [self._baseline(b, bench, ref, sets, compile_it=b == "torch_compile") for b in wanted]
            cases.append({
                "index": case["index"],
                "candidates": measured,
                "baselines": baselines,
                "input_bytes": sum(t.nbytes for t in sets[0] if isinstance(t, torch.Tensor)),
                "output_bytes": sum(t.nbytes for t in outs if isinstance(t, torch.Tensor)),
            })
            del sets, ref, outs
            torch.cuda.empty_cache()
        return {"status": "ok", "timing": cases, "errors": errors, "error_classes": classes}

    @staticmethod
    def _baseline(name: str, bench, ref, sets, *, compile_it: bool = False) -> dict[str, Any]:
        import torch

        try:
            fn = torch.compile(ref, dynamic=False) if compile_it else ref
            return {"name": name, "timing": bench.measure(fn, sets).model_dump(), "error": None}
        except Exception as exc:  # a baseline that cannot run is recorded, not fatal
            return {"name": name, "timing": None, "error": one_line(exc)}

    # -- remeasure ------------------------------------------------------------------------------
    def remeasure(self) -> dict[str, Any]:
        import torch

        from evaluation.guards import HarnessSnapshot
        from evaluation.timing import Bench, quantile

        import torch._dynamo  # noqa: F401  (see timing())

        snapshot = HarnessSnapshot()
        modules, errors = self._import_candidates(snapshot)
        bench = Bench(**self.request.get("bench", {}))
        rounds, per_round = self.request["rounds"], self.request["samples_per_round"]
        cases = []
        for case in self.request["cases"]:
            pm, sets = self._timed_case_setup(case, "remeasure")
            with torch.no_grad():
                ref = self._reference(pm, case)
                runners = {"__baseline__": bench.prepare(ref, sets)}
                for name, module in modules.items():
                    if name in errors:
                        continue
                    try:
                        model, _ = build(module.ModelNew, pm, self.request["init_seed"], self.states[case["state"]], self.device, case["dtype"])
                        runners[name] = bench.prepare(model, sets)
                    except Exception as exc:
                        errors[name] = f"{case['case_id']}: {one_line(exc)}"
                self.check(snapshot, "timing")
                if "torch_compile" in self.request.get("baselines", ()):
                    try:
                        runners[COMPILED] = bench.prepare(torch.compile(ref, dynamic=False), sets)
                    except Exception as exc:  # recorded, not fatal: the eager comparison still stands
                        errors[COMPILED] = f"{case['case_id']}: {one_line(exc)}"
                p50s: dict[str, list[float]] = {name: [] for name in runners}
                for _ in range(rounds):  # B A C B A C ...: drift hits every provider alike
                    for name, runner in runners.items():
                        if name in errors:
                            continue
                        try:
                            samples = bench.sample(runner, per_round)
                        except Exception as exc:
                            errors[name] = f"{case['case_id']}: {one_line(exc)}"
                            continue
                        p50s[name].append(quantile(samples, 0.5))
            self.check(snapshot, "timing")
            cases.append({"index": case["index"], "p50s_ms": p50s,
                          "methods": {name: r.method for name, r in runners.items()}})
            del runners, sets
            torch.cuda.empty_cache()
        return {"status": "ok", "remeasure": cases, "errors": errors}

    def run(self) -> None:
        mode = self.request["mode"]
        try:
            result = {"correctness": self.correctness, "timing": self.timing, "remeasure": self.remeasure}[mode]()
        except Stop as stop:
            result = stop.fields
        self.report(result)


def main() -> None:
    Worker(Path.cwd()).run()


if __name__ == "__main__":
    # Re-enter through the package, so the harness's functions live in sys.modules["evaluation.worker"]
    # where the snapshot watches them, not in an unwatched __main__.
    from evaluation import worker as _worker

    _worker.main()
