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
