"""`python -m agent.model.survey`: which models optimize-model can take and why the rest are out, each
model in a child process of its own (issue 26: "state which and why the rest are out")."""

from __future__ import annotations

import json

from agent.model.survey import main, survey

MLP = """
import torch
import torch.nn as nn

batch_size = 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, x):
        return torch.sort(self.net(x), dim=-1).values


def get_inputs():
    return [torch.randn(batch_size, 16)]


def get_init_inputs():
    return []
"""


def test_a_model_is_taken_with_its_regions_and_a_broken_one_is_out_with_its_reason(tmp_path, capsys):
    (tmp_path / "1_Tiny.py").write_text(MLP)
    (tmp_path / "2_Broken.py").write_text("import torch\n\ndef get_inputs():\n    return []\n")
    main([str(tmp_path), "--json", "--timeout", "120"])
    rows = {r["model"]: r for r in json.loads(capsys.readouterr().out)}
    tiny, broken = rows["1_Tiny.py"], rows["2_Broken.py"]
    assert (tiny["status"], tiny["regions"], tiny["contraction"], tiny["reference"]) == ("taken", 3, 2, 1)
    assert 0.0 < tiny["lowered_share"] < 1.0  # the sort stays reference ops and takes some of the time
    assert tiny["why_not"] == ["1x no schedule lowers sort"]
    assert broken["status"] == "out" and "Model" in broken["reason"]


def test_a_model_past_its_time_limit_is_a_timeout_row_not_a_hung_survey(tmp_path):
    slow = MLP.replace("def get_inputs():", "import time\ntime.sleep(30)\n\n\ndef get_inputs():")
    (tmp_path / "3_Slow.py").write_text(slow)
    (row,) = survey([str(tmp_path / "3_Slow.py")], timeout_s=3)
    assert (row.model, row.status, row.reason) == ("3_Slow.py", "timeout", "more than 3 s")
    assert row.seconds < 20


DENSE = """
import torch
import torch.nn as nn

batch_size = 2


class Model(nn.Module):
    def __init__(self, layers=12, growth=4):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(3 + i * growth, growth, 3, padding=1) for i in range(layers))

    def forward(self, x):
        features = [x]
        for conv in self.convs:
            features.append(conv(torch.cat(features, 1)))
        return torch.cat(features, 1).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(batch_size, 3, 8, 8)]


def get_init_inputs():
    return []
"""


def test_a_model_is_captured_with_its_shipped_sizes_and_runs_as_the_model_does(tmp_path):
    """The model flow's capture is static: a dense block's growing `cat` is plain ints, not a sum of
    symbols whose guards sympy re-simplifies at every layer (minutes for DenseNet121), while a problem's
    lowering still captures symbolic sizes."""
    import torch

    from agent.model import graph
    from agent.proposers.lowering.capture import capture

    path = tmp_path / "14_Dense.py"
    path.write_text(DENSE)
    traced = graph.trace(DENSE, str(path))
    sizes = [
        s
        for n in traced.captured.gm.graph.nodes
        if isinstance(n.meta.get("val"), torch.Tensor)
        for s in n.meta["val"].shape
    ]
    assert sizes and all(type(s) is int for s in sizes)
    assert traced.captured.hints == {}
    with torch.no_grad():
        expected = traced.model(*traced.inputs)
    out = graph.run(traced)
    out = out[0] if isinstance(out, tuple) else out
    assert out.shape == (2, 3 + 12 * 4) and torch.allclose(out, expected, atol=1e-5, rtol=1e-5)
    symbolic = capture(DENSE, str(path))
    assert any(isinstance(s, torch.SymInt) for s in symbolic.gm.graph.find_nodes(op="placeholder")[0].meta["val"].shape)


def test_the_csv_holds_a_row_per_model_with_its_status_and_regions(tmp_path, capsys):
    import csv

    (tmp_path / "1_Tiny.py").write_text(MLP)
    (tmp_path / "2_Broken.py").write_text("import torch\n\ndef get_inputs():\n    return []\n")
    out = tmp_path / "survey.csv"
    main([str(tmp_path), "--csv", str(out), "--timeout", "120"])
    rows = {r["model"]: r for r in csv.DictReader(out.open())}
    assert (rows["1_Tiny.py"]["status"], rows["1_Tiny.py"]["regions"]) == ("taken", "3")
    assert rows["1_Tiny.py"]["why_not"] == "1x no schedule lowers sort"
    assert rows["2_Broken.py"]["status"] == "out" and "Model" in rows["2_Broken.py"]["reason"]
    assert "1 of 2 models taken" in capsys.readouterr().out


LSTM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, 2, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1, :])


def get_inputs():
    return [torch.randn(3, 40, 8)]


def get_init_inputs():
    return []
"""


def test_a_model_with_an_lstm_is_out_at_once_with_the_module_named(tmp_path):
    """nn.LSTM/GRU/RNN would unroll into a region per step (the six dev LSTM and GRU models ran past
    300 s): the survey row says the model is out and which module, before any capture."""
    import time

    from agent.model.survey import survey_one

    path = tmp_path / "36_Lstm.py"
    path.write_text(LSTM)
    t0 = time.perf_counter()
    row = survey_one(str(path))
    assert row.status == "out"
    assert "recurrent `rnn` (nn.LSTM, 2 layer-directions) is out of the model flow" in row.reason
    assert row.regions == 0
    assert time.perf_counter() - t0 < 60  # the unrolled capture is never started
