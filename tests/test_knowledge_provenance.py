"""Provenance is never lost by a re-run: a folder job run again without --device, --vendor or
--doc-version keeps the tags already stored. Only an explicit flag or `kscout retag` changes them, and
each change is kept, with the old value, in the document's history (`kscout docs --json`).

Real DuckDB files under $KSCOUT_HOME and the shipped MiniLM model, as the other ingest tests use.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main as kscout
from store import Store

LAYERNORM_MD = "# Layernorm on MI300\n## Rows\nOne row per program keeps the whole row in VGPRs.\n"
SOFTMAX_MD = "# Softmax on MI300\n## Max\nSubtract the running maximum before exponentiating.\n"


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    try:
        kscout(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, _ = capsys.readouterr()
    return code, out


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mi300-notes"
    folder.mkdir()
    (folder / "layernorm.md").write_text(LAYERNORM_MD)
    (folder / "softmax.md").write_text(SOFTMAX_MD)
    return folder


def ingest(folder: Path, capsys, *flags: str) -> list[str]:
    code, out = run_cli(["ingest", str(folder), *flags, "--json"], capsys)
    assert code == 0, out
    return [f["status"] for f in json.loads(out)["files"]]


def listing(capsys) -> dict[str, dict]:
    code, out = run_cli(["docs", "--json"], capsys)
    assert code == 0
    return {Path(d["source"]).name: d for d in json.loads(out)["documents"]}


def tags(doc: dict) -> tuple:
    return doc["vendor"], doc["devices"], doc["doc_version"]


def changes(doc: dict) -> list[tuple]:
    return [(h["field"], h["old"], h["new"], h["cause"]) for h in doc["history"]]


def test_an_explicit_device_flag_changes_a_retagged_value_and_the_change_is_recorded(kscout_home, folder, capsys):
    assert ingest(folder, capsys, "--device", "MI300X") == ["added", "added"]
    code, _ = run_cli(["retag", "softmax.md", "--device", "MI300A"], capsys)
    assert code == 0
    assert ingest(folder, capsys, "--device", "MI300X") == ["unchanged", "retagged"]
    docs = listing(capsys)
    assert tags(docs["softmax.md"]) == ("amd", ["MI300X"], None)
    assert changes(docs["softmax.md"]) == [
        ("devices", ["MI300X"], ["MI300A"], "retag"),
        ("devices", ["MI300A"], ["MI300X"], "ingest"),
    ]
    with Store.open(kscout_home) as store:  # the vectors' metadata follows the rows
        found = store.vector_search("chunks", "running maximum", k=5, where={"devices": {"$contains": "MI300X"}})
        softmax = next(d for d in store.documents() if d.title == "Softmax on MI300")
        assert [i for i, _ in found if i.startswith(softmax.document_id)] == [f"{softmax.document_id}:0"]


def test_an_edited_file_rerun_without_flags_keeps_its_stored_tags(kscout_home, folder, capsys):
    assert ingest(folder, capsys, "--device", "MI300X", "--vendor", "amd", "--source-url", "https://x.org/d/") == [
        "added",
        "added",
    ]
    (folder / "softmax.md").write_text(SOFTMAX_MD + "\n## Sum\nAccumulate the sum in float32.\n")
    assert ingest(folder, capsys) == ["unchanged", "replaced"]
    docs = listing(capsys)
    assert tags(docs["softmax.md"]) == ("amd", ["MI300X"], None)
    assert docs["softmax.md"]["source_url"] == "https://x.org/d/softmax.html"
    assert docs["softmax.md"]["history"] == []


def test_an_explicit_vendor_flag_changes_the_vendor_and_records_the_old_one(kscout_home, folder, capsys):
    assert ingest(folder, capsys, "--vendor", "amd", "--device", "MI300X") == ["added", "added"]
    assert ingest(folder / "softmax.md", capsys, "--vendor", "AMD Research") == ["retagged"]
    docs = listing(capsys)
    assert tags(docs["softmax.md"]) == ("amd-research", ["MI300X"], None)  # the devices were not named: kept
    assert changes(docs["softmax.md"]) == [("vendor", "amd", "amd-research", "ingest")]


def test_a_tagged_folder_keeps_its_tags_through_untagged_reruns_and_a_retag(kscout_home, folder, capsys):
    # 1. the job as first run, tagged
    assert ingest(folder, capsys, "--device", "MI300X", "--vendor", "amd", "--doc-version", "6.2") == [
        "added",
        "added",
    ]
    docs = listing(capsys)
    assert tags(docs["layernorm.md"]) == tags(docs["softmax.md"]) == ("amd", ["MI300X"], "6.2")

    # 2. the same job again without flags: nothing changes, nothing is written
    assert ingest(folder, capsys) == ["unchanged", "unchanged"]
    docs = listing(capsys)
    assert tags(docs["layernorm.md"]) == tags(docs["softmax.md"]) == ("amd", ["MI300X"], "6.2")
    assert docs["softmax.md"]["history"] == []

    # 3. a curator retags one page: changed, and its history has the old value
    code, out = run_cli(["retag", "softmax.md", "--device", "MI300A", "--json"], capsys)
    assert code == 0 and json.loads(out)["documents"][0]["status"] == "retagged"
    docs = listing(capsys)
    assert tags(docs["softmax.md"]) == ("amd", ["MI300A"], "6.2")
    assert changes(docs["softmax.md"]) == [("devices", ["MI300X"], ["MI300A"], "retag")]
    assert docs["layernorm.md"]["history"] == []

    # 4. the untagged job again: the retagged value stands
    assert ingest(folder, capsys) == ["unchanged", "unchanged"]
    docs = listing(capsys)
    assert tags(docs["softmax.md"]) == ("amd", ["MI300A"], "6.2")
    assert tags(docs["layernorm.md"]) == ("amd", ["MI300X"], "6.2")
    assert changes(docs["softmax.md"]) == [("devices", ["MI300X"], ["MI300A"], "retag")]
