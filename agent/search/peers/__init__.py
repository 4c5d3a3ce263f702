"""Side-by-side timing of eager, torch.compile, max-autotune and the found kernels on a GPU host.

`python -m agent.search.peers` (bench.py) needs only torch and Triton; the kernels travel as rendered
files (kernels/, rendered from the template knobs in best_knobs.json by `python -m agent.search.peers.render`)."""
