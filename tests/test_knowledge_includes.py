"""Includes in ingested pages: RST `.. include::` and MyST `{include}` are followed inside the tree, named
and not read outside it, and a cycle ends. The store keeps rows only (KSCOUT_VECTORS=off): what is
checked is which text lands under which page and heading, not the vectors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_knowledge_ingest import run_cli

from knowledge.ingest import ingest_paths
from knowledge.records import FileStatus
from store import Store

FENCE_RST = """fence
=====

Memory fences order accesses.

fence.sync_restrict
-------------------

.. include:: generated/fence_sync_restrict.rst

fence.proxy.alias
-----------------

.. include:: /generated/fence_proxy_alias.rst
"""

GENERATED_SYNC = """..
   This file was automatically generated. Do not edit.

fence.sync_restrict.shared
^^^^^^^^^^^^^^^^^^^^^^^^^^

The quetzal variant restricts the fence to shared::cluster memory.
"""

GENERATED_ALIAS = """fence.proxy.alias.sys
^^^^^^^^^^^^^^^^^^^^^

The axolotl proxy orders generic and alias accesses.
"""


@pytest.fixture(autouse=True)
def rows_only(monkeypatch):
    monkeypatch.setenv("KSCOUT_VECTORS", "off")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "generated").mkdir(parents=True)
    (docs / "fence.rst").write_text(FENCE_RST)
    (docs / "generated" / "fence_sync_restrict.rst").write_text(GENERATED_SYNC)
    (docs / "generated" / "fence_proxy_alias.rst").write_text(GENERATED_ALIAS)
    return docs


def by_name(report) -> dict:
    return {Path(f.path).name: f for f in report.files}


def test_an_rst_include_is_indexed_under_the_including_page_and_its_heading(tmp_path, tree):
    with Store.open(tmp_path / "home") as store:
        report = ingest_paths(store, [tree])
        files = by_name(report)
        assert files["fence.rst"].status is FileStatus.added
        # The included files are part of fence.rst, not documents of their own.
        assert (files["fence_sync_restrict.rst"].status, files["fence_sync_restrict.rst"].reason) == (
            FileStatus.skipped,
            f"included by {tree / 'fence.rst'} (indexed there)",
        )
        assert files["fence_proxy_alias.rst"].status is FileStatus.skipped
        (doc,) = store.documents()
        assert json.loads(doc.metadata_json)["includes"] == [
            "generated/fence_sync_restrict.rst",
            "generated/fence_proxy_alias.rst",
        ]
        chunks = {c.heading_path: c.text for c in store.chunks(doc.document_id)}
        assert "quetzal" in chunks[("fence", "fence.sync_restrict", "fence.sync_restrict.shared")]
        assert "axolotl" in chunks[("fence", "fence.proxy.alias", "fence.proxy.alias.sys")]
        assert "automatically generated" not in " ".join(chunks.values())  # an RST comment stays one

        from knowledge.retrieve import ask

        hit = ask(store, "quetzal variant shared cluster memory", k=1).documents[0]
        assert (hit.document_id, hit.title) == (doc.document_id, "fence")


def test_an_edit_to_an_included_file_replaces_the_including_page(tmp_path, tree):
    with Store.open(tmp_path / "home") as store:
        ingest_paths(store, [tree])
        (tree / "generated" / "fence_proxy_alias.rst").write_text(GENERATED_ALIAS.replace("axolotl", "pangolin"))
        report = ingest_paths(store, [tree])
        assert by_name(report)["fence.rst"].status is FileStatus.replaced
        text = " ".join(c.text for c in store.chunks())
        assert "pangolin" in text and "axolotl" not in text


def test_a_myst_include_nests_its_headings_under_the_section_that_holds_it(tmp_path):
    docs = tmp_path / "docs"
    (docs / "snippets").mkdir(parents=True)
    (docs / "install.md").write_text(
        "# Install\n\n## Requirements\n\n```{include} snippets/rocm.md\n```\n\n## Next steps\n\nRun the tests.\n"
    )
    (docs / "snippets" / "rocm.md").write_text("# ROCm versions\n\nThe narwhal release needs ROCm 6.2.\n")
    with Store.open(tmp_path / "home") as store:
        report = ingest_paths(store, [docs])
        assert by_name(report)["rocm.md"].status is FileStatus.skipped
        (doc,) = store.documents()
        chunks = {c.heading_path: c.text for c in store.chunks(doc.document_id)}
        assert "narwhal" in chunks[("Install", "Requirements", "ROCm versions")]
        assert "Run the tests." in chunks[("Install", "Next steps")]


def test_an_include_outside_the_tree_is_named_in_one_line_and_not_read(tmp_path, capsys, monkeypatch):
    # Wide enough for the whole note; at 80 columns it wraps between words (test_knowledge_render).
    monkeypatch.setenv("COLUMNS", "300")
    (tmp_path / "LICENSE").write_text("Secret wombat licence text.\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "license.rst").write_text("License\n=======\n\n.. include:: ../LICENSE\n")
    (docs / "license.md").write_text("# License\n\n:::{include} ../LICENSE\n:::\n")
    (docs / "guide.md").write_text("# Guide\n\nTiles of 128 work well.\n")

    code, out, _ = run_cli(["ingest", str(docs), "--store", str(tmp_path / "home")], capsys)

    assert code == 0
    outside = str(tmp_path / "LICENSE")
    lines = [line for line in out.splitlines() if line.startswith("note:") and "outside the ingested tree" in line]
    assert lines == [
        f"note: {docs / 'license.md'}: include ../LICENSE is outside the ingested tree ({outside}): not read",
        f"note: {docs / 'license.rst'}: include ../LICENSE is outside the ingested tree ({outside}): not read",
    ]
    with Store.open(tmp_path / "home") as store:
        assert [d.title for d in store.documents()] == ["Guide"]
        assert not any("wombat" in c.text for c in store.chunks())


def test_an_include_cycle_is_named_and_ends(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.rst").write_text("Page A\n======\n\nAardvark text.\n\n.. include:: b.rst\n")
    (docs / "b.rst").write_text("Part B\n------\n\nBadger text.\n\n.. include:: a.rst\n")
    (docs / "self.md").write_text("# Self\n\nSelf text.\n\n```{include} self.md\n```\n")
    with Store.open(tmp_path / "home") as store:
        report = ingest_paths(store, [docs])
        files = by_name(report)
        # Nothing outside the cycle includes either page, so each stays a document of its own.
        assert [files[n].status for n in ("a.rst", "b.rst", "self.md")] == [FileStatus.added] * 3
        assert files["a.rst"].notes == ("include a.rst is a cycle (a.rst -> b.rst -> a.rst): not followed",)
        assert files["self.md"].notes == ("include self.md is a cycle (self.md -> self.md): not followed",)
        a = next(d for d in store.documents() if d.title == "Page A")
        texts = [c.text for c in store.chunks(a.document_id)]
        assert sum("Aardvark" in t for t in texts) == 1 and sum("Badger" in t for t in texts) == 1


def test_include_options_select_lines_and_show_code(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("intro\n.. start\nThe ocelot line.\n.. end\noutro\n")
    (docs / "kernel.cu").write_text("__global__ void k() {}\n")
    (docs / "page.rst").write_text(
        "Page\n====\n\n.. include:: notes.txt\n   :start-after: .. start\n   :end-before: .. end\n\n"
        ".. include:: kernel.cu\n   :code: cuda\n"
    )
    with Store.open(tmp_path / "home") as store:
        ingest_paths(store, [docs / "page.rst"])
        (chunk,) = store.chunks()
        assert "The ocelot line." in chunk.text and "intro" not in chunk.text and "outro" not in chunk.text
        assert "```cuda\n__global__ void k() {}\n```" in chunk.text
