"""The prompt loader and the code extractor: strict templates, stable hashes, robust extraction."""

import hashlib
import importlib.resources

import pytest

import prompts
from agent.proposers.codeextract import extract_code
from prompts import PromptError


def test_every_prompt_named_in_the_design_exists():
    assert {"system", "propose", "refine", "repair", "explain"} <= set(prompts.names())
    assert "_problem" not in prompts.names()


def test_render_returns_text_and_the_hash_of_the_template_and_its_partials():
    text, sha = prompts.render(
        "explain",
        source="S",
        parent_source="P",
        result_line="passed, 1.2x",
        op_family="layernorm",
        device_name="H200",
        arch="sm_90",
    )
    assert "passed, 1.2x" in text and "H200 (arch sm_90)" in text
    raw = importlib.resources.files("prompts").joinpath("explain.j2").read_text()
    assert sha == hashlib.sha256(b"explain\0" + raw.encode() + b"\0").hexdigest()
    # refine includes the shared problem partial: its hash must change with that partial, not only refine.j2
    parts = prompts._closure("refine")
    assert parts == ["refine", "_problem"]


def test_a_missing_variable_is_an_error_not_an_empty_string():
    with pytest.raises(PromptError, match="explain.*'source' is undefined"):
        prompts.render("explain", parent_source="P", result_line="x", op_family="o", device_name="d", arch="a")


def test_an_unknown_template_is_a_one_line_error():
    with pytest.raises(PromptError, match="no prompt template named 'nope'"):
        prompts.render("nope")


SEED = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_extracts_the_python_fence_that_defines_modelnew():
    reply = f"Plan.\n```python\nx = 1\n```\nFull module:\n```python\n{SEED}```\nDone."
    assert extract_code(reply) == SEED


def test_prefers_python_fences_over_other_languages():
    other = "class ModelNew:\n    big = 1\n    bigger = 2\n    biggest = 3\n"
    reply = f"```text\n{other}```\n```python\n{SEED}```"
    assert extract_code(reply) == SEED


def test_takes_an_unlabelled_fence_when_no_python_fence_defines_modelnew():
    assert extract_code(f"```\n{SEED}```") == SEED


def test_finds_unfenced_code_between_prose():
    reply = f"Here is my kernel.\n\n{SEED}\nThis should be faster."
    assert extract_code(reply) == SEED


def test_prose_without_code_yields_none():
    assert extract_code("I would fuse the two passes and use a larger block.") is None
    assert extract_code("```python\nx = 1\n```") is None


def test_malformed_code_is_returned_for_the_evaluator_to_reject():
    broken = "class ModelNew(nn.Module)\n    def forward(self x):\n        return x +\n"
    assert extract_code(f"```python\n{broken}```") == broken
