"""Built-in problems, one file each.

A built-in problem file is a KernelBench-style file (`Model`, `get_inputs()`, `get_init_inputs()`,
module-level integer size constants that those functions read at call time) plus declarations that
the harness reads when present:

- `OP_FAMILY: str`       the kernel family ("layernorm", "rmsnorm", "softmax", "log_softmax",
                         "cross_entropy", "swiglu", "geglu", "add_rmsnorm", "row_sum", "matmul_epilogue",
                         "attention")
- `DESCRIPTION: str`     one line
- `SHAPES: dict[str, list[dict]]`   per device kind ("cuda", "cpu") the declared cases; each dict binds
                         size constants and may carry `"tags": (...)` ("representative", "timed",
                         "largest", "edge"). Cases must include edges: 1, primes, non-multiples of
                         common block sizes.
- `DTYPES: tuple[str, ...]`         floating dtypes the problem is declared for ("float32", "bfloat16")
- `TOLERANCES: dict[str, tuple[float, float]]`  optional (atol, rtol) overrides per dtype
- `FLOAT32_MATMUL_PRECISION: str`  optional, "highest" (default: IEEE fp32) or "high" (TF32). A problem
                         whose float32 tolerance admits TF32 must say "high": the baselines are then
                         timed with TF32 matmuls too, so a TF32 kernel is not credited for its precision
                         against an IEEE-fp32 cuBLAS call (on the H200 that alone looked like 4.3-4.9x).
- `bytes_moved(params, itemsize) -> int`   optional byte model (fewest bytes through memory)
- `flops(params) -> int`                   optional flop model

The seed kernel for problem `NAME` is `evaluation/seeds/NAME.py` and defines `ModelNew`.
"""
